//! `ledger bench relay`: the relay draining an outbox backlog, against the two ceilings it
//! sits between: PostgreSQL's own `pg_recvlogical` reading the slot, and rdkafka alone
//! producing the same messages.

use std::time::{Duration, Instant};

use ra_ledger::db;
use ra_ledger::testing;
use uuid::Uuid;

use super::scratch;

pub async fn run(
    database_url: &str,
    brokers: &str,
    rows: u64,
    per_transaction: u64,
) -> anyhow::Result<()> {
    if rows == 0 || per_transaction == 0 {
        anyhow::bail!("--rows and --per-transaction must be at least 1");
    }
    let figures = measure(database_url, brokers, rows, per_transaction).await?;
    let ceiling = figures.slot_ceiling.min(figures.broker_ceiling);
    println!(
        "backlog: {} outbox rows, {per_transaction} per transaction",
        figures.rows
    );
    println!(
        "slot ceiling   (pg_recvlogical to /dev/null): {:.0} rows/s",
        figures.slot_ceiling
    );
    println!(
        "broker ceiling (rdkafka alone, same messages): {:.0} rows/s",
        figures.broker_ceiling
    );
    println!(
        "relay          (slot -> Kafka, acknowledged): {:.0} rows/s",
        figures.relay
    );
    println!(
        "relay / lower ceiling = {:.2} (target >= 0.80)",
        figures.relay / ceiling
    );
    Ok(())
}

/// Figures of the relay benchmark.
#[derive(Debug, Clone)]
struct RelayFigures {
    /// Outbox rows in the backlog.
    rows: u64,
    /// `pg_recvlogical` draining the backlog to /dev/null: the slot's ceiling, rows/s.
    slot_ceiling: f64,
    /// rdkafka alone producing the same messages: the broker's ceiling, rows/s.
    broker_ceiling: f64,
    /// The relay draining the backlog to the broker, rows/s.
    relay: f64,
}

/// Drains a backlog of `rows` outbox rows (`per_transaction` per transaction) through
/// `pg_recvlogical`, through rdkafka alone and through the relay, in one run.
async fn measure(
    url: &str,
    brokers: &str,
    rows: u64,
    per_transaction: u64,
) -> anyhow::Result<RelayFigures> {
    let scratch = scratch(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let recvlogical_slot = scratch.create_slot(&client, "recvlogical").await?;
    let relay_slot = scratch.create_slot(&client, "relay").await?;
    eprintln!("inserting {rows} outbox rows, {per_transaction} per transaction…");
    let transactions = rows.div_ceil(per_transaction);
    for _ in 0..transactions {
        client
            .execute(
                "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                 SELECT gen_random_uuid(), 'assignment', 'agg-' || (n % 1000), 'AssignmentStarted', \
                        convert_to(repeat('x', 120), 'UTF8') FROM generate_series(1, $1) n",
                &[&(per_transaction as i32)],
            )
            .await?;
    }
    let end_lsn: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    let total_rows: i64 = client
        .query_one("SELECT count(*) FROM outbox", &[])
        .await?
        .get(0);

    // Topics for the two producers.
    let prefix = format!("bench{}.", Uuid::new_v4().simple());
    let topics = [
        format!("{prefix}raw.assignment"),
        format!("{prefix}relay.assignment"),
    ];
    testing::create_topics(brokers, &topics, 3).await?;
    let relay_config = scratch.relay_config(relay_slot, format!("{prefix}relay."), brokers);

    // Ceiling 2: the same messages produced by rdkafka alone, same producer settings.
    let payloads: Vec<(Uuid, String)> = client
        .query("SELECT event_id, aggregate_id FROM outbox ORDER BY id", &[])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let producer = ra_ledger_cdc::publish::producer(&relay_config)?;
    let payload = vec![b'x'; 120];
    let started = Instant::now();
    let mut pending = futures::stream::FuturesUnordered::new();
    for (index, (event_id, key)) in payloads.iter().enumerate() {
        let id = event_id.to_string();
        let ordinal = (index % per_transaction as usize).to_string();
        let headers = rdkafka::message::OwnedHeaders::new()
            .insert(rdkafka::message::Header {
                key: "id",
                value: Some(id.as_bytes()),
            })
            .insert(rdkafka::message::Header {
                key: "event_type",
                value: Some(&b"AssignmentStarted"[..]),
            })
            .insert(rdkafka::message::Header {
                key: "commit_lsn",
                value: Some(&b"0/16B3748"[..]),
            })
            .insert(rdkafka::message::Header {
                key: "txid",
                value: Some(&b"742"[..]),
            })
            .insert(rdkafka::message::Header {
                key: "commit_timestamp",
                value: Some(&b"2026-11-30T00:00:00.000000Z"[..]),
            })
            .insert(rdkafka::message::Header {
                key: "ordinal",
                value: Some(ordinal.as_bytes()),
            });
        let record = rdkafka::producer::FutureRecord::to(&topics[0])
            .key(key.as_bytes())
            .payload(&payload)
            .headers(headers);
        let future = producer.send_result(record).map_err(|(error, _)| error)?;
        pending.push(future);
        // Same bound as the relay's max_in_flight.
        while pending.len() >= relay_config.max_in_flight {
            use futures::StreamExt;
            pending.next().await;
        }
    }
    {
        use futures::StreamExt;
        while let Some(result) = pending.next().await {
            result?.map_err(|(error, _)| error)?;
        }
    }
    let broker_ceiling = total_rows as f64 / started.elapsed().as_secs_f64();

    // The relay, from the same backlog, until the slot confirms the end.
    let metrics = std::sync::Arc::new(ra_ledger_cdc::metrics::RelayMetrics::default());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(ra_ledger_cdc::relay::run(
        relay_config,
        metrics.clone(),
        shutdown.clone(),
    ));
    while metrics.events_published() < total_rows as u64 {
        anyhow::ensure!(!task.is_finished(), "the relay stopped early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let relay = total_rows as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await??;
    // Ceiling 1: the slot itself, read by PostgreSQL's own client. It runs last, so the
    // relay, not this ceiling, pays for any cold start of decoding.
    let parsed: tokio_postgres::Config = scratch.url.parse()?;
    let password = parsed
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let host = match parsed.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".into(),
    };
    let started = Instant::now();
    let status = tokio::process::Command::new(pg_recvlogical()?)
        .args([
            "-h",
            &host,
            "-p",
            &parsed
                .get_ports()
                .first()
                .copied()
                .unwrap_or(5432)
                .to_string(),
        ])
        .args([
            "-U",
            parsed.get_user().unwrap_or("postgres"),
            "-d",
            &scratch.name,
        ])
        .args([
            "--slot",
            &recvlogical_slot,
            "--start",
            "--no-loop",
            "-f",
            "/dev/null",
            "-E",
            &end_lsn,
        ])
        .args([
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=ra_ledger_outbox",
        ])
        .env("PGPASSWORD", password)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "pg_recvlogical failed: {status}");
    let slot_ceiling = total_rows as f64 / started.elapsed().as_secs_f64();

    drop(client);
    scratch.drop().await?;
    Ok(RelayFigures {
        rows: total_rows as u64,
        slot_ceiling,
        broker_ceiling,
        relay,
    })
}

fn pg_recvlogical() -> anyhow::Result<std::path::PathBuf> {
    let mut candidates: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")?
        .flatten()
        .map(|entry| entry.path().join("bin/pg_recvlogical"))
        .filter(|path| path.exists())
        .collect();
    candidates.sort();
    candidates
        .pop()
        .ok_or_else(|| anyhow::anyhow!("pg_recvlogical not found under /usr/lib/postgresql"))
}
