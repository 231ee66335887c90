//! The `ledger` command's output as a shell user meets it (issue 48, item 4): an audit
//! question with no answer is an error in the API's words, not `null` and success; and a
//! reader that goes away (`| head`) ends the command quietly, without a panic.

use axum::http::StatusCode;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{TestApi, contact_body};
use ra_ledger_tests::cli::{Printed, Stdout, ledger_printing};
use serde_json::json;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_at_without_an_agent_fails_as_the_api_answers_404() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    api.post("/v1/contacts", contact_body("TX", "Lone Star Agents"))
        .await
        .expect(StatusCode::CREATED);
    let business = Uuid::now_v7().to_string();
    api.post(
        "/v1/assignments",
        json!({"business_id": business, "jurisdiction": "TX"}),
    )
    .await
    .expect(StatusCode::CREATED);
    // Now: the agent, as JSON, exit 0.
    let now = chrono::Utc::now().to_rfc3339();
    let answered = audit_at(&database, &business, &now).await?;
    assert_eq!(answered.code, Some(0), "{answered:?}");
    let answer: serde_json::Value = serde_json::from_str(&answered.stdout)?;
    assert_eq!(
        answer["contact"]["name"], "Lone Star Agents",
        "{answered:?}"
    );
    // Before the business subscribed: the API's 404 sentence, a non-zero exit, nothing on
    // stdout (it printed `null` and exited 0).
    let api_says = api
        .get(&format!(
            "/v1/businesses/{business}/jurisdictions/TX/registered-agent?at=2020-01-01T00:00:00Z"
        ))
        .await;
    api_says.expect(StatusCode::NOT_FOUND);
    let none = audit_at(&database, &business, "2020-01-01T00:00:00Z").await?;
    assert_eq!(none.code, Some(1), "{none:?}");
    assert_eq!(none.stdout, "", "{none:?}");
    assert!(
        none.stderr.contains(&format!(
            "business {business} had no registered agent in TX at 2020-01-01 00:00:00 UTC"
        )),
        "{none:?}"
    );
    Ok(())
}

/// `ledger audit at` the registration (`business`, TX) at `at`.
async fn audit_at(database: &TestDatabase, business: &str, at: &str) -> anyhow::Result<Printed> {
    let arguments = [
        "audit",
        "at",
        "--business",
        business,
        "--jurisdiction",
        "TX",
        "--at",
        at,
    ];
    let env = [("LEDGER_DATABASE_URL", database.url.as_str())];
    ledger_printing(&arguments, &env, Stdout::Read).await
}

/// `ledger audit history … | head` once `head` exited: Rust ignores SIGPIPE, and
/// `println!` panicked with a backtrace. Now the command ends quietly with 141, as a shell
/// reports `cat` killed by SIGPIPE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_gone_ends_the_command_quietly() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let business = Uuid::now_v7().to_string();
    let env = [
        ("LEDGER_DATABASE_URL", database.url.as_str()),
        ("RUST_BACKTRACE", "1"),
    ];
    let arguments = ["audit", "history", business.as_str()];
    let read = ledger_printing(&arguments, &env, Stdout::Read).await?;
    assert_eq!((read.code, read.stdout.trim()), (Some(0), "[]"), "{read:?}");
    let gone = ledger_printing(&arguments, &env, Stdout::Closed).await?;
    assert_eq!(gone.code, Some(141), "{gone:?}");
    assert!(!gone.stderr.contains("panicked"), "{gone:?}");
    assert!(!gone.stderr.contains("Error"), "{gone:?}");
    Ok(())
}
