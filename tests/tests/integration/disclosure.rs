//! What a failure inside the service tells its clients: a stable code, a sentence and a
//! reference, never the database's text (SQLSTATE, constraint, table).

use ra_ledger::reassign;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{TestApi, WRITER, contact_body};
use ra_ledger_tests::runs::{follow_chain, page_requests};
use reqwest::{StatusCode, header};
use uuid::Uuid;

use crate::console::{http, session_cookie};
use crate::reassignment::{seeded, supersede};

/// Words of the database's own text that must never reach a client.
const INTERNALS: [&str; 5] = [
    "keep_one_business",
    "assignments",
    "23514",
    "constraint",
    "relation",
];

fn assert_disclosed(text: &str, what: &str) {
    for internal in INTERNALS {
        assert!(
            !text.contains(internal),
            "{what} discloses {internal:?}: {text}"
        );
    }
    let reference = text.split("reference ").nth(1).map(|rest| {
        rest.split(|c: char| !c.is_ascii_hexdigit() && c != '-')
            .next()
    });
    assert!(
        text.starts_with("internal: ")
            && reference
                .flatten()
                .is_some_and(|id| id.parse::<Uuid>().is_ok()),
        "{what} has a code and a reference: {text}"
    );
}

/// A row that fails in the database (a CHECK the test adds: its name and table would be in
/// PostgreSQL's message) leaves a `last_error` and a failure reason with the code
/// `internal` and a reference, on the API, the console and the `ReassignmentRowFailed`
/// event that goes to Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_failure_in_a_run_reaches_readers_as_a_code_and_a_reference()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 3).await?;
    let (old, stuck) = (seeded.contact_id, seeded.businesses[0]);
    seeded
        .client
        .batch_execute(&format!(
            "ALTER TABLE assignments ADD CONSTRAINT keep_one_business \
             CHECK (business_id <> '{stuck}' OR contact_id = '{old}')"
        ))
        .await?;
    let (run_id, _new) = supersede(&seeded.api, old, 100).await;

    // One whole-page attempt fails: the run's last_error says so, disclosed.
    let first = page_requests(&seeded.client, run_id).await?.remove(0);
    let failed = reassign::handle(seeded.api.ledger.pool(), &first, 3).await;
    assert!(failed.is_err(), "{failed:?}");
    let run = seeded
        .api
        .get(&format!("/v1/reassignment-runs/{run_id}"))
        .await;
    assert_eq!(run.status, StatusCode::OK);
    assert_disclosed(&run.str("last_error"), "last_error");

    let base = format!("http://{}", seeded.api.serve().await?);
    let cookie = session_cookie(&base, WRITER).await;
    let page = http()
        .get(format!("{base}/runs/{run_id}"))
        .header(header::COOKIE, &cookie)
        .send()
        .await?
        .text()
        .await?;
    let at = page
        .find("Last page error: ")
        .expect("the run page shows the error");
    assert_disclosed(
        &page[at + 17..page[at..].find('<').map_or(page.len(), |end| at + end)],
        "run page",
    );

    // The row is given up on: its reason is disclosed on the API and in the event.
    let status = follow_chain(&database, run_id).await?;
    assert_eq!((status.replaced, status.failed), (2, 1), "{status:#?}");
    let run = seeded
        .api
        .get(&format!("/v1/reassignment-runs/{run_id}"))
        .await;
    let reason = run.body["failures"][0]["reason"]
        .as_str()
        .unwrap_or_default();
    assert_disclosed(reason, "failure reason");
    let payload: Vec<u8> = seeded
        .client
        .query_one(
            "SELECT payload FROM events WHERE event_type = 'ReassignmentRowFailed'",
            &[],
        )
        .await?
        .get(0);
    let payload = String::from_utf8_lossy(&payload);
    assert!(payload.contains("internal: internal error"), "{payload}");
    for internal in INTERNALS {
        assert!(
            !payload.contains(internal),
            "the event discloses {internal:?}"
        );
    }
    Ok(())
}

/// The console's proof page: an event that does not exist is a 404; a database that
/// fails is a 500 naming a reference, not a "No proof" 404 with the database's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proof_page_tells_a_failing_database_from_an_unknown_event() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    api.post("/v1/contacts", contact_body("TX", "Office")).await;
    let base = format!("http://{}", api.serve().await?);
    let cookie = session_cookie(&base, WRITER).await;
    let proof = |id: Uuid| {
        http()
            .get(format!("{base}/events/{id}/proof"))
            .header(header::COOKIE, &cookie)
            .send()
    };
    let reply = proof(Uuid::now_v7()).await?;
    assert_eq!(reply.status(), StatusCode::NOT_FOUND);
    assert!(reply.text().await?.contains("not found"));

    let client = database.connect().await?;
    client
        .batch_execute("ALTER TABLE events RENAME TO events_elsewhere")
        .await?;
    let reply = proof(Uuid::now_v7()).await?;
    assert_eq!(reply.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let page = reply.text().await?;
    assert!(page.contains("under reference"), "{page}");
    for internal in ["events", "relation", "42P01", "does not exist"] {
        assert!(
            !page.contains(internal),
            "the page discloses {internal:?}: {page}"
        );
    }
    Ok(())
}
