//! `ledger serve` serves the contracts a consuming team builds on, with no token, as
//! `/openapi.json` is served: the AsyncAPI document and events.proto, byte for byte what the
//! repository holds, and listed in `/openapi.json`.

use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_serve_serves_the_asyncapi_document_and_the_proto_without_a_token()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let address = api.serve().await?;
    let http = reqwest::Client::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (path, file, content_type) in [
        (
            "/contracts/asyncapi.yaml",
            "docs/asyncapi.yaml",
            "application/yaml",
        ),
        (
            "/contracts/ra/ledger/v1/events.proto",
            "proto/proto/ra/ledger/v1/events.proto",
            "text/plain; charset=utf-8",
        ),
    ] {
        let response = http.get(format!("http://{address}{path}")).send().await?;
        assert_eq!(response.status(), reqwest::StatusCode::OK, "{path}");
        assert_eq!(
            response.headers()["content-type"].to_str()?,
            content_type,
            "{path}"
        );
        assert_eq!(
            response.text().await?,
            std::fs::read_to_string(root.join(file))?,
            "{path} is not {file}"
        );
        let documented = api.get("/openapi.json").await.body;
        assert!(
            documented["paths"][path]["get"]["security"] == serde_json::json!([]),
            "{path} is not in /openapi.json as served without a token"
        );
    }
    let missing = http
        .get(format!(
            "http://{address}/contracts/ra/ledger/v2/events.proto"
        ))
        .send()
        .await?;
    assert_eq!(missing.status(), reqwest::StatusCode::NOT_FOUND);
    Ok(())
}
