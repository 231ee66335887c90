//! API errors: a stable machine-readable code, a human message, and the HTTP status.
//!
//! A server error tells the client only that it happened and under which reference; the
//! cause (SQLSTATE, the server's message, the constraint) goes to the service log under
//! the same reference, for the operator.

use crate::error::{CommandError, Disclosed};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Every code an error answer can carry: the `code` enum of `/openapi.json`'s `Error`
/// schema, which a test keeps equal to this list. [`ApiError::new`] and [`ApiError::body`]
/// refuse any other in debug builds, so a new code fails the first test that meets it
/// until it is added here and to the document.
pub const CODES: [&str; 16] = [
    "bad_request",
    "invalid_field",
    "invalid_cursor",
    "backdated_effective_at",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "body_timeout",
    "conflict",
    "not_sealed",
    "payload_too_large",
    "unsupported_media_type",
    "too_many_replays",
    "unavailable",
    "internal",
];

/// An error answer: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
}

impl ApiError {
    /// An error with an explicit status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        debug_assert!(CODES.contains(&code), "error code {code:?} is not in CODES");
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// A 500 whose cause is logged under a fresh reference and not shown to the client.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        let disclosed = Disclosed::internal(cause);
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            disclosed.code,
            disclosed.message,
        )
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The body every error answer has, for a status and a message.
    pub fn body(code: &str, message: &str) -> String {
        debug_assert!(CODES.contains(&code), "error code {code:?} is not in CODES");
        serde_json::to_string(&Body {
            error: Inner { code, message },
        })
        .unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<CommandError> for ApiError {
    /// The code and message the client may read ([`CommandError::disclosed`], one place
    /// for the API, a run's errors and the console), and the status of that code.
    fn from(error: CommandError) -> Self {
        let disclosed = error.disclosed();
        let status = match disclosed.code {
            "invalid_field" | "backdated_effective_at" => StatusCode::UNPROCESSABLE_ENTITY,
            "not_found" => StatusCode::NOT_FOUND,
            "conflict" => StatusCode::CONFLICT,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, disclosed.code, disclosed.message)
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(error: tokio_postgres::Error) -> Self {
        CommandError::from(error).into()
    }
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        CommandError::Pool(error).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_documents_error_codes_are_the_codes_the_service_answers_with() {
        let document: serde_json::Value =
            serde_json::from_str(include_str!("openapi.json")).expect("openapi.json is JSON");
        let documented: BTreeSet<&str> = document
            .pointer("/components/schemas/Error/properties/error/properties/code/enum")
            .and_then(serde_json::Value::as_array)
            .expect("the Error schema has a code enum")
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect();
        let answered: BTreeSet<&str> = CODES.into_iter().collect();
        assert_eq!(documented, answered);
        assert_eq!(answered.len(), CODES.len(), "a code is listed twice");
    }
}
