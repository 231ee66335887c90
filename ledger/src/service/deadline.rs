//! The body-read timeout: a request body that has not arrived in full within
//! [`super::Limits::body_read_timeout`] of its head is answered 408 and its connection closed.
//!
//! hyper bounds a head, not a body. A client that promises `Content-Length: 100` and sends 6
//! bytes would hold its connection, and the handler waiting on it, for as long as it likes.
//! The bound sits on the body itself ([`DeadlineBody`]), so it runs only while someone
//! waits for the body. A handler that answers without reading the body is not delayed, and
//! hyper then closes the connection rather than wait for the rest. When the deadline passes,
//! the handler's read fails and it answers as for a broken body. The layer ([`body_deadline`])
//! replaces that answer with the 408 and adds `Connection: close`, so hyper closes the
//! connection once the answer is written.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};

use crate::api::ApiError;

/// Middleware: gives each request's body a deadline of `limit` from now, and answers 408 on
/// a closed connection when the handler's read of the body ran past it.
pub(super) async fn body_deadline(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    // No body (most GETs): nothing to wait for, no timer.
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let expired = Arc::new(AtomicBool::new(false));
    let request =
        request.map(|body| Body::new(DeadlineBody::new(body, limit, Arc::clone(&expired))));
    let response = next.run(request).await;
    if !expired.load(Ordering::Relaxed) {
        return response;
    }
    tracing::info!(
        limit_ms = limit.as_millis() as u64,
        "request body not received in time; answered 408 and closed the connection"
    );
    timed_out(limit, &response)
}

/// The 408 in the API's JSON shape, with the request's `traceparent` kept.
fn timed_out(limit: Duration, answered: &Response) -> Response {
    let mut response = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "body_timeout",
        format!(
            "the request body did not arrive within {} ms; the connection is closed",
            limit.as_millis()
        ),
    )
    .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Some(trace) = answered.headers().get(crate::trace::HEADER) {
        headers.insert(crate::trace::HEADER, trace.clone());
    }
    response
}

/// The error a body gives once its deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
struct BodyTimedOut;

/// A request body that fails once its deadline passed, and records that it did.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
}

impl DeadlineBody {
    fn new(inner: Body, limit: Duration, expired: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
            expired,
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        // What has arrived goes first: a body complete at the deadline is not cut off.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::post;
    use hyper::service::Service as _;

    /// Answers `request` as a route that reads the whole body, under the deadline `limit`.
    async fn answer(limit: Duration, request: Request) -> Response {
        let router = Router::new()
            .route(
                "/",
                post(|body: Bytes| async move { body.len().to_string() }),
            )
            .layer(axum::middleware::from_fn_with_state(limit, body_deadline));
        let service = hyper_util::service::TowerToHyperService::new(router);
        match service.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// A body of which only `sent` arrives, then nothing.
    fn stalled(sent: &'static [u8]) -> Body {
        let first =
            futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(sent)) });
        Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending()))
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_is_answered_408_on_a_closed_connection() {
        let request = Request::post("/").body(stalled(b"abcdef")).unwrap();
        let response = answer(Duration::from_millis(100), request).await;
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(response.headers()[header::CONNECTION], "close");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "body_timeout");
    }

    #[tokio::test]
    async fn a_body_that_arrives_in_time_is_untouched() {
        let request = Request::post("/").body(Body::from("hello")).unwrap();
        let response = answer(Duration::from_secs(30), request).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!response.headers().contains_key(header::CONNECTION));
    }
}
