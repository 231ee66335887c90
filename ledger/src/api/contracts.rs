//! The contracts a consuming team builds on, served as the repository holds them, with the
//! same (no) authentication as `/openapi.json`: the AsyncAPI document of the topics
//! (`docs/asyncapi.yaml`) and the `.proto` of every value (`proto/proto/`), at the path
//! `protoc -I` expects under `/contracts/`. The schema registry holds the same `.proto` under
//! each framed topic's subject (docs/consumers.md, "Reading through a schema registry").
//!
//! The document's links to the `.proto` are relative: from `docs/` in the repository they
//! name `../proto/proto/ra/ledger/v1/events.proto`, which from `/contracts/asyncapi.yaml`
//! would be `/proto/proto/…`, a 404. The served copy names the same file relative to
//! `/contracts/`, where it is served ([`served_asyncapi`]); nothing else differs.

use std::sync::LazyLock;

use axum::http::HeaderName;
use axum::http::header::CONTENT_TYPE;

/// The AsyncAPI document, as in the repository.
pub const ASYNCAPI: &str = include_str!("../../../docs/asyncapi.yaml");

/// Where the repository's document (in `docs/`) finds the `.proto` files: `proto/proto/`.
const REPOSITORY_PROTO_REF: &str = "$ref: '../proto/proto/";

/// Where the served document (under `/contracts/`) finds them: beside it.
const SERVED_PROTO_REF: &str = "$ref: '";

/// The AsyncAPI document as served.
static SERVED_ASYNCAPI: LazyLock<String> = LazyLock::new(|| served_asyncapi(ASYNCAPI));

/// `document` with each `$ref` to a `.proto` made relative to `/contracts/`.
pub fn served_asyncapi(document: &str) -> String {
    document.replace(REPOSITORY_PROTO_REF, SERVED_PROTO_REF)
}

/// Where each contract is served.
pub const ASYNCAPI_PATH: &str = "/contracts/asyncapi.yaml";

/// `/contracts/<path of events.proto under proto/proto>`.
pub fn events_proto_path() -> String {
    format!("/contracts/{}", ra_ledger_proto::EVENTS_PROTO_PATH)
}

/// `GET /contracts/asyncapi.yaml`.
pub async fn asyncapi() -> ([(HeaderName, &'static str); 1], &'static str) {
    (
        [(CONTENT_TYPE, "application/yaml")],
        SERVED_ASYNCAPI.as_str(),
    )
}

/// `GET /contracts/ra/ledger/v1/events.proto`.
pub async fn events_proto() -> ([(HeaderName, &'static str); 1], &'static str) {
    (
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        ra_ledger_proto::EVENTS_PROTO,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each file `$ref` of `document`, resolved against `base` as a client resolves it.
    fn file_refs(document: &str, base: &str) -> Vec<String> {
        let base = reqwest::Url::parse(base).expect("a base URL");
        document
            .lines()
            .filter_map(|line| line.trim().strip_prefix("$ref: '"))
            .filter(|reference| !reference.starts_with('#'))
            .map(|reference| {
                let reference = reference.trim_end_matches('\'');
                base.join(reference)
                    .expect("a relative reference")
                    .path()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn the_served_document_names_the_proto_where_it_is_served() {
        let served = file_refs(
            &served_asyncapi(ASYNCAPI),
            &format!("http://ledger{ASYNCAPI_PATH}"),
        );
        assert!(!served.is_empty(), "the document names no .proto");
        for path in served {
            assert_eq!(path, events_proto_path());
        }
    }

    #[test]
    fn the_repositorys_document_names_the_proto_where_the_repository_has_it() {
        let repository = file_refs(ASYNCAPI, "file:///repo/docs/asyncapi.yaml");
        assert!(!repository.is_empty(), "the document names no .proto");
        for path in repository {
            assert_eq!(
                path,
                format!("/repo/proto/proto/{}", ra_ledger_proto::EVENTS_PROTO_PATH)
            );
        }
    }
}
