//! `ledger projections rebuild --online` while a writer keeps committing: the rebuilt tables
//! equal the live ones, keep their keys and grants, and the writer never fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use ra_ledger::rebuild::online::{OnlineOptions, rebuild_online};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{TestApi, contact_body};
use serde_json::json;
use uuid::Uuid;

// Chunks of 7 events: their ends fall inside the original transactions (a REPLACE's end
// and start, a supersede's two contact events), as they do at 10,000 on a large ledger.
const VERIFY: OnlineOptions = OnlineOptions {
    verify_only: true,
    chunk: 7,
    pause_ratio: 0.0,
};
const SWAP: OnlineOptions = OnlineOptions {
    verify_only: false,
    chunk: 7,
    pause_ratio: 0.5,
};

/// Assigns, replaces and ends, one request after another, until `stop`; returns the
/// latencies and the failures.
async fn write_until(api: Arc<TestApi>, stop: Arc<AtomicBool>) -> (Vec<Duration>, Vec<String>) {
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let mut step = 0u64;
    while !stop.load(Ordering::Relaxed) {
        step += 1;
        let started = Instant::now();
        let reply = match (step % 3, open.pop()) {
            (1, Some(id)) => {
                let reply = api
                    .post(&format!("/v1/assignments/{id}/replace"), json!({}))
                    .await;
                if reply.status == StatusCode::CREATED {
                    open.push(reply.str("assignment_id"));
                }
                reply
            }
            (2, Some(id)) => {
                api.post(&format!("/v1/assignments/{id}/end"), json!({}))
                    .await
            }
            (_, popped) => {
                open.extend(popped);
                let reply = api
                    .post(
                        "/v1/assignments",
                        json!({"business_id": Uuid::now_v7(), "jurisdiction": "TX"}),
                    )
                    .await;
                if reply.status == StatusCode::CREATED {
                    open.push(reply.str("assignment_id"));
                }
                reply
            }
        };
        latencies.push(started.elapsed());
        if !reply.status.is_success() {
            failures.push(format!("{}: {:?}", reply.status, reply.body));
        }
    }
    (latencies, failures)
}

async fn catalog(client: &tokio_postgres::Client) -> anyhow::Result<Vec<String>> {
    Ok(client
        .query(
            "SELECT c.relname || ' ' || coalesce(c.relacl::text, '') || ' ' || \
                    pg_get_userbyid(c.relowner) || ' ' || \
                    (SELECT string_agg(conname || '=' || pg_get_constraintdef(k.oid), ';' ORDER BY conname) \
                     FROM pg_constraint k WHERE k.conrelid = c.oid) || ' ' || \
                    (SELECT string_agg(pg_get_indexdef(i.indexrelid), ';' ORDER BY 1) \
                     FROM pg_index i WHERE i.indrelid = c.oid) \
             FROM pg_class c WHERE c.oid IN ('public.contacts'::regclass, 'public.assignments'::regclass) \
             ORDER BY c.relname",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_online_rebuild_under_writes_equals_the_live_tables_and_keeps_keys_and_grants()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = Arc::new(TestApi::new(&database)?);
    let contact = api.contact("TX", "Office").await;
    for _ in 0..300 {
        api.assign(Uuid::now_v7()).await;
    }
    // A supersede: two contact events in one transaction, pointing at each other.
    let superseded = api
        .post(
            &format!("/v1/contacts/{contact}/supersede"),
            json!({"name": "New Office", "address": contact_body("TX", "x")["address"]}),
        )
        .await;
    superseded.expect(StatusCode::ACCEPTED);
    let client = database.connect().await?;
    // A grant the new tables must keep (as `ledger grant app` gives).
    client
        .batch_execute("GRANT SELECT ON contacts, assignments TO PUBLIC")
        .await?;
    let before = catalog(&client).await?;
    let pool = ra_ledger::db::pool(&database.url, "online-rebuild-test", 2)?;

    // A drifted live row: --verify (online) names it; nothing is swapped.
    client
        .batch_execute(
            "UPDATE assignments SET started_at = started_at - interval '1 day' \
             WHERE assignment_id = (SELECT assignment_id FROM assignments ORDER BY assignment_id LIMIT 1)",
        )
        .await?;
    let drifted = rebuild_online(&pool, VERIFY, |_, _, _| {}).await?;
    assert_eq!(
        drifted.differences,
        vec![("contacts".into(), 0), ("assignments".into(), 2)],
        "{drifted:?}"
    );
    assert_eq!(catalog(&client).await?, before, "verify swaps nothing");

    // The rebuild while a writer commits continuously repairs it.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until(Arc::clone(&api), Arc::clone(&stop)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = rebuild_online(&pool, SWAP, |_, _, _| {}).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Also a verify while writes go on: the snapshot trick compares at one exact point.
    let verified = rebuild_online(&pool, VERIFY, |_, _, _| {}).await?;
    stop.store(true, Ordering::Relaxed);
    let (latencies, failures) = writer.await?;
    assert!(
        failures.is_empty(),
        "writes failed across the swap: {failures:?}"
    );
    assert!(
        latencies.len() > 20,
        "the writer kept writing: {}",
        latencies.len()
    );
    assert!(report.catch_up_windows >= 1, "{report:?}");
    assert_eq!(
        verified.differences,
        vec![("contacts".into(), 0), ("assignments".into(), 0)],
        "{verified:?}"
    );
    // Every event applied once: the events the rebuild applied are all there were then,
    // and an offline rebuild (its own snapshot) agrees with the swapped-in tables.
    let mut offline = pool.get().await?;
    let check = ra_ledger::rebuild::rebuild(&mut offline, true, |_, _| {}).await?;
    assert_eq!(
        check.differences,
        vec![("contacts".into(), 0), ("assignments".into(), 0)]
    );
    assert!(
        report.events <= check.events && report.events > 300,
        "{report:?}"
    );
    // The same keys, indexes, owner and grants; nothing left behind.
    assert_eq!(catalog(&client).await?, before);
    let leftovers: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'projection_%'",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(leftovers, 0);
    // The API still reads and writes the (new) tables.
    let business = Uuid::now_v7();
    api.assign(business).await;
    let answer = api
        .get(&format!(
            "/v1/businesses/{business}/jurisdictions/TX/registered-agent"
        ))
        .await;
    answer.expect(StatusCode::OK);
    Ok(())
}
