//! A PostgreSQL cluster of the harness: initdb, start, stop, as the `postgres` system user
//! when the tests run as root (initdb and postgres refuse root).
//!
//! Each server is started through [`crate::process`]'s keeper with `setpriv --pdeathsig`, so
//! it dies with the test process. [`crate::stack`] starts the run's shared one from here.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::process::{free_port, spawn_kept, stop_kept};

/// Superuser password of the harness's own PostgreSQL clusters (loopback only, temporary).
const PG_PASSWORD: &str = "ra-ledger-test";

/// A PostgreSQL cluster started by the harness.
#[derive(Debug, Clone)]
pub struct PostgresServer {
    /// Server binaries.
    pub bindir: PathBuf,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Listening port on 127.0.0.1.
    pub port: u16,
    owner: Option<ServerUser>,
    pid: Arc<Mutex<Option<u32>>>,
}

impl PostgresServer {
    /// Creates a cluster in `pg_dir` (initdb), owned by `postgres` when we are root.
    pub fn init(pg_dir: &Path) -> anyhow::Result<Self> {
        let bindir = postgres_bindir()?;
        std::fs::create_dir_all(pg_dir)?;
        let password_file = pg_dir.join("pwfile");
        std::fs::write(&password_file, PG_PASSWORD)?;
        let owner = server_user()?;
        if let Some(user) = &owner {
            // initdb and postgres refuse to run as root: hand the folders to `postgres`.
            for path in [pg_dir.parent().unwrap_or(pg_dir), pg_dir, &password_file] {
                std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))?;
            }
        }
        let data_dir = pg_dir.join("data");
        let output = as_server_user(&owner, &bindir.join("initdb"), None)
            .arg("-D")
            .arg(&data_dir)
            .args(["-U", "postgres", "--auth=scram-sha-256", "--encoding=UTF8"])
            .args(["--locale=C.UTF-8", "--no-sync"])
            .arg(format!("--pwfile={}", password_file.display()))
            .output()
            .context("running initdb")?;
        if !output.status.success() {
            bail!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::fs::write(
            data_dir.join("pg_hba.conf"),
            "host all all 127.0.0.1/32 scram-sha-256\nhost replication all 127.0.0.1/32 scram-sha-256\n",
        )?;
        Ok(Self {
            bindir,
            data_dir,
            port: free_port()?,
            owner,
            pid: Arc::new(Mutex::new(None)),
        })
    }

    /// Makes the server accept TLS connections only (`hostssl` lines alone), with `pki`'s
    /// server certificate. Call before [`PostgresServer::start`].
    pub fn require_tls(&self, pki: &crate::tls::Pki) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for (from, to) in [
            (&pki.server_cert, "server.crt"),
            (&pki.server_key, "server.key"),
        ] {
            let path = self.data_dir.join(to);
            std::fs::copy(from, &path)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            if let Some(user) = &self.owner {
                std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid))?;
            }
        }
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data_dir.join("postgresql.conf"))?;
        std::io::Write::write_all(
            &mut conf,
            b"ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
        )?;
        std::fs::write(
            self.data_dir.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 scram-sha-256\nhostssl replication all 127.0.0.1/32 scram-sha-256\n",
        )?;
        Ok(())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// URL of the superuser on the maintenance database.
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://postgres:{PG_PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// Starts the server and waits until it accepts connections. It dies with the test
    /// process (SIGQUIT: immediate shutdown).
    pub fn start(&self) -> anyhow::Result<()> {
        let log_path = self.data_dir.with_file_name("postgres.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        if let Some(user) = &self.owner {
            std::os::unix::fs::chown(&log_path, Some(user.uid), Some(user.gid))?;
        }
        let mut command =
            as_server_user(&self.owner, &self.bindir.join("postgres"), Some("SIGQUIT"));
        command
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c"])
            .arg(format!("port={}", self.port))
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "wal_level=logical", "-c", "wal_writer_delay=10ms"])
            .args(["-c", "max_wal_senders=64", "-c", "max_replication_slots=64"])
            .args(["-c", "max_connections=300"])
            // The machine does not crash under a test; the server may.
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdout(log.try_clone()?)
            .stderr(log);
        let pid = spawn_kept(command).context("starting postgres")?;
        *self.pid.lock().expect("pid lock") = Some(pid);
        wait_for_port(self.port, Duration::from_secs(60), "postgres", &log_path)?;
        // Listening is not yet accepting: wait out recovery after a restart.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(self.bindir.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "postgres on port {} is not ready after 60 s; see {}",
                    self.port,
                    log_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server: `INT` is a fast shutdown, `QUIT` an immediate one (a crash).
    pub fn stop(&self, signal: &'static str) -> anyhow::Result<()> {
        let pid = self
            .pid
            .lock()
            .expect("pid lock")
            .take()
            .context("postgres is not running")?;
        stop_kept(pid, signal)
    }
}

/// The `postgres` system user, when we run as root.
#[derive(Debug, Clone)]
struct ServerUser {
    uid: u32,
    gid: u32,
}

fn server_user() -> anyhow::Result<Option<ServerUser>> {
    let id = |flag: &str| -> anyhow::Result<u32> {
        let output = Command::new("id").args([flag, "postgres"]).output()?;
        if !output.status.success() {
            bail!("there is no `postgres` system user; install PostgreSQL (deploy/test does)");
        }
        Ok(String::from_utf8(output.stdout)?.trim().parse()?)
    };
    let me = Command::new("id").arg("-u").output()?;
    if String::from_utf8(me.stdout)?.trim() != "0" {
        return Ok(None);
    }
    Ok(Some(ServerUser {
        uid: id("-u")?,
        gid: id("-g")?,
    }))
}

/// A command run as `postgres` when we are root, with an optional parent-death signal.
/// setpriv changes the user first and sets the signal last, since changing credentials
/// clears it.
fn as_server_user(
    owner: &Option<ServerUser>,
    program: &Path,
    death_signal: Option<&str>,
) -> Command {
    let mut command = Command::new("setpriv");
    if let Some(user) = owner {
        command
            .arg(format!("--reuid={}", user.uid))
            .arg(format!("--regid={}", user.gid))
            .arg("--clear-groups");
    }
    if let Some(signal) = death_signal {
        command.args(["--pdeathsig", signal]);
    }
    command.arg("--").arg(program);
    command.stdin(Stdio::null());
    command
}

fn postgres_bindir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("LEDGER_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut candidates: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
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
    candidates.sort();
    candidates.pop().map(|(_, bin)| bin).context(
        "no PostgreSQL 15+ server in /usr/lib/postgresql/*/bin; run deploy/test (it installs it) \
         or set LEDGER_TEST_DATABASE_URL",
    )
}

fn wait_for_port(port: u16, timeout: Duration, name: &str, log: &Path) -> anyhow::Result<()> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{name} did not listen on {address} within {timeout:?}; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
