//! Routes, methods and headers: answered in JSON in process; heads hyper cannot parse get
//! its bare 400 or 431 over real TCP.

use super::*;

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_wrong_methods_and_bad_tokens_answer_in_json() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = database.counts().await?;
    let contact = &world.contact;
    for (method, uri, status, code) in [
        (Method::GET, "/nope".to_owned(), 404, "not_found"),
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
        database.counts().await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

/// One response read off a raw connection: its status, its head (lowercase) and its body.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    head: String,
    body: String,
}

/// Sends raw bytes over a fresh TCP connection and reads the whole answer (the server
/// closes it after a refusal), split into its responses.
async fn raw_http(address: SocketAddr, request: &[u8]) -> anyhow::Result<Vec<RawResponse>> {
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
        let head = rest[..head_end].to_ascii_lowercase();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_default();
        let length: usize = head
            .lines()
            .find_map(|line| {
                line.strip_prefix("content-length:")
                    .map(|n| n.trim().parse().unwrap_or_default())
            })
            .unwrap_or_default();
        let body = rest[head_end + 4..head_end + 4 + length].to_owned();
        rest = &rest[head_end + 4 + length..];
        responses.push(RawResponse { status, head, body });
    }
    anyhow::ensure!(rest.is_empty(), "bytes after the last response: {rest:?}");
    Ok(responses)
}

/// The answer to a good request: 200 in JSON.
fn assert_served(case: &str, response: &RawResponse) {
    assert_eq!(response.status, 200, "{case}: {response:?}");
    assert!(
        response.head.contains("content-type: application/json"),
        "{case}: a JSON answer: {response:?}"
    );
    assert!(
        serde_json::from_str::<Value>(&response.body).is_ok(),
        "{case}: {response:?}"
    );
}

/// hyper's own answer to a head it refuses: the status, an empty body, and the connection
/// closed. The one documented exception to the JSON error shape.
fn assert_bare_refusal(case: &str, response: &RawResponse, status: u16) {
    assert_eq!(response.status, status, "{case}: {response:?}");
    assert!(
        response.head.contains("content-length: 0"),
        "{case}: {response:?}"
    );
    assert!(response.body.is_empty(), "{case}: {response:?}");
    assert!(
        !response.head.contains("content-type"),
        "{case}: no body type: {response:?}"
    );
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_heads_over_tcp_get_hypers_bare_status() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let address = world.api.serve().await?;
    let before = database.counts().await?;
    let uri = format!("/v1/contacts/{}", world.contact);
    let good = format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {AUDITOR}\r\n\r\n");
    let big = "b".repeat(100_000);
    let many: String = (0..150).map(|i| format!("X-Header-{i}: {i}\r\n")).collect();
    let write = format!("/v1/assignments/{}/end", world.assignment);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "DEL byte in Authorization",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \x7f\r\n\r\n")
                .into_bytes(),
            400,
        ),
        (
            "DEL byte in a write's Authorization",
            format!(
                "POST {write} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRITER}\x7f\r\n\
                 Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            )
            .into_bytes(),
            400,
        ),
        (
            "NUL in a header value",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nX-Note: a\0b\r\n\r\n").into_bytes(),
            400,
        ),
        (
            "header line without a colon",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nnot a header\r\n\r\n").into_bytes(),
            400,
        ),
        (
            "100 KB header",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {big}\r\n\r\n")
                .into_bytes(),
            431,
        ),
        (
            "150 headers",
            format!("GET {uri} HTTP/1.1\r\nHost: x\r\n{many}\r\n").into_bytes(),
            431,
        ),
        (
            "two different Content-Lengths",
            format!(
                "POST {write} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRITER}\r\n\
                 Content-Length: 2\r\nContent-Length: 3\r\n\r\n{{}} "
            )
            .into_bytes(),
            400,
        ),
        (
            "a request line that is not HTTP",
            b"HELLO\r\n\r\n".to_vec(),
            400,
        ),
    ];
    for (case, request, status) in cases {
        // A good request first on the same connection: it is still answered, then the
        // refusal comes last.
        let mut bytes = good.clone().into_bytes();
        bytes.extend_from_slice(&request);
        let responses = raw_http(address, &bytes).await?;
        assert_eq!(responses.len(), 2, "{case}: {responses:?}");
        assert_served(&format!("{case}: the request before it"), &responses[0]);
        assert_bare_refusal(case, &responses[1], status);
    }
    // The server still serves.
    let after = raw_http(
        address,
        format!("GET {uri} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {AUDITOR}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    assert_served("after the refusals", &after[0]);
    assert_eq!(
        database.counts().await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}
