//! Integration tests, in one binary so the whole run shares one PostgreSQL and one broker.

mod as_of;
mod audit;
mod bad_input;
mod broker_faults;
mod console;
mod console_security;
mod deploy;
mod digest;
mod digest_published;
mod disclosure;
mod import;
mod ledger;
mod migrations;
mod races;
mod reassignment;
mod rebuild_online;
mod relay;
mod relay_faults;
mod replay;
mod retention;
mod roles;
mod secrets;
mod slow_clients;
mod smoke;
mod tls;
mod topics;
