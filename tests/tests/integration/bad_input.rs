//! Bad input on every endpoint: malformed and out-of-range times, control characters in
//! every text field, bodies that are not one JSON object, unknown routes and methods, and
//! malformed or oversized headers, the last over real TCP. Each answer is a 4xx with the
//! documented `{"error": {"code", "message"}}` body, and writes nothing.

use std::net::SocketAddr;

use axum::http::{Method, StatusCode};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{AUDITOR, Reply, TestApi, WRITER, contact_body};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

/// Rows in the ledger's tables that a write would change.
async fn counts(database: &TestDatabase) -> anyhow::Result<[i64; 5]> {
    let client = database.connect().await?;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM outbox), \
                    (SELECT count(*) FROM contacts), (SELECT count(*) FROM assignments), \
                    (SELECT count(*) FROM reassignment_runs)",
            &[],
        )
        .await?;
    Ok([row.get(0), row.get(1), row.get(2), row.get(3), row.get(4)])
}

/// Checks one refused request: its status, its code and the documented body shape.
fn assert_refused(
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

fn check(case: &str, reply: &Reply, status: u16, code: &str) {
    assert_refused(case, reply.status.as_u16(), &reply.body, status, code);
}

/// A world to be refused in: a contact, a business assigned to it, a superseded contact
/// with a run.
struct World {
    api: TestApi,
    contact: String,
    business: String,
    assignment: String,
    superseded: String,
    run: String,
}

async fn world(database: &TestDatabase) -> World {
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
    fn writes(&self) -> Vec<(String, Value)> {
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
    fn reads(&self) -> Vec<String> {
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
fn with(body: &Value, path: &str, value: Value) -> Value {
    let mut body = body.clone();
    let mut at = &mut body;
    for key in path.split('.') {
        at = &mut at[key];
    }
    *at = value;
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_one_json_object_are_refused() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = counts(&database).await?;
    for (uri, _) in world.writes() {
        for body in [
            json!([]),
            json!([Uuid::now_v7(), "MP"]),
            json!("text"),
            json!(3),
            json!(true),
            json!(null),
        ] {
            let reply = world.api.post(&uri, body.clone()).await;
            check(&format!("POST {uri} {body}"), &reply, 400, "bad_request");
        }
        // Not JSON, no content type, far too large.
        let reply = world
            .api
            .raw(
                Method::POST,
                &uri,
                Some(WRITER),
                Some("application/json"),
                b"{not json".to_vec(),
            )
            .await;
        check(
            &format!("POST {uri} broken JSON"),
            &reply,
            400,
            "bad_request",
        );
        let reply = world
            .api
            .raw(Method::POST, &uri, Some(WRITER), None, b"{}".to_vec())
            .await;
        check(
            &format!("POST {uri} without content type"),
            &reply,
            415,
            "unsupported_media_type",
        );
        let huge = format!("{{\"name\": \"{}\"}}", "a".repeat(100_000)).into_bytes();
        let reply = world
            .api
            .raw(
                Method::POST,
                &uri,
                Some(WRITER),
                Some("application/json"),
                huge,
            )
            .await;
        check(
            &format!("POST {uri} 100 KB"),
            &reply,
            413,
            "payload_too_large",
        );
    }
    assert_eq!(
        counts(&database).await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_any_text_field_are_refused_naming_the_field() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = counts(&database).await?;
    let text_fields: Vec<(String, Value, Vec<&str>)> = world
        .writes()
        .into_iter()
        .map(|(uri, body)| {
            let fields = match uri.as_str() {
                "/v1/contacts" => vec![
                    "jurisdiction",
                    "name",
                    "address.line1",
                    "address.line2",
                    "address.city",
                    "address.region",
                    "address.postal_code",
                ],
                "/v1/assignments" => vec!["business_id", "jurisdiction"],
                uri if uri.ends_with("/supersede") => vec![
                    "name",
                    "address.line1",
                    "address.line2",
                    "address.city",
                    "address.region",
                    "address.postal_code",
                ],
                _ => vec!["effective_at"],
            };
            (uri, body, fields)
        })
        .collect();
    for (uri, body, fields) in &text_fields {
        for field in fields {
            for bad in [
                "a\u{0}b",
                "\u{1b}[31mred",
                "two\nlines",
                "del\u{7f}",
                "\u{202e}evil",
            ] {
                let reply = world.api.post(uri, with(body, field, json!(bad))).await;
                let case = format!("POST {uri} {field}={bad:?}");
                check(&case, &reply, 400, "invalid_field");
                let message = reply.body["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    message.starts_with(&format!("{field}:")),
                    "{case}: {message}"
                );
            }
        }
    }
    assert_eq!(
        counts(&database).await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_paths_and_queries_of_reads_are_refused() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = counts(&database).await?;
    let business = &world.business;
    for bad in ["%00", "%1B%5B31m", "%0A", "%7F", "%E2%80%AE"] {
        for (uri, code) in [
            (format!("/v1/contacts/{bad}"), "bad_request"),
            (format!("/v1/contacts/{bad}/lineage"), "bad_request"),
            (
                format!("/v1/contacts/{bad}/reassignment-runs"),
                "bad_request",
            ),
            (format!("/v1/reassignment-runs/{bad}"), "bad_request"),
            (format!("/v1/assignments/{bad}"), "bad_request"),
            (
                format!("/v1/businesses/{bad}/jurisdictions/TX/registered-agent"),
                "bad_request",
            ),
            (
                format!("/v1/businesses/{business}/jurisdictions/T{bad}X/registered-agent"),
                "bad_request",
            ),
            (
                format!("/v1/businesses/{business}/jurisdictions/TX/registered-agent?at=2026{bad}"),
                "bad_request",
            ),
            (
                format!(
                    "/v1/businesses/{business}/jurisdictions/TX/registered-agents?from={bad}&to=2026-01-01T00:00:00Z"
                ),
                "bad_request",
            ),
            (
                format!("/v1/businesses/{business}/assignments?cursor={bad}"),
                "invalid_cursor",
            ),
            (
                format!("/v1/businesses/{business}/assignments?limit={bad}"),
                "bad_request",
            ),
        ] {
            let reply = world.api.get(&uri).await;
            check(&format!("GET {uri}"), &reply, 400, code);
        }
    }
    assert_eq!(
        counts(&database).await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_and_malformed_times_are_refused() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = counts(&database).await?;
    let registration = format!("/v1/businesses/{}/jurisdictions/TX", world.business);
    // Query times: a year PostgreSQL cannot store, a year RFC 3339 cannot write, and text.
    for (value, status, code) in [
        ("-5000-01-01T00:00:00Z", 400, "invalid_field"),
        ("0000-12-31T00:00:00Z", 400, "invalid_field"),
        ("%2B10000-01-01T00:00:00Z", 400, "invalid_field"),
        ("%2B275760-09-13T00:00:00Z", 400, "bad_request"),
        ("yesterday", 400, "bad_request"),
        ("2026-02-30T00:00:00Z", 400, "bad_request"),
        ("", 400, "bad_request"),
    ] {
        for uri in [
            format!("{registration}/registered-agent?at={value}"),
            format!("{registration}/registered-agent?known_at={value}"),
            format!("{registration}/registered-agents?from={value}&to=2026-01-01T00:00:00Z"),
            format!("{registration}/registered-agents?from=2026-01-01T00:00:00Z&to={value}"),
        ] {
            let reply = world.api.get(&uri).await;
            check(&format!("GET {uri}"), &reply, status, code);
        }
    }
    // Body times.
    for (uri, body) in world.writes() {
        if uri.ends_with("/reassignment-runs") {
            continue; // Takes no time.
        }
        for (value, status, code) in [
            ("-5000-01-01T00:00:00Z", 422, "invalid_field"),
            ("+10000-01-01T00:00:00Z", 422, "invalid_field"),
            ("not a time", 400, "bad_request"),
        ] {
            let reply = world
                .api
                .post(&uri, with(&body, "effective_at", json!(value)))
                .await;
            check(
                &format!("POST {uri} effective_at={value}"),
                &reply,
                status,
                code,
            );
        }
    }
    assert_eq!(
        counts(&database).await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_wrong_methods_and_bad_tokens_answer_in_json() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = counts(&database).await?;
    let contact = &world.contact;
    for (method, uri, status, code) in [
        (Method::GET, "/".to_owned(), 404, "not_found"),
        (Method::GET, "/v1/nope".to_owned(), 404, "not_found"),
        (Method::POST, "/v2/contacts".to_owned(), 404, "not_found"),
        (
            Method::GET,
            format!("/v1/contacts/{contact}/nope"),
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            format!("/v1/contacts/{contact}"),
            405,
            "method_not_allowed",
        ),
        (
            Method::PUT,
            "/v1/assignments".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::PATCH,
            format!("/v1/assignments/{}", world.assignment),
            405,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/v1/assignments".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::POST,
            format!("/v1/contacts/{contact}"),
            405,
            "method_not_allowed",
        ),
    ] {
        let body = (method != Method::GET).then(|| json!({}));
        let reply = world
            .api
            .call(method.clone(), &uri, Some(WRITER), body)
            .await;
        check(&format!("{method} {uri}"), &reply, status, code);
    }
    // Malformed and oversized Authorization headers the HTTP layer can carry.
    let reads = world.reads();
    let long_token = "t".repeat(20_000);
    for (header, status, code) in [
        ("Bearer".to_owned(), 401, "unauthorized"),
        ("Basic d3JpdGVyOnNlY3JldA==".to_owned(), 401, "unauthorized"),
        (format!("Bearer {long_token}"), 401, "unauthorized"),
        (format!("Bearer {WRITER} trailing"), 401, "unauthorized"),
    ] {
        for uri in reads.iter().take(2) {
            let reply = world
                .api
                .with_authorization(Method::GET, uri, header.as_bytes())
                .await;
            check(
                &format!("GET {uri} with {:.40}", header),
                &reply,
                status,
                code,
            );
        }
    }
    // Non-ASCII bytes (allowed by HTTP as obs-text, not by a token).
    let reply = world
        .api
        .with_authorization(Method::GET, &reads[0], b"Bearer \xff\xfe")
        .await;
    check("obs-text token", &reply, 401, "unauthorized");
    // An auditor may read every endpoint, and no write one.
    for uri in &reads {
        let reply = world.api.call(Method::GET, uri, Some(AUDITOR), None).await;
        assert_eq!(reply.status, StatusCode::OK, "GET {uri}: {:?}", reply.body);
    }
    for (uri, body) in world.writes() {
        let reply = world
            .api
            .call(Method::POST, &uri, Some(AUDITOR), Some(body))
            .await;
        check(&format!("auditor POST {uri}"), &reply, 403, "forbidden");
    }
    assert_eq!(
        counts(&database).await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

/// Sends raw bytes over a fresh TCP connection and reads the whole answer (the server
/// closes it after a refusal). Returns each response's status and JSON body.
async fn raw_http(address: SocketAddr, request: &[u8]) -> anyhow::Result<Vec<(u16, Value)>> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream.write_all(request).await?;
    let mut bytes = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut bytes),
    )
    .await??;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut responses = Vec::new();
    let mut rest = text.as_str();
    while let Some(head_end) = rest.find("\r\n\r\n") {
        let head = &rest[..head_end];
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_default();
        let length: usize = head
            .lines()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|n| n.trim().parse().unwrap_or_default())
            })
            .unwrap_or_default();
        anyhow::ensure!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "a JSON answer: {head}"
        );
        let body = &rest[head_end + 4..head_end + 4 + length];
        responses.push((status, serde_json::from_str(body)?));
        rest = &rest[head_end + 4 + length..];
    }
    Ok(responses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_headers_over_tcp_get_json_errors() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let address = world.api.serve().await?;
    let before = counts(&database).await?;
    let uri = format!("/v1/contacts/{}", world.contact);
    let good = format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {AUDITOR}\r\n\r\n");
    let big = "b".repeat(100_000);
    let many: String = (0..150).map(|i| format!("X-Header-{i}: {i}\r\n")).collect();
    let write = format!("/v1/assignments/{}/end", world.assignment);
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "DEL byte in Authorization",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \x7f\r\n\r\n")
                .into_bytes(),
            400,
            "bad_request",
        ),
        (
            "DEL byte in a write's Authorization",
            format!(
                "POST {write} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRITER}\x7f\r\n\
                 Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            )
            .into_bytes(),
            400,
            "bad_request",
        ),
        (
            "NUL in a header value",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nX-Note: a\0b\r\n\r\n").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "header line without a colon",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nnot a header\r\n\r\n").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "100 KB header",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {big}\r\n\r\n")
                .into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "150 headers",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\n{many}\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "two different Content-Lengths",
            format!(
                "POST {write} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRITER}\r\n\
                 Content-Length: 2\r\nContent-Length: 3\r\n\r\n{{}} "
            )
            .into_bytes(),
            400,
            "bad_request",
        ),
        (
            "a request line that is not HTTP",
            b"HELLO\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
    ];
    for (case, request, status, code) in cases {
        // A good request first on the same connection: it is still answered, then the
        // refusal comes last.
        let mut bytes = good.clone().into_bytes();
        bytes.extend_from_slice(&request);
        let responses = raw_http(address, &bytes).await?;
        assert_eq!(responses.len(), 2, "{case}: {responses:?}");
        assert_eq!(
            responses[0].0, 200,
            "{case}: the request before it: {responses:?}"
        );
        assert_refused(case, responses[1].0, &responses[1].1, status, code);
    }
    // The server still serves.
    let after = raw_http(
        address,
        format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {AUDITOR}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    assert_eq!(after[0].0, 200);
    assert_eq!(
        counts(&database).await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}
