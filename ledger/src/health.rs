//! Liveness and readiness endpoints.
//!
//! `/healthz` answers as long as the process serves HTTP. `/readyz` answers 200 only when
//! PostgreSQL answers a query through the pool, so a load balancer stops routing to an
//! instance that lost its database.

use axum::{Json, Router, extract::State, http::StatusCode, routing::get};
use deadpool_postgres::Pool;
use serde::Serialize;

/// Body of the health endpoints.
#[derive(Debug, Serialize)]
pub struct HealthBody {
    /// `ok` or `unavailable`.
    pub status: &'static str,
    /// Why the instance is not ready, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Routes `/healthz` and `/readyz`.
pub fn router(pool: Pool) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(pool)
}

async fn healthz() -> Json<HealthBody> {
    Json(HealthBody {
        status: "ok",
        reason: None,
    })
}

async fn readyz(State(pool): State<Pool>) -> (StatusCode, Json<HealthBody>) {
    let check = async {
        let client = pool.get().await.map_err(|error| error.to_string())?;
        client
            .query_one("SELECT 1", &[])
            .await
            .map_err(|error| error.to_string())
    };
    match check.await {
        Ok(_) => (
            StatusCode::OK,
            Json(HealthBody {
                status: "ok",
                reason: None,
            }),
        ),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(HealthBody {
                status: "unavailable",
                reason: Some(format!("database: {reason}")),
            }),
        ),
    }
}
