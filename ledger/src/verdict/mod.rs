//! One verdict on the whole pipeline, the way an on-call engineer reads a status page:
//! healthy, degraded or failing, with the one reason that decides it and its runbook
//! section (issue 48). The same verdict heads the console's operations page, answers at
//! `GET /status` for a load balancer or a status page, and is printed by `deploy/stack
//! status`.
//!
//! - [`rules`]: the rules, pure, in the order they are applied, with their tests.
//! - [`read`]: the facts, from the database at one moment; with a witness policy
//!   ([`Witnessing`]), the witnesses' last answers and the newest checkpoints' quorum too.
//! - [`router`]: `GET /status`, without a token like `/readyz`: 200 while healthy or
//!   degraded (events still flow), 503 when failing or when the database does not answer.
//!
//! `/status` is open, so what it tells anyone names nothing inside (issue 57, item 1): the
//! verdict of [`rules::Facts::for_anyone`], without the relay's refusal in its own words
//! (a registry URL, a system id, a database, a host) or the slot's name, and without the
//! database's error. An operator token (`Authorization: Bearer`) reads the whole verdict,
//! as the console's operations page shows it; another valid token reads what anyone does;
//! an unknown one is 401. And anyone cannot load the database through it: the open verdict
//! is read at most once per [`OPEN_FOR`] ([`Shared`]), however many ask at once.

pub mod rules;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use deadpool_postgres::{GenericClient, Pool};

use self::rules::{Facts, State as Health, Verdict, WitnessFact, WitnessFacts};
use crate::api::{ApiError, Role, Tokens, bearer_principal};
use crate::digest::cosign::Outcome;
use crate::lag;
pub use crate::tlog::policy::Witnessing;

/// The path of the endpoint.
pub const PATH: &str = "/status";

/// The facts about the relay's slot `slot`, and the witnesses of `witnessing`, read now.
pub async fn read(
    client: &impl GenericClient,
    slot: &str,
    witnessing: Option<&Witnessing>,
) -> Result<Facts, tokio_postgres::Error> {
    let progress = lag::slot_progress(client, slot).await?;
    let row = client
        .query_one(include_str!("../sql/verdict/facts.sql"), &[&slot])
        .await?;
    Ok(Facts {
        slot_name: slot.to_owned(),
        slot: progress,
        slot_registered: row.get("slot_registered"),
        relay_refused: row.get("relay_refused"),
        parked_waiting: row.get("parked_waiting"),
        replays_failed: row.get("replays_failed"),
        newest_failed_replay: row.get("newest_failed_replay"),
        events_missing: row.get("events_missing"),
        first_missing: row.get("first_missing"),
        now: Utc::now(),
        witnesses: match witnessing {
            Some(witnessing) => Some(witnesses(client, witnessing).await?),
            None => None,
        },
    })
}

/// The witnesses' last answers and the newest checkpoints' quorum.
pub async fn witnesses(
    client: &impl GenericClient,
    witnessing: &Witnessing,
) -> Result<WitnessFacts, tokio_postgres::Error> {
    let names: Vec<&str> = witnessing
        .policy
        .witnesses
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    let witnesses = client
        .query(include_str!("../sql/verdict/witnesses.sql"), &[&names])
        .await?
        .iter()
        .map(|row| WitnessFact {
            name: row.get("name"),
            outcome: row
                .get::<_, Option<i16>>("outcome")
                .and_then(Outcome::from_stored),
            reason: row.get("reason"),
            digest_seq: row.get("digest_seq"),
            size: row.get::<_, Option<i64>>("size").unwrap_or(0) as u64,
            answered_at: row.get("updated_at"),
        })
        .collect();
    let row = client
        .query_one(include_str!("../sql/verdict/checkpoints.sql"), &[])
        .await?;
    let newest: Option<i64> = row.get("newest");
    Ok(WitnessFacts {
        quorum: witnessing.policy.describe(),
        witnesses,
        newest,
        newest_met: newest.is_some() && newest == Some(row.get::<_, i64>("newest_met")),
        short_since: row.get("short_since"),
        short_after: chrono::Duration::from_std(witnessing.short_after)
            .unwrap_or(chrono::Duration::MAX),
    })
}

/// How long the verdict anyone reads is served from one reading of the database.
pub const OPEN_FOR: Duration = Duration::from_secs(1);

/// One reading shared by every request within [`OPEN_FOR`] of it. The lock is held while
/// reading, so requests that arrive meanwhile wait for that reading rather than start
/// their own: the database sees at most one reading per period.
#[derive(Debug)]
pub struct Shared<T> {
    last: tokio::sync::Mutex<Option<(Instant, T)>>,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self {
            last: tokio::sync::Mutex::new(None),
        }
    }
}

impl<T: Clone> Shared<T> {
    /// The reading of less than `fresh` ago, else a new one from `read`.
    pub async fn get<F: Future<Output = T>>(&self, fresh: Duration, read: impl FnOnce() -> F) -> T {
        let mut last = self.last.lock().await;
        if let Some((at, value)) = last.as_ref()
            && at.elapsed() < fresh
        {
            return value.clone();
        }
        let value = read().await;
        *last = Some((Instant::now(), value.clone()));
        value
    }
}

/// What the endpoint serves.
#[derive(Debug, Clone)]
struct Status {
    pool: Pool,
    slot: String,
    witnessing: Option<Witnessing>,
    tokens: Tokens,
    open: Arc<Shared<(StatusCode, Verdict)>>,
}

/// Routes `GET /status` for the relay's slot `slot` and the witnesses of `witnessing`;
/// `tokens` tell an operator.
pub fn router(pool: Pool, slot: String, witnessing: Option<Witnessing>, tokens: Tokens) -> Router {
    Router::new().route(PATH, get(status)).with_state(Status {
        pool,
        slot,
        witnessing,
        tokens,
        open: Arc::default(),
    })
}

async fn status(
    State(status): State<Status>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<Verdict>), ApiError> {
    let operator = bearer_principal(&headers, &status.tokens)?
        .is_some_and(|principal| principal.role == Role::Operator);
    let (code, verdict) = if operator {
        read_verdict(&status, Audience::Operator).await
    } else {
        status
            .open
            .get(OPEN_FOR, || read_verdict(&status, Audience::Anyone))
            .await
    };
    Ok((code, Json(verdict)))
}

/// Who reads the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Audience {
    Operator,
    Anyone,
}

async fn read_verdict(status: &Status, audience: Audience) -> (StatusCode, Verdict) {
    let read = async {
        let client = status.pool.get().await.map_err(|error| error.to_string())?;
        read(&client, &status.slot, status.witnessing.as_ref())
            .await
            .map_err(|error| crate::db::describe(&error))
    };
    let verdict = match (read.await, audience) {
        (Ok(facts), Audience::Operator) => rules::verdict(&facts),
        (Ok(facts), Audience::Anyone) => rules::verdict(&facts.for_anyone()),
        (Err(error), audience) => Verdict {
            state: Health::Failing,
            reason: if audience == Audience::Operator {
                format!("the ledger database does not answer: {error}")
            } else {
                "the ledger database does not answer".to_owned()
            },
            runbook: Some("docs/operators.md#what-to-do-when-"),
            also: Vec::new(),
        },
    };
    let code = if verdict.state == Health::Failing {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, verdict)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Many requests at once cause one reading; after the period, one more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_at_once_share_one_reading() {
        let shared = Arc::new(Shared::<usize>::default());
        let readings = Arc::new(AtomicUsize::new(0));
        let ask = || {
            let (shared, readings) = (Arc::clone(&shared), Arc::clone(&readings));
            tokio::spawn(async move {
                shared
                    .get(Duration::from_secs(3600), || async {
                        tokio::task::yield_now().await;
                        readings.fetch_add(1, Ordering::SeqCst) + 1
                    })
                    .await
            })
        };
        let asked: Vec<_> = (0..200).map(|_| ask()).collect();
        for answer in asked {
            assert_eq!(answer.await.unwrap(), 1);
        }
        assert_eq!(readings.load(Ordering::SeqCst), 1);
        let stale = shared.get(Duration::ZERO, || async { 7 }).await;
        assert_eq!(stale, 7, "a reading older than the period is read again");
    }
}
