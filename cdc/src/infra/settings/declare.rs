//! How a config is declared and loaded, the same for the relay, `ledger serve` and
//! `ledger worker`.
//!
//! Each setting is declared once, in the config's [`crate::settings!`] block: its key in
//! the file (the field), its type and doc, its default, the environment variable that
//! overrides it (a name from [`super::env`]) with what reads the variable's text, and
//! whether `Debug` may print it. The checks that need several fields, or a file read, stay
//! in the config's `validate`, which runs once before anything starts.
//!
//! Every config loads in the same order: the defaults, the TOML file ([`super::read_file`]),
//! the environment ([`Settings::read`]), then the command line (each tool's flags), then the
//! secret files resolved and every field checked.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::{ConfigError, env, listen_address, read_file};

/// One environment variable of a config: its name, and what sets the field from its value
/// (or says why the value is wrong; the error adds the variable's name and the value).
pub type EnvVar<C> = (&'static str, fn(&mut C, &str) -> Result<(), &'static str>);

/// A config's librdkafka properties and its secret files, to read the `LEDGER_KAFKA_*`
/// variables into.
pub type KafkaMaps<'a> = (
    &'a mut BTreeMap<String, String>,
    &'a mut BTreeMap<String, PathBuf>,
);

/// A config declared with [`crate::settings!`].
pub trait Settings: serde::de::DeserializeOwned + Default + 'static {
    /// The environment variables of this config, each with the field it sets.
    const ENV: &'static [EnvVar<Self>];

    /// Keys an older shape of this config had, each with where its setting is now: a file
    /// still naming one is refused (as every unknown key), saying so.
    const MOVED: &'static [(&'static str, &'static str)] = &[];

    /// The librdkafka properties and secret files of a config that has them: the
    /// `LEDGER_KAFKA_*` security variables ([`crate::infra::kafka::ENV_SETTINGS`]) are read
    /// into them after [`Settings::ENV`].
    fn kafka_maps(&mut self) -> Option<KafkaMaps<'_>> {
        None
    }

    /// The defaults, then the file at `path` (every key may be left out, an unknown one is
    /// an error), then the environment. The command line may change fields after this; the
    /// config's secrets and checks come last.
    fn read(path: Option<&str>) -> Result<Self, ConfigError> {
        let mut config: Self = read_file(path).map_err(|error| moved(error, Self::MOVED))?;
        overlay(&mut config, Self::ENV, env::read)?;
        if let Some((properties, secret_files)) = config.kafka_maps() {
            crate::infra::kafka::apply_env(properties, secret_files);
        }
        Ok(config)
    }
}

/// A file's error, with where a moved key went when the file names one.
fn moved(error: ConfigError, moved: &[(&str, &str)]) -> ConfigError {
    let ConfigError::File { path, mut message } = error else {
        return error;
    };
    for (old, new) in moved {
        if message.contains(&format!("unknown field `{old}`")) {
            message.push_str(&format!("\n`{old}` is now {new}"));
        }
    }
    ConfigError::File { path, message }
}

/// Sets every field whose variable in `table` has a value in `lookup`.
pub fn overlay<C>(
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
pub fn number<T: std::str::FromStr>(text: &str) -> Result<T, &'static str> {
    text.trim().parse().map_err(|_| "expected a whole number")
}

/// `true` or `false`.
pub fn flag(text: &str) -> Result<bool, &'static str> {
    match text.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true or false"),
    }
}

/// A `host:port` to listen on, or `None` for an empty value (disabled).
pub fn listen(text: &str) -> Result<Option<SocketAddr>, &'static str> {
    listen_address("", text).map_err(|_| "expected host:port, or empty to disable")
}

/// Refuses a `value` of `field` outside `range`, saying the range ("must be between 1 and
/// 100"): every bounded number of the configs is checked, and worded, the same way.
pub fn within<T: PartialOrd + std::fmt::Display>(
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
pub fn non_empty(text: &str) -> Option<&str> {
    Some(text).filter(|text| !text.is_empty())
}

/// Declares a config: a struct whose fields are the keys of its TOML file (unknown keys
/// refused, every key optional), each with its doc, its type and its default; the
/// environment variable that overrides a field, with what sets the field from the
/// variable's text (`c` the config, `v` the text); and how `Debug` shows a field that
/// holds a secret (`shown secret`: `<redacted>`; `shown keys`: a map's keys only). The
/// table of variables is the [`Settings::ENV`] of the struct and the `const` named first.
///
/// ```ignore
/// ra_ledger_cdc::settings! {
///     const EXAMPLE_ENV;
///     /// An example.
///     #[derive(Clone)]
///     pub struct ExampleConfig {
///         /// How many (`LEDGER_EXAMPLE_COUNT`).
///         count: u32 = 3, env env::EXAMPLE_COUNT => |c, v| c.count = number(v)?;
///         /// A token.
///         token: String = String::new(), shown secret;
///     }
/// }
/// ```
#[macro_export]
macro_rules! settings {
    (
        const $table:ident;
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field:ident: $ty:ty = $default:expr
                $(, env $var:expr => |$c:ident, $v:ident| $set:expr)?
                $(, shown $shown:ident)?
                ;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $ty,
            )*
        }

        impl $name {
            /// The keys of this config's TOML file, in declaration order: what its part of
            /// the operators' reference must name (a test holds it to that).
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $($field: $default,)*
                }
            }
        }

        impl std::fmt::Debug for $name {
            // Every field, but a secret's value never.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut debug = f.debug_struct(stringify!($name));
                $(
                    $crate::__settings_field!(debug, stringify!($field), self.$field $(, $shown)?);
                )*
                debug.finish()
            }
        }

        /// The environment variables of this config, each with the field it sets.
        pub const $table: &[$crate::infra::settings::EnvVar<$name>] = &[
            $($(
                ($var, |$c, $v| {
                    $set;
                    Ok(())
                }),
            )?)*
        ];
    };
}

/// How [`crate::settings!`]'s `Debug` shows one field.
#[doc(hidden)]
#[macro_export]
macro_rules! __settings_field {
    ($debug:ident, $name:expr, $value:expr) => {
        $debug.field($name, &$value);
    };
    ($debug:ident, $name:expr, $value:expr, secret) => {
        $debug.field($name, &"<redacted>");
    };
    ($debug:ident, $name:expr, $value:expr, keys) => {
        $debug.field($name, &$value.keys().collect::<Vec<_>>());
    };
}
