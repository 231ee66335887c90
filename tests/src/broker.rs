//! Apache Kafka brokers of the test run: KRaft nodes (broker and controller in one JVM),
//! from the jars `deploy/test` fetches from Maven Central into the cache. A node is a
//! cluster of its own ([`BrokerServer::new`]) or one of several voters of a cluster's
//! quorum ([`BrokerServer::members`], which [`crate::cluster`] starts).
//!
//! A broker has two listeners: `INTERNAL`, plaintext, for the node itself (inter-broker
//! traffic, and the harness's readiness probe), and `CLIENT`, the one tests connect to,
//! plaintext or with the [`Security`] a test asks for: Kafka speaks TLS, mutual TLS and
//! SASL/SCRAM itself. Storage is formatted once, at the first start; a broker killed with
//! SIGKILL starts again on the same ports and log directory, and recovers its logs as a
//! production broker does.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

use crate::process::{free_port, send_signal, spawn_kept, stop_kept};
use crate::tls::Pki;

/// The log4j2 configuration the stack's broker uses too.
const LOG4J2: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/kafka/log4j2.properties"
);

/// The JVM options of the test run's Kafka processes (brokers, their format, Kafka's tools):
/// the client compiler only, and the serial collector. A broker of a test lives a minute
/// or a few, with a light load, on a machine of two cores that runs several at once: C2's
/// compilations and G1's concurrent threads cost more CPU than they give back in that
/// time (a broker's start to ready, then a minute idle: 6.3 CPU s with G1 and C2 as
/// Kafka's start script runs it, 3.8 with these; 2026-12-07, issue 57, item 7). The
/// stack's broker (`deploy/lib.sh`) keeps Kafka's own options.
pub(crate) const TEST_JVM: [&str; 2] = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"];

/// How long a start may take, JVM start and log recovery included.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// What the `CLIENT` listener asks of a client.
#[derive(Debug, Clone)]
pub enum Security {
    /// No TLS, no authentication.
    Plaintext,
    /// TLS with `pki`'s server certificate (for `localhost`); with `mutual`, a client must
    /// present a certificate `pki`'s CA signed.
    Ssl {
        /// The certificates.
        pki: Pki,
        /// Client certificates required.
        mutual: bool,
    },
    /// SASL over TLS with SCRAM-SHA-512; the users are created when the storage is
    /// formatted (`kafka-storage format --add-scram`).
    SaslSsl {
        /// The certificates.
        pki: Pki,
        /// `(name, password)` of each user.
        users: Vec<(String, String)>,
    },
}

/// An Apache Kafka broker started by the harness.
#[derive(Debug, Clone)]
pub struct BrokerServer {
    /// Port of the `CLIENT` listener on 127.0.0.1 (advertised as `localhost` when it
    /// speaks TLS, the name on the test certificate).
    pub port: u16,
    /// Its folder: configuration, log directory, the JVM's output.
    pub dir: PathBuf,
    /// What the `CLIENT` listener asks of a client.
    pub security: Security,
    /// Its `node.id`.
    pub node_id: i32,
    /// Lines added to its `server.properties`, where they win (an authorizer, for one).
    pub more_properties: String,
    internal_port: u16,
    controller_port: u16,
    quorum: Quorum,
    cluster_id: String,
    libs: PathBuf,
    log: PathBuf,
    pid: Arc<Mutex<Option<u32>>>,
}

/// The KRaft quorum a node belongs to.
#[derive(Debug, Clone)]
enum Quorum {
    /// The node is its own only voter (formatted `--standalone`).
    Standalone,
    /// A node of a cluster of `brokers` brokers whose quorum `controller.quorum.voters`
    /// names (`id@host:port,...`).
    Member {
        voters: String,
        brokers: usize,
        roles: Roles,
    },
}

/// What a cluster's node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Roles {
    /// A broker and a voter of the quorum, in one JVM (`process.roles=broker,controller`).
    BrokerAndController,
    /// A broker only; the quorum runs elsewhere.
    Broker,
    /// A controller only: no client listener, it holds the cluster's metadata.
    Controller,
}

impl Roles {
    fn process_roles(self) -> &'static str {
        match self {
            Self::BrokerAndController => "broker,controller",
            Self::Broker => "broker",
            Self::Controller => "controller",
        }
    }
}

/// Where a cluster's KRaft quorum runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuorumLayout {
    /// On the brokers: every broker is a voter (Kafka's own system tests, and small
    /// deployments). Two of three nodes down is then a quorum lost too: no leader moves,
    /// no in-sync set shrinks, and produces time out rather than being refused.
    OnTheBrokers,
    /// On one controller-only node beside the brokers (production's layout of dedicated
    /// controllers, with one of them): brokers can fail while the metadata stays
    /// writable, so with two of three down the survivor's in-sync set shrinks to itself
    /// and `acks=all` produces are refused with NOT_ENOUGH_REPLICAS.
    OwnController,
}

/// The settings of a cluster's nodes that the harness shortens for test speed, with
/// Kafka's defaults beside them. `docs/benchmarks.md` (faults on a cluster) says so too.
pub mod cluster_timing {
    /// `broker.session.timeout.ms` (default 9,000): how long the controller waits for a
    /// silent broker's heartbeat before it fences it and moves its leaderships.
    pub const BROKER_SESSION_TIMEOUT_MS: u64 = 6_000;
    /// `broker.heartbeat.interval.ms` (default 2,000).
    pub const BROKER_HEARTBEAT_INTERVAL_MS: u64 = 1_000;
    /// `replica.lag.time.max.ms` (default 30,000): how long a follower may not fetch before
    /// its leader drops it from the in-sync replicas.
    pub const REPLICA_LAG_TIME_MAX_MS: u64 = 10_000;
}

/// The settings of a node of its own that the harness shortens for test speed.
pub mod standalone_timing {
    /// `broker.session.timeout.ms` (default 9,000): a node restarted after a kill -9 waits
    /// this long for its own controller to let its broker register again.
    pub const BROKER_SESSION_TIMEOUT_MS: u64 = 4_000;
    /// `broker.heartbeat.interval.ms` (default 2,000).
    pub const BROKER_HEARTBEAT_INTERVAL_MS: u64 = 1_000;
}

impl BrokerServer {
    /// A broker (not started yet) on free ports, keeping its files in `dir`: a cluster of
    /// one node, its own KRaft quorum.
    pub fn new(dir: &Path, security: Security) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            port: free_port()?,
            dir: dir.to_owned(),
            security,
            node_id: 1,
            more_properties: String::new(),
            internal_port: free_port()?,
            controller_port: free_port()?,
            quorum: Quorum::Standalone,
            cluster_id: cluster_id(),
            libs: kafka_libs()?,
            log: dir.join("kafka.log"),
            pid: Arc::new(Mutex::new(None)),
        })
    }

    /// The nodes of one cluster of `brokers` brokers (not started yet), plaintext, on
    /// free ports, each keeping its files in `dir/node-<id>`: brokers `1..=brokers`, and
    /// with [`QuorumLayout::OwnController`] a controller after them, the last node.
    pub fn members(dir: &Path, brokers: usize, layout: QuorumLayout) -> anyhow::Result<Vec<Self>> {
        let cluster_id = cluster_id();
        let roles = |id: usize| match layout {
            QuorumLayout::OnTheBrokers => Roles::BrokerAndController,
            QuorumLayout::OwnController if id <= brokers => Roles::Broker,
            QuorumLayout::OwnController => Roles::Controller,
        };
        let size = match layout {
            QuorumLayout::OnTheBrokers => brokers,
            QuorumLayout::OwnController => brokers + 1,
        };
        let mut nodes = (1..=size)
            .map(|id| {
                let mut node = Self::new(&dir.join(format!("node-{id}")), Security::Plaintext)?;
                node.node_id = i32::try_from(id)?;
                node.cluster_id.clone_from(&cluster_id);
                Ok(node)
            })
            .collect::<anyhow::Result<Vec<Self>>>()?;
        let voters = (1..=size)
            .zip(&nodes)
            .filter(|(id, _)| roles(*id) != Roles::Broker)
            .map(|(_, node)| format!("{}@127.0.0.1:{}", node.node_id, node.controller_port))
            .collect::<Vec<_>>()
            .join(",");
        for (id, node) in (1..=size).zip(&mut nodes) {
            node.quorum = Quorum::Member {
                voters: voters.clone(),
                brokers,
                roles: roles(id),
            };
        }
        Ok(nodes)
    }

    /// What it runs: a node of its own is a broker and its controller.
    pub fn roles(&self) -> Roles {
        match self.quorum {
            Quorum::Standalone => Roles::BrokerAndController,
            Quorum::Member { roles, .. } => roles,
        }
    }

    /// Bootstrap servers of the `CLIENT` listener.
    pub fn brokers(&self) -> String {
        match self.security {
            Security::Plaintext => format!("127.0.0.1:{}", self.port),
            _ => format!("localhost:{}", self.port),
        }
    }

    /// Starts the broker (again, after [`BrokerServer::kill`], on the same ports and log
    /// directory) and waits until it answers metadata requests with itself as a broker.
    pub fn start(&self) -> anyhow::Result<()> {
        let pid = self.spawn()?;
        self.wait_until_ready(pid)
    }

    /// Starts the JVM and returns its pid at once; [`BrokerServer::wait_until_ready`]
    /// waits for it. The nodes of a cluster are spawned together: none is ready until a
    /// majority of its quorum runs.
    pub(crate) fn spawn(&self) -> anyhow::Result<u32> {
        let properties = self.dir.join("server.properties");
        std::fs::write(&properties, self.properties())?;
        if !self.dir.join("data/meta.properties").exists() {
            self.format(&properties)?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "SIGKILL", "--", "java"])
            .args(TEST_JVM)
            .args(["-Xms256m", "-Xmx512m"])
            .args(["-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"])
            .args(self.jvm_logging())
            .arg("kafka.Kafka")
            .arg(&properties)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let pid = spawn_kept(command).context("starting java (Kafka)")?;
        *self.pid.lock().expect("pid lock") = Some(pid);
        Ok(pid)
    }

    /// Stops the broker cleanly (SIGTERM: a controlled shutdown, which hands its
    /// leaderships over first) and waits until it exited.
    pub fn stop(&self) -> anyhow::Result<()> {
        let pid = self
            .pid
            .lock()
            .expect("pid lock")
            .take()
            .context("the broker is not running")?;
        stop_kept(pid, "TERM")
    }

    /// Whether the harness started it and has not killed or stopped it since.
    pub fn running(&self) -> bool {
        self.pid.lock().expect("pid lock").is_some()
    }

    /// The pid of its JVM.
    pub fn pid(&self) -> Option<u32> {
        *self.pid.lock().expect("pid lock")
    }

    /// Kills the broker with SIGKILL and waits until it is gone.
    pub fn kill(&self) -> anyhow::Result<()> {
        let pid = self
            .pid
            .lock()
            .expect("pid lock")
            .take()
            .context("the broker is not running")?;
        stop_kept(pid, "KILL")
    }

    /// Freezes (`STOP`) or thaws (`CONT`) the broker: to its clients it is unreachable.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = (*self.pid.lock().expect("pid lock")).context("the broker is not running")?;
        send_signal(pid, signal)
    }

    /// The JVM's arguments before its main class: Kafka's jars, its logging.
    pub fn jvm_logging(&self) -> Vec<String> {
        vec![
            "-cp".to_owned(),
            format!("{}/*", self.libs.display()),
            format!("-Dlog4j2.configurationFile={LOG4J2}"),
            format!("-Dkafka.logs.dir={}", self.dir.display()),
        ]
    }

    /// `server.properties` of a one-node cluster, its `CLIENT` listener after
    /// [`BrokerServer::security`].
    fn properties(&self) -> String {
        if self.roles() == Roles::Controller {
            return self.controller_properties();
        }
        let client_host = match self.security {
            Security::Plaintext => "127.0.0.1",
            _ => "localhost",
        };
        let protocol = match self.security {
            Security::Plaintext => "PLAINTEXT",
            Security::Ssl { .. } => "SSL",
            Security::SaslSsl { .. } => "SASL_SSL",
        };
        let controller_listener = match self.roles() {
            Roles::Broker => String::new(),
            _ => format!(",CONTROLLER://127.0.0.1:{}", self.controller_port),
        };
        let mut text = format!(
            "process.roles={roles}\n\
             node.id={node_id}\n\
             listeners=CLIENT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal}{controller_listener}\n\
             advertised.listeners=CLIENT://{client_host}:{client},INTERNAL://127.0.0.1:{internal}\n\
             listener.security.protocol.map=CLIENT:{protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             inter.broker.listener.name=INTERNAL\n\
             controller.listener.names=CONTROLLER\n\
             log.dirs={data}\n\
             auto.create.topics.enable=false\n\
             num.partitions=3\n\
             offsets.topic.num.partitions=4\n\
             transaction.state.log.num.partitions=4\n\
             group.initial.rebalance.delay.ms=0\n\
             # Few threads: a test run has several brokers on two cores.\n\
             num.network.threads=2\n\
             num.io.threads=2\n\
             num.recovery.threads.per.data.dir=1\n\
             background.threads=2\n",
            roles = self.roles().process_roles(),
            node_id = self.node_id,
            client = self.port,
            internal = self.internal_port,
            data = self.dir.join("data").display(),
        );
        text.push_str(&self.quorum_properties());
        let tls = |pki: &Pki| {
            format!(
                "listener.name.client.ssl.keystore.type=PEM\n\
                 listener.name.client.ssl.keystore.location={keystore}\n\
                 listener.name.client.ssl.truststore.type=PEM\n\
                 listener.name.client.ssl.truststore.location={ca}\n",
                keystore = pki.server_keystore_pem().display(),
                ca = pki.ca.display(),
            )
        };
        match &self.security {
            Security::Plaintext => {}
            Security::Ssl { pki, mutual } => {
                text.push_str(&tls(pki));
                if *mutual {
                    text.push_str("listener.name.client.ssl.client.auth=required\n");
                }
            }
            Security::SaslSsl { pki, .. } => {
                text.push_str(&tls(pki));
                text.push_str(
                    "sasl.enabled.mechanisms=SCRAM-SHA-512\n\
                     listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512\n\
                     listener.name.client.scram-sha-512.sasl.jaas.config=\
                     org.apache.kafka.common.security.scram.ScramLoginModule required;\n",
                );
            }
        }
        text.push_str(&self.more_properties);
        text
    }

    /// The quorum's settings, and the replication of the internal topics: one copy on a
    /// node of its own; on a cluster three, two in sync, as production runs them, and
    /// the shorter failure detection of [`cluster_timing`].
    fn quorum_properties(&self) -> String {
        match &self.quorum {
            // The broker's session shortened as on a cluster: a node killed with -9 and
            // started again is refused by its own controller (DuplicateBrokerRegistration)
            // until its old registration's session ran out, 9 s by default, which was most
            // of each restart.
            Quorum::Standalone => format!(
                "controller.quorum.bootstrap.servers=127.0.0.1:{controller}\n\
                 broker.session.timeout.ms={session}\n\
                 broker.heartbeat.interval.ms={heartbeat}\n\
                 offsets.topic.replication.factor=1\n\
                 transaction.state.log.replication.factor=1\n\
                 transaction.state.log.min.isr=1\n\
                 share.coordinator.state.topic.replication.factor=1\n\
                 share.coordinator.state.topic.min.isr=1\n",
                controller = self.controller_port,
                session = standalone_timing::BROKER_SESSION_TIMEOUT_MS,
                heartbeat = standalone_timing::BROKER_HEARTBEAT_INTERVAL_MS,
            ),
            Quorum::Member {
                voters, brokers, ..
            } => {
                let replicas = (*brokers).min(3);
                let in_sync = replicas.saturating_sub(1).max(1);
                format!(
                    "controller.quorum.voters={voters}\n\
                     offsets.topic.replication.factor={replicas}\n\
                     transaction.state.log.replication.factor={replicas}\n\
                     transaction.state.log.min.isr={in_sync}\n\
                     share.coordinator.state.topic.replication.factor={replicas}\n\
                     share.coordinator.state.topic.min.isr={in_sync}\n\
                     default.replication.factor={replicas}\n\
                     min.insync.replicas={in_sync}\n\
                     unclean.leader.election.enable=false\n\
                     broker.session.timeout.ms={session}\n\
                     broker.heartbeat.interval.ms={heartbeat}\n\
                     replica.lag.time.max.ms={lag}\n",
                    session = cluster_timing::BROKER_SESSION_TIMEOUT_MS,
                    heartbeat = cluster_timing::BROKER_HEARTBEAT_INTERVAL_MS,
                    lag = cluster_timing::REPLICA_LAG_TIME_MAX_MS,
                )
            }
        }
    }

    /// `server.properties` of a controller-only node: its quorum listener and its log.
    fn controller_properties(&self) -> String {
        let Quorum::Member {
            voters, brokers, ..
        } = &self.quorum
        else {
            unreachable!("a node of its own runs a broker");
        };
        let replicas = (*brokers).min(3);
        format!(
            "process.roles=controller\n\
             node.id={node_id}\n\
             listeners=CONTROLLER://127.0.0.1:{controller}\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT\n\
             controller.listener.names=CONTROLLER\n\
             controller.quorum.voters={voters}\n\
             log.dirs={data}\n\
             default.replication.factor={replicas}\n\
             min.insync.replicas={in_sync}\n\
             unclean.leader.election.enable=false\n\
             broker.session.timeout.ms={session}\n\
             broker.heartbeat.interval.ms={heartbeat}\n\
             num.network.threads=2\n\
             num.io.threads=2\n\
             background.threads=2\n",
            in_sync = replicas.saturating_sub(1).max(1),
            node_id = self.node_id,
            controller = self.controller_port,
            data = self.dir.join("data").display(),
            session = cluster_timing::BROKER_SESSION_TIMEOUT_MS,
            heartbeat = cluster_timing::BROKER_HEARTBEAT_INTERVAL_MS,
        )
    }

    /// Formats the log directory once, creating the SCRAM users: `--standalone` for a node
    /// of its own; a cluster's nodes name their voters in their properties, and share the
    /// cluster id.
    fn format(&self, properties: &Path) -> anyhow::Result<()> {
        let mut command = Command::new("java");
        command
            .args(TEST_JVM)
            .args(self.jvm_logging())
            .args(["kafka.tools.StorageTool", "format"]);
        if let Quorum::Standalone = self.quorum {
            command.arg("--standalone");
        }
        command
            // One argument: a random id may start with '-', which would read as an option.
            .arg(format!("--cluster-id={}", self.cluster_id))
            .arg("--config")
            .arg(properties);
        if let Security::SaslSsl { users, .. } = &self.security {
            for (name, password) in users {
                command
                    .arg("--add-scram")
                    .arg(format!("SCRAM-SHA-512=[name={name},password={password}]"));
            }
        }
        let output = command
            .stdin(Stdio::null())
            .output()
            .context("running java (kafka.tools.StorageTool)")?;
        if !output.status.success() {
            bail!(
                "formatting {}: {}{}",
                self.dir.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// Waits until a metadata request on the plaintext `INTERNAL` listener names this node as
    /// a broker: it then has registered with its controller and been unfenced, and takes
    /// topic creations and produce requests.
    pub(crate) fn wait_until_ready(&self, pid: u32) -> anyhow::Result<()> {
        if self.roles() == Roles::Controller {
            return self.wait_until_listening(pid);
        }
        let probe: BaseConsumer = ClientConfig::new()
            .set(
                "bootstrap.servers",
                format!("127.0.0.1:{}", self.internal_port),
            )
            .set("log_level", "0")
            .create()?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(metadata) = probe.fetch_metadata(None, Duration::from_millis(500))
                && metadata.brokers().iter().any(|b| b.id() == self.node_id)
            {
                return Ok(());
            }
            if !Path::new(&format!("/proc/{pid}")).exists() || Instant::now() > deadline {
                bail!(
                    "Kafka in {} did not become ready within {START_TIMEOUT:?}; see {}:\n{}",
                    self.dir.display(),
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl BrokerServer {
    /// A controller-only node has no client listener to ask for metadata: it is up once
    /// its quorum listener takes connections (the brokers' readiness says the rest).
    fn wait_until_listening(&self, pid: u32) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.controller_port));
        while std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            if !Path::new(&format!("/proc/{pid}")).exists() || Instant::now() > deadline {
                bail!(
                    "the Kafka controller in {} did not listen within {START_TIMEOUT:?}; see {}:\n{}",
                    self.dir.display(),
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }
}

/// A random Kafka cluster id: 16 bytes in URL-safe base64 without padding, as
/// `kafka-storage random-uuid` prints.
fn cluster_id() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
}

/// The last `lines` lines of a text file, for error messages.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The folder of Kafka's jars: `LEDGER_KAFKA_LIBS`, else the one `deploy/test` fills in the
/// cache (`$RA_CACHE_DIR`, `$XDG_CACHE_HOME/ra-ledger` or `~/.cache/ra-ledger`).
pub fn kafka_libs() -> anyhow::Result<PathBuf> {
    if let Ok(path) = std::env::var("LEDGER_KAFKA_LIBS")
        && !path.is_empty()
    {
        return Ok(PathBuf::from(path));
    }
    let cache = std::env::var_os("RA_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|dir| PathBuf::from(dir).join("ra-ledger"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/ra-ledger"))
        })
        .context("HOME is not set")?;
    // `kafka-<version>/libs`, as deploy/lib.sh names it; the newest if there are several.
    let mut found: Vec<PathBuf> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("kafka-"))
        .map(|entry| entry.path().join("libs"))
        .filter(|libs| has_broker_jar(libs))
        .collect();
    found.sort();
    found.pop().with_context(|| {
        format!(
            "{} holds no Kafka jars (kafka-<version>/libs); run deploy/test (it fetches them \
             once), set LEDGER_KAFKA_LIBS, or point LEDGER_TEST_KAFKA_BROKERS at a running broker",
            cache.display()
        )
    })
}

fn has_broker_jar(libs: &Path) -> bool {
    std::fs::read_dir(libs)
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("kafka_2.13-") && name.ends_with(".jar")
        })
}
