//! API errors: a stable machine-readable code, a human message, and the HTTP status.
//!
//! A server error tells the client only that it happened and under which reference; the
//! cause (SQLSTATE, the server's message, the constraint) goes to the service log under
//! the same reference, for the operator.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use crate::error::CommandError;
use crate::store::AppendError;

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
        let reference = Uuid::now_v7();
        tracing::error!(%reference, cause = %cause, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error; the service log has the cause under reference {reference}"),
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
    fn from(error: CommandError) -> Self {
        let message = error.to_string();
        match error {
            CommandError::Validation(_) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", message)
            }
            CommandError::NotFound { .. } => Self::not_found(message),
            CommandError::Conflict(_) | CommandError::Append(AppendError::Conflict { .. }) => {
                Self::new(StatusCode::CONFLICT, "conflict", message)
            }
            CommandError::Append(AppendError::Backdated { .. }) => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "backdated_effective_at",
                message,
            ),
            CommandError::Pool(_) => {
                tracing::warn!(%message, "no database connection for a request");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the ledger database is unavailable; retry later",
                )
            }
            CommandError::Append(AppendError::Database(_))
            | CommandError::Projection(_)
            | CommandError::Database(_) => Self::internal(&message),
        }
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
