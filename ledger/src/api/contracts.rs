//! The contracts a consuming team builds on, served as the repository holds them, with the
//! same (no) authentication as `/openapi.json`: the AsyncAPI document of the topics
//! (`docs/asyncapi.yaml`) and the `.proto` of every value (`proto/proto/`), at the path
//! `protoc -I` expects under `/contracts/`. The schema registry holds the same `.proto` under
//! each framed topic's subject (docs/consumers.md, "Reading through a schema registry").

use axum::http::HeaderName;
use axum::http::header::CONTENT_TYPE;

/// The AsyncAPI document, as in the repository.
pub const ASYNCAPI: &str = include_str!("../../../docs/asyncapi.yaml");

/// Where each contract is served.
pub const ASYNCAPI_PATH: &str = "/contracts/asyncapi.yaml";

/// `/contracts/<path of events.proto under proto/proto>`.
pub fn events_proto_path() -> String {
    format!("/contracts/{}", ra_ledger_proto::EVENTS_PROTO_PATH)
}

/// `GET /contracts/asyncapi.yaml`.
pub async fn asyncapi() -> ([(HeaderName, &'static str); 1], &'static str) {
    ([(CONTENT_TYPE, "application/yaml")], ASYNCAPI)
}

/// `GET /contracts/ra/ledger/v1/events.proto`.
pub async fn events_proto() -> ([(HeaderName, &'static str); 1], &'static str) {
    (
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        ra_ledger_proto::EVENTS_PROTO,
    )
}
