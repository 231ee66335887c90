//! The little of Markdown the link check needs, as pure functions over a document's text:
//! where its links point, and which heading anchors it has, as GitHub renders them.
//!
//! Code is not prose: fenced blocks and inline code spans are blanked out before links and
//! headings are looked for, so a `[a](b)` shown as code is not taken for a link. Blanking keeps
//! every newline, so offsets still map to the right line numbers.

use std::collections::HashMap;

/// A link found in a document: its 1-based line and its target as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub line: usize,
    pub target: String,
}

/// The text with fenced code blocks and inline code spans replaced by spaces (newlines kept).
pub fn prose(text: &str) -> String {
    blank_code_spans(&blank_fences(text))
}

/// Every link target of `text`: inline links and images `[text](target "title")`, reference
/// definitions `[label]: target`, autolinks `<https://…>` and HTML `href="…"` / `src="…"`.
pub fn links(text: &str) -> Vec<Link> {
    let prose = prose(text);
    let mut found = Vec::new();
    inline_links(&prose, &mut found);
    reference_definitions(&prose, &mut found);
    autolinks(&prose, &mut found);
    html_attributes(&prose, &mut found);
    found.sort_by_key(|link| link.line);
    found
}

/// The anchors GitHub gives the headings of `text`, duplicates numbered `-1`, `-2`, … in order.
pub fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for heading in blank_fences(text).lines().filter_map(heading_text) {
        let base = slug(&heading);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.push(if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// GitHub's anchor of a heading's text (github-slugger): inline markup rendered away,
/// lowercase, every character that is not a letter, a digit, `-`, `_` or a space dropped,
/// each space turned into `-`.
pub fn slug(heading: &str) -> String {
    rendered(heading)
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// An ATX heading's text (`## Text ##` gives `Text`); `None` for any other line. Up to three
/// spaces of indent; the hashes must be followed by a space or end the line.
fn heading_text(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let hashes = rest.len() - rest.trim_start_matches('#').len();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &rest[hashes..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    let text = rest.trim();
    // A closing sequence of hashes is not part of the text when a space precedes it.
    let without_closing = text.trim_end_matches('#');
    let text = if without_closing.is_empty() || without_closing.ends_with(' ') {
        without_closing.trim_end()
    } else {
        text
    };
    Some(text.to_owned())
}

/// A heading's text as GitHub renders it: a link `[text](url)` becomes its text, HTML tags go.
/// Code spans keep their content (only the backticks go, and `slug` drops those anyway).
fn rendered(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(start) = rest.find("](") {
        let Some(end) = rest[start..].find(')') else {
            break;
        };
        out.push_str(&rest[..start]);
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    strip_tags(&out)
}

fn strip_tags(text: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// Fenced code blocks (``` or ~~~, at least three, up to three spaces of indent) blanked; a
/// fence closes with the same character, at least as many, and nothing else on the line.
fn blank_fences(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut open: Option<(char, usize)> = None;
    for line in text.split_inclusive('\n') {
        let fence = fence_of(line);
        let in_code = match (open, fence) {
            (None, Some((c, n, _))) => {
                open = Some((c, n));
                true
            }
            (Some((c, n)), Some((fc, fn_, info))) if fc == c && fn_ >= n && info.is_empty() => {
                open = None;
                true
            }
            (Some(_), _) => true,
            (None, None) => false,
        };
        if in_code {
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The fence character, its count and the info string after it, when `line` is a fence.
fn fence_of(line: &str) -> Option<(char, usize, &str)> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let c = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let count = trimmed.len() - trimmed.trim_start_matches(c).len();
    (count >= 3).then(|| (c, count, trimmed[count..].trim()))
}

/// Inline code spans blanked: a run of backticks up to the next run of the same length in
/// the same paragraph; an unmatched run is literal text, as in CommonMark.
fn blank_code_spans(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = backtick_run(bytes, i);
        match closing_run(bytes, i + run, run) {
            Some(close) => {
                for byte in &mut out[i..close + run] {
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                i = close + run;
            }
            None => i += run,
        }
    }
    // Only ASCII bytes were replaced, by ASCII spaces, and never inside a UTF-8 sequence.
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

fn backtick_run(bytes: &[u8], from: usize) -> usize {
    bytes[from..].iter().take_while(|b| **b == b'`').count()
}

/// Where the run of exactly `run` backticks that closes a span opened before `from` starts;
/// `None` when a blank line (the paragraph's end) or the text's end comes first.
fn closing_run(bytes: &[u8], from: usize, run: usize) -> Option<usize> {
    let mut j = from;
    while j < bytes.len() {
        if bytes[j] == b'\n' && blank_line_follows(bytes, j + 1) {
            return None;
        }
        if bytes[j] == b'`' {
            let len = backtick_run(bytes, j);
            if len == run {
                return Some(j);
            }
            j += len;
        } else {
            j += 1;
        }
    }
    None
}

fn blank_line_follows(bytes: &[u8], from: usize) -> bool {
    bytes[from..]
        .iter()
        .take_while(|b| **b != b'\n')
        .all(|b| b.is_ascii_whitespace())
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// `](target)` and `](<target>)`, with an optional title; parentheses in a target nest.
fn inline_links(prose: &str, found: &mut Vec<Link>) {
    for (offset, _) in prose.match_indices("](") {
        let rest = &prose[offset + 2..];
        let target = if let Some(bracketed) = rest.strip_prefix('<') {
            bracketed.find('>').map(|end| &bracketed[..end])
        } else {
            unbracketed_target(rest)
        };
        if let Some(target) = target {
            found.push(Link {
                line: line_of(prose, offset),
                target: target.to_owned(),
            });
        }
    }
}

/// The target up to whitespace or the `)` that closes the link; `None` when neither comes.
fn unbracketed_target(rest: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(&rest[..i]),
            ')' => depth -= 1,
            c if c.is_whitespace() => return Some(&rest[..i]),
            _ => {}
        }
    }
    None
}

/// `[label]: target` at the start of a line (up to three spaces of indent).
fn reference_definitions(prose: &str, found: &mut Vec<Link>) {
    for (index, line) in prose.lines().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 || !trimmed.starts_with('[') {
            continue;
        }
        let Some(close) = trimmed.find("]:") else {
            continue;
        };
        if let Some(target) = trimmed[close + 2..].split_whitespace().next() {
            let target = target.trim_start_matches('<').trim_end_matches('>');
            found.push(Link {
                line: index + 1,
                target: target.to_owned(),
            });
        }
    }
}

/// `<http://…>` and `<https://…>`.
fn autolinks(prose: &str, found: &mut Vec<Link>) {
    for scheme in ["<http://", "<https://"] {
        for (offset, _) in prose.match_indices(scheme) {
            let rest = &prose[offset + 1..];
            if let Some(end) = rest.find('>') {
                found.push(Link {
                    line: line_of(prose, offset),
                    target: rest[..end].to_owned(),
                });
            }
        }
    }
}

/// `href="…"` and `src="…"` of HTML written in the Markdown.
fn html_attributes(prose: &str, found: &mut Vec<Link>) {
    for attribute in ["href=\"", "src=\""] {
        for (offset, _) in prose.match_indices(attribute) {
            let rest = &prose[offset + attribute.len()..];
            if let Some(end) = rest.find('"') {
                found.push(Link {
                    line: line_of(prose, offset),
                    target: rest[..end].to_owned(),
                });
            }
        }
    }
}
