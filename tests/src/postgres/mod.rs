//! A PostgreSQL cluster of the harness: initdb (or a base backup of another), start, stop,
//! as the `postgres` system user when the tests run as root (initdb and postgres refuse
//! root).
//!
//! Each server is started through [`crate::process`]'s keeper with `setpriv --pdeathsig`, so
//! it dies with the test process. [`crate::stack`](mod@crate::stack) starts the run's shared one from here,
//! [`crate::replicated`] a primary and its standby.

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::process::{free_port, spawn_kept, stop_kept};

pub mod bindir;

/// Superuser password of the harness's own PostgreSQL clusters (loopback only, temporary).
const PG_PASSWORD: &str = "ra-ledger-test";

/// What every cluster of the harness is set to, in its `postgresql.conf` (a base backup
/// copies them): a test or a harness that needs otherwise appends its own, which win. Only
/// where a server listens is given on its command line.
const DEFAULT_SETTINGS: &str = "\
# The test harness's (tests/src/postgres): logical decoding, room for many tests at once.
wal_level = logical
wal_writer_delay = 10ms
max_wal_senders = 64
max_replication_slots = 64
max_connections = 300
# The machine does not crash under a test; the server may.
fsync = off
full_page_writes = off";

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
    /// Creates a cluster in `pg_dir` (initdb) with the default binaries
    /// ([`bindir::default_bindir`]), owned by `postgres` when we are root.
    pub fn init(pg_dir: &Path) -> anyhow::Result<Self> {
        Self::init_in(pg_dir, bindir::default_bindir()?)
    }

    /// Creates a cluster in `pg_dir` (initdb) with the binaries of `bindir`.
    pub fn init_in(pg_dir: &Path, bindir: PathBuf) -> anyhow::Result<Self> {
        let owner = server_user()?;
        let password_file = pg_dir.join("pwfile");
        prepare_dir(pg_dir, &owner)?;
        std::fs::write(&password_file, PG_PASSWORD)?;
        chown(&owner, &password_file)?;
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
        let server = Self {
            bindir,
            data_dir,
            port: free_port()?,
            owner,
            pid: Arc::new(Mutex::new(None)),
        };
        server.configure(DEFAULT_SETTINGS)?;
        Ok(server)
    }

    /// A standby of `source` in `pg_dir`, listening on `port`: `pg_basebackup -R -C -S
    /// physical_slot` (which creates that physical slot on `source`, and writes
    /// `standby.signal`, `primary_conninfo` and `primary_slot_name`). Not started.
    pub fn from_base_backup(
        source: &PostgresServer,
        pg_dir: &Path,
        physical_slot: &str,
        port: u16,
    ) -> anyhow::Result<Self> {
        let owner = server_user()?;
        prepare_dir(pg_dir, &owner)?;
        let server = Self {
            bindir: source.bindir.clone(),
            data_dir: pg_dir.join("data"),
            port,
            owner,
            pid: Arc::new(Mutex::new(None)),
        };
        // -R writes standby.signal and the connection it used; -C -S creates the slot.
        let args = [
            "--host=127.0.0.1".to_owned(),
            format!("--port={}", source.port),
            "--username=postgres".to_owned(),
            "--write-recovery-conf".to_owned(),
            "--create-slot".to_owned(),
            format!("--slot={physical_slot}"),
            "--wal-method=stream".to_owned(),
            "--checkpoint=fast".to_owned(),
            "--no-sync".to_owned(),
            format!("--pgdata={}", server.data_dir.display()),
        ];
        server
            .run_tool("pg_basebackup", args)
            .context("taking the standby's base backup")?;
        Ok(server)
    }

    /// A copy of this cluster's files in `pg_dir`, on a port of its own, not started: a
    /// clone as a file-system copy makes one (the same system identifier, timeline and
    /// slots). Stop this one first: a copy of a running cluster's files is not consistent.
    pub fn clone_to(&self, pg_dir: &Path) -> anyhow::Result<Self> {
        prepare_dir(pg_dir, &self.owner)?;
        let data_dir = pg_dir.join("data");
        let status = Command::new("cp")
            .arg("-a")
            .arg(&self.data_dir)
            .arg(&data_dir)
            .status()
            .context("copying the data folder")?;
        anyhow::ensure!(status.success(), "cp -a failed");
        Ok(Self {
            bindir: self.bindir.clone(),
            data_dir,
            port: free_port()?,
            owner: self.owner.clone(),
            pid: Arc::new(Mutex::new(None)),
        })
    }

    /// Makes the WAL of this new cluster start at segment `wal_file` (a WAL file name such
    /// as `000000010000000F000000FF`, which starts at LSN F/FF000000), with `pg_resetwal -l`.
    /// Call after [`PostgresServer::init`], before the first [`PostgresServer::start`]:
    /// tests of LSNs near a boundary (one `pg_switch_wal()` from there is 10/0) need no
    /// gigabytes of WAL.
    pub fn start_wal_at(&self, wal_file: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            wal_file.len() == 24 && wal_file.bytes().all(|byte| byte.is_ascii_hexdigit()),
            "{wal_file:?} is not a WAL file name (24 hexadecimal digits: timeline, then the \
             segment's high and low halves)"
        );
        anyhow::ensure!(
            self.pid.lock().expect("pid lock").is_none(),
            "pg_resetwal needs the server stopped"
        );
        self.run_tool(
            "pg_resetwal",
            ["-l".as_ref(), wal_file.as_ref(), self.data_dir.as_os_str()],
        )
        .context("setting where the WAL starts")?;
        Ok(())
    }

    /// Appends `settings` (lines of `postgresql.conf`) to the server's configuration, where
    /// they win over earlier ones. They take effect at the next start, or reload.
    pub fn configure(&self, settings: &str) -> anyhow::Result<()> {
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data_dir.join("postgresql.conf"))?;
        std::io::Write::write_all(&mut conf, format!("\n{settings}\n").as_bytes())?;
        Ok(())
    }

    /// Writes file `name` of the data directory, owned by the server's user.
    pub fn write_data_file(&self, name: &str, contents: &str) -> anyhow::Result<()> {
        let path = self.data_dir.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        chown(&self.owner, &path)
    }

    /// Runs `tool` of the server's binaries as the server's user (with the superuser's
    /// password at hand, in the server's folder), and returns what it printed; fails with
    /// its output when it fails.
    pub fn run_tool<I, A>(&self, tool: &str, args: I) -> anyhow::Result<String>
    where
        I: IntoIterator<Item = A>,
        A: AsRef<OsStr>,
    {
        let folder = self.data_dir.parent().unwrap_or(&self.data_dir);
        let output = as_server_user(&self.owner, &self.bindir.join(tool), None)
            .args(args)
            .env("PGPASSWORD", PG_PASSWORD)
            // A user that cannot enter the test's working folder makes some tools complain.
            .current_dir(folder)
            .output()
            .with_context(|| format!("running {tool}"))?;
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if !output.status.success() {
            bail!("{tool} failed ({}): {printed}", output.status);
        }
        Ok(printed)
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
            chown(&self.owner, &path)?;
        }
        self.configure("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'")?;
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

    /// libpq key=value parameters of the superuser on the maintenance database (for
    /// `primary_conninfo` and the tools).
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres password={PG_PASSWORD} dbname=postgres",
            self.port
        )
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.data_dir.with_file_name("postgres.log")
    }

    /// Whether the harness started the server and has not stopped it.
    pub fn is_running(&self) -> bool {
        self.pid.lock().expect("pid lock").is_some()
    }

    /// What `IDENTIFY_SYSTEM` on a replication connection says: the system identifier, the
    /// timeline (on a standby, the one it replays) and the WAL position.
    pub fn identify_system(&self) -> anyhow::Result<SystemIdentity> {
        let output = Command::new(self.bindir.join("psql"))
            .args(["-X", "-A", "-t", "-F", "|", "-c", "IDENTIFY_SYSTEM"])
            .arg(format!("{} replication=database", self.conninfo()))
            .stdin(Stdio::null())
            .output()
            .context("running psql")?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "IDENTIFY_SYSTEM on port {} failed: {}",
                self.port,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let fields: Vec<&str> = text.trim().split('|').collect();
        match fields[..] {
            [system_id, timeline, wal_position, ..] => Ok(SystemIdentity {
                system_id: system_id.parse().context("system identifier")?,
                timeline: timeline.parse().context("timeline")?,
                wal_position: wal_position.to_owned(),
            }),
            _ => bail!("IDENTIFY_SYSTEM answered {text:?}"),
        }
    }

    /// Starts the server and waits until it accepts connections. It dies with the test
    /// process (SIGQUIT: immediate shutdown).
    pub fn start(&self) -> anyhow::Result<()> {
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        chown(&self.owner, &log_path)?;
        let mut command =
            as_server_user(&self.owner, &self.bindir.join("postgres"), Some("SIGQUIT"));
        command
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c"])
            .arg(format!("port={}", self.port))
            .args(["-c", "unix_socket_directories="])
            .stdout(log.try_clone()?)
            .stderr(log);
        let pid = spawn_kept(command).context("starting postgres")?;
        *self.pid.lock().expect("pid lock") = Some(pid);
        let refused = || self.refused_at_start(pid, &log_path);
        wait_for_port(self.port, Duration::from_secs(60), &refused, &log_path)?;
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
            refused()?;
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

    /// An error carrying the end of the server's log when the server `pid` started has
    /// exited (a zombie until its keeper reaps it, which this does): PostgreSQL refused to
    /// start (a setting it cannot run with), and waiting for it to listen would only wait
    /// out the deadline.
    fn refused_at_start(&self, pid: u32, log: &Path) -> anyhow::Result<()> {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command's name in parentheses: "pid (postgres) Z ...".
        let exited = state
            .rsplit_once(')')
            .is_none_or(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !exited {
            return Ok(());
        }
        let _ = self.stop("KILL"); // reaps it; the pid is no longer this server's
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        bail!(
            "postgres exited at start; its log ({}) ends:\n{}",
            log.display(),
            lines[lines.len().saturating_sub(8)..].join("\n")
        )
    }

    /// A fast shutdown, waited out: the server's files are still once this returns (its
    /// `postmaster.pid` gone), ready to copy or replace.
    pub fn stop_and_wait(&self) -> anyhow::Result<()> {
        self.stop("INT")?;
        let pid_file = self.data_dir.join("postmaster.pid");
        let deadline = Instant::now() + Duration::from_secs(30);
        while pid_file.exists() {
            anyhow::ensure!(Instant::now() < deadline, "postgres did not stop in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
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

/// What `IDENTIFY_SYSTEM` says of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemIdentity {
    /// The cluster's system identifier (a standby has its primary's).
    pub system_id: u64,
    /// The timeline: 1 after initdb, one more at each promotion.
    pub timeline: u32,
    /// The current WAL position (flushed on a primary, replayed on a standby), as text.
    pub wal_position: String,
}

/// Creates `pg_dir` and hands it (and its parent, the servers' shared folder) to the server
/// user: initdb and postgres refuse to run as root.
fn prepare_dir(pg_dir: &Path, owner: &Option<ServerUser>) -> anyhow::Result<()> {
    std::fs::create_dir_all(pg_dir).with_context(|| format!("creating {}", pg_dir.display()))?;
    for path in [pg_dir.parent().unwrap_or(pg_dir), pg_dir] {
        chown(owner, path)?;
    }
    Ok(())
}

/// Gives `path` to the server user, when there is one.
fn chown(owner: &Option<ServerUser>, path: &Path) -> anyhow::Result<()> {
    if let Some(user) = owner {
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
            .with_context(|| format!("chown {}", path.display()))?;
    }
    Ok(())
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

/// Waits until something listens on `port`; fails at once when `refused` does (the server
/// exited), and after `timeout`.
fn wait_for_port(
    port: u16,
    timeout: Duration,
    refused: &dyn Fn() -> anyhow::Result<()>,
    log: &Path,
) -> anyhow::Result<()> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        refused()?;
        if Instant::now() > deadline {
            bail!(
                "postgres did not listen on {address} within {timeout:?}; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
