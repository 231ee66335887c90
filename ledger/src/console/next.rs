//! Where the browser goes after signing in: the `next` a form or link carries, checked and
//! rebuilt as a path on this site, or the start page.
//!
//! `next` comes from whoever made the link, so it is an attacker's input. A browser reading
//! a `Location` drops tabs and newlines and treats `\` as `/`, so text that looks like a
//! path (`/\t/evil.example`, `/\evil.example`) can name another origin. Checking for `//`
//! is not enough; the target is rebuilt instead:
//!
//! - any control character refuses it, before anything else (a browser would remove it);
//! - it must be a path that starts with exactly one `/`, with no `\` anywhere, and its
//!   percent-decoded form must not start with `//` nor hold a control character or a `\`
//!   either (a proxy or a framework in front may decode it once);
//! - the path and query are then written again byte by byte: what RFC 3986 allows in them
//!   is kept, everything else percent-encoded; a fragment is dropped.
//!
//! What comes out can only be read as a path on this origin, and is always a valid header
//! value (a `next` with CR/LF used to make the redirect panic into a 500).

/// Longest `next` taken; a longer one is replaced by the start page.
const MAX_NEXT: usize = 2000;

/// Where to go after signing in: `next` as a path on this site, or `/`.
pub fn safe_next(next: Option<&str>) -> String {
    next.and_then(local_path).unwrap_or_else(|| "/".into())
}

/// `next` rebuilt as a path (and query) on this site, or `None` when it is not one.
fn local_path(next: &str) -> Option<String> {
    if next.len() > MAX_NEXT || next.chars().any(char::is_control) || next.contains('\\') {
        return None;
    }
    let next = next.split_once('#').map_or(next, |(before, _)| before);
    let (path, query) = match next.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (next, None),
    };
    let decoded = percent_decoded(path);
    let hidden = |byte: &u8| byte.is_ascii_control() || *byte == b'\\';
    if !path.starts_with('/') || decoded.starts_with(b"//") || decoded.iter().any(hidden) {
        return None;
    }
    let mut rebuilt = String::with_capacity(next.len());
    encode_into(&mut rebuilt, path, |byte| is_pchar(byte) || byte == b'/');
    if let Some(query) = query {
        rebuilt.push('?');
        encode_into(&mut rebuilt, query, |byte| {
            is_pchar(byte) || byte == b'/' || byte == b'?'
        });
    }
    Some(rebuilt)
}

/// RFC 3986 `pchar` (unreserved, sub-delims, `:` and `@`), and `%` of an escape already made.
fn is_pchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%".contains(&byte)
}

/// Appends `text` to `out`, percent-encoding each byte `keep` refuses.
fn encode_into(out: &mut String, text: &str, keep: impl Fn(u8) -> bool) {
    for byte in text.bytes() {
        if keep(byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

/// `text` with its `%XX` escapes decoded (a malformed escape is kept as it is).
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_next_that_could_leave_the_site_is_the_start_page() {
        for next in [
            "/\t/evil.example/x",
            "/\r/evil.example/x",
            "/\n/evil.example/x",
            "/x\r\nSet-Cookie: a=b",
            "/\u{7f}/evil.example",
            "/\u{85}/evil.example",
            "\t//evil.example",
            "//evil.example/x",
            "/\\evil.example",
            "\\/evil.example",
            "/%2F/evil.example/x",
            "/%2f/evil.example/x",
            "/%5C/evil.example/x",
            "/%09/evil.example/x",
            "/%0d%0a/evil.example/x",
            "https://evil.example/",
            "evil.example",
            "",
            "?next=//evil.example",
        ] {
            assert_eq!(safe_next(Some(next)), "/", "next {next:?}");
        }
        assert_eq!(safe_next(None), "/");
        assert_eq!(safe_next(Some(&format!("/{}", "a".repeat(MAX_NEXT)))), "/");
    }

    #[test]
    fn a_path_on_this_site_is_kept_and_written_again_safely() {
        for (next, rebuilt) in [
            ("/", "/"),
            ("/contacts/0190-aa", "/contacts/0190-aa"),
            (
                "/search?q=Acme%20Inc&as_of=2026-01-01",
                "/search?q=Acme%20Inc&as_of=2026-01-01",
            ),
            ("/search?q=a b\"<", "/search?q=a%20b%22%3C"),
            ("/search?q=//x", "/search?q=//x"),
            ("/a//b", "/a//b"),
            ("/caf\u{e9}", "/caf%C3%A9"),
            ("/runs/1#progress", "/runs/1"),
        ] {
            assert_eq!(safe_next(Some(next)), rebuilt, "next {next:?}");
        }
    }
}
