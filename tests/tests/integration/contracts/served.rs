//! `ledger serve` serves the contracts a consuming team builds on, with no token, as
//! `/openapi.json` is served: the AsyncAPI document and events.proto, what the repository
//! holds (the document's links to the `.proto` made relative to where it is served), and
//! listed in `/openapi.json`; every link of the served document to a file answers that file.

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
    // From docs/ the repository's document names ../proto/proto/…; served under
    // /contracts/ it names the .proto beside it.
    let served_asyncapi =
        std::fs::read_to_string(root.join("docs/asyncapi.yaml"))?.replace("'../proto/proto/", "'");
    let events_proto = std::fs::read_to_string(root.join("proto/proto/ra/ledger/v1/events.proto"))?;
    for (path, expected, content_type) in [
        (
            "/contracts/asyncapi.yaml",
            &served_asyncapi,
            "application/yaml",
        ),
        (
            "/contracts/ra/ledger/v1/events.proto",
            &events_proto,
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
        assert_eq!(&response.text().await?, expected, "{path}");
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

/// Every `$ref` string in `value` that names a file (not `#/…` inside the document).
fn file_refs(value: &serde_json::Value, refs: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                match item.as_str() {
                    Some(reference) if key == "$ref" && !reference.starts_with('#') => {
                        refs.push(reference.to_owned())
                    }
                    _ => file_refs(item, refs),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| file_refs(item, refs)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_link_of_the_served_asyncapi_document_answers_the_file_it_names() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let address = api.serve().await?;
    let http = reqwest::Client::new();
    let document_url = reqwest::Url::parse(&format!("http://{address}/contracts/asyncapi.yaml"))?;
    let text = http.get(document_url.clone()).send().await?.text().await?;
    let document: serde_json::Value = serde_norway::from_str(&text)?;
    let mut refs = Vec::new();
    file_refs(&document, &mut refs);
    assert!(
        refs.len() >= 2,
        "the served document links no .proto: {refs:?}"
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let events_proto = std::fs::read_to_string(root.join("proto/proto/ra/ledger/v1/events.proto"))?;
    for reference in refs {
        let url = document_url.join(&reference)?;
        let response = http.get(url.clone()).send().await?;
        assert_eq!(
            response.status(),
            reqwest::StatusCode::OK,
            "{reference:?}, followed from the served document to {url}"
        );
        assert_eq!(response.text().await?, events_proto, "{url}");
    }
    Ok(())
}
