//! Reassignment runs: after a supersede, every active assignment of the old contact is
//! REPLACEd onto the jurisdiction's primary contact in chained pages.
//!
//! One `ReassignmentPageRequested` event handles one keyset page (`assignment_id > cursor
//! ORDER BY assignment_id LIMIT page_size`, never OFFSET). The page's transaction appends the
//! REPLACE events and their outbox rows, records the run's progress and raises the next
//! request, so the next link exists exactly when this page committed. A short page ends a
//! pass over the keyset; the run completes only when nothing active is left on the old
//! contact but the rows it gave up on.
//!
//! Safety, in layers:
//! - **The fence.** A request is processed only if its cursor and page number equal the
//!   run's, checked and advanced under the run row's lock. A redelivered or duplicated
//!   request is stale and dropped, so one run has at most one page in flight and never forks.
//! - **No landing on a superseded contact.** A page holds the jurisdiction's primary-contact
//!   lock (shared, like assign and replace) and moves its rows to the primary contact it
//!   reads under that lock. If the run's target was superseded meanwhile, the rows go to its
//!   successor, and the run follows.
//! - **Skip finished rows.** Candidate rows are locked (`FOR UPDATE`) and re-checked; a row
//!   that a concurrent run or a cancellation finished meanwhile is skipped, never rewritten.
//! - **The unique index** `assignments_one_active` is the last line of defense: a duplicate
//!   REPLACE that got past everything else fails its page instead of corrupting data.
//! - **No starvation.** A page that keeps failing is retried a bounded number of times,
//!   then run row by row: rows that still fail are recorded as failed with their reason and
//!   the cursor moves past them.
//! - **Nothing left behind.** At the end of a pass, rows still active on the old contact
//!   (other than failed ones) start another pass, up to [`MAX_PASSES`]; after the last one
//!   they are recorded as failed with the reason, so `completed` always means "moved, or
//!   listed with why not".

mod fence;
mod page;
mod page_log;
mod progress;
mod request;
mod rows;
mod start;
mod status;

pub use page::{PageFailed, PageOutcome, PageReport, handle};
pub use page_log::{PageRecord, pages};
pub use request::{PageRequest, PageRequestError};
pub use rows::replace_appends;
pub use start::{RunStarted, reraise_stalled, resume, stalled, start_in};
pub use status::{
    RowFailure, RunState, RunStatus, in_progress, in_progress_summary, running, runs_of, status,
    statuses_of,
};

use crate::domain::ValidationError;

/// Rows per page when the request does not say.
pub const DEFAULT_PAGE_SIZE: u32 = 1_000;
/// Largest page size accepted: keeps every page transaction short.
pub const MAX_PAGE_SIZE: u32 = 10_000;
/// Whole-page attempts before a page is processed row by row.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// How long a run may go without progress before a worker raises its page request again
/// (the default of the worker's `stall_after_ms`), and after which its status says
/// `stalled`.
pub const STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
/// Passes over the old contact's assignments before a run records what is still left as
/// failed. One pass suffices when every write respects the primary-contact lock; the others
/// are for whatever does not.
pub const MAX_PASSES: u32 = 3;

/// Checks a requested page size.
pub fn page_size(requested: Option<u32>) -> Result<u32, ValidationError> {
    match requested {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(size) if (1..=MAX_PAGE_SIZE).contains(&size) => Ok(size),
        Some(size) => Err(ValidationError::new(
            "page_size",
            format!("{size} is outside 1..={MAX_PAGE_SIZE}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_defaults_and_bounds() {
        assert_eq!(page_size(None).unwrap(), DEFAULT_PAGE_SIZE);
        assert_eq!(page_size(Some(1)).unwrap(), 1);
        assert_eq!(page_size(Some(MAX_PAGE_SIZE)).unwrap(), MAX_PAGE_SIZE);
        for bad in [0, MAX_PAGE_SIZE + 1] {
            let error = page_size(Some(bad)).unwrap_err();
            assert_eq!(error.field, "page_size");
            assert!(error.reason.contains(&bad.to_string()), "{}", error.reason);
        }
    }
}
