//! A relay under test as a process of its own (`ledger relay`, or Connect's JVM), so its
//! CPU is its own and a kill -9 is a real one: how each system is launched, and the running
//! process.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use ra_ledger_cdc::infra::pg::ReplicationTarget;
use ra_ledger_cdc::infra::settings::env;
use ra_ledger_testing::{ScratchDatabase, debezium};
use tokio::process::{Child, Command};

use super::Options;

/// How to start one relay under test, again after a kill.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it (others are inherited, less `removed`).
    pub env: Vec<(String, String)>,
    /// Environment variables taken away from it.
    pub removed: Vec<&'static str>,
    /// The file its stdout and stderr are appended to.
    pub log: PathBuf,
}

/// A running relay under test.
#[derive(Debug)]
pub struct Peer {
    launch: Launch,
    child: Child,
    /// CPU seconds of the processes killed before this one, so that the figures of a
    /// system count all of its lives.
    past_cpu: f64,
}

impl Peer {
    /// Starts it.
    pub fn start(launch: Launch) -> anyhow::Result<Self> {
        let child = spawn(&launch)?;
        Ok(Self {
            launch,
            child,
            past_cpu: 0.0,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child
            .id()
            .ok_or_else(|| anyhow::anyhow!("{} has exited", self.launch.program.display()))
    }

    /// User plus system CPU seconds of this process and those it replaced, from
    /// `/proc/<pid>/stat`.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        Ok(self.past_cpu + crate::cpu::process_seconds(self.pid()?)?)
    }

    /// Fails when the process exited by itself (a relay under test must not).
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!(
                "{} exited with {status}; see {}",
                self.launch.program.display(),
                self.launch.log.display()
            );
        }
        Ok(())
    }

    /// kill -9, reaped, then started again with the same command: no help with recovery.
    pub async fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        self.ensure_running()?;
        let cpu = self.cpu_seconds()?;
        self.child.start_kill()?;
        self.child.wait().await?;
        self.past_cpu = cpu;
        self.child = spawn(&self.launch)?;
        Ok(())
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<()> {
        if let Ok(pid) = self.pid() {
            // A child of ours: `kill` names it by pid, nothing broader.
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            self.child.start_kill()?;
            self.child.wait().await?;
        }
        Ok(())
    }
}

fn spawn(launch: &Launch) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&launch.log)?;
    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .envs(launch.env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    for name in &launch.removed {
        command.env_remove(name);
    }
    command
        .spawn()
        .map_err(|error| anyhow::anyhow!("cannot start {}: {error}", launch.program.display()))
}

/// The `ledger` binary beside this one (`target/release/ledger` beside
/// `target/release/ledger-bench`): the relay the benchmarks run as a process is the
/// product's own, not a copy built into the benchmarks. `cargo build --release --workspace
/// --bins` builds both at once.
pub fn ledger_binary() -> anyhow::Result<PathBuf> {
    let bench = std::env::current_exe()?;
    let ledger = bench.with_file_name("ledger");
    anyhow::ensure!(
        ledger.is_file(),
        "{} is missing: the benchmarks run `ledger relay` as a process from beside {}; \
         build both with `cargo build --release --workspace --bins`",
        ledger.display(),
        bench.display()
    );
    Ok(ledger)
}

/// `ledger relay`, the binary beside this one ([`ledger_binary`]), on the scratch database,
/// its slot and its topic prefix.
pub fn relay_launch(
    scratch: &ScratchDatabase,
    slot: &str,
    prefix: &str,
    brokers: &str,
    dir: &Path,
) -> anyhow::Result<Launch> {
    Ok(Launch {
        program: ledger_binary()?,
        args: vec!["relay".into()],
        env: vec![
            (env::DATABASE_URL.into(), scratch.url.clone()),
            (env::RELAY_SLOT.into(), slot.into()),
            (env::KAFKA_BROKERS.into(), brokers.into()),
            (env::TOPIC_PREFIX.into(), prefix.into()),
            (env::METRICS_LISTEN.into(), String::new()),
        ],
        // The relay runs in its default delivery mode, whatever the caller's environment.
        removed: vec![
            env::RELAY_CONFIG,
            env::DATABASE_PASSWORD_FILE,
            env::RELAY_DELIVERY,
        ],
        log: dir.join("relay.log"),
    })
}

/// Debezium's publication (insert-only, as the relay's) and properties files; its slot
/// is `slot`, made before the backlog is written.
pub async fn debezium_launch(
    scratch: &ScratchDatabase,
    client: &tokio_postgres::Client,
    slot: &str,
    prefix: &str,
    brokers: &str,
    dir: &Path,
    options: &Options,
) -> anyhow::Result<Launch> {
    const PUBLICATION: &str = "peers_debezium";
    debezium::create_publication(client, PUBLICATION).await?;
    let settings = ra_ledger_cdc::infra::pg::config(&scratch.url, "ledger-bench")?;
    let target = ReplicationTarget::of(&settings);
    let rest_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let setup = debezium::ConnectSetup {
        database: &target,
        brokers,
        name: "peers_debezium",
        slot,
        publication: PUBLICATION,
        topic_prefix: prefix,
        dir,
        rest_port,
    };
    let (worker, connector) = setup.write()?;
    Ok(Launch {
        program: options.connect_command.clone(),
        args: vec![
            "connect".into(),
            worker.display().to_string(),
            connector.display().to_string(),
        ],
        env: Vec::new(),
        removed: Vec::new(),
        log: dir.join("connect.log"),
    })
}
