//! Whether each link of a set of Markdown files leads somewhere: a relative link to a file
//! or folder that exists in the repository, an anchor to a heading the target has, an
//! external link that is at least a well-formed `http(s)` URL (CI has no network, so external
//! links are never fetched).

use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::markdown;

/// One broken link: where it is, what it says and why it leads nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file, relative to the root.
    pub file: PathBuf,
    pub line: usize,
    pub target: String,
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: ({}) {}",
            self.file.display(),
            self.line,
            self.target,
            self.reason
        )
    }
}

/// What checking found: every broken link, and how many links there were in all.
#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<Problem>,
    pub links: usize,
}

/// Checks every link of `files` (paths relative to `root`, the repository).
pub fn check(root: &Path, files: &[PathBuf]) -> std::io::Result<Report> {
    let mut anchors = AnchorCache::default();
    let mut report = Report::default();
    for file in files {
        let text = fs::read_to_string(root.join(file))?;
        for link in markdown::links(&text) {
            report.links += 1;
            if let Err(reason) = check_target(root, file, &link.target, &mut anchors) {
                report.problems.push(Problem {
                    file: file.clone(),
                    line: link.line,
                    target: link.target,
                    reason,
                });
            }
        }
    }
    Ok(report)
}

/// The anchors of each Markdown file read so far, by path relative to the root.
#[derive(Default)]
struct AnchorCache(HashMap<PathBuf, Vec<String>>);

impl AnchorCache {
    fn of(&mut self, root: &Path, file: &Path) -> Result<&[String], String> {
        if !self.0.contains_key(file) {
            let text = fs::read_to_string(root.join(file))
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            self.0.insert(file.to_owned(), markdown::anchors(&text));
        }
        Ok(&self.0[file])
    }
}

fn check_target(
    root: &Path,
    from: &Path,
    target: &str,
    anchors: &mut AnchorCache,
) -> Result<(), String> {
    if target.is_empty() {
        return Err("empty link target".into());
    }
    if target.starts_with("http://") || target.starts_with("https://") {
        return well_formed_url(target);
    }
    if let Some(address) = target.strip_prefix("mailto:") {
        return address
            .contains('@')
            .then_some(())
            .ok_or_else(|| "a mailto: link without an address".into());
    }
    if let Some(scheme) = scheme_of(target) {
        return Err(format!(
            "scheme {scheme}: is neither http(s) nor a path in the repository"
        ));
    }
    let (path, fragment) = match target.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        from.to_owned()
    } else {
        resolve(from, &percent_decode(path)?)?
    };
    if !root.join(&file).exists() {
        return Err(format!("{} does not exist", file.display()));
    }
    match fragment {
        None => Ok(()),
        Some(fragment) => check_anchor(root, &file, &percent_decode(fragment)?, anchors),
    }
}

fn check_anchor(
    root: &Path,
    file: &Path,
    fragment: &str,
    anchors: &mut AnchorCache,
) -> Result<(), String> {
    let is_markdown = file.extension().is_some_and(|e| e == "md");
    if !is_markdown {
        // GitHub's line anchors of a source file: #L12 or #L12-L20.
        return is_line_anchor(fragment).then_some(()).ok_or_else(|| {
            format!(
                "#{fragment}: {} is not Markdown, so only line anchors (#L12, #L12-L20) exist",
                file.display()
            )
        });
    }
    if anchors.of(root, file)?.iter().any(|a| a == fragment) {
        Ok(())
    } else {
        Err(format!(
            "{} has no heading with the anchor #{fragment}",
            file.display()
        ))
    }
}

fn is_line_anchor(fragment: &str) -> bool {
    let line = |s: &str| {
        s.strip_prefix('L')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    match fragment.split_once('-') {
        Some((from, to)) => line(from) && line(to),
        None => line(fragment),
    }
}

/// `scheme` of a target `scheme:…` (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn scheme_of(target: &str) -> Option<&str> {
    let (scheme, _) = target.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// `path` (relative to the folder of `from`, or to the root when it starts with `/`) as a
/// path relative to the root; an error when it climbs out of the repository.
fn resolve(from: &Path, path: &str) -> Result<PathBuf, String> {
    let joined = match path.strip_prefix('/') {
        Some(absolute) => PathBuf::from(absolute),
        None => from.parent().unwrap_or(Path::new("")).join(path),
    };
    let mut resolved = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::Normal(part) => resolved.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !resolved.pop() {
                    return Err(format!("{path} leads out of the repository"));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("{path} is not a relative path"));
            }
        }
    }
    Ok(resolved)
}

/// `%20` and the like decoded, as a browser does before asking for the file.
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{text}: a % not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text}: percent-encoding that is not UTF-8"))
}

/// An `http(s)` URL a browser would follow: a host of dot-separated labels (or `localhost`,
/// or an IPv4 address), an optional numeric port, then a path, query and fragment without
/// spaces or characters URLs never carry unescaped.
pub fn well_formed_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("{url}: not an http(s) URL"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    if let Some(port) = port
        && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.len() > 5)
    {
        return Err(format!("{url}: port {port:?} is not a number"));
    }
    if !well_formed_host(host) {
        return Err(format!("{url}: host {host:?} is not a host name"));
    }
    if let Some(bad) = tail
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "<>\"{}|\\^`".contains(*c))
    {
        return Err(format!("{url}: {bad:?} may not appear unescaped in a URL"));
    }
    Ok(())
}

fn well_formed_host(host: &str) -> bool {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    host == "localhost" || (host.contains('.') && host.split('.').all(label_ok))
}
