//! Writes racing each other and a reassignment run on the same rows: a REPLACE racing a
//! supersede, an END or REPLACE racing a page that holds its row, a supersede of the run's
//! own target, rows that appear behind a run's cursor, and many writers against one run.
//!
//! The promises: nothing lands on a contact whose supersede committed first; a run never
//! completes with an active assignment left on its old contact unexplained; a race ends in a
//! 2xx or a 409, never a 500.

use std::collections::HashMap;

use axum::http::StatusCode;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::reassign::{self, PageOutcome, RunState, RunStatus};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{TestApi, contact_body};
use ra_ledger_tests::runs::{count, follow_chain, lock_waiters_reach, page_requests};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

mod writers;

pub(super) const TX: &str = "TX";

/// A Texas primary contact serving `rows` seeded businesses.
pub(super) async fn seeded(
    database: &TestDatabase,
    rows: usize,
) -> anyhow::Result<(TestApi, Uuid, Vec<Uuid>)> {
    let api = TestApi::new(database)?;
    let created = api
        .post("/v1/contacts", contact_body(TX, "First Office"))
        .await;
    created.expect(StatusCode::CREATED);
    let contact: Uuid = created.str("contact_id").parse()?;
    let businesses = ra_ledger_testing::seed_assignments(
        api.ledger.pool(),
        Jurisdiction::parse("jurisdiction", TX)?,
        contact,
        rows,
        1_000,
        |_| {},
    )
    .await?;
    Ok((api, contact, businesses))
}

/// Supersedes `contact` over HTTP with `page_size`; returns the run and the new contact.
pub(super) async fn supersede(api: &TestApi, contact: Uuid, page_size: u32) -> (Uuid, Uuid) {
    let reply = api
        .post(
            &format!("/v1/contacts/{contact}/supersede"),
            json!({"name": "Next Office", "address": contact_body(TX, "x")["address"], "page_size": page_size}),
        )
        .await;
    reply.expect(StatusCode::ACCEPTED);
    (
        reply.str("run_id").parse().expect("a run id"),
        reply.body["new"]["contact_id"]
            .as_str()
            .expect("a new contact")
            .parse()
            .expect("a UUID"),
    )
}

pub(super) async fn active_on(client: &Client, contact: Uuid) -> i64 {
    count(
        client,
        "SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NULL",
        &[&contact],
    )
    .await
}

/// The invariants every test here ends with.
pub(super) async fn assert_invariants(client: &Client) {
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM (SELECT 1 FROM assignments WHERE ended_at IS NULL \
             GROUP BY business_id, jurisdiction HAVING count(*) > 1) d",
            &[]
        )
        .await,
        0,
        "at most one active assignment per business and jurisdiction"
    );
    // The ledger records each write's time after its locks, so this holds exactly: an
    // assignment recorded after its contact's supersede landed on a superseded contact.
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments a JOIN contacts c USING (contact_id) \
             WHERE c.superseded_recorded_at IS NOT NULL \
               AND a.recorded_at > c.superseded_recorded_at",
            &[]
        )
        .await,
        0,
        "no assignment started on a contact after its supersede was recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_racing_a_supersede_never_leaves_a_row_on_the_old_contact() -> anyhow::Result<()>
{
    // The order of the report: a session holds assignment X; a REPLACE of X queues behind
    // it; the contact is superseded; the session lets go.
    let database = TestDatabase::new().await?;
    let (api, old, businesses) = seeded(&database, 20).await?;
    let client = database.connect().await?;
    let x: Uuid = client
        .query_one(
            "SELECT assignment_id FROM assignments WHERE business_id = $1",
            &[&businesses[7]],
        )
        .await?
        .get(0);
    let mut session = database.connect().await?;
    let hold = session.transaction().await?;
    hold.execute(
        "SELECT 1 FROM assignments WHERE assignment_id = $1 FOR UPDATE",
        &[&x],
    )
    .await?;
    let replace = tokio::spawn({
        let api = api.clone();
        async move {
            api.post(&format!("/v1/assignments/{x}/replace"), json!({}))
                .await
        }
    });
    lock_waiters_reach(&client, 1, "the REPLACE queues behind the session").await;
    let superseding = tokio::spawn({
        let api = api.clone();
        async move { supersede(&api, old, 100).await }
    });
    // The supersede waits for the REPLACE in flight: it holds the jurisdiction's shared lock.
    lock_waiters_reach(&client, 2, "the supersede waits for the REPLACE").await;
    hold.rollback().await?;
    let replaced = replace.await?;
    let (run, new) = superseding.await?;
    replaced.expect(StatusCode::CREATED);
    // It committed before the supersede did, on what was then the primary contact...
    assert_eq!(replaced.body["contact_id"], json!(old.to_string()));
    // ...so the run, which starts after it, moves it on.
    let status = follow_chain(&database, run).await?;
    assert_eq!(status.status, RunState::Completed);
    assert_eq!(status.remaining, 0, "{status:#?}");
    assert_eq!(
        active_on(&client, old).await,
        0,
        "nothing left on the old contact"
    );
    assert_eq!(active_on(&client, new).await, 20);
    assert_invariants(&client).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_after_a_supersede_lands_on_the_new_contact() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (api, old, businesses) = seeded(&database, 3).await?;
    let client = database.connect().await?;
    let (run, new) = supersede(&api, old, 100).await;
    let x: Uuid = client
        .query_one(
            "SELECT assignment_id FROM assignments WHERE business_id = $1",
            &[&businesses[0]],
        )
        .await?
        .get(0);
    let replaced = api
        .post(&format!("/v1/assignments/{x}/replace"), json!({}))
        .await;
    replaced.expect(StatusCode::CREATED);
    assert_eq!(replaced.body["contact_id"], json!(new.to_string()));
    let status = follow_chain(&database, run).await?;
    assert_eq!((status.replaced, status.remaining), (2, 0), "{status:#?}");
    assert_invariants(&client).await;
    Ok(())
}

/// Makes a page take assignment X's lock first, then sends `path` (an END or a REPLACE of
/// X) while the page holds it: the command must wait, find X replaced, and answer 409.
async fn command_racing_a_page(path: &str) -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (api, old, businesses) = seeded(&database, 10).await?;
    let client = database.connect().await?;
    let pool = api.ledger.pool().clone();
    let (run, new) = supersede(&api, old, 100).await;
    let first = page_requests(&client, run).await?.remove(0);
    let x: Uuid = client
        .query_one(
            "SELECT assignment_id FROM assignments WHERE business_id = $1",
            &[&businesses[3]],
        )
        .await?
        .get(0);
    let mut session = database.connect().await?;
    let hold = session.transaction().await?;
    hold.execute(
        "SELECT 1 FROM assignments WHERE assignment_id = $1 FOR UPDATE",
        &[&x],
    )
    .await?;
    let page = tokio::spawn({
        let pool = pool.clone();
        async move { reassign::handle(&pool, &first, 3).await }
    });
    lock_waiters_reach(&client, 1, "the page queues on X").await;
    let command = tokio::spawn({
        let api = api.clone();
        let uri = format!("/v1/assignments/{x}/{path}");
        async move { api.post(&uri, json!({})).await }
    });
    lock_waiters_reach(&client, 2, "the command queues behind the page").await;
    hold.rollback().await?;
    let page = page.await??;
    let reply = command.await?;
    let PageOutcome::Processed(report) = page else {
        panic!("the page must run: {page:?}");
    };
    assert_eq!((report.replaced, report.skipped), (10, 0), "{report:?}");
    reply.expect_error(StatusCode::CONFLICT, "conflict");
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("already ended"),
        "{:?}",
        reply.body
    );
    assert_eq!(active_on(&client, new).await, 10);
    assert_invariants(&client).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_racing_a_page_that_holds_its_row_gets_a_conflict_not_a_deadlock()
-> anyhow::Result<()> {
    command_racing_a_page("end").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_racing_a_page_that_holds_its_row_gets_a_conflict_not_a_deadlock()
-> anyhow::Result<()> {
    command_racing_a_page("replace").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_follows_its_target_when_that_contact_is_superseded_too() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (api, a, _) = seeded(&database, 12).await?;
    let client = database.connect().await?;
    let pool = api.ledger.pool().clone();
    let (run_a, b) = supersede(&api, a, 5).await;
    // The first page of A -> B moves five rows to B...
    let first = page_requests(&client, run_a).await?.remove(0);
    assert!(matches!(
        reassign::handle(&pool, &first, 3).await?,
        PageOutcome::Processed(_)
    ));
    assert_eq!(active_on(&client, b).await, 5);
    // ...then B is superseded by C while A's run is still going.
    let (run_b, c) = supersede(&api, b, 5).await;
    let status_a = follow_chain(&database, run_a).await?;
    let status_b = follow_chain(&database, run_b).await?;
    assert_eq!(
        status_a.new_contact_id, c,
        "the run moved on with its target"
    );
    assert_eq!(
        (status_a.replaced, status_a.remaining),
        (12, 0),
        "{status_a:#?}"
    );
    assert_eq!(
        (status_b.replaced, status_b.remaining),
        (5, 0),
        "{status_b:#?}"
    );
    assert_eq!(active_on(&client, a).await, 0);
    assert_eq!(active_on(&client, b).await, 0);
    assert_eq!(active_on(&client, c).await, 12);
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM assignments WHERE contact_id = $1",
            &[&b]
        )
        .await,
        5,
        "only the first page's rows ever went to B"
    );
    assert_invariants(&client).await;
    Ok(())
}

/// Handles a run's next page while a writer that ignores the primary-contact lock (and the
/// ledger: it writes the projection row only) commits a new active assignment on the old
/// contact between the page's keyset read and the end of its pass: the page is held on the
/// lock of its first row meanwhile. Returns the page's outcome.
async fn page_racing_a_rogue_writer(
    database: &TestDatabase,
    run: Uuid,
    old: Uuid,
) -> anyhow::Result<PageOutcome> {
    let client = database.connect().await?;
    let pool = ra_ledger::db::pool(&database.url, "rogue-race", 1)?;
    let next = page_requests(&client, run)
        .await?
        .pop()
        .expect("a page request");
    let mut session = database.connect().await?;
    let hold = session.transaction().await?;
    hold.execute(
        "SELECT 1 FROM assignments WHERE assignment_id = (SELECT assignment_id \
         FROM assignments WHERE contact_id = $1 AND ended_at IS NULL \
         ORDER BY assignment_id LIMIT 1) FOR UPDATE",
        &[&old],
    )
    .await?;
    let page = tokio::spawn(async move { reassign::handle(&pool, &next, 3).await });
    lock_waiters_reach(&client, 1, "the page waits for its first row").await;
    client
        .execute(
            "INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, \
                                      started_at, recorded_at) \
             VALUES (gen_random_uuid(), gen_random_uuid(), 'TX', $1, now(), now())",
            &[&old],
        )
        .await?;
    hold.rollback().await?;
    Ok(page.await??)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_left_behind_a_pass_is_moved_by_another_pass_before_the_run_completes()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (api, old, _) = seeded(&database, 3).await?;
    let client = database.connect().await?;
    let (run, new) = supersede(&api, old, 5).await;
    // The first page is short: it ends the pass, and finds the row that appeared meanwhile.
    let first = page_racing_a_rogue_writer(&database, run, old).await?;
    let PageOutcome::Processed(first) = first else {
        panic!("{first:?}");
    };
    assert_eq!((first.replaced, first.completed), (3, false), "{first:?}");
    let status = follow_chain(&database, run).await?;
    assert_eq!(status.status, RunState::Completed);
    assert_eq!(status.pass, 2, "a second pass moved the row: {status:#?}");
    assert_eq!(
        (status.replaced, status.failed, status.remaining),
        (4, 0, 0),
        "{status:#?}"
    );
    assert_eq!(active_on(&client, old).await, 0);
    assert_eq!(active_on(&client, new).await, 4);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_keeps_finding_rows_left_behind_completes_listing_them_with_the_reason()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (api, old, _) = seeded(&database, 3).await?;
    let client = database.connect().await?;
    let (run, _) = supersede(&api, old, 5).await;
    // A writer that never stops: every pass ends with a new row on the old contact.
    for _ in 0..reassign::MAX_PASSES {
        page_racing_a_rogue_writer(&database, run, old).await?;
    }
    let status = follow_chain(&database, run).await?;
    assert_eq!(status.status, RunState::Completed);
    assert_eq!(status.pass, reassign::MAX_PASSES, "{status:#?}");
    assert_eq!((status.replaced, status.failed), (5, 1), "{status:#?}");
    // What is still on the old contact is listed, with why.
    let left: Vec<Uuid> = client
        .query(
            "SELECT assignment_id FROM assignments WHERE contact_id = $1 AND ended_at IS NULL",
            &[&old],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(status.remaining, left.len() as i64);
    assert_eq!(left.len(), 1);
    let failure = status
        .failures
        .iter()
        .find(|f| f.assignment_id == left[0])
        .unwrap_or_else(|| panic!("{} is left behind unexplained: {status:#?}", left[0]));
    assert!(failure.reason.contains("passes"), "{}", failure.reason);
    // The ledger says so too.
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM events WHERE stream = $1 AND event_type = 'ReassignmentRowFailed'",
            &[&format!("reassignment-{run}")]
        )
        .await,
        1
    );
    Ok(())
}
