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
    let port = free_port()?;
    launch(
        "registry",
        port,
        registry_properties(port, free_port()?),
        None,
    )
}

/// Starts Apicurio in the run folder's `name` with `properties`, answering at `port`
/// (plain HTTP, or HTTPS when `tls` names the CA to check it with).
fn launch(
    name: &str,
    port: u16,
    properties: Vec<String>,
    tls: Option<&Path>,
) -> anyhow::Result<RegistryServer> {
    let home = env_path("LEDGER_REGISTRY_HOME")?;
    let java = env_path("LEDGER_REGISTRY_JAVA")?;
    // The shared stack clears the run folder when it starts: start it first.
    crate::stack();
    let dir = crate::stack::run_dir().join(name);
    std::fs::create_dir_all(&dir)?;
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
        .args(properties)
        .arg("-jar")
        .arg(home.join("quarkus-run.jar"))
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let started = Instant::now();
    let pid = spawn_kept(command).context("starting java (Apicurio Registry)")?;
    let root = match tls {
        None => format!("http://127.0.0.1:{port}"),
        Some(_) => format!("https://localhost:{port}"),
    };
    wait_until_ready(&root, pid, &log_path, tls)?;
    Ok(RegistryServer {
        root,
        log: Some(log_path),
        pid: Some(pid),
        started_in: Some(started.elapsed()),
    })
}

/// A user of a secured registry: name, password, and whether it may write (register,
/// set compatibility, delete) or only read (look up, read schemas and levels).
#[derive(Debug, Clone)]
pub struct RegistryUser {
    /// The name.
    pub name: String,
    /// The password.
    pub password: String,
    /// May write.
    pub writes: bool,
}

/// A registry of one test's own, killed when dropped: for what the shared one must not
/// see (its storage lost, its users and TLS).
#[derive(Debug)]
pub struct OwnRegistry {
    /// The server.
    pub server: RegistryServer,
}

impl Drop for OwnRegistry {
    fn drop(&mut self) {
        if let Some(pid) = self.server.pid {
            let _ = crate::process::stop_kept(pid, "KILL");
        }
    }
}

impl OwnRegistry {
    /// A plain registry on empty storage, as the shared one.
    pub fn start() -> anyhow::Result<Self> {
        let port = free_port()?;
        let name = format!("registry-{}", crate::random_suffix());
        Ok(Self {
            server: launch(&name, port, registry_properties(port, free_port()?), None)?,
        })
    }

    /// A registry that speaks only HTTPS, with the certificate of `pki` (for `localhost`),
    /// and answers its APIs only to `users` by basic auth; a user that does not write may
    /// read and look schemas up, and is refused (403) registering or setting a level.
    /// Apicurio does it alone, through Quarkus' own settings: its embedded users and HTTP
    /// permissions, and its TLS listener (no proxy in between).
    pub fn secured(pki: &crate::tls::Pki, users: &[RegistryUser]) -> anyhow::Result<Self> {
        let port = free_port()?;
        let name = format!("registry-{}", crate::random_suffix());
        let mut properties = registry_properties(free_port()?, free_port()?);
        properties.extend(secured_properties(pki, port, users));
        Ok(Self {
            server: launch(&name, port, properties, Some(&pki.ca))?,
        })
    }
}

/// Quarkus' settings for HTTPS only on `port`, basic auth for `users`, and the write
/// permissions: PUT and DELETE anywhere under `/apis`, and POST of a new version.
fn secured_properties(pki: &crate::tls::Pki, port: u16, users: &[RegistryUser]) -> Vec<String> {
    let mut properties = vec![
        format!("-Dquarkus.http.ssl-port={port}"),
        format!(
            "-Dquarkus.http.ssl.certificate.files={}",
            pki.server_cert.display()
        ),
        format!(
            "-Dquarkus.http.ssl.certificate.key-files={}",
            pki.server_key.display()
        ),
        "-Dquarkus.http.insecure-requests=disabled".into(),
        "-Dquarkus.http.auth.basic=true".into(),
        "-Dquarkus.security.users.embedded.enabled=true".into(),
        "-Dquarkus.security.users.embedded.plain-text=true".into(),
        "-Dquarkus.http.auth.permission.read.paths=/apis/*".into(),
        "-Dquarkus.http.auth.permission.read.policy=reading".into(),
        "-Dquarkus.http.auth.policy.reading.roles-allowed=read".into(),
        "-Dquarkus.http.auth.permission.write.paths=/apis/*".into(),
        "-Dquarkus.http.auth.permission.write.methods=PUT,DELETE".into(),
        "-Dquarkus.http.auth.permission.write.policy=writing".into(),
        "-Dquarkus.http.auth.permission.register.paths=/apis/ccompat/v7/subjects/*/versions".into(),
        "-Dquarkus.http.auth.permission.register.methods=POST".into(),
        "-Dquarkus.http.auth.permission.register.policy=writing".into(),
        "-Dquarkus.http.auth.policy.writing.roles-allowed=write".into(),
    ];
    for user in users {
        properties.push(format!(
            "-Dquarkus.security.users.embedded.users.{}={}",
            user.name, user.password
        ));
        properties.push(format!(
            "-Dquarkus.security.users.embedded.roles.{}={}",
            user.name,
            if user.writes { "read,write" } else { "read" }
        ));
    }
    properties
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

/// Polls until the registry answers (any HTTP status: a secured one answers 401 to a
/// request without credentials), or fails with the log's tail.
fn wait_until_ready(root: &str, pid: u32, log: &Path, tls: Option<&Path>) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if answers(root, tls) {
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

/// Whether the Confluent-compatible API at `root` answers (the `curl` command: no client
/// needed before the runtime of a test exists); 200 for a plain registry, any status over
/// TLS checked with the CA `tls`.
fn answers(root: &str, tls: Option<&Path>) -> bool {
    let mut command = Command::new("curl");
    command
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
        ])
        .arg(format!("{root}/apis/ccompat/v7/config"));
    if let Some(ca) = tls {
        command.arg("--cacert").arg(ca);
    }
    let Ok(output) = command.stderr(Stdio::null()).output() else {
        return false;
    };
    let code = String::from_utf8_lossy(&output.stdout).into_owned();
    match tls {
        None => code == "200",
        Some(_) => code == "200" || code == "401",
    }
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
