//! `ledger proof <event-id>`: an event's inclusion proof against the newest digest, as JSON;
//! `ledger proof verify <file> --public-key <file>`: checks one offline, with no database and
//! no network.

use ra_ledger::db;
use ra_ledger::digest::{answer, prove, public_key_from_pem, verify};

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
    Verify(VerifyArgs),
}

/// Arguments of `ledger proof verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The proof (JSON), as `ledger proof` or `GET /v1/events/{id}/proof` gave it.
    file: String,
    /// The digests' public key (PEM), as `GET /v1/digests/public-key` gave it. Never
    /// the one inside the proof: that one proves nothing.
    #[arg(long)]
    public_key: String,
    /// The witness policy (C2SP tlog-policy): the checkpoint must carry the cosignatures
    /// its quorum asks for, each verified with the policy's keys; its `log` line, if any,
    /// must be the key of --public-key and the checkpoint's origin.
    #[arg(long)]
    policy: Option<String>,
    /// A checkpoint you saved earlier (a signed note, as `GET /v1/checkpoints/latest`
    /// gave it); repeat for each. The proof's log must extend every one.
    #[arg(long = "saved-checkpoint")]
    saved_checkpoints: Vec<String>,
    /// A digest key the ledger signed with before a rotation (PEM), as its operator
    /// announced it to you; repeat for each: a saved checkpoint may be signed by it (the
    /// proof itself must verify with --public-key).
    #[arg(long = "previous-key")]
    previous_keys: Vec<String>,
    /// The business you asked about: an answer's proof of another is refused.
    #[arg(long)]
    business: Option<uuid::Uuid>,
    /// The jurisdiction you asked about (code, e.g. TX).
    #[arg(long, value_parser = super::audit::parse_jurisdiction)]
    jurisdiction: Option<ra_ledger::domain::Jurisdiction>,
    /// The business time you asked about (RFC 3339), exactly as asked.
    #[arg(long, value_parser = super::audit::parse_instant)]
    at: Option<chrono::DateTime<chrono::Utc>>,
    /// The transaction time you asked about (RFC 3339), exactly as asked.
    #[arg(long, value_parser = super::audit::parse_instant)]
    known_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Refuse a proof whose newest cosignature (of the policy's witnesses) is older than
    /// this (90s, 15m, 2h, 1d): how stale a view of the log you accept. Needs --policy.
    #[arg(long, value_parser = super::reconcile::parse_duration)]
    max_age: Option<std::time::Duration>,
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
        (_, Some(ProofCommand::Verify(args))) => verify_offline(args),
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

fn verify_offline(args: VerifyArgs) -> anyhow::Result<()> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|error| anyhow::anyhow!("{path}: {error}"))
    };
    let document: serde_json::Value = serde_json::from_str(&read(&args.file)?)
        .map_err(|error| anyhow::anyhow!("{}: not JSON: {error}", args.file))?;
    let key = public_key_from_pem(&read(&args.public_key)?)
        .ok_or_else(|| anyhow::anyhow!("{}: not an Ed25519 public key in PEM", args.public_key))?;
    let policy = match &args.policy {
        None => None,
        Some(path) => Some(
            ra_ledger::tlog::policy::Policy::parse(&read(path)?)
                .map_err(|error| anyhow::anyhow!("--policy {path}: {error}"))?,
        ),
    };
    if args.max_age.is_some() && policy.is_none() {
        anyhow::bail!(
            "--max-age needs --policy: the age is the newest cosignature's, verified with the witnesses' keys"
        );
    }
    let previous = args
        .previous_keys
        .iter()
        .map(|path| {
            public_key_from_pem(&read(path)?)
                .ok_or_else(|| anyhow::anyhow!("{path}: not an Ed25519 public key in PEM"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let saved = args
        .saved_checkpoints
        .iter()
        .map(|path| read(path))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let stated = answer::StatedQuestion {
        business_id: args.business,
        jurisdiction: args.jurisdiction,
        at: args.at,
        known_at: args.known_at,
    };
    let checked = verify::ClaimedProof::from_json(&document).and_then(|proof| {
        answer::check_question(&stated, proof.question.as_ref())?;
        let verified = verify::verify(&proof, &key)?;
        let log = if proof.log.is_some() || policy.is_some() || !saved.is_empty() {
            Some(verify::verify_log_across(
                &proof,
                &key,
                &previous,
                policy.as_ref(),
                &saved,
            )?)
        } else {
            None
        };
        if let (Some(max_age), Some(log)) = (args.max_age, &log) {
            let now = chrono::Utc::now().timestamp().max(0) as u64;
            answer::check_age(log.newest_cosignature, now, max_age)?;
        }
        Ok((verified, log))
    });
    match checked {
        Ok((verified, log)) => {
            print_verified(
                &verified,
                log.as_ref(),
                policy.is_some(),
                !stated.is_empty(),
            );
            Ok(())
        }
        Err(failure) => {
            eprintln!("FAIL: {failure}");
            std::process::exit(1);
        }
    }
}

fn print_verified(
    verified: &verify::VerifiedProof,
    log: Option<&verify::VerifiedLog>,
    policy: bool,
    stated: bool,
) {
    if let Some(log) = log {
        outln!(
            "ok: the heads are in the log's checkpoint {} of size {}, signed by the log{}",
            log.checkpoint.origin,
            log.checkpoint.size,
            if policy {
                format!(
                    " and cosigned by {} (the policy's quorum holds)",
                    log.cosigned.join(", ")
                )
            } else {
                " (no --policy: cosignatures not checked)".into()
            }
        );
        if let Some(time) = log
            .newest_cosignature
            .and_then(|time| chrono::DateTime::from_timestamp(time as i64, 0))
        {
            outln!("ok: the newest cosignature is of {}", time.to_rfc3339());
        }
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
        if !stated {
            outln!(
                "note: you did not state your question (--business, --jurisdiction, --at, \
                 --known-at): this is the answer to the proof's own question"
            );
        }
    }
}
