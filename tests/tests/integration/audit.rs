//! The audit questions over HTTP: who was the RA at T (as known at K), every RA during a
//! period, the lineage, and a business's history in signed keyset pages.

use axum::http::StatusCode;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{TestApi, contact_body, one_assignment};
use serde_json::json;
use uuid::Uuid;

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_questions_over_http() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let address = contact_body("TX", "x")["address"].clone();
    let first = api
        .post("/v1/contacts", json!({"jurisdiction": "TX", "name": "First Office", "address": address, "effective_at": "2024-01-01T00:00:00Z"}))
        .await;
    let first_id = first.str("contact_id");
    let business = Uuid::now_v7().to_string();
    let assigned = api
        .post("/v1/assignments", json!({"business_id": business, "jurisdiction": "TX", "effective_at": "2024-02-01T00:00:00Z"}))
        .await;
    assigned.expect(StatusCode::CREATED);
    let superseded = api
        .post(&format!("/v1/contacts/{first_id}/supersede"), json!({"name": "Second Office", "address": address, "effective_at": "2025-01-01T00:00:00Z"}))
        .await;
    let second_id = superseded.body["new"]["contact_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let replaced = api
        .post(
            &format!("/v1/assignments/{}/replace", assigned.str("assignment_id")),
            json!({"effective_at": "2025-03-01T00:00:00Z"}),
        )
        .await;
    replaced.expect(StatusCode::CREATED);

    let base = format!("/v1/businesses/{business}/jurisdictions/TX");
    let in_2024 = api
        .get(&format!("{base}/registered-agent?at=2024-06-01T00:00:00Z"))
        .await;
    assert_eq!(in_2024.body["contact"]["name"], json!("First Office"));
    assert_eq!(in_2024.body["contact_status"], json!("primary"));
    // Between the supersede and the REPLACE the business was still served by the old,
    // now on-file contact.
    let in_between = api
        .get(&format!("{base}/registered-agent?at=2025-02-01T00:00:00Z"))
        .await;
    assert_eq!(in_between.body["contact"]["name"], json!("First Office"));
    assert_eq!(in_between.body["contact_status"], json!("on_file"));
    let now = api.get(&format!("{base}/registered-agent")).await;
    assert_eq!(now.body["contact"]["contact_id"], json!(second_id));
    // As known before anything was recorded: nothing.
    let unknown = api
        .get(&format!(
            "{base}/registered-agent?at=2024-06-01T00:00:00Z&known_at=2020-01-01T00:00:00Z"
        ))
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let before_start = api
        .get(&format!("{base}/registered-agent?at=2024-01-15T00:00:00Z"))
        .await;
    assert_eq!(before_start.status, StatusCode::NOT_FOUND);

    let in_2025 = api
        .get(&format!(
            "{base}/registered-agents?from=2025-01-01T00:00:00Z&to=2026-01-01T00:00:00Z"
        ))
        .await;
    let names: Vec<&str> = in_2025
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|ra| ra["contact"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["First Office", "Second Office"]);
    let backwards = api
        .get(&format!(
            "{base}/registered-agents?from=2026-01-01T00:00:00Z&to=2025-01-01T00:00:00Z"
        ))
        .await;
    assert_eq!(backwards.status, StatusCode::BAD_REQUEST);

    let lineage = api.get(&format!("/v1/contacts/{second_id}/lineage")).await;
    let chain: Vec<&str> = lineage
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(chain, vec!["First Office", "Second Office"]);
    let from_first = api.get(&format!("/v1/contacts/{first_id}/lineage")).await;
    assert_eq!(
        from_first.body, lineage.body,
        "the same lineage from either end"
    );
    Ok(())
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_pages_with_signed_cursors() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (_, business, mut assignment_id) = one_assignment(&api).await;
    for _ in 0..4 {
        let replaced = api
            .post(
                &format!("/v1/assignments/{assignment_id}/replace"),
                json!({}),
            )
            .await;
        assignment_id = replaced.str("assignment_id");
    }
    let mut seen = Vec::new();
    let mut uri = format!("/v1/businesses/{business}/assignments?limit=2");
    loop {
        let page = api.get(&uri).await;
        page.expect(StatusCode::OK);
        for item in page.body["items"].as_array().unwrap() {
            seen.push(item["assignment_id"].as_str().unwrap().to_owned());
        }
        match page.body["next_cursor"].as_str() {
            Some(cursor) => {
                // A tampered cursor is refused.
                let tampered = format!("{}x", cursor);
                let refused = api
                    .get(&format!(
                        "/v1/businesses/{business}/assignments?cursor={tampered}"
                    ))
                    .await;
                assert_eq!(refused.status, StatusCode::BAD_REQUEST);
                uri = format!("/v1/businesses/{business}/assignments?limit=2&cursor={cursor}");
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), 5);
    assert_eq!(seen.last().unwrap(), &assignment_id);
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique.len(), 5, "no row twice");
    Ok(())
}

/// The report's case: asked as known at the instant the assignment was recorded, the answer
/// showed its end and its contact's supersede, both recorded later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_as_known_at_k_shows_nothing_recorded_after_k() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let address = contact_body("TX", "x")["address"].clone();
    let contact = api
        .post("/v1/contacts", json!({"jurisdiction": "TX", "name": "First Office", "address": address, "effective_at": "2026-01-01T00:00:00Z"}))
        .await;
    let contact_id = contact.str("contact_id");
    let business = Uuid::now_v7();
    let assigned = api
        .post("/v1/assignments", json!({"business_id": business, "jurisdiction": "TX", "effective_at": "2026-02-01T00:00:00Z"}))
        .await;
    assigned.expect(StatusCode::CREATED);
    let recorded = assigned.str("recorded_at");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let ended = api
        .post(
            &format!("/v1/assignments/{}/end", assigned.str("assignment_id")),
            json!({"effective_at": "2026-04-01T00:00:00Z"}),
        )
        .await;
    ended.expect(StatusCode::OK);
    let superseded = api
        .post(
            &format!("/v1/contacts/{contact_id}/supersede"),
            json!({"name": "Second Office", "address": address, "effective_at": "2026-02-15T00:00:00Z"}),
        )
        .await;
    superseded.expect(StatusCode::ACCEPTED);

    let base = format!("/v1/businesses/{business}/jurisdictions/TX/registered-agent");
    let known_then = api
        .get(&format!(
            "{base}?at=2026-03-01T00:00:00Z&known_at={}",
            recorded.replace('+', "%2B")
        ))
        .await;
    known_then.expect(StatusCode::OK);
    let assignment = &known_then.body["assignment"];
    for field in ["ended_at", "end_reason", "replaced_by", "ended_recorded_at"] {
        assert_eq!(
            assignment[field],
            json!(null),
            "{field} was recorded after K: {assignment}"
        );
    }
    let contact = &known_then.body["contact"];
    assert_eq!(contact["status"], json!("primary"), "{contact}");
    assert_eq!(contact["superseded_by"], json!(null));
    assert_eq!(contact["superseded_at"], json!(null));
    assert_eq!(contact["version"], json!(1));
    assert_eq!(known_then.body["contact_status"], json!("primary"));

    // Known now, the same question shows both.
    let known_now = api.get(&format!("{base}?at=2026-03-01T00:00:00Z")).await;
    assert_eq!(
        known_now.body["assignment"]["end_reason"],
        json!("cancelled")
    );
    assert_eq!(known_now.body["contact"]["status"], json!("on_file"));
    assert_eq!(known_now.body["contact_status"], json!("on_file"));
    Ok(())
}

/// The report's case: assign at T, end at T, assign again at T. The first never served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_that_ended_as_it_started_was_never_in_force() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let address = contact_body("TX", "x")["address"].clone();
    api.post("/v1/contacts", json!({"jurisdiction": "TX", "name": "Office", "address": address, "effective_at": "2026-01-01T00:00:00Z"}))
        .await;
    let business = Uuid::now_v7();
    let t = "2026-03-01T00:00:00Z";
    let first = api
        .post(
            "/v1/assignments",
            json!({"business_id": business, "jurisdiction": "TX", "effective_at": t}),
        )
        .await;
    let ended = api
        .post(
            &format!("/v1/assignments/{}/end", first.str("assignment_id")),
            json!({"effective_at": t}),
        )
        .await;
    ended.expect(StatusCode::OK);
    let second = api
        .post(
            "/v1/assignments",
            json!({"business_id": business, "jurisdiction": "TX", "effective_at": t}),
        )
        .await;
    second.expect(StatusCode::CREATED);

    let base = format!("/v1/businesses/{business}/jurisdictions/TX");
    let at_t = api.get(&format!("{base}/registered-agent?at={t}")).await;
    assert_eq!(
        at_t.body["assignment"]["assignment_id"],
        second.body["assignment_id"]
    );
    let during = api
        .get(&format!(
            "{base}/registered-agents?from=2026-02-01T00:00:00Z&to=2026-04-01T00:00:00Z"
        ))
        .await;
    let listed: Vec<&serde_json::Value> = during
        .body
        .as_array()
        .expect("a list")
        .iter()
        .map(|ra| &ra["assignment"]["assignment_id"])
        .collect();
    assert_eq!(
        listed,
        vec![&second.body["assignment_id"]],
        "{:?}",
        during.body
    );
    // A period that ends at T lists nothing: [from, T) and [T, ...) do not meet.
    let before = api
        .get(&format!(
            "{base}/registered-agents?from=2026-02-01T00:00:00Z&to={t}"
        ))
        .await;
    assert_eq!(before.body, json!([]));
    Ok(())
}
