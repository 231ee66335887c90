//! Database URLs as text: the TLS parameters libpq knows and tokio-postgres does not, split
//! off before the driver parses the rest ([`tls_params`]), and the two edits the project
//! makes to a URL without parsing it ([`with_password`], [`with_database`]).

use super::UrlError;

const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Splits the TLS parameters off a URL or key=value string: the rest, and them.
pub(super) fn tls_params(url: &str) -> Result<(String, Vec<(String, String)>), UrlError> {
    let mut found = Vec::new();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), found));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if TLS_KEYS.contains(&key) {
                found.push((key.to_owned(), percent_decode(value)?));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, found));
    }
    // key=value pairs, values optionally single-quoted with backslash escapes.
    let mut rest = String::new();
    let mut chars = url.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(UrlError(format!("expected key=value at {key:?}")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut raw = String::new();
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            raw.push('\'');
            loop {
                match chars.next() {
                    Some('\'') => break raw.push('\''),
                    Some('\\') => {
                        let escaped = chars
                            .next()
                            .ok_or_else(|| UrlError("unterminated quote".into()))?;
                        raw.push('\\');
                        raw.push(escaped);
                        value.push(escaped);
                    }
                    Some(c) => {
                        raw.push(c);
                        value.push(c);
                    }
                    None => return Err(UrlError("unterminated quote".into())),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                raw.push(c);
                value.push(c);
            }
        }
        if TLS_KEYS.contains(&key.as_str()) {
            found.push((key, value));
        } else {
            rest.push_str(&format!("{key}={raw} "));
        }
    }
    Ok((rest.trim_end().to_owned(), found))
}

fn percent_decode(text: &str) -> Result<String, UrlError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| UrlError(format!("bad percent-encoding in {text:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError(format!("{text:?} is not UTF-8")))
}

/// `url` with `password` as its password (replacing any): how a password read from a file
/// (`LEDGER_DATABASE_PASSWORD_FILE`) joins the URL, so it never has to be written in one.
pub fn with_password(url: &str, password: &str) -> Result<String, UrlError> {
    let Some(scheme_end) = url.find("://") else {
        // key=value: a later key wins, so appending replaces an earlier password.
        let escaped = password.replace('\\', "\\\\").replace('\'', "\\'");
        return Ok(format!("{url} password='{escaped}'"));
    };
    let authority_start = scheme_end + 3;
    let authority_end = url[authority_start..]
        .find(['/', '?'])
        .map_or(url.len(), |end| authority_start + end);
    let authority = &url[authority_start..authority_end];
    let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
        return Err(UrlError(
            "a password file needs a user name in the URL (postgres://USER@host/db)".into(),
        ));
    };
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    let encoded: String = password
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect();
    Ok(format!(
        "{}{user}:{encoded}@{hosts}{}",
        &url[..authority_start],
        &url[authority_end..]
    ))
}

/// `url` with its database replaced by `database` (credentials, host and query kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(base, query)| (base, Some(query)));
    let authority = base.find("://").map_or(0, |scheme| scheme + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |slash| slash + authority);
    let mut out = format!("{}/{database}", &base[..path]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{SslMode, config};
    use super::*;

    #[test]
    fn replaces_the_database_of_a_url() {
        assert_eq!(
            with_database("postgres://u:p@h:1/postgres", "t_1"),
            "postgres://u:p@h:1/t_1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1", "t_1"),
            "postgres://u:p@h:1/t_1"
        );
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "t_1"),
            "postgres://u@h/t_1?sslmode=disable"
        );
    }

    #[test]
    fn a_password_from_a_file_joins_the_url_encoded() {
        let url = with_password(
            "postgres://ledger@db.example:5432/ledger?sslmode=verify-full",
            "p@ss:w/rd %",
        )
        .unwrap();
        let settings = config(&url, "t").unwrap();
        assert_eq!(settings.sql.get_password(), Some(&b"p@ss:w/rd %"[..]));
        assert_eq!(settings.sql.get_user(), Some("ledger"));
        assert_eq!(settings.tls.mode, SslMode::VerifyFull);
        let replaced = with_password("postgres://ledger:old@h/db", "new").unwrap();
        assert_eq!(replaced, "postgres://ledger:new@h/db");
        let keyword = with_password("host=h user=u password=old", "it's").unwrap();
        assert_eq!(
            config(&keyword, "t").unwrap().sql.get_password(),
            Some(&b"it's"[..])
        );
        let error = with_password("postgres://h/db", "secret")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("user name") && !error.contains("secret"),
            "{error}"
        );
    }
}
