//! What `deploy/` ships for production: systemd units that `systemd-analyze` accepts with
//! their hardening and that do not restart a refusal, example configs every key of which
//! the services know, and the `ledger` binary's exit status when it refuses.

use std::path::{Path, PathBuf};
use std::process::Command;

use ra_ledger::config::{ServeConfig, WorkerConfig};
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::infra::runtime::EXIT_REFUSED;
use ra_ledger_cdc::infra::settings::read_file;
use ra_ledger_tests::cli::ledger;
use ra_ledger_tests::{TestDatabase, random_suffix, stack};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

const UNITS: [&str; 3] = [
    "ra-ledger-serve.service",
    "ra-ledger-relay.service",
    "ra-ledger-worker.service",
];

#[test]
fn systemd_units_verify_cleanly_and_are_hardened() -> anyhow::Result<()> {
    // Not in the run's folder: the shared stack clears it when it starts, maybe meanwhile.
    let dir = std::env::temp_dir().join(format!(
        "ra-ledger-units-{}",
        ra_ledger_tests::random_suffix()
    ));
    std::fs::create_dir_all(&dir)?;
    // `verify` checks that ExecStart's binary exists: point it at one that does.
    let binary = std::env::current_exe()?;
    for unit in UNITS {
        let text = std::fs::read_to_string(deploy_dir().join("systemd").join(unit))?;
        assert!(text.contains("ExecStart=/usr/local/bin/ledger "), "{unit}");
        for setting in [
            "DynamicUser=yes",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "CapabilityBoundingSet=\n",
            "Restart=always",
        ] {
            assert!(text.contains(setting), "{unit} lacks {setting}");
        }
        // Issue 50, item 6: a refusal is not restarted (with `Restart=always` and
        // `RestartSec=2s` the start limit is never reached, and refusals repeated for ever).
        let prevented = format!("\nRestartPreventExitStatus={EXIT_REFUSED}\n");
        assert!(text.contains(&prevented), "{unit} lacks {prevented:?}");
        let path = dir.join(unit);
        std::fs::write(
            &path,
            text.replace("/usr/local/bin/ledger", &binary.display().to_string()),
        )?;
        let verify = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&verify.stdout),
            String::from_utf8_lossy(&verify.stderr)
        );
        // An unknown key is only a warning (exit 0): any output is a failure here.
        assert!(
            verify.status.success() && said.trim().is_empty(),
            "{unit}: {said}"
        );
        // Exposure 0.0 (locked down) to 10.0; the units score about 1.2.
        let security = Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--threshold=20", "--no-pager"])
            .arg(&path)
            .output()?;
        let report = String::from_utf8_lossy(&security.stdout);
        let overall = report
            .lines()
            .find(|line| line.contains("Overall exposure level"))
            .unwrap_or_default()
            .to_owned();
        println!("{unit}: {overall}");
        assert!(
            security.status.success(),
            "{unit}: {overall}\n{report}{}",
            String::from_utf8_lossy(&security.stderr)
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn example_production_configs_use_only_known_keys_and_no_inline_secret() -> anyhow::Result<()> {
    let dir = deploy_dir().join("production");
    let path = |name: &str| dir.join(name).display().to_string();
    let serve: ServeConfig = read_file(Some(&path("serve.toml")))?;
    let relay: RelayConfig = read_file(Some(&path("relay.toml")))?;
    let worker: WorkerConfig = read_file(Some(&path("worker.toml")))?;
    // TLS everywhere, secrets from files.
    for url in [
        serve.database_url.expose(),
        relay.database_url.expose(),
        worker.database_url.expose(),
    ] {
        assert!(
            url.contains("sslmode=verify-full") && !url.contains(":5432@"),
            "{url}"
        );
        let settings = ra_ledger_cdc::infra::pg::config(
            &url.replace(
                "sslrootcert=/etc/ra-ledger/tls/postgres-ca.crt",
                "sslrootcert=system",
            ),
            "t",
        )?;
        assert!(settings.sql.get_password().is_none(), "a password in {url}");
    }
    assert!(serve.database_password_file.is_some() && serve.tokens_file.is_some());
    assert!(serve.cursor_key_file.is_some() && serve.tls_cert_file.is_some());
    assert!(serve.session_key_file.is_some() && serve.session_key_file != serve.cursor_key_file);
    assert!(serve.tokens.is_empty() && serve.cursor_key.is_none());
    for kafka in [&relay.kafka, &worker.kafka] {
        assert_eq!(kafka["security.protocol"], "SASL_SSL");
        assert!(!kafka.contains_key("sasl.password"));
    }
    assert!(relay.kafka_secret_files.contains_key("sasl.password"));
    assert!(worker.kafka_secret_files.contains_key("sasl.password"));
    assert!(relay.database_password_file.is_some() && worker.database_password_file.is_some());
    Ok(())
}

/// Issue 50, item 6: `ledger relay` that refuses exits 78, which the units do not restart,
/// and any other failure 1. A database whose slot is registered in `relay_slots` but missing
/// (lost in a failover, a restore, a drop) is refused with `relay stopped`; so is a slot
/// name the configuration cannot use. A parked message that is not there is an ordinary
/// error: 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_relay_exits_78_on_a_refusal_and_1_on_another_error() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let slot = format!("relay_{}", random_suffix());
    database
        .connect()
        .await?
        .execute(
            "INSERT INTO relay_slots (slot_name, registered_by) VALUES ($1, 'test')",
            &[&slot],
        )
        .await?;
    let brokers = stack().kafka_brokers.clone();
    let env = [
        ("LEDGER_DATABASE_URL", database.url.as_str()),
        ("LEDGER_RELAY_SLOT", slot.as_str()),
        ("LEDGER_KAFKA_BROKERS", brokers.as_str()),
        ("LEDGER_METRICS_LISTEN", ""),
    ];

    let (code, log) = ledger(&["relay"], &env).await?;
    assert_eq!(code, Some(78), "a lost slot:\n{log}");
    assert!(log.contains("relay stopped"), "{log}");
    assert!(
        log.contains(&format!(
            "the replication slot {slot} is missing, though the relay streamed from it before"
        )),
        "{log}"
    );

    let mut bad_slot = env;
    bad_slot[1] = ("LEDGER_RELAY_SLOT", "Not-A-Slot");
    let (code, log) = ledger(&["relay"], &bad_slot).await?;
    assert_eq!(code, Some(78), "a slot name that cannot work:\n{log}");
    assert!(log.contains("Not-A-Slot"), "{log}");

    let (code, log) = ledger(&["relay", "parked", "republish", "--id", "1"], &env).await?;
    assert_eq!(code, Some(1), "no such parked message:\n{log}");
    assert!(log.contains("no pending parked message with id 1"), "{log}");
    Ok(())
}
