//! The pages a run processed, one record each (table `reassignment_pages`), for the run
//! page's pictures: rows per second page by page, and pages over time.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

/// One processed page.
#[derive(Debug, Clone, PartialEq)]
pub struct PageRecord {
    /// Its number within the run (across passes).
    pub page: i32,
    /// The pass it belonged to.
    pub pass: i32,
    /// Rows it handled (replaced, skipped or failed).
    pub rows: i32,
    /// When its transaction started.
    pub started_at: DateTime<Utc>,
    /// When its work ended, just before commit.
    pub finished_at: DateTime<Utc>,
}

impl PageRecord {
    /// Rows per second of its transaction.
    pub fn rows_per_second(&self) -> f64 {
        let seconds = (self.finished_at - self.started_at).as_seconds_f64();
        if seconds > 0.0 {
            f64::from(self.rows) / seconds
        } else {
            0.0
        }
    }
}

/// The newest `limit` pages of run `run_id`, in the order they ran.
pub async fn pages(
    client: &impl GenericClient,
    run_id: Uuid,
    limit: i64,
) -> Result<Vec<PageRecord>, tokio_postgres::Error> {
    Ok(client
        .query(
            include_str!("../sql/reassign/run_pages.sql"),
            &[&run_id, &limit],
        )
        .await?
        .iter()
        .map(|row| PageRecord {
            page: row.get(0),
            pass: row.get(1),
            rows: row.get(2),
            started_at: row.get(3),
            finished_at: row.get(4),
        })
        .collect())
}
