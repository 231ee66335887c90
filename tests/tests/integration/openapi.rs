//! `/openapi.json` says what the API does: schemathesis (pinned in
//! `tests/schemathesis/requirements.txt`, installed by deploy/test) runs every check against
//! the real router served over TCP on a real database, with a token of each role, and finds
//! nothing the document and the service disagree on. The requests it cannot tell from
//! valid ones (the rule spans two fields, the clock or what the ledger holds) are refused
//! as the document says where they apply.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ra_ledger::domain::JURISDICTIONS;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{AUDITOR, OPERATOR, TestApi, WRITER, contact_body, one_assignment};
use serde_json::{Value, json};
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
        // The pipeline's verdict takes no input to generate, and answers 503 by design
        // while the pipeline fails, as here without a relay (schemathesis counts any 5xx
        // a fault); oncall.rs checks its answers, healthy and failing.
        .args(["--exclude-path", "/status"])
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

/// The description at `pointer` in the document, or an empty string.
fn described<'a>(document: &'a Value, pointer: &str) -> &'a str {
    document
        .pointer(pointer)
        .and_then(|description| description["description"].as_str())
        .unwrap_or_default()
}

/// Issue 35, item 11: requests that fit the document but are refused, which schemathesis
/// reported as "schema-valid request rejected" (ST202). No schema can say these rules, so
/// each is said in words where it applies: the field's description names the refusal, and
/// the operation lists the status. Each is then sent, and answered as described.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_no_schema_can_foresee_are_described_where_they_apply() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (contact, business, assignment) = one_assignment(&api).await;
    let document = api.get("/openapi.json").await.body;
    let schemas = "/components/schemas";
    let agents = "/paths/~1v1~1businesses~1{business_id}~1jurisdictions~1{jurisdiction}~1registered-agents/get";
    let history = "/paths/~1v1~1businesses~1{business_id}~1assignments/get";
    let parameter = |operation: &str, name: &str| -> String {
        let index = document
            .pointer(&format!("{operation}/parameters"))
            .and_then(Value::as_array)
            .and_then(|list| list.iter().position(|p| p["name"] == name))
            .unwrap_or(usize::MAX);
        format!("{operation}/parameters/{index}")
    };
    let shaped_cursor = format!("{}.{}A", "A".repeat(32), "A".repeat(21));
    let long_ago = "2000-01-01T00:00:00Z";
    let mut newer = contact_body("TX", "Newer Office");
    newer.as_object_mut().unwrap().remove("jurisdiction");
    newer["effective_at"] = json!(long_ago);
    // (what, the operation, the description that must name the refusal, the answer, its
    // status and code)
    let cases = [
        (
            "`to` equal to `from`",
            agents.to_owned(),
            parameter(agents, "to"),
            api.get(&format!(
                "/v1/businesses/{business}/jurisdictions/TX/registered-agents\
                 ?from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00Z"
            ))
            .await,
            400,
            "bad_request",
        ),
        (
            "a cursor of the right shape this server did not sign",
            history.to_owned(),
            parameter(history, "cursor"),
            api.get(&format!(
                "/v1/businesses/{business}/assignments?cursor={shaped_cursor}"
            ))
            .await,
            400,
            "invalid_cursor",
        ),
        (
            "an assignment before its contact took effect",
            "/paths/~1v1~1assignments/post".to_owned(),
            format!("{schemas}/Assign/properties/effective_at"),
            api.post(
                "/v1/assignments",
                json!({"business_id": Uuid::now_v7(), "jurisdiction": "TX", "effective_at": long_ago}),
            )
            .await,
            422,
            "invalid_field",
        ),
        (
            "an end before the assignment started",
            "/paths/~1v1~1assignments~1{id}~1end/post".to_owned(),
            format!("{schemas}/ChangeAssignment/properties/effective_at"),
            api.post(
                &format!("/v1/assignments/{assignment}/end"),
                json!({"effective_at": long_ago}),
            )
            .await,
            422,
            "backdated_effective_at",
        ),
        (
            "a successor before the contact was created",
            "/paths/~1v1~1contacts~1{id}~1supersede/post".to_owned(),
            format!("{schemas}/SupersedeContact/properties/effective_at"),
            api.post(&format!("/v1/contacts/{contact}/supersede"), newer).await,
            422,
            "backdated_effective_at",
        ),
    ];
    for (what, operation, field, reply, status, code) in cases {
        assert_eq!(
            (reply.status.as_u16(), reply.error_code()),
            (status, code),
            "{what}: {:?}",
            reply.body
        );
        let declared = document
            .pointer(&format!("{operation}/responses/{status}"))
            .is_some();
        assert!(declared, "{what}: {operation} does not list {status}");
        let description = described(&document, &field);
        assert!(
            description.contains(&format!("`{code}`")),
            "{what}: the description at {field} does not name `{code}`: {description:?}"
        );
    }
    Ok(())
}
