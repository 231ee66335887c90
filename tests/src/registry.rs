//! Apicurio Registry for the test run: one registry, shared by every test that frames values
//! for registries, as the run shares one broker. It starts on first use (a JVM start of
//! several seconds that tests without a registry do not pay), on free loopback ports, its
//! storage in memory (each test registers under subjects of its own topics, `t<random>.…`),
//! and dies with the test process like every server of the run ([`crate::process`]).
//!
//! `deploy/test` fetches and unpacks it (`ensure_registry` in deploy/lib.sh) and exports
//! `LEDGER_REGISTRY_HOME` (the folder of `quarkus-run.jar`) and `LEDGER_REGISTRY_JAVA` (a
//! java of version 21 or later). `LEDGER_TEST_SCHEMA_REGISTRY_URL` points the tests at a
//! running Apicurio instead (its `http://HOST:PORT`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::process::{free_port, spawn_kept};

/// How long the registry may take to answer after its JVM started.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The run's schema registry.
#[derive(Debug)]
pub struct RegistryServer {
    /// `http://127.0.0.1:PORT`, the root of its APIs.
    pub root: String,
    /// Its log, when the harness started it.
    pub log: Option<PathBuf>,
    /// Its JVM's pid, when the harness started it.
    pub pid: Option<u32>,
    /// How long it took to answer, when the harness started it.
    pub started_in: Option<Duration>,
}

impl RegistryServer {
    /// The Confluent-compatible API: what the relay's `schema_registry_url` and every
    /// Confluent client take.
    pub fn ccompat_url(&self) -> String {
        format!("{}/apis/ccompat/v7", self.root)
    }

    /// Apicurio's own v2 API, which its 2.x serdes call.
    pub fn v2_url(&self) -> String {
        format!("{}/apis/registry/v2", self.root)
    }

    /// Apicurio's own v3 API (its dry runs give a refusal's causes).
    pub fn v3_url(&self) -> String {
        format!("{}/apis/registry/v3", self.root)
    }
}

/// The registry of this test run, started on first use.
///
/// # Panics
/// When it cannot be started; the message says what to run or set.
pub fn registry() -> &'static RegistryServer {
    static REGISTRY: OnceLock<RegistryServer> = OnceLock::new();
    REGISTRY.get_or_init(|| match start() {
        Ok(registry) => registry,
        Err(error) => panic!("cannot start the schema registry: {error:#}"),
    })
}

fn start() -> anyhow::Result<RegistryServer> {
    if let Ok(root) = std::env::var("LEDGER_TEST_SCHEMA_REGISTRY_URL")
        && !root.is_empty()
    {
        return Ok(RegistryServer {
            root: root.trim_end_matches('/').to_owned(),
            log: None,
            pid: None,
            started_in: None,
        });
    }
    let home = env_path("LEDGER_REGISTRY_HOME")?;
    let java = env_path("LEDGER_REGISTRY_JAVA")?;
    // The shared stack clears the run folder when it starts: start it first.
    crate::stack();
    let dir = crate::stack::run_dir().join("registry");
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let management_port = free_port()?;
    let log_path = dir.join("registry.log");
    let log = std::fs::File::create(&log_path)?;
    let mut command = Command::new("setpriv");
    command
        .args(["--pdeathsig", "SIGKILL", "--"])
        .arg(&java)
        // A small heap and the serial collector: it holds a few subjects per test.
        .args([
            "-Xms64m",
            "-Xmx384m",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
        ])
        .args(registry_properties(port, management_port))
        .arg("-jar")
        .arg(home.join("quarkus-run.jar"))
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let started = Instant::now();
    let pid = spawn_kept(command).context("starting java (Apicurio Registry)")?;
    let root = format!("http://127.0.0.1:{port}");
    wait_until_ready(&root, pid, &log_path)?;
    Ok(RegistryServer {
        root,
        log: Some(log_path),
        pid: Some(pid),
        started_in: Some(started.elapsed()),
    })
}

/// Apicurio's settings for a registry on loopback: its HTTP API on `port`, its management
/// interface (health, metrics) on `management_port` rather than on 0.0.0.0:9000, which
/// every instance would fight for. Storage stays Apicurio's default, SQL in memory (H2).
pub fn registry_properties(port: u16, management_port: u16) -> Vec<String> {
    vec![
        "-Dquarkus.http.host=127.0.0.1".into(),
        format!("-Dquarkus.http.port={port}"),
        "-Dquarkus.management.host=127.0.0.1".into(),
        format!("-Dquarkus.management.port={management_port}"),
        // No connection pool of 20 for an in-memory database.
        "-Dapicurio.datasource.jdbc.initial-size=2".into(),
        "-Dapicurio.datasource.jdbc.min-size=2".into(),
        "-Dapicurio.datasource.jdbc.max-size=10".into(),
    ]
}

/// Polls the Confluent-compatible API until it answers, or fails with the log's tail.
fn wait_until_ready(root: &str, pid: u32, log: &Path) -> anyhow::Result<()> {
    let address = root.trim_start_matches("http://").to_owned();
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if http_ok(&address, "/apis/ccompat/v7/config") {
            return Ok(());
        }
        if !Path::new(&format!("/proc/{pid}")).exists() || Instant::now() > deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            bail!(
                "Apicurio Registry did not answer on {root} within {START_TIMEOUT:?}; see {}:\n{}",
                log.display(),
                lines[lines.len().saturating_sub(30)..].join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `GET path` on `address` answers 200 (a bare HTTP/1.0 request: no client needed
/// before the runtime of a test exists).
fn http_ok(address: &str, path: &str) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

fn env_path(name: &str) -> anyhow::Result<PathBuf> {
    match std::env::var_os(name) {
        Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
        _ => bail!(
            "{name} is not set: run the tests through deploy/test, which fetches Apicurio Registry \
             and a Java 21+ (ensure_registry in deploy/lib.sh), or set LEDGER_TEST_SCHEMA_REGISTRY_URL"
        ),
    }
}
