//! What wraps every route: unknown routes answered, and every error response (the routing
//! layer's body-less 405 and 413, a handler's panic) in the API's JSON shape.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::FutureExt as _;

use super::ApiError;
use super::extract;

pub(super) async fn unknown_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {method} {}; GET /openapi.json lists them",
        shorten(uri.path())
    ))
}

fn shorten(text: &str) -> &str {
    match text.char_indices().nth(200) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// Gives an error response without a body (405 from the router, 413 from the body limit)
/// the JSON shape, and turns a panic into a logged 500.
pub(super) async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = shorten(request.uri().path()).to_owned();
    let response = match std::panic::AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            return ApiError::internal(&format!("handler of {method} {path} panicked: {what}"))
                .into_response();
        }
    };
    let status = response.status();
    if status.as_u16() < 400 || response.headers().contains_key(header::CONTENT_TYPE) {
        return response;
    }
    let allowed = response
        .headers()
        .get(header::ALLOW)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            format!("{method} is not allowed on {path}; allowed: {allowed}")
                .trim_end_matches("; allowed: ")
                .to_owned(),
        ),
        StatusCode::NOT_FOUND => ("not_found", format!("no endpoint {method} {path}")),
        StatusCode::PAYLOAD_TOO_LARGE => (
            "payload_too_large",
            format!("the body is larger than {} bytes", extract::MAX_BODY_BYTES),
        ),
        other if other.is_server_error() => ("internal", "internal error".to_owned()),
        other => (
            "bad_request",
            other.canonical_reason().unwrap_or("bad request").to_owned(),
        ),
    };
    let (mut parts, _) = response.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, ApiError::body(code, &message).into())
}
