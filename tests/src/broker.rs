//! Apache Kafka brokers of the test run: one KRaft node each (broker and controller in one
//! JVM), from the jars `deploy/test` fetches from Maven Central into the cache.
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
    internal_port: u16,
    controller_port: u16,
    libs: PathBuf,
    log: PathBuf,
    pid: Arc<Mutex<Option<u32>>>,
}

impl BrokerServer {
    /// A broker (not started yet) on free ports, keeping its files in `dir`.
    pub fn new(dir: &Path, security: Security) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            port: free_port()?,
            dir: dir.to_owned(),
            security,
            internal_port: free_port()?,
            controller_port: free_port()?,
            libs: kafka_libs()?,
            log: dir.join("kafka.log"),
            pid: Arc::new(Mutex::new(None)),
        })
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
            // A small heap, and G1 as Kafka's own start script runs it.
            .args([
                "-Xms256m",
                "-Xmx512m",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
            ])
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
        self.wait_until_ready(pid)
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

    fn jvm_logging(&self) -> Vec<String> {
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
        let client_host = match self.security {
            Security::Plaintext => "127.0.0.1",
            _ => "localhost",
        };
        let protocol = match self.security {
            Security::Plaintext => "PLAINTEXT",
            Security::Ssl { .. } => "SSL",
            Security::SaslSsl { .. } => "SASL_SSL",
        };
        let mut text = format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             listeners=CLIENT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=CLIENT://{client_host}:{client},INTERNAL://127.0.0.1:{internal}\n\
             listener.security.protocol.map=CLIENT:{protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             inter.broker.listener.name=INTERNAL\n\
             controller.listener.names=CONTROLLER\n\
             controller.quorum.bootstrap.servers=127.0.0.1:{controller}\n\
             log.dirs={data}\n\
             auto.create.topics.enable=false\n\
             num.partitions=3\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=4\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             transaction.state.log.num.partitions=4\n\
             share.coordinator.state.topic.replication.factor=1\n\
             share.coordinator.state.topic.min.isr=1\n\
             group.initial.rebalance.delay.ms=0\n\
             # Few threads: a test run has several brokers on two cores.\n\
             num.network.threads=2\n\
             num.io.threads=2\n\
             num.recovery.threads.per.data.dir=1\n\
             background.threads=2\n",
            client = self.port,
            internal = self.internal_port,
            controller = self.controller_port,
            data = self.dir.join("data").display(),
        );
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
        text
    }

    /// Formats the log directory once (`kafka-storage format --standalone`), creating the
    /// SCRAM users.
    fn format(&self, properties: &Path) -> anyhow::Result<()> {
        let mut command = Command::new("java");
        command
            .args(self.jvm_logging())
            .args(["kafka.tools.StorageTool", "format", "--standalone"])
            // One argument: a random id may start with '-', which would read as an option.
            .arg(format!("--cluster-id={}", cluster_id()))
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
    fn wait_until_ready(&self, pid: u32) -> anyhow::Result<()> {
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
                && !metadata.brokers().is_empty()
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
