//! Supersede and chained-page reassignment runs, through the real relay and broker: the
//! chain itself ([`chain`]: the 5,000-row run, redelivery, duplicates, a killed worker) and
//! its edges ([`edges`]: double clicks, poison rows, bad input, runs racing runs).

mod chain;
mod edges;
mod faults;

use std::collections::HashSet;
use std::time::Duration;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use ra_ledger::domain::Jurisdiction;
use ra_ledger::reassign::{self, PageOutcome, RunStatus};
use ra_ledger::worker::WorkerConfig;
use ra_ledger_cdc::consumer;
use ra_ledger_tests::api::{TestApi, contact_body};
use ra_ledger_tests::relay::{Collector, RunningRelay, test_config};
use ra_ledger_tests::runs::{count, lock_waiters, lock_waiters_reach, page_requests};
use ra_ledger_tests::worker::{self, RunningWorker, wait_for_run};
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

pub(super) const TX: &str = "TX";

/// A database with a primary contact in Texas serving `rows` seeded assignments.
pub(super) struct Seeded {
    pub(super) api: TestApi,
    pub(super) client: Client,
    pub(super) contact_id: Uuid,
    pub(super) businesses: Vec<Uuid>,
}

pub(super) async fn seeded(database: &TestDatabase, rows: usize) -> anyhow::Result<Seeded> {
    Ok(poisoned_then_seeded(database, 0, rows).await?.0)
}

/// Like [`seeded`], after first assigning `poisoned` businesses that take effect four
/// minutes from now (within the clock skew the ledger accepts). Their REPLACE now would
/// reorder their streams' history, which the ledger refuses on every attempt. They have the
/// lowest ids: first in the first pages. Returns them too.
pub(super) async fn poisoned_then_seeded(
    database: &TestDatabase,
    poisoned: usize,
    rows: usize,
) -> anyhow::Result<(Seeded, Vec<Uuid>)> {
    let api = TestApi::new(database)?;
    let created = api
        .post("/v1/contacts", contact_body(TX, "First Office"))
        .await;
    created.expect(StatusCode::CREATED);
    let contact_id: Uuid = created.str("contact_id").parse()?;
    let future = Utc::now() + chrono::Duration::minutes(4);
    let mut poison = Vec::new();
    for _ in 0..poisoned {
        let business = Uuid::now_v7();
        let reply = api
            .post(
                "/v1/assignments",
                json!({"business_id": business, "jurisdiction": TX, "effective_at": future}),
            )
            .await;
        reply.expect(StatusCode::CREATED);
        poison.push(business);
    }
    let businesses = ra_ledger_testing::seed_assignments(
        api.ledger.pool(),
        Jurisdiction::parse("jurisdiction", TX)?,
        contact_id,
        rows,
        1_000,
        |_| {},
    )
    .await?;
    let seeded = Seeded {
        api,
        client: database.connect().await?,
        contact_id,
        businesses,
    };
    Ok((seeded, poison))
}

/// A fresh database and topics, the relay between them, and a worker configuration.
pub(super) async fn relayed()
-> anyhow::Result<(TestDatabase, TestTopics, RunningRelay, WorkerConfig)> {
    relayed_on(TestTopics::new()).await
}

/// Like [`relayed`], with the topics of `topics` (on their broker).
pub(super) async fn relayed_on(
    mut topics: TestTopics,
) -> anyhow::Result<(TestDatabase, TestTopics, RunningRelay, WorkerConfig)> {
    let database = TestDatabase::new().await?;
    let relay = RunningRelay::start(test_config(&database, &mut topics).await?);
    let config = worker::test_config(&database, &topics);
    Ok((database, topics, relay, config))
}

/// Supersedes `contact_id` over HTTP; returns the run id and the new contact id.
pub(super) async fn supersede(api: &TestApi, contact_id: Uuid, page_size: u32) -> (Uuid, Uuid) {
    let reply = api
        .post(
            &format!("/v1/contacts/{contact_id}/supersede"),
            json!({
                "name": "Second Office",
                "address": contact_body(TX, "x")["address"],
                "page_size": page_size,
            }),
        )
        .await;
    reply.expect(StatusCode::ACCEPTED);
    let run_id: Uuid = reply.str("run_id").parse().expect("a run id");
    assert_eq!(
        reply.str("status_url"),
        format!("/v1/reassignment-runs/{run_id}")
    );
    let new_id = reply.body["new"]["contact_id"]
        .as_str()
        .expect("the new contact")
        .parse()
        .expect("a UUID");
    (run_id, new_id)
}

/// Checks the end state every completed repoint must have: each business one active
/// assignment, on the new contact, the old one ended at the instant the new one started.
pub(super) async fn assert_all_moved(seeded: &Seeded, old: Uuid, new: Uuid) {
    let client = &seeded.client;
    let rows = seeded.businesses.len() as i64;
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NULL \
             AND business_id = ANY($2)",
            &[&old, &seeded.businesses]
        )
        .await,
        0,
        "nothing stays on the old contact"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NULL \
                        AND business_id = ANY($2)",
            &[&new, &seeded.businesses]
        )
        .await,
        rows,
        "every business is on the new contact"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM (SELECT business_id FROM assignments WHERE ended_at IS NULL \
                        GROUP BY business_id, jurisdiction HAVING count(*) > 1) d",
            &[]
        )
        .await,
        0,
        "one active assignment per business"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments o JOIN assignments n ON n.assignment_id = o.replaced_by \
             WHERE o.contact_id = $1 AND n.contact_id = $2 AND o.end_reason = 'replaced' \
               AND n.replaces = o.assignment_id AND o.ended_at = n.started_at",
            &[&old, &new]
        )
        .await,
        rows,
        "each old assignment ended when its replacement started"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND business_id = ANY($2)",
            &[&old, &seeded.businesses]
        )
        .await,
        rows,
        "no old assignment was replaced twice"
    );
}

pub(super) fn completed(status: &RunStatus) -> bool {
    status.status == reassign::RunState::Completed
}

pub(super) async fn max_pages_in_flight(client: &Client, run_id: Uuid) -> i64 {
    ra_ledger_testing::max_pages_in_flight(client, run_id)
        .await
        .expect("page intervals")
}
