//! `ledger proof <event-id>`: an event's inclusion proof against the newest digest, as JSON;
//! `ledger proof verify <file> --public-key <file>`: checks one offline, with no database and
//! no network.

use ra_ledger::db;
use ra_ledger::digest::{prove, public_key_from_pem, verify};

/// Arguments of `ledger proof`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProofArgs {
    /// The event to prove.
    event_id: Option<String>,
    /// Sizes of checkpoints you saved: the proof carries the log's consistency proof from
    /// each to its checkpoint (`ledger proof verify --saved-checkpoint` checks them).
    #[arg(long = "consistent-with")]
    consistent_with: Vec<u64>,
    #[command(subcommand)]
    command: Option<ProofCommand>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ProofCommand {
    /// Print the transparency log's verifier key (signed-note vkey) for a public key and an
    /// origin: what a witness registers the log with (`witnessctl add-key`) and a policy's
    /// `log` line holds.
    LogKey {
        /// The digests' public key (PEM).
        #[arg(long)]
        public_key: String,
        /// The log's origin (`log_origin` of `ledger serve`).
        #[arg(long, default_value = ra_ledger::tlog::DEFAULT_ORIGIN)]
        origin: String,
    },
    /// Check a proof offline; exits 1 naming the first thing that does not hold.
    Verify {
        /// The proof (JSON), as `ledger proof` or `GET /v1/events/{id}/proof` gave it.
        file: String,
        /// The digests' public key (PEM), as `GET /v1/digests/public-key` gave it. Never
        /// the one inside the proof: that one proves nothing.
        #[arg(long)]
        public_key: String,
        /// The witness policy (C2SP tlog-policy): the checkpoint must carry the cosignatures
        /// its quorum asks for, each verified with the policy's keys.
        #[arg(long)]
        policy: Option<String>,
        /// A checkpoint you saved earlier (a signed note, as `GET /v1/checkpoints/latest`
        /// gave it); repeat for each. The proof's log must extend every one.
        #[arg(long = "saved-checkpoint")]
        saved_checkpoints: Vec<String>,
    },
}

pub async fn run(database_url: &str, args: ProofArgs) -> anyhow::Result<()> {
    match (args.event_id, args.command) {
        (_, Some(ProofCommand::LogKey { public_key, origin })) => {
            let pem = std::fs::read_to_string(&public_key)
                .map_err(|error| anyhow::anyhow!("--public-key {public_key}: {error}"))?;
            let key = public_key_from_pem(&pem).ok_or_else(|| {
                anyhow::anyhow!("--public-key {public_key}: not an Ed25519 public key in PEM")
            })?;
            if origin.is_empty() || origin.contains(char::is_whitespace) || origin.contains('+') {
                anyhow::bail!("--origin {origin:?}: a name without spaces or '+'");
            }
            outln!(
                "{}",
                ra_ledger::tlog::note::NoteKey::log(&origin, key).vkey()
            );
            Ok(())
        }
        (
            _,
            Some(ProofCommand::Verify {
                file,
                public_key,
                policy,
                saved_checkpoints,
            }),
        ) => {
            let read = |path: &str| {
                std::fs::read_to_string(path).map_err(|error| anyhow::anyhow!("{path}: {error}"))
            };
            let document: serde_json::Value = serde_json::from_str(&read(&file)?)
                .map_err(|error| anyhow::anyhow!("{file}: not JSON: {error}"))?;
            let key = public_key_from_pem(&read(&public_key)?)
                .ok_or_else(|| anyhow::anyhow!("{public_key}: not an Ed25519 public key in PEM"))?;
            let policy = match &policy {
                None => None,
                Some(path) => Some(
                    ra_ledger::tlog::policy::Policy::parse(&read(path)?)
                        .map_err(|error| anyhow::anyhow!("--policy {path}: {error}"))?,
                ),
            };
            let saved = saved_checkpoints
                .iter()
                .map(|path| read(path))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let checked = verify::ClaimedProof::from_json(&document).and_then(|proof| {
                let verified = verify::verify(&proof, &key)?;
                let log = if proof.log.is_some() || policy.is_some() || !saved.is_empty() {
                    Some(verify::verify_log(&proof, &key, policy.as_ref(), &saved)?)
                } else {
                    None
                };
                Ok((verified, log))
            });
            match checked {
                Ok((verified, log)) => {
                    if let Some(log) = &log {
                        outln!(
                            "ok: the heads are in the log's checkpoint {} of size {}, signed by the log{}",
                            log.checkpoint.origin,
                            log.checkpoint.size,
                            if policy.is_some() {
                                format!(
                                    " and cosigned by {} (the policy's quorum holds)",
                                    log.cosigned.join(", ")
                                )
                            } else {
                                " (no --policy: cosignatures not checked)".into()
                            }
                        );
                        for size in &log.consistent_with {
                            outln!("ok: the log extends your saved checkpoint of size {size}");
                        }
                    }
                    let time = chrono::DateTime::from_timestamp_micros(verified.digest_time_micros)
                        .map(|time| time.to_rfc3339())
                        .unwrap_or_default();
                    for proven in &verified.streams {
                        outln!(
                            "ok: {} versions {}..={} chain to the head sealed by the digest of {time}",
                            proven.stream,
                            proven.first_version,
                            proven.sealed_version
                        );
                    }
                    if let Some(answer) = &verified.answer {
                        outln!("ok: the proven events fold to the answer: {answer}");
                    }
                    Ok(())
                }
                Err(failure) => {
                    eprintln!("FAIL: {failure}");
                    std::process::exit(1);
                }
            }
        }
        (Some(event_id), None) => {
            let id = event_id
                .parse()
                .map_err(|_| anyhow::anyhow!("event id {event_id:?} is not a UUID"))?;
            let pool = db::pool(database_url, "ledger-proof", 1)?;
            // A process of its own: no builder tree to take paths from.
            let document =
                prove::for_event_with(&pool, id, &Default::default(), &args.consistent_with)
                    .await?;
            outln!("{}", serde_json::to_string_pretty(&document)?);
            Ok(())
        }
        (None, None) => anyhow::bail!("name an event id, or `verify <file> --public-key <file>`"),
    }
}
