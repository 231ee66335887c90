//! Settings of `ledger serve` ([`serve`]) and `ledger worker` ([`worker`]), like the relay's
//! ([`ra_ledger_cdc::config::RelayConfig`]): the defaults suit the local stack, a TOML file
//! may change any field (an unknown one is an error), the environment overrides the file,
//! and the command line overrides both. All three are declared and load the same way
//! ([`ra_ledger_cdc::infra::settings::declare`]): each setting once, with its key, its
//! variable and its default; then `load` (the file, then the environment through the
//! config's table of variables), the command line's changes, then the secret files
//! resolved and every field checked once, before anything starts.

pub mod serve;
pub mod worker;

pub use serve::{SERVE_ENV, ServeConfig};
pub use worker::{WORKER_ENV, WorkerConfig};

// What the tests below exercise, declared with every config in
// `ra_ledger_cdc::infra::settings`.
#[cfg(test)]
use ra_ledger_cdc::infra::settings::{EnvVar, flag, listen, number, overlay, within};

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
