//! Secrets from files never reach a process's arguments, its logs, `Debug` output or error
//! messages: the relay and the worker run as processes with wrong credentials (so they log
//! failures at debug level), and the service's configuration is checked in process.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ra_ledger::api::{Role, token_entry};
use ra_ledger::config::ServeConfig;
use ra_ledger_tests::stack::{run_dir, stack};
use ra_ledger_tests::{TestDatabase, random_suffix};

const DATABASE_SECRET: &str = "db-secret-Vq8tY2";
const KAFKA_SECRET: &str = "kafka-secret-Lm4pR7";
const TOKEN_SECRET: &str = "api-token-secret-Zx3wQ9";
const CURSOR_SECRET: &str = "cursor-key-secret-Hb6nK1";

/// Runs `binary` with `env` for a few seconds; returns what it logged and its arguments.
/// Runs `binary` with `env` until its log shows `awaited` (at most 60 s, or until it exits:
/// a fixed wait of 5 s was too short on a loaded machine), then kills it; returns its log and
/// its arguments as `/proc` showed them while it ran.
fn observe(
    binary: &str,
    env: &[(&str, String)],
    awaited: &str,
) -> anyhow::Result<(String, String)> {
    let log_path = run_dir().join(format!("secrets-{}.log", random_suffix()));
    let log = std::fs::File::create(&log_path)?;
    let mut command = Command::new("setpriv");
    command
        .args(["--pdeathsig", "SIGKILL", "--", binary])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut arguments = String::new();
    loop {
        if let Ok(bytes) = std::fs::read(format!("/proc/{}/cmdline", child.id())) {
            arguments = String::from_utf8_lossy(&bytes).replace('\0', " ");
        }
        let logged = std::fs::read_to_string(&log_path)?.contains(awaited);
        if logged || child.try_wait()?.is_some() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    child.wait()?;
    Ok((std::fs::read_to_string(&log_path)?, arguments))
}

fn assert_hidden(what: &str, text: &str) {
    for secret in [DATABASE_SECRET, KAFKA_SECRET, TOKEN_SECRET, CURSOR_SECRET] {
        assert!(!text.contains(secret), "{what} shows {secret}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_from_files_stay_out_of_arguments_logs_debug_and_errors() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let dir = run_dir().join(format!("secrets-{}", random_suffix()));
    std::fs::create_dir_all(&dir)?;
    let file = |name: &str, content: &str| -> anyhow::Result<String> {
        let path = dir.join(name);
        std::fs::write(&path, format!("{content}\n"))?;
        Ok(path.display().to_string())
    };
    let database_password = file("database-password", DATABASE_SECRET)?;
    let kafka_password = file("kafka-password", KAFKA_SECRET)?;
    // The test database's URL without its password: the (wrong) one comes from the file.
    let (scheme, rest) = database.url.split_once("://").expect("a URL");
    let (_, hosts) = rest.split_once('@').expect("credentials");
    let url = format!("{scheme}://postgres@{hosts}");
    let common = [
        ("LEDGER_DATABASE_URL", url.clone()),
        ("LEDGER_DATABASE_PASSWORD_FILE", database_password.clone()),
        ("LEDGER_KAFKA_BROKERS", stack().kafka_brokers.clone()),
        ("LEDGER_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT".into()),
        ("LEDGER_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256".into()),
        ("LEDGER_KAFKA_SASL_USERNAME", "nobody".into()),
        ("LEDGER_KAFKA_SASL_PASSWORD_FILE", kafka_password.clone()),
    ];
    // Each did use the passwords from the files: a server refused one, and it said so (the
    // relay connects to PostgreSQL first, the worker to Kafka).
    for (binary, extra, refusal) in [
        (
            env!("CARGO_BIN_EXE_relay-under-test"),
            ("LEDGER_METRICS_LISTEN", String::new()),
            "password authentication failed",
        ),
        (
            env!("CARGO_BIN_EXE_worker-under-test"),
            ("LEDGER_WORKER_METRICS_LISTEN", String::new()),
            "SASL SCRAM-SHA-256",
        ),
    ] {
        let mut env = common.to_vec();
        env.push(extra);
        let (log, arguments) = observe(binary, &env, refusal)?;
        assert!(
            log.contains(refusal),
            "{binary} did not log {refusal:?}:\n{log}"
        );
        assert_hidden(&format!("{binary}'s log"), &log);
        assert_hidden(&format!("{binary}'s arguments"), &arguments);
    }

    // The service: every secret from a file; Debug output and errors name files, not content.
    let tokens = file("tokens", &token_entry(Role::Writer, "cs", TOKEN_SECRET))?;
    let cursor_key = file("cursor-key", CURSOR_SECRET)?;
    let config = ServeConfig {
        database_url: url.as_str().into(),
        database_password_file: Some(database_password.into()),
        tokens_file: Some(tokens.into()),
        cursor_key_file: Some(cursor_key.into()),
        ..ServeConfig::default()
    };
    let service = config.validate()?;
    assert_hidden("ServeConfig's Debug", &format!("{config:?} {service:?}"));
    let refused = ra_ledger::db::connect(&service.database_url, "secrets-test")
        .await
        .expect_err("a wrong password");
    assert!(
        refused
            .to_string()
            .contains("password authentication failed"),
        "{refused}"
    );
    assert_hidden("a connection error", &format!("{refused} {refused:?}"));
    let short_key = file("short-key", "short")?;
    let bad = ServeConfig {
        cursor_key_file: Some(short_key.into()),
        tokens: format!("writer:cs:{TOKEN_SECRET}"),
        ..config
    };
    let error = bad.validate().expect_err("a plaintext token").to_string();
    assert!(
        error.contains("plaintext tokens are not accepted"),
        "{error}"
    );
    assert_hidden("a config error", &error);
    Ok(())
}
