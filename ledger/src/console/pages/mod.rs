//! The console's pages, one module each, rendered on the server with `maud` (escaped by
//! default). Read pages work without JavaScript; the run page's progress bar advances by
//! polling when it is on.

mod business;
mod contact;
mod operations;
mod proof;
mod run;
mod runbook;
mod search;
mod sign_in;

pub(super) use business::business;
pub(super) use contact::{contact, supersede};
pub(super) use operations::{operations, request_republish};
pub(super) use proof::event_proof;
pub(super) use run::{resume, run, run_progress};
pub(super) use runbook::runbook;
pub(super) use search::{home, search};
pub(super) use sign_in::{sign_in, sign_in_form, sign_out};
