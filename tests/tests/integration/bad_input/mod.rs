//! Bad input on every endpoint: bodies that are not one JSON object and control characters
//! in every text field ([`bodies`]), malformed and out-of-range times and control
//! characters in paths and queries ([`queries`]), unknown routes and methods and malformed
//! or oversized headers, the last over real TCP ([`heads`]). Each answer is a 4xx with the
//! documented `{"error": {"code", "message"}}` body, except hyper's bare 400 or 431 for a
//! head it cannot parse, and writes nothing.

mod batch;
mod bodies;
mod heads;
mod queries;

use std::net::SocketAddr;

use axum::http::{Method, StatusCode};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{AUDITOR, Reply, TestApi, WRITER, contact_body};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

/// Checks one refused request: its status, its code and the documented body shape.
pub(super) fn assert_refused(
    case: &str,
    status: u16,
    body: &Value,
    expected_status: u16,
    expected_code: &str,
) {
    assert_eq!(status, expected_status, "{case}: {body}");
    let error = body["error"]
        .as_object()
        .unwrap_or_else(|| panic!("{case}: no error object in {body}"));
    assert_eq!(
        body.as_object().map(|o| o.len()),
        Some(1),
        "{case}: only `error` in {body}"
    );
    assert_eq!(error.len(), 2, "{case}: code and message only: {body}");
    assert_eq!(error["code"], json!(expected_code), "{case}: {body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{case}: a message: {body}"
    );
}

pub(super) fn check(case: &str, reply: &Reply, status: u16, code: &str) {
    assert_refused(case, reply.status.as_u16(), &reply.body, status, code);
}

/// A world to be refused in: a contact, a business assigned to it, a superseded contact
/// with a run.
pub(super) struct World {
    pub(super) api: TestApi,
    pub(super) contact: String,
    pub(super) business: String,
    pub(super) assignment: String,
    pub(super) superseded: String,
    pub(super) run: String,
}

pub(super) async fn world(database: &TestDatabase) -> World {
    let api = TestApi::new(database).expect("an API");
    let old = api
        .post("/v1/contacts", contact_body("MS", "Old Office"))
        .await;
    let superseded = old.str("contact_id");
    let run = api
        .post(
            &format!("/v1/contacts/{superseded}/supersede"),
            json!({"name": "New Office", "address": contact_body("MS", "x")["address"]}),
        )
        .await
        .str("run_id");
    let contact = api
        .post("/v1/contacts", contact_body("TX", "Lone Star Agents"))
        .await
        .str("contact_id");
    let business = Uuid::now_v7().to_string();
    let assignment = api
        .post(
            "/v1/assignments",
            json!({"business_id": business, "jurisdiction": "TX"}),
        )
        .await
        .str("assignment_id");
    assert!(!assignment.is_empty() && !run.is_empty());
    World {
        api,
        contact,
        business,
        assignment,
        superseded,
        run,
    }
}

impl World {
    /// Every write endpoint with a valid body.
    pub(super) fn writes(&self) -> Vec<(String, Value)> {
        let address = contact_body("TX", "x")["address"].clone();
        vec![
            (
                "/v1/contacts".into(),
                json!({"jurisdiction": "CA", "name": "Golden", "address": address}),
            ),
            (
                format!("/v1/contacts/{}/supersede", self.contact),
                json!({"name": "Next", "address": address}),
            ),
            (
                format!("/v1/contacts/{}/reassignment-runs", self.superseded),
                json!({"page_size": 10}),
            ),
            (
                "/v1/assignments".into(),
                json!({"business_id": Uuid::now_v7(), "jurisdiction": "TX"}),
            ),
            (
                format!("/v1/assignments/{}/end", self.assignment),
                json!({}),
            ),
            (
                format!("/v1/assignments/{}/replace", self.assignment),
                json!({}),
            ),
        ]
    }

    /// Every read endpoint.
    pub(super) fn reads(&self) -> Vec<String> {
        let registration = format!("/v1/businesses/{}/jurisdictions/TX", self.business);
        vec![
            format!("/v1/contacts/{}", self.contact),
            format!("/v1/contacts/{}/lineage", self.contact),
            format!("/v1/contacts/{}/reassignment-runs", self.superseded),
            format!("/v1/reassignment-runs/{}", self.run),
            format!("/v1/assignments/{}", self.assignment),
            format!("{registration}/registered-agent"),
            format!(
                "{registration}/registered-agents?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z"
            ),
            format!("/v1/businesses/{}/assignments", self.business),
        ]
    }
}

/// `body` with the string at `path` (dot-separated) set to `value`.
pub(super) fn with(body: &Value, path: &str, value: Value) -> Value {
    let mut body = body.clone();
    let mut at = &mut body;
    for key in path.split('.') {
        at = &mut at[key];
    }
    *at = value;
    body
}
