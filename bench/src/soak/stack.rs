//! The stack the soak runs, each part a process of its own as in production (so its
//! resident memory is its own): `ledger serve` with outbox retention and digests on, `ledger
//! relay` and `ledger worker`, all the `ledger` binary beside this one, on the scratch
//! database, its slot and the run's topics. Each is started with the settings the stack's
//! would have (their defaults), on free loopback ports, its log in the run's folder.

use std::path::Path;
use std::time::{Duration, Instant};

use ed25519_dalek::pkcs8::EncodePrivateKey as _;
use ra_ledger::api::{Role, token_entry};
use ra_ledger_cdc::infra::settings::env;
use ra_ledger_testing::ScratchDatabase;

use crate::peers::process::{Launch, Peer, ledger_binary, relay_launch};

/// The writer token the soak's load sends (the service holds its hash only).
pub const WRITER_TOKEN: &str = "soak-writer-token";

/// How long a part may take to answer after its start.
const START_WITHIN: Duration = Duration::from_secs(60);

/// The three processes, and where to reach them.
#[derive(Debug)]
pub struct Stack {
    /// `ledger serve`.
    pub serve: Peer,
    /// `ledger relay`.
    pub relay: Peer,
    /// `ledger worker`.
    pub worker: Peer,
    /// The service's base URL.
    pub api: String,
    /// The relay's `/metrics`.
    pub relay_metrics: String,
}

/// Where the parts run: the scratch database, its slot, the topics and the brokers.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub scratch: &'a ScratchDatabase,
    pub slot: &'a str,
    pub prefix: &'a str,
    pub brokers: &'a str,
    /// The run's folder: logs and the digest key.
    pub dir: &'a Path,
    /// Whether the service seals digests.
    pub digests: bool,
}

impl Stack {
    /// Starts the service, then the relay, then the worker, each once the one before
    /// answers.
    pub async fn start(place: Place<'_>) -> anyhow::Result<Self> {
        let http = client()?;
        let api = format!("http://{}", free_address()?);
        let mut serve = Peer::start(serve_launch(place, &api)?)?;
        wait_for(&http, &format!("{api}/readyz"), &mut serve, "ledger serve").await?;
        let metrics_address = free_address()?;
        let mut launch = relay_launch(
            place.scratch,
            place.slot,
            place.prefix,
            place.brokers,
            place.dir,
        )?;
        for (key, value) in &mut launch.env {
            if key == env::METRICS_LISTEN {
                value.clone_from(&metrics_address);
            }
        }
        let mut relay = Peer::start(launch)?;
        let relay_metrics = format!("http://{metrics_address}/metrics");
        let health = format!("http://{metrics_address}/healthz");
        wait_for(&http, &health, &mut relay, "ledger relay").await?;
        let worker = Peer::start(worker_launch(place)?)?;
        Ok(Self {
            serve,
            relay,
            worker,
            api,
            relay_metrics,
        })
    }

    /// Fails when a part exited by itself.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        self.serve.ensure_running()?;
        self.relay.ensure_running()?;
        self.worker.ensure_running()
    }

    /// Each part's resident memory, in MiB: serve, relay, worker.
    pub fn resident_mib(&self) -> anyhow::Result<[f64; 3]> {
        Ok([
            resident_mib(self.serve.pid()?)?,
            resident_mib(self.relay.pid()?)?,
            resident_mib(self.worker.pid()?)?,
        ])
    }

    /// SIGTERM to each, the worker first, SIGKILL after a grace.
    pub async fn stop(self) -> anyhow::Result<()> {
        let grace = Duration::from_secs(15);
        self.worker.stop(grace).await?;
        self.relay.stop(grace).await?;
        self.serve.stop(grace).await
    }
}

/// An HTTP client for the parts' endpoints and the load.
pub fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?)
}

/// `ledger serve` as the stack runs it: retention at its default interval on the run's
/// slot, digests on with a key made for the run (unless `place.digests` is off), one writer
/// token, no witnesses.
fn serve_launch(place: Place<'_>, api: &str) -> anyhow::Result<Launch> {
    let mut env = vec![
        (env::DATABASE_URL.into(), place.scratch.url.clone()),
        (env::LISTEN.into(), api.trim_start_matches("http://").into()),
        (
            env::TOKENS.into(),
            token_entry(Role::Writer, "soak", WRITER_TOKEN),
        ),
        (env::RELAY_SLOT.into(), place.slot.into()),
        (env::SERVE_METRICS_LISTEN.into(), String::new()),
    ];
    let mut removed = vec![
        env::SERVE_CONFIG,
        env::DATABASE_PASSWORD_FILE,
        env::TOKENS_FILE,
        env::WITNESS_POLICY_FILE,
        env::OUTBOX_RETENTION_INTERVAL_MS,
        env::DIGEST_INTERVAL_MS,
    ];
    if place.digests {
        let key = place.dir.join("digest-key.pem");
        let seed: [u8; 32] = rand::random();
        let pem = ed25519_dalek::SigningKey::from_bytes(&seed)
            .to_pkcs8_pem(Default::default())
            .map_err(|error| anyhow::anyhow!("cannot encode the run's digest key: {error}"))?;
        std::fs::write(&key, pem.as_bytes())?;
        env.push((env::DIGEST_KEY_FILE.into(), key.display().to_string()));
    } else {
        removed.push(env::DIGEST_KEY_FILE);
    }
    Ok(Launch {
        program: ledger_binary()?,
        args: vec!["serve".into()],
        env,
        removed,
        log: place.dir.join("serve.log"),
    })
}

/// `ledger worker` on the run's reassignment topic, in a group of its own.
fn worker_launch(place: Place<'_>) -> anyhow::Result<Launch> {
    Ok(Launch {
        program: ledger_binary()?,
        args: vec!["worker".into()],
        env: vec![
            (env::DATABASE_URL.into(), place.scratch.url.clone()),
            (env::KAFKA_BROKERS.into(), place.brokers.into()),
            (
                env::REASSIGNMENT_TOPIC.into(),
                format!("{}reassignment", place.prefix),
            ),
            (env::WORKER_GROUP.into(), format!("{}worker", place.prefix)),
            (env::WORKER_METRICS_LISTEN.into(), String::new()),
        ],
        removed: vec![
            env::WORKER_CONFIG,
            env::DATABASE_PASSWORD_FILE,
            env::SCHEMA_REGISTRY_URL,
            env::WORKER_INSTANCE_ID,
        ],
        log: place.dir.join("worker.log"),
    })
}

/// A loopback address nobody listens on now.
fn free_address() -> anyhow::Result<String> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .to_string())
}

/// Waits until `url` answers 2xx, failing when `peer` exits or after [`START_WITHIN`].
async fn wait_for(
    http: &reqwest::Client,
    url: &str,
    peer: &mut Peer,
    name: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_WITHIN;
    loop {
        peer.ensure_running()?;
        if let Ok(response) = http.get(url).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} did not answer {url} within {START_WITHIN:?}; see its log in the run's folder"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Resident memory of process `pid` in MiB, from `/proc/<pid>/status`.
fn resident_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vm_rss_kib(&status)
        .map(|kib| kib as f64 / 1024.0)
        .ok_or_else(|| anyhow::anyhow!("no VmRSS line in /proc/{pid}/status"))
}

/// The `VmRSS:` line of a `/proc/<pid>/status`, in KiB (the kernel writes `kB`).
fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// The value of the unlabelled metric `name` in a Prometheus text rendering.
pub fn metric(rendered: &str, name: &str) -> Option<f64> {
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_resident_set_from_proc_status() {
        let status =
            "Name:\tledger\nVmPeak:\t  900000 kB\nVmRSS:\t   52344 kB\nRssAnon:\t 40000 kB\n";
        assert_eq!(parse_vm_rss_kib(status), Some(52_344));
        assert_eq!(parse_vm_rss_kib("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn reads_an_unlabelled_metric_and_not_its_longer_namesakes() {
        let text = "# HELP x\nra_relay_lag_total 5\nra_relay_lag 0.25\n";
        assert_eq!(metric(text, "ra_relay_lag"), Some(0.25));
        assert_eq!(metric(text, "ra_relay_missing"), None);
    }
}
