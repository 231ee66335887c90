//! `ledger verify`: recompute every stream's hash chain, and replay every event into
//! scratch projections compared with the live `contacts` and `assignments` (what the plain
//! audit answers read); with `--digests`, also check the ledger against the signed digests
//! published on Kafka.

use std::path::PathBuf;
use std::time::Duration;

use ra_ledger::digest::{DigestKey, public_key_from_pem, published};
use ra_ledger::{db, verify};
use ra_ledger_cdc::infra::settings::{env, local};

/// Arguments of `ledger verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Also check every digest published on Kafka: its signature, the chain of digests, and
    /// that the current tables reproduce its root.
    #[arg(long)]
    digests: bool,
    /// The digests' public key (PEM, as `GET /v1/digests/public-key` serves it). Defaults to
    /// the public half of LEDGER_DIGEST_KEY_FILE; an auditor should pass the key they got
    /// and kept themselves.
    #[arg(long, env = env::DIGEST_PUBLIC_KEY_FILE)]
    public_key: Option<PathBuf>,
    /// Kafka bootstrap servers.
    #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
    brokers: String,
    /// The digest topic; defaults to `<prefix>digest`.
    #[arg(long)]
    topic: Option<String>,
    /// Topic prefix the relay publishes under.
    #[arg(long, env = env::TOPIC_PREFIX, default_value = local::TOPIC_PREFIX)]
    prefix: String,
    /// Give up reading the topic after this many seconds.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    read_timeout_s: u64,
}

fn public_key(args: &VerifyArgs) -> anyhow::Result<ed25519_dalek::VerifyingKey> {
    if let Some(path) = &args.public_key {
        let pem = std::fs::read_to_string(path)
            .map_err(|error| anyhow::anyhow!("--public-key {}: {error}", path.display()))?;
        return public_key_from_pem(&pem).ok_or_else(|| {
            anyhow::anyhow!(
                "--public-key {}: not an Ed25519 public key in PEM",
                path.display()
            )
        });
    }
    match env::read_path(env::DIGEST_KEY_FILE) {
        Some(path) => Ok(DigestKey::from_pem_file(path.as_ref())?.public()),
        None => anyhow::bail!(
            "--digests needs the digests' public key: --public-key FILE (GET /v1/digests/public-key)"
        ),
    }
}

/// Every event replayed into scratch projections in one snapshot, compared row for row with
/// the live ones (`ledger projections rebuild --verify`): an edited projection row changes
/// an unproven audit answer, and nothing else would see it.
async fn projections_hold(database_url: &str) -> anyhow::Result<bool> {
    let mut client = db::pool(database_url, "ledger-verify-projections", 1)?
        .get()
        .await?;
    let report = ra_ledger::rebuild::rebuild(&mut client, true, |done, total| {
        if done.is_multiple_of(100_000) {
            eprintln!("replayed {done}/{total} events into scratch projections…");
        }
    })
    .await?;
    let different: u64 = report.differences.iter().map(|(_, count)| count).sum();
    if different == 0 {
        outln!(
            "ok: the projections equal the {} events replayed (every row of contacts and assignments)",
            report.events
        );
        return Ok(true);
    }
    let tables: Vec<String> = report
        .differences
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(table, count)| format!("{table}: {count} differing rows"))
        .collect();
    let line = format!(
        "PROJECTIONS DIFFER from the {} events replayed ({}), e.g. {}: answers read from them are not what the ledger proves; `ledger projections rebuild` replaces them",
        report.events,
        tables.join(", "),
        report.examples.join("; ")
    );
    outln!("{line}");
    eprintln!("{line}");
    Ok(false)
}

pub async fn run(database_url: &str, args: VerifyArgs) -> anyhow::Result<()> {
    // Before any long work: a missing key is a usage error.
    let key = args.digests.then(|| public_key(&args)).transpose()?;
    let client = db::connect(database_url, "ledger-verify").await?;
    let report = verify::verify(&client, |done| eprintln!("verified {done} events…")).await?;
    let mut holds = projections_hold(database_url).await?;
    holds &= match report.broken {
        None => {
            outln!(
                "ok: {} events in {} streams, every hash chain intact",
                report.events,
                report.streams
            );
            true
        }
        Some(link) => {
            outln!("BROKEN: {link}");
            false
        }
    };
    if let Some(key) = key {
        let topic = args
            .topic
            .clone()
            .unwrap_or_else(|| format!("{}{}", args.prefix, ra_ledger::digest::AGGREGATE_TYPE));
        let config = ra_ledger_cdc::infra::kafka::KafkaSettings::from_env(&args.brokers)
            .and_then(|settings| settings.client_config())?;
        let timeout = Duration::from_secs(args.read_timeout_s);
        let report = published::verify_topic(&client, config, &topic, &key, timeout).await?;
        for problem in &report.problems {
            outln!("DIGEST: {problem}");
        }
        if let Some(disagreement) = &report.disagreement {
            outln!("DIGEST MISMATCH: {disagreement}");
        }
        if report.checked == 0 {
            outln!("DIGEST: no digest on {topic}: nothing proves the tables");
            holds = false;
        } else if report.holds() {
            outln!(
                "ok: {} digests published on {topic}: signatures, chain and roots hold",
                report.checked
            );
        }
        if report.copies > 0 {
            outln!(
                "note: {} extra copies of digests on {topic} (a message delivered again, as after a relay restart) were the same documents, each counted once",
                report.copies
            );
        }
        if report.relabelled > 0 {
            outln!(
                "note: {} copies of version-1 digests on {topic} carried another number than their chain gives them (a version-1 digest does not sign its number, so anyone may relabel one); each was counted once, at its place in the chain",
                report.relabelled
            );
        }
        if !report.unpublished.is_empty() {
            outln!(
                "note: digests {:?} are in the table but not on {topic} yet (is the relay running?)",
                report.unpublished
            );
        }
        holds &= report.holds();
    }
    if !holds {
        std::process::exit(1);
    }
    Ok(())
}
