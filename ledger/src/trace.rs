//! W3C trace context (`traceparent`) carried from an HTTP request to the consumers.
//!
//! A request's `traceparent` (or a new trace the service starts when it has none, or a
//! malformed one) becomes the parent of the service's span; that span's `traceparent` is
//! recorded with every event the request appends (`events.traceparent`, `outbox.traceparent`)
//! and answered in the response's `traceparent` header. The relay publishes it as a Kafka
//! header. A reassignment run keeps its supersede's trace: every page the worker runs gets a
//! span of its own in the same trace. The trace is operational metadata, not a ledger fact:
//! it is outside the events' hash chain.

use std::fmt;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

/// The header's name, in HTTP and in Kafka.
pub const HEADER: &str = "traceparent";

/// One span of a trace: `00-<trace id>-<span id>-<flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value (version 00, or a later version's first four fields);
    /// `None` for anything malformed, an all-zero id, or version `ff`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let mut parts = text.split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        let lower_hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !lower_hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
            return None;
        }
        if !lower_hex(trace, 32) || !lower_hex(span, 16) || !lower_hex(flags, 2) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&trace[2 * i..2 * i + 2], 16).ok()?;
        }
        for (i, byte) in span_id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&span[2 * i..2 * i + 2], 16).ok()?;
        }
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }

    /// A new trace (sampled).
    pub fn start() -> Self {
        let mut trace_id = [0u8; 16];
        trace_id.copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self {
            trace_id,
            span_id: new_span_id(),
            flags: 1,
        }
    }

    /// A new span of the same trace, this one its parent.
    pub fn child(&self) -> Self {
        Self {
            span_id: new_span_id(),
            ..*self
        }
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        crate::hex::hex(&self.trace_id)
    }

    /// The child of `incoming` (a header value), or a new trace when there is none or it is
    /// malformed.
    pub fn continue_or_start(incoming: Option<&str>) -> Self {
        incoming
            .and_then(Self::parse)
            .map_or_else(Self::start, |parent| parent.child())
    }
}

fn new_span_id() -> [u8; 8] {
    let mut span = [0u8; 8];
    span.copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..8]);
    if span == [0; 8] {
        span[7] = 1;
    }
    span
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            crate::hex::hex(&self.trace_id),
            crate::hex::hex(&self.span_id),
            self.flags
        )
    }
}

tokio::task_local! {
    static CURRENT: TraceParent;
}

/// The span of the request being served, if any.
pub fn current() -> Option<TraceParent> {
    CURRENT.try_with(|trace| *trace).ok()
}

/// Middleware: the request's span (see the module docs), current while it is handled and
/// answered in the response's `traceparent` header.
pub async fn http_layer(request: Request, next: Next) -> Response {
    let incoming = request
        .headers()
        .get(HEADER)
        .and_then(|value| value.to_str().ok());
    let span = TraceParent::continue_or_start(incoming);
    let mut response = CURRENT.scope(span, next.run(request)).await;
    if let Ok(value) = HeaderValue::from_str(&span.to_string()) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_w3c_example_and_refuses_malformed_values() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceParent::parse(text).expect("the W3C example");
        assert_eq!(parsed.to_string(), text);
        assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let child = parsed.child();
        assert_eq!(child.trace_id(), parsed.trace_id());
        assert_ne!(child.to_string(), text);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // A later version may add fields.
        assert!(TraceParent::parse(&format!("01{}-more", &text[2..])).is_some());
        let started = TraceParent::continue_or_start(Some("garbage"));
        assert_eq!(TraceParent::parse(&started.to_string()), Some(started));
    }
}
