//! `ledger bench`: throughput and latency figures, printed, never asserted.
//!
//! Each benchmark works in a scratch database it creates next to the configured one (the
//! role needs CREATEDB) and drops afterwards, so the ledger's own data is never touched.

use std::time::{Duration, Instant};

use chrono::Utc;
use deadpool_postgres::Pool;
use futures::future::try_join_all;
use uuid::Uuid;

use crate::commands::{Assign, CreateContact, Ledger};
use crate::db;
use crate::domain::PostalAddress;
use crate::store::Metadata;

/// A database that exists for one benchmark.
#[derive(Debug)]
pub struct ScratchDatabase {
    admin_url: String,
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
}

impl ScratchDatabase {
    /// Creates and migrates a scratch database on the server of `url`.
    pub async fn create(url: &str) -> anyhow::Result<Self> {
        let name = format!("ledger_bench_{}", Uuid::new_v4().simple());
        let admin = db::connect(url, "ledger-bench").await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|error| {
                anyhow::anyhow!(
                    "cannot create scratch database {name}: {error}; the role needs CREATEDB"
                )
            })?;
        let scratch_url = db::with_database(url, &name);
        let mut client = db::connect(&scratch_url, "ledger-bench").await?;
        crate::migrate::run(&mut client).await?;
        Ok(Self {
            admin_url: url.to_owned(),
            name,
            url: scratch_url,
        })
    }

    /// Creates a pgoutput logical replication slot in the database and returns its name,
    /// unique to this database (slot names are cluster-wide) so a bench that died leaves
    /// nothing in the way of the next one.
    pub async fn create_slot(
        &self,
        client: &tokio_postgres::Client,
        purpose: &str,
    ) -> anyhow::Result<String> {
        let slot = format!("{}_{purpose}", self.name);
        client
            .query_one(
                "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await?;
        Ok(slot)
    }

    /// A relay on this database's `slot`, publishing under `topic_prefix` to `brokers`,
    /// without a metrics endpoint.
    pub fn relay_config(
        &self,
        slot: String,
        topic_prefix: String,
        brokers: &str,
    ) -> ra_ledger_cdc::config::RelayConfig {
        ra_ledger_cdc::config::RelayConfig {
            database_url: self.url.clone(),
            slot,
            topic_prefix,
            kafka: std::collections::BTreeMap::from([("bootstrap.servers".into(), brokers.into())]),
            metrics_listen: None,
            ..Default::default()
        }
    }

    /// Drops the database.
    pub async fn drop(self) -> anyhow::Result<()> {
        let admin = db::connect(&self.admin_url, "ledger-bench").await?;
        // Slots pin WAL for the whole cluster; none may outlive the database. A relay that
        // is still stopping holds its slot for a moment.
        for _ in 0..100 {
            let left: i64 = admin
                .query_one(
                    "SELECT count(*) FILTER (WHERE active) FROM ( \
                       SELECT active, CASE WHEN NOT active \
                              THEN pg_drop_replication_slot(slot_name) END \
                       FROM pg_replication_slots WHERE database = $1) s",
                    &[&self.name],
                )
                .await?
                .get(0);
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // FORCE cannot end an autovacuum worker for a role without pg_signal_backend; those
        // finish or give way within moments.
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let mut attempts = 0;
        loop {
            match admin.batch_execute(&drop).await {
                Ok(()) => return Ok(()),
                Err(error) if attempts < 50 => {
                    attempts += 1;
                    tracing::debug!(%error, "scratch database busy; retrying the drop");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => {
                    return Err(anyhow::anyhow!(
                        "cannot drop scratch database {}: {error}; drop it by hand",
                        self.name
                    ));
                }
            }
        }
    }
}

fn texas_address() -> PostalAddress {
    PostalAddress {
        line1: "211 E 7th St".into(),
        line2: "Suite 620".into(),
        city: "Austin".into(),
        region: "TX".into(),
        postal_code: "78701".into(),
    }
}

/// Figures of one write benchmark round.
#[derive(Debug, Clone, Copy)]
pub struct WriteRound {
    /// Assignments per second through `Ledger::assign`.
    pub ledger_per_second: f64,
    /// The same rows as raw INSERTs, per second.
    pub raw_per_second: f64,
}

/// Assignments created per second through the ledger's write path, against raw INSERTs of
/// the same rows in the same transaction shape (one transaction per assignment: its event,
/// its outbox row, its projection row), at the same concurrency, alternating rounds.
pub async fn write(
    url: &str,
    rows: usize,
    concurrency: usize,
    rounds: usize,
) -> anyhow::Result<Vec<WriteRound>> {
    let scratch = ScratchDatabase::create(url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", concurrency)?;
    let ledger = Ledger::new(pool.clone());
    let metadata = Metadata {
        actor: "bench".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
    };
    let contact = ledger
        .create_contact(
            CreateContact {
                jurisdiction: "TX".into(),
                name: "Bench Agents".into(),
                address: texas_address(),
                effective_at: None,
            },
            &metadata,
        )
        .await?;
    let mut results = Vec::new();
    for _ in 0..rounds {
        let (ledger_, metadata_) = (ledger.clone(), metadata.clone());
        let ledger_rate = timed(rows, concurrency, move |_| {
            let ledger = ledger_.clone();
            let metadata = metadata_.clone();
            async move {
                let command = Assign {
                    business_id: Uuid::now_v7(),
                    jurisdiction: "TX".into(),
                    effective_at: None,
                };
                ledger.assign(command, &metadata).await?;
                anyhow::Ok(())
            }
        })
        .await?;
        let (raw_pool, contact_id) = (pool.clone(), contact.contact_id);
        let raw_rate = timed(rows, concurrency, move |_| {
            raw_assign(raw_pool.clone(), contact_id)
        })
        .await?;
        results.push(WriteRound {
            ledger_per_second: ledger_rate,
            raw_per_second: raw_rate,
        });
    }
    pool.close();
    scratch.drop().await?;
    Ok(results)
}

/// Runs `rows` operations on `concurrency` workers; returns operations per second.
async fn timed<F, Fut>(rows: usize, concurrency: usize, operation: F) -> anyhow::Result<f64>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let workers = (0..concurrency).map(|worker| {
        let operation = operation.clone();
        tokio::spawn(async move {
            let mut index = worker;
            while index < rows {
                operation(index).await?;
                index += concurrency;
            }
            anyhow::Ok(())
        })
    });
    for result in try_join_all(workers).await? {
        result?;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

/// The rows one assignment writes, inserted directly: the baseline the ledger is held to.
async fn raw_assign(pool: Pool, contact_id: Uuid) -> anyhow::Result<()> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let business = Uuid::now_v7();
    let assignment = Uuid::now_v7();
    let event_id = Uuid::now_v7();
    let stream = format!("assignment-{business}-TX");
    let payload = vec![0u8; 160];
    let hash = vec![0u8; 32];
    let now = Utc::now();
    let insert_event = tx
        .prepare_cached(
            "INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, payload, \
             recorded_at, effective_at, actor, correlation_id, causation_id, prev_hash, hash) \
             VALUES ($1, $2, 1, 'AssignmentStarted', 1, $3, $4, $4, 'bench', $1, NULL, NULL, $5)",
        )
        .await?;
    tx.execute(&insert_event, &[&event_id, &stream, &payload, &now, &hash])
        .await?;
    let insert_outbox = tx
        .prepare_cached(
            "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ($1, 'assignment', $2, 'AssignmentStarted', $3)",
        )
        .await?;
    tx.execute(&insert_outbox, &[&event_id, &stream, &payload])
        .await?;
    let insert_assignment = tx
        .prepare_cached(
            "INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at, recorded_at) \
             VALUES ($1, $2, 'TX', $3, $4, $4)",
        )
        .await?;
    tx.execute(
        &insert_assignment,
        &[&assignment, &business, &contact_id, &now],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The distribution of a set of measured durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latencies {
    /// How many were measured.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

impl Latencies {
    /// Summarizes `samples`; `None` when there are none.
    pub fn from_samples(mut samples: Vec<Duration>) -> Option<Self> {
        samples.sort();
        let last = *samples.last()?;
        let percentile =
            |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
        Some(Self {
            count: samples.len(),
            p50: percentile(0.50),
            p99: percentile(0.99),
            max: last,
        })
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        )
    }
}

/// Latency figures of the as-of query.
#[derive(Debug, Clone, Copy)]
pub struct AsOfFigures {
    /// Assignment history rows in the table.
    pub history_rows: i64,
    /// Query latencies.
    pub latencies: Latencies,
}

/// As-of query latency over a projection of `history_rows` assignment rows: businesses with
/// five assignments each (four REPLACEs over four years) spread over every jurisdiction.
pub async fn as_of(url: &str, history_rows: usize, queries: usize) -> anyhow::Result<AsOfFigures> {
    let scratch = ScratchDatabase::create(url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 1)?;
    let client = pool.get().await?;
    let businesses = (history_rows / 5).max(1) as i64;
    // One contact per jurisdiction, then the history in bulk, straight into the projection
    // (the query reads only the projection).
    client
        .batch_execute(&format!(
            "INSERT INTO contacts (contact_id, jurisdiction, name, address_line1, city, region, postal_code, \
                                   status, created_at, recorded_at, stream_version) \
             SELECT gen_random_uuid(), code, 'Agent ' || code, '1 Main St', 'Capital', code, '00001', 'primary', \
                    '2020-01-01', '2020-01-01', 1 FROM jurisdictions;
             CREATE TEMP TABLE bench_business AS
               SELECT gen_random_uuid() AS business_id,
                      (SELECT array_agg(code ORDER BY code) FROM jurisdictions)[1 + (n % 56)] AS jurisdiction
               FROM generate_series(1, {businesses}) n;
             INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at, ended_at,
                                      end_reason, recorded_at, ended_recorded_at)
             SELECT gen_random_uuid(), b.business_id, b.jurisdiction, c.contact_id,
                    '2021-01-01'::timestamptz + (k * interval '365 days'),
                    CASE WHEN k < 4 THEN '2021-01-01'::timestamptz + ((k + 1) * interval '365 days') END,
                    CASE WHEN k < 4 THEN 'replaced' END,
                    '2021-01-01'::timestamptz + (k * interval '365 days'),
                    CASE WHEN k < 4 THEN '2021-01-01'::timestamptz + ((k + 1) * interval '365 days') END
             FROM bench_business b JOIN contacts c ON c.jurisdiction = b.jurisdiction
             CROSS JOIN generate_series(0, 4) k;
             ANALYZE assignments; ANALYZE contacts;"
        ))
        .await?;
    let history_rows: i64 = client
        .query_one("SELECT count(*) FROM assignments", &[])
        .await?
        .get(0);
    let sample: Vec<(Uuid, String)> = client
        .query(
            "SELECT business_id, jurisdiction FROM bench_business ORDER BY random() LIMIT $1",
            &[&(queries as i64)],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut latencies = Vec::with_capacity(queries);
    let base = chrono::DateTime::parse_from_rfc3339("2021-01-01T00:00:00Z")?.with_timezone(&Utc);
    for (index, (business, jurisdiction)) in sample.iter().cycle().take(queries).enumerate() {
        let jurisdiction = crate::domain::Jurisdiction::parse("jurisdiction", jurisdiction)?;
        let at = base + chrono::Duration::days((index as i64 * 7919) % (5 * 365));
        let started = Instant::now();
        let answer =
            crate::queries::registered_agent_at(&client, *business, jurisdiction, at, Utc::now())
                .await?;
        latencies.push(started.elapsed());
        anyhow::ensure!(
            answer.is_some(),
            "no RA for {business} at {at}: the seed is wrong"
        );
    }
    let latencies =
        Latencies::from_samples(latencies).ok_or_else(|| anyhow::anyhow!("no query was timed"))?;
    let figures = AsOfFigures {
        history_rows,
        latencies,
    };
    drop(client);
    pool.close();
    scratch.drop().await?;
    Ok(figures)
}

/// Figures of the relay benchmark.
#[derive(Debug, Clone)]
pub struct RelayFigures {
    /// Outbox rows in the backlog.
    pub rows: u64,
    /// `pg_recvlogical` draining the backlog to /dev/null: the slot's ceiling, rows/s.
    pub slot_ceiling: f64,
    /// rdkafka alone producing the same messages: the broker's ceiling, rows/s.
    pub broker_ceiling: f64,
    /// The relay draining the backlog to the broker, rows/s.
    pub relay: f64,
}

/// Drains a backlog of `rows` outbox rows (`per_transaction` per transaction) through
/// `pg_recvlogical`, through rdkafka alone and through the relay, in one run.
pub async fn relay(
    url: &str,
    brokers: &str,
    rows: u64,
    per_transaction: u64,
) -> anyhow::Result<RelayFigures> {
    let scratch = ScratchDatabase::create(url).await?;
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
    create_topics(brokers, &topics).await?;
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

/// Figures of the steady-load benchmark.
#[derive(Debug, Clone)]
pub struct LatencyFigures {
    /// Events committed.
    pub sent: u64,
    /// Commit → consumer receipt, one sample per event received.
    pub latencies: Latencies,
}

/// Steady load of `rate` events/s for `seconds` s (10 ms ticks of rate/100 rows per
/// transaction) through the relay to a consumer; measures commit → consumer receipt using
/// the `commit_timestamp` header (same machine clock).
pub async fn latency(
    url: &str,
    brokers: &str,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<LatencyFigures> {
    use futures::StreamExt;
    use ra_ledger_cdc::config::RelayConfig;
    use rdkafka::Message as _;
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::message::Headers as _;

    let scratch = ScratchDatabase::create(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "latency").await?;
    let prefix = format!("bench{}.", Uuid::new_v4().simple());
    let topic = format!("{prefix}assignment");
    create_topics(brokers, std::slice::from_ref(&topic)).await?;
    let consumer: StreamConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("bench-{}", Uuid::new_v4().simple()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()?;
    // Assigned partitions rather than a group subscription: no rebalance pauses in the figures.
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..3 {
        assignment.add_partition_offset(&topic, partition, rdkafka::Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let relay_config = RelayConfig {
        status_interval_ms: 100,
        ..scratch.relay_config(slot, prefix, brokers)
    };
    let metrics = std::sync::Arc::new(ra_ledger_cdc::metrics::RelayMetrics::default());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let relay = tokio::spawn(ra_ledger_cdc::relay::run(
        relay_config,
        metrics.clone(),
        shutdown.clone(),
    ));

    let per_tick = (rate / 100).max(1) as i32;
    let ticks = seconds * 100;
    let expected = per_tick as u64 * ticks;
    // Warm up: one row through relay, broker and consumer, so connecting, producer id
    // negotiation and the consumer group's first assignment are not in the figures.
    let insert = "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                  SELECT gen_random_uuid(), 'assignment', 'agg-' || (n % 1000), $2, \
                         convert_to(repeat('x', 120), 'UTF8') FROM generate_series(1, $1) n";
    client.execute(insert, &[&1i32, &"WarmUp"]).await?;
    {
        let mut stream = consumer.stream();
        tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .map_err(|_| anyhow::anyhow!("warm-up row did not arrive within 60 s"))?;
    }
    let receiver = tokio::spawn(async move {
        let mut latencies = Vec::with_capacity(expected as usize);
        let mut stream = consumer.stream();
        while (latencies.len() as u64) < expected {
            let Ok(Some(Ok(message))) =
                tokio::time::timeout(Duration::from_secs(60), stream.next()).await
            else {
                break;
            };
            let received = chrono::Utc::now();
            let committed = message
                .headers()
                .and_then(|headers| headers.iter().find(|h| h.key == "commit_timestamp"))
                .and_then(|h| std::str::from_utf8(h.value?).ok().map(str::to_owned))
                .and_then(|text| chrono::DateTime::parse_from_rfc3339(&text).ok());
            if let Some(committed) = committed {
                latencies.push(
                    (received - committed.with_timezone(&chrono::Utc))
                        .to_std()
                        .unwrap_or_default(),
                );
            }
        }
        latencies
    });
    eprintln!("steady load: {rate} events/s for {seconds} s ({per_tick} rows every 10 ms)…");
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for _ in 0..ticks {
        tick.tick().await;
        client
            .execute(insert, &[&per_tick, &"AssignmentStarted"])
            .await?;
    }
    let latencies = receiver.await?;
    // The relay's own share (commit → Kafka acknowledgement), to tell it from the consumer's.
    for line in metrics
        .render()
        .lines()
        .filter(|line| line.starts_with("ra_relay_commit_to_ack_seconds"))
    {
        eprintln!("{line}");
    }
    shutdown.cancel();
    relay.await??;
    drop(client);
    scratch.drop().await?;
    let latencies = Latencies::from_samples(latencies)
        .ok_or_else(|| anyhow::anyhow!("the consumer received nothing"))?;
    Ok(LatencyFigures {
        sent: expected,
        latencies,
    })
}

/// Creates `topics` with 3 partitions each on `brokers`.
pub async fn create_topics(brokers: &str, topics: &[String]) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let mut admin_config = rdkafka::ClientConfig::new();
    admin_config.set("bootstrap.servers", brokers);
    let admin: AdminClient<DefaultClientContext> = admin_config.create()?;
    let new_topics: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, 3, TopicReplication::Fixed(1)))
        .collect();
    for result in admin
        .create_topics(&new_topics, &AdminOptions::new())
        .await?
    {
        result.map_err(|(topic, code)| anyhow::anyhow!("creating {topic}: {code}"))?;
    }
    Ok(())
}

/// Figures of `ledger bench reassign`.
#[derive(Debug, Clone)]
pub struct ReassignFigures {
    /// Active assignments moved by each approach.
    pub rows: usize,
    /// Rows per page of the chained run.
    pub page_size: u32,
    /// Chained run: supersede commit to the last page's commit.
    pub chained_total: Duration,
    /// Longest page transaction.
    pub chained_longest_page: Duration,
    /// Pages processed.
    pub pages: u32,
    /// Most page transactions of the run open at the same time.
    pub max_pages_in_flight: i64,
    /// Time in page transactions and between them.
    pub timing: crate::reassign::PageTiming,
    /// All REPLACEs in one transaction: its duration.
    pub single_total: Duration,
}

/// Supersedes a contact with `rows` active assignments and lets `workers` workers run the
/// chain through the relay and the broker; compares with all REPLACEs in one transaction.
pub async fn reassign(
    url: &str,
    brokers: &str,
    rows: usize,
    page_size: u32,
    workers: usize,
) -> anyhow::Result<ReassignFigures> {
    let scratch = ScratchDatabase::create(url).await?;
    let figures = reassign_in(&scratch, brokers, rows, page_size, workers).await;
    scratch.drop().await?;
    figures
}

async fn reassign_in(
    scratch: &ScratchDatabase,
    brokers: &str,
    rows: usize,
    page_size: u32,
    workers: usize,
) -> anyhow::Result<ReassignFigures> {
    use crate::commands::SupersedeContact;
    use crate::domain::Jurisdiction;
    use crate::worker::{WorkerConfig, WorkerMetrics};
    use ra_ledger_cdc::config::RelayConfig;

    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "reassign").await?;
    let prefix = format!("bench{}.", Uuid::new_v4().simple());
    let topics: Vec<String> = ["contact", "assignment", "reassignment"]
        .iter()
        .map(|aggregate| format!("{prefix}{aggregate}"))
        .collect();
    create_topics(brokers, &topics).await?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Whatever way this ends, the relay and the workers stop.
    let _stop = shutdown.clone().drop_guard();
    let relay = tokio::spawn(ra_ledger_cdc::relay::run(
        RelayConfig {
            status_interval_ms: 100,
            ..scratch.relay_config(slot.clone(), prefix.clone(), brokers)
        },
        std::sync::Arc::new(ra_ledger_cdc::metrics::RelayMetrics::default()),
        shutdown.clone(),
    ));
    let pool = db::pool(&scratch.url, "ledger-bench", 4)?;
    let ledger = Ledger::new(pool.clone());
    let metadata = Metadata {
        actor: "bench".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
    };
    let supersede = |contact_id: Uuid| {
        let ledger = ledger.clone();
        let metadata = metadata.clone();
        async move {
            ledger
                .supersede_contact(
                    contact_id,
                    SupersedeContact {
                        name: "New office".into(),
                        address: texas_address(),
                        effective_at: None,
                        expected_version: None,
                        page_size: Some(page_size),
                    },
                    &metadata,
                )
                .await
        }
    };
    let contact = |code: &'static str| {
        let ledger = ledger.clone();
        let metadata = metadata.clone();
        async move {
            ledger
                .create_contact(
                    CreateContact {
                        jurisdiction: code.into(),
                        name: format!("{code} office"),
                        address: texas_address(),
                        effective_at: None,
                    },
                    &metadata,
                )
                .await
        }
    };
    let seed = |code: &'static str, contact_id: Uuid| {
        let pool = pool.clone();
        async move {
            let started = Instant::now();
            crate::seed::assignments(
                &pool,
                Jurisdiction::parse("jurisdiction", code)?,
                contact_id,
                rows,
                5_000,
                |_| {},
            )
            .await?;
            eprintln!(
                "seeded {rows} active assignments in {code} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            anyhow::Ok(())
        }
    };

    // The workers join their group first, so no rebalance lands inside the figures.
    let worker_tasks: Vec<_> = (0..workers.max(1))
        .map(|_| {
            tokio::spawn(crate::worker::run(
                WorkerConfig {
                    database_url: scratch.url.clone(),
                    brokers: brokers.into(),
                    topic: format!("{prefix}reassignment"),
                    group_id: format!("{prefix}workers"),
                    ..WorkerConfig::default()
                },
                std::sync::Arc::new(WorkerMetrics::default()),
                shutdown.clone(),
            ))
        })
        .collect();
    // The baseline's contacts: superseded before it has assignments, so its run ends at
    // once (and goes through the workers: the group is up). The rows are then seeded onto
    // the old contact directly, for the one big transaction to move.
    let single_old = contact("OK").await?.contact_id;
    let single = supersede(single_old).await?;
    wait_run(&pool, single.run.run_id).await?;
    seed("OK", single_old).await?;
    let chained_old = contact("TX").await?.contact_id;
    seed("TX", chained_old).await?;
    wait_for_relay(&client, &slot).await?;
    // Both approaches start from vacuumed, analyzed tables, so autovacuum does not land in
    // one of them by chance.
    let settle =
        "VACUUM ANALYZE assignments, events, outbox, reassignment_runs, reassignment_pages";
    client.batch_execute(settle).await?;

    eprintln!("single transaction: {rows} REPLACEs…");
    let started = Instant::now();
    let moved =
        crate::reassign::replace_all_at_once(&pool, single_old, single.new.contact_id, &metadata)
            .await?;
    let single_total = started.elapsed();
    anyhow::ensure!(
        moved == rows,
        "the single transaction moved {moved} of {rows}"
    );
    wait_for_relay(&client, &slot).await?;
    client.batch_execute(settle).await?;

    eprintln!("chained pages of {page_size} through relay, broker and {workers} worker(s)…");
    let chained = supersede(chained_old).await?;
    let status = wait_run(&pool, chained.run.run_id).await?;
    anyhow::ensure!(
        status.replaced == rows as i64,
        "the chained run replaced {} of {rows}",
        status.replaced
    );
    let in_flight = crate::reassign::max_pages_in_flight(&client, chained.run.run_id).await?;
    let timing = crate::reassign::page_timing(&client, chained.run.run_id).await?;
    shutdown.cancel();
    for task in worker_tasks {
        task.await??;
    }
    relay.await??;
    Ok(ReassignFigures {
        rows,
        page_size,
        chained_total: Duration::from_secs_f64(status.elapsed_seconds),
        chained_longest_page: Duration::from_secs_f64(status.longest_page_ms / 1000.0),
        pages: status.pages,
        max_pages_in_flight: in_flight,
        timing,
        single_total,
    })
}

/// Waits until the relay confirmed everything written so far.
async fn wait_for_relay(client: &tokio_postgres::Client, slot: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let target: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    loop {
        let caught_up: bool = client
            .query_one(
                "SELECT confirmed_flush_lsn >= $2::text::pg_lsn FROM pg_replication_slots \
                 WHERE slot_name = $1",
                &[&slot, &target],
            )
            .await?
            .get(0);
        if caught_up {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the relay did not catch up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls a run until it completes.
async fn wait_run(pool: &Pool, run_id: Uuid) -> anyhow::Result<crate::reassign::RunStatus> {
    let client = pool.get().await?;
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let status = crate::reassign::status(&client, run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("run {run_id} vanished"))?;
        if status.status == crate::reassign::RunState::Completed {
            return Ok(status);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "run {run_id} did not complete: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
