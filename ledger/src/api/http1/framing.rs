//! HTTP/1.1 framing as a request stream goes by: each request's head held back until it is
//! complete and checked with the parser hyper uses, then its body passed through by
//! `Content-Length` or chunks. Pure: bytes in, bytes out, no I/O.

use axum::http::StatusCode;

use super::super::error::ApiError;

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Most header lines accepted (hyper's own limit).
const MAX_HEADERS: usize = 100;
/// Longest chunk-size line followed before the body is left to hyper to judge.
const MAX_CHUNK_LINE: usize = 1024;

/// Where the connection is in the current request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Framing {
    /// Reading a request head; the bytes so far are held back.
    Head(Vec<u8>),
    /// A fixed-length body: this many bytes still to come.
    Body(u64),
    /// A chunked body.
    Chunks(Chunks),
    /// Bytes pass unchecked from here on (an upgrade, or a body hyper will refuse).
    Unchecked,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chunks {
    /// A chunk-size line, so far.
    Size(Vec<u8>),
    /// Chunk data and its CRLF: this many bytes still to come.
    Data(u64),
    /// The trailer section after the last chunk, so far.
    Trailers(Vec<u8>),
}

/// A request head refused before hyper saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    code: &'static str,
    pub(super) message: String,
}

impl Refusal {
    fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: message.into(),
        }
    }

    fn too_large(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            code: "headers_too_large",
            message: message.into(),
        }
    }

    /// The whole HTTP response, closing the connection.
    pub(super) fn response(&self) -> Vec<u8> {
        let body = ApiError::body(self.code, &self.message);
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or_default(),
            body.len()
        )
        .into_bytes()
    }
}

impl Framing {
    /// Follows `input` through the framing, appending what may go to hyper to `ready`.
    /// Returns the refusal of a head that must not reach it; nothing after is passed on.
    pub(super) fn feed(&mut self, input: &[u8], ready: &mut Vec<u8>) -> Option<Refusal> {
        let mut data = input.to_vec();
        let mut at = 0;
        while at < data.len() {
            let rest = &data[at..];
            match self {
                Framing::Unchecked => {
                    ready.extend_from_slice(rest);
                    return None;
                }
                Framing::Body(remaining) => {
                    let n = (*remaining).min(rest.len() as u64) as usize;
                    ready.extend_from_slice(&rest[..n]);
                    *remaining -= n as u64;
                    at += n;
                    if *remaining == 0 {
                        *self = Framing::Head(Vec::new());
                    }
                }
                Framing::Chunks(chunks) => {
                    let (used, next) = chunks.feed(rest);
                    ready.extend_from_slice(&rest[..used]);
                    at += used;
                    if let Some(next) = next {
                        *self = next;
                    }
                }
                Framing::Head(head) => {
                    head.extend_from_slice(rest);
                    match check_head(head) {
                        HeadCheck::Partial if head.len() > MAX_HEAD_BYTES => {
                            return Some(head_too_large());
                        }
                        HeadCheck::Complete(length, _) if length > MAX_HEAD_BYTES => {
                            return Some(head_too_large());
                        }
                        HeadCheck::Partial => return None,
                        HeadCheck::Refused(refusal) => return Some(refusal),
                        HeadCheck::Complete(length, next) => {
                            let head = std::mem::take(head);
                            ready.extend_from_slice(&head[..length]);
                            data = head[length..].to_vec();
                            at = 0;
                            *self = next;
                        }
                    }
                }
            }
        }
        None
    }
}

fn head_too_large() -> Refusal {
    Refusal::too_large(format!(
        "the request head is larger than {MAX_HEAD_BYTES} bytes"
    ))
}

impl Chunks {
    /// Consumes the start of `input`; returns how much, and the framing that follows when
    /// the body ends (or can no longer be followed).
    fn feed(&mut self, input: &[u8]) -> (usize, Option<Framing>) {
        match self {
            Chunks::Data(remaining) => {
                let n = (*remaining).min(input.len() as u64) as usize;
                *remaining -= n as u64;
                if *remaining == 0 {
                    *self = Chunks::Size(Vec::new());
                }
                (n, None)
            }
            Chunks::Size(line) => {
                let Some(end) = input.iter().position(|b| *b == b'\n') else {
                    line.extend_from_slice(input);
                    let next = (line.len() > MAX_CHUNK_LINE).then_some(Framing::Unchecked);
                    return (input.len(), next);
                };
                line.extend_from_slice(&input[..=end]);
                match httparse::parse_chunk_size(line) {
                    Ok(httparse::Status::Complete((_, 0))) => {
                        *self = Chunks::Trailers(Vec::new());
                        (end + 1, None)
                    }
                    // The data, then its CRLF.
                    Ok(httparse::Status::Complete((_, size))) => {
                        *self = Chunks::Data(size.saturating_add(2));
                        (end + 1, None)
                    }
                    // A broken body reaches the handler as a body error, answered in JSON.
                    _ => (end + 1, Some(Framing::Unchecked)),
                }
            }
            Chunks::Trailers(section) => {
                let before = section.len();
                section.extend_from_slice(input);
                let end = if section.starts_with(b"\r\n") {
                    Some(2)
                } else if section.starts_with(b"\n") {
                    Some(1)
                } else {
                    find(section, b"\r\n\r\n").map(|at| at + 4)
                };
                match end {
                    Some(end) => (end - before, Some(Framing::Head(Vec::new()))),
                    None if section.len() > MAX_HEAD_BYTES => {
                        (input.len(), Some(Framing::Unchecked))
                    }
                    None => (input.len(), None),
                }
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// What a request head is, so far.
#[derive(Debug)]
enum HeadCheck {
    Partial,
    Complete(usize, Framing),
    Refused(Refusal),
}

/// Parses a head as hyper would, and works out how its body is framed (as hyper does:
/// `Transfer-Encoding` wins over `Content-Length`, and must end in `chunked`).
fn check_head(bytes: &[u8]) -> HeadCheck {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let length = match request.parse(bytes) {
        Ok(httparse::Status::Partial) => return HeadCheck::Partial,
        Ok(httparse::Status::Complete(length)) => length,
        Err(httparse::Error::TooManyHeaders) => {
            return HeadCheck::Refused(Refusal::too_large(format!(
                "the request has more than {MAX_HEADERS} header lines"
            )));
        }
        Err(error) => return HeadCheck::Refused(Refusal::bad_request(describe(error, bytes))),
    };
    let target = request.path.unwrap_or_default();
    if axum::http::Uri::try_from(target).is_err() {
        return HeadCheck::Refused(Refusal::bad_request(format!(
            "the request target {:?} is not a valid URI",
            truncate(target)
        )));
    }
    let http_11 = request.version == Some(1);
    let mut chunked = None;
    let mut content_length: Option<u64> = None;
    let mut upgrade = request.method == Some("CONNECT");
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            if !http_11 {
                return HeadCheck::Refused(Refusal::bad_request(
                    "HTTP/1.0 requests cannot have a Transfer-Encoding header",
                ));
            }
            let last = header
                .value
                .rsplit(|b| *b == b',')
                .next()
                .unwrap_or_default();
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if header.name.eq_ignore_ascii_case("content-length") {
            let parsed = std::str::from_utf8(header.value)
                .ok()
                .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|text| text.parse::<u64>().ok());
            match (parsed, content_length) {
                (None, _) => {
                    return HeadCheck::Refused(Refusal::bad_request(
                        "the Content-Length header is not a number",
                    ));
                }
                (Some(new), Some(old)) if new != old => {
                    return HeadCheck::Refused(Refusal::bad_request(
                        "the request has Content-Length headers with different values",
                    ));
                }
                (Some(new), _) => content_length = Some(new),
            }
        } else if header.name.eq_ignore_ascii_case("upgrade") && http_11 {
            upgrade = true;
        }
    }
    let next = match (chunked, content_length) {
        (Some(false), _) => {
            return HeadCheck::Refused(Refusal::bad_request(
                "Transfer-Encoding must end with chunked",
            ));
        }
        _ if upgrade => Framing::Unchecked,
        (Some(true), _) => Framing::Chunks(Chunks::Size(Vec::new())),
        (None, Some(length)) if length > 0 => Framing::Body(length),
        (None, _) => Framing::Head(Vec::new()),
    };
    HeadCheck::Complete(length, next)
}

/// What is wrong with a head httparse refused, naming the header when it is one.
fn describe(error: httparse::Error, bytes: &[u8]) -> String {
    let header_error = matches!(
        error,
        httparse::Error::HeaderName | httparse::Error::HeaderValue
    );
    if header_error && let Some(found) = bad_header_line(bytes) {
        return found;
    }
    format!("malformed request: {error}")
}

/// The first header line with a byte HTTP does not allow, described.
fn bad_header_line(bytes: &[u8]) -> Option<String> {
    let name_byte = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let value_byte = |b: u8| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80;
    for line in bytes.split(|b| *b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            return Some(format!(
                "the header line {:?} has no colon",
                truncate(&String::from_utf8_lossy(line))
            ));
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let shown = truncate(&String::from_utf8_lossy(name)).to_owned();
        if let Some(b) = name.iter().find(|b| !name_byte(**b)) {
            return Some(format!(
                "the header name {shown:?} contains the byte 0x{b:02x}, which HTTP does not allow"
            ));
        }
        if let Some(b) = value.iter().find(|b| !value_byte(**b)) {
            return Some(format!(
                "the value of header {shown} contains the byte 0x{b:02x}, which HTTP does not allow"
            ));
        }
    }
    None
}

fn truncate(text: &str) -> &str {
    match text.char_indices().nth(100) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> (Vec<u8>, Option<Refusal>) {
        let mut framing = Framing::Head(Vec::new());
        let mut ready = Vec::new();
        for chunk in chunks {
            if let Some(refusal) = framing.feed(chunk, &mut ready) {
                return (ready, Some(refusal));
            }
        }
        (ready, None)
    }

    const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn good_requests_pass_whole_and_unchanged_however_they_are_split() {
        let post = b"POST /v1/contacts HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        let chunked = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n";
        let stream: Vec<u8> = [GET, &post[..], &chunked[..], GET].concat();
        for split in 1..stream.len() {
            let (ready, refusal) = run(&[&stream[..split], &stream[split..]]);
            assert_eq!(refusal, None, "split at {split}");
            assert_eq!(ready, stream, "split at {split}");
        }
        let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(run(&bytewise), (stream.clone(), None));
    }

    #[test]
    fn a_head_is_held_back_until_it_is_complete() {
        let (ready, refusal) = run(&[&GET[..10]]);
        assert!(ready.is_empty() && refusal.is_none());
    }

    #[test]
    fn a_malformed_header_is_refused_naming_it_after_the_requests_before_it() {
        let bad = b"GET /v1/contacts/x HTTP/1.1\r\nAuthorization: Bearer \x7f\r\n\r\n";
        let (ready, refusal) = run(&[GET, &bad[..20], &bad[20..]]);
        assert_eq!(ready, GET, "the good request before it still goes through");
        let refusal = refusal.expect("refused");
        assert_eq!(refusal.status, StatusCode::BAD_REQUEST);
        assert!(
            refusal.message.contains("Authorization") && refusal.message.contains("0x7f"),
            "{}",
            refusal.message
        );
        let response = String::from_utf8(refusal.response()).unwrap();
        assert!(
            response.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{response}"
        );
        let body = response.split("\r\n\r\n").nth(1).unwrap();
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "bad_request");
    }

    #[test]
    fn oversized_heads_and_too_many_headers_are_431() {
        let huge = format!(
            "GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        let (_, refusal) = run(&[huge.as_bytes()]);
        assert_eq!(
            refusal.unwrap().status,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: 1\r\n")).collect();
        let (_, refusal) = run(&[format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()]);
        assert_eq!(refusal.unwrap().code, "headers_too_large");
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        for head in [
            &b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /\x01 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
        ] {
            let (_, refusal) = run(&[head]);
            assert_eq!(
                refusal.map(|r| r.status),
                Some(StatusCode::BAD_REQUEST),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
