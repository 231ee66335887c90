//! `/openapi.json` says what the API does: schemathesis (pinned in
//! `tests/schemathesis/requirements.txt`, installed by deploy/test) runs every check against
//! the real router served over TCP on a real database, with a token of each role, and finds
//! nothing the document and the service disagree on.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ra_ledger::domain::JURISDICTIONS;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{AUDITOR, OPERATOR, TestApi, WRITER};
use uuid::Uuid;

/// schemathesis's time budget: its examples, coverage, fuzzing and stateful phases repeat
/// until it is spent. With the start of the database and the seeding, the test stays
/// within 90 s.
const BUDGET: Duration = Duration::from_secs(60);

/// The venv's schemathesis, which deploy/test prepares (deploy/lib.sh `ensure_schemathesis`).
fn schemathesis() -> anyhow::Result<String> {
    std::env::var("LEDGER_SCHEMATHESIS").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_SCHEMATHESIS is not set: run this test through deploy/test, which makes the venv"
        )
    })
}

/// What the stateful phase and the reads need to find: a primary contact in every other
/// jurisdiction (the rest are left for schemathesis to create), a business assigned in each,
/// and a superseded contact with its successor.
async fn seed(api: &TestApi) -> anyhow::Result<()> {
    for code in JURISDICTIONS.iter().step_by(2) {
        api.contact(code, "Seeded Agents").await;
        let business = Uuid::now_v7();
        let assigned = api
            .post(
                "/v1/assignments",
                serde_json::json!({"business_id": business, "jurisdiction": code}),
            )
            .await;
        anyhow::ensure!(assigned.status.is_success(), "{:?}", assigned.body);
    }
    Ok(())
}

/// The number after "Test cases:" in schemathesis's summary: how many it generated.
fn generated(output: &str) -> Option<u64> {
    let summary = output.split("Test cases:").nth(1)?;
    summary.split_whitespace().next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_the_service_and_its_openapi_document_in_agreement() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    seed(&api).await?;
    let address = api.serve().await?;

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new(schemathesis()?);
    command
        .arg("--config-file")
        .arg(root.join("schemathesis/schemathesis.toml"))
        .arg("run")
        .arg(format!("http://{address}/openapi.json"))
        .args(["--checks", "all"])
        .args(["--max-time", &BUDGET.as_secs().to_string()])
        // One worker: two meet a race inside hypothesis (a runtime error, not a finding).
        .args(["--workers", "1"])
        .env("SCHEMATHESIS_WRITER", WRITER)
        .env("SCHEMATHESIS_AUDITOR", AUDITOR)
        .env("SCHEMATHESIS_OPERATOR", OPERATOR)
        .env("NO_COLOR", "1");
    // schemathesis blocks; the server runs on this runtime's other worker.
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        generated(&stdout).is_some_and(|count| count > 0),
        "schemathesis generated no test case"
    );
    assert!(
        output.status.success(),
        "schemathesis found the service and /openapi.json in disagreement ({}); its output is above",
        output.status
    );
    Ok(())
}
