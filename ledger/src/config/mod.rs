//! Settings of `ledger serve` ([`serve`]) and `ledger worker` ([`worker`]), like the relay's
//! ([`ra_ledger_cdc::config::RelayConfig`]): the defaults suit the local stack, a TOML file
//! may change any field (an unknown one is an error), the environment overrides the file,
//! and the command line overrides both. Both load the same way: `load` (the file, then the
//! environment through the config's table of variables), the command line's changes, then
//! the secret files resolved and every field checked once, before anything starts.

pub mod serve;
pub mod worker;

use std::net::SocketAddr;

use ra_ledger_cdc::infra::settings::{ConfigError, env, listen_address};

pub use serve::{SERVE_ENV, ServeConfig};
pub use worker::{WORKER_ENV, WorkerConfig};

/// One environment variable of a config: its name, and what sets the field from its value
/// (or says why the value is wrong; the error adds the variable's name and the value).
pub type EnvVar<C> = (&'static str, fn(&mut C, &str) -> Result<(), &'static str>);

/// Sets every field whose variable in `table` is set in the environment.
fn overlay_env<C>(config: &mut C, table: &[EnvVar<C>]) -> Result<(), ConfigError> {
    overlay(config, table, env)
}

/// Sets every field whose variable in `table` has a value in `lookup`.
fn overlay<C>(
    config: &mut C,
    table: &[EnvVar<C>],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    for (name, set) in table {
        if let Some(value) = lookup(name) {
            set(config, &value).map_err(|reason| ConfigError::invalid(name, &value, reason))?;
        }
    }
    Ok(())
}

/// A whole number.
fn number<T: std::str::FromStr>(text: &str) -> Result<T, &'static str> {
    text.trim().parse().map_err(|_| "expected a whole number")
}

/// `true` or `false`.
fn flag(text: &str) -> Result<bool, &'static str> {
    match text.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true or false"),
    }
}

/// A `host:port` to listen on, or `None` for an empty value (disabled).
fn listen(text: &str) -> Result<Option<SocketAddr>, &'static str> {
    listen_address("", text).map_err(|_| "expected host:port, or empty to disable")
}

/// Refuses a `value` of `field` outside `range`, saying the range ("must be between 1 and
/// 100"): every bounded number of the configs is checked, and worded, the same way.
fn within<T: PartialOrd + std::fmt::Display>(
    field: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        field,
        value.to_string(),
        format!("must be between {} and {}", range.start(), range.end()),
    ))
}

/// `None` for an empty value: the variable unsets what the file set.
fn non_empty(text: &str) -> Option<&str> {
    Some(text).filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Probe {
        count: u32,
    }

    #[test]
    fn a_bad_value_is_refused_naming_the_variable_and_the_value() {
        const NAME: &str = "LEDGER_TEST_CONFIG_OVERLAY_PROBE";
        let table: &[EnvVar<Probe>] = &[(NAME, |c, v| {
            c.count = number(v)?;
            Ok(())
        })];
        let mut probe = Probe::default();
        overlay(&mut probe, table, |_| None).unwrap();
        assert_eq!(probe, Probe::default(), "unset: unchanged");
        let error = overlay(&mut probe, table, |_| Some("12x".into()))
            .unwrap_err()
            .to_string();
        assert!(error.contains(NAME) && error.contains("12x"), "{error}");
        overlay(&mut probe, table, |name| {
            (name == NAME).then(|| " 12".into())
        })
        .unwrap();
        assert_eq!(probe.count, 12);
    }

    #[test]
    fn each_variable_is_in_its_table_once() {
        for names in [
            SERVE_ENV.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
            WORKER_ENV.iter().map(|(name, _)| *name).collect(),
        ] {
            let mut unique = names.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "{names:?}");
        }
    }

    #[test]
    fn a_number_out_of_its_range_is_refused_naming_the_range() {
        assert!(within("pool_size", 1_000_usize, 1..=1_000).is_ok());
        assert_eq!(
            within("lock_timeout_ms", 600_001_u64, 1..=600_000)
                .unwrap_err()
                .to_string(),
            "config: lock_timeout_ms = \"600001\": must be between 1 and 600000"
        );
    }

    #[test]
    fn flags_and_listen_addresses_parse_or_say_what_they_expected() {
        assert_eq!(flag(" true"), Ok(true));
        assert_eq!(flag("false"), Ok(false));
        assert!(flag("yes").is_err());
        assert_eq!(listen(""), Ok(None));
        assert!(listen("127.0.0.1:9").unwrap().is_some());
        assert!(listen("nowhere").is_err());
    }
}
