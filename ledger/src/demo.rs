//! `ledger demo`: the whole supersede flow on the local stack, with visible progress. It
//! seeds a jurisdiction, supersedes its contact over the HTTP API like the customer-service
//! tool does, watches the run, asks audit questions before and after, and counts the run's
//! events that reached Kafka.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use deadpool_postgres::Pool;
use rdkafka::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

use crate::db;
use crate::domain::Jurisdiction;
use crate::queries;
use crate::reassign::{self, RunStatus};

/// Settings of the demo.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoOptions {
    /// Jurisdiction to use.
    #[arg(long, default_value = "TX")]
    pub jurisdiction: Jurisdiction,
    /// Active assignments to seed before the supersede.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rows: u32,
    /// Rows per page of the run.
    #[arg(long, default_value_t = reassign::DEFAULT_PAGE_SIZE)]
    pub page_size: u32,
    /// The ledger's HTTP API.
    #[arg(long, env = "LEDGER_API_URL", default_value = "http://127.0.0.1:18080")]
    pub api: String,
    /// A writer token of that API.
    #[arg(
        long,
        env = "LEDGER_WRITER_TOKEN",
        default_value = "dev-writer-token",
        hide_env_values = true
    )]
    pub token: String,
    /// Kafka bootstrap servers.
    #[arg(long, env = "LEDGER_KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
    pub brokers: String,
    /// Topic prefix the relay publishes under.
    #[arg(long, env = "LEDGER_TOPIC_PREFIX", default_value = "outbox.event.")]
    pub topic_prefix: String,
}

/// Polls a run and draws its progress until it completes; returns the final status.
pub async fn watch(pool: &Pool, run_id: Uuid) -> anyhow::Result<RunStatus> {
    let client = pool.get().await?;
    let terminal = std::io::stdout().is_terminal();
    let mut last_line = String::new();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    loop {
        let status = reassign::status(&client, run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no reassignment run {run_id}"))?;
        let line = reassign::progress_line(&status);
        let done = status.status == crate::reassign::RunState::Completed;
        if terminal {
            print!("\r\x1b[2K{line}");
            std::io::stdout().flush()?;
        } else if line != last_line && (done || last_print.elapsed() >= Duration::from_secs(1)) {
            println!("{line}");
            last_print = Instant::now();
        }
        last_line = line;
        if done {
            if terminal {
                println!();
            }
            return Ok(status);
        }
        if let Some(error) = &status.last_error {
            eprintln!(
                "\npage {} is being retried (attempt {}): {error}",
                status.pages + 1,
                status.page_attempts
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Runs the demo; seeds through `database_url`.
pub async fn run(database_url: &str, config: DemoOptions) -> anyhow::Result<()> {
    reassign::page_size(Some(config.page_size))?;
    let rows = config.rows as usize;
    let api = Api::new(&config.api, &config.token)?;
    api.get("/readyz").await.with_context(|| {
        format!(
            "the ledger API at {} is not ready; start the stack with `deploy/stack up`",
            config.api
        )
    })?;
    let pool = db::pool(database_url, "ledger-demo", 2)?;
    let code = config.jurisdiction.code();
    println!(
        "== RA Ledger demo: supersede a {code} contact with {} active assignments ==",
        rows
    );

    // 1. A primary contact in the jurisdiction, and N businesses it serves.
    let primary = {
        let client = pool.get().await?;
        queries::primary_contact(&client, config.jurisdiction).await?
    };
    let old_id = match primary {
        Some(contact) => contact.contact_id,
        None => {
            let created = api
                .post(
                    "/v1/contacts",
                    json!({"jurisdiction": code, "name": format!("{code} Registered Agent Office"),
                           "address": demo_address(code, 1)}),
                )
                .await?;
            uuid_field(&created, "contact_id")?
        }
    };
    println!("1. {code} primary contact: {old_id}");
    let started = Instant::now();
    let terminal = std::io::stdout().is_terminal();
    let businesses =
        crate::seed::assignments(&pool, config.jurisdiction, old_id, rows, 1_000, |done| {
            if terminal {
                print!("\r   seeding assignments: {done}/{}", rows);
                let _ = std::io::stdout().flush();
            }
        })
        .await?;
    println!(
        "{}   seeded {} active assignments on it in {:.1} s",
        if terminal { "\r\x1b[2K" } else { "" },
        businesses.len(),
        started.elapsed().as_secs_f64()
    );
    let sample = businesses[businesses.len() / 2];
    let before: DateTime<Utc> = Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let agent_path = format!("/v1/businesses/{sample}/jurisdictions/{code}/registered-agent");
    print_agent(
        "   who is the RA of business",
        sample,
        &api.get(&agent_path).await?,
    );

    // 2. Listen on Kafka from now on, then supersede like the CS tool does.
    let kafka = KafkaCount::start(&config.brokers, &config.topic_prefix)?;
    let superseded = api
        .post(
            &format!("/v1/contacts/{old_id}/supersede"),
            json!({"name": format!("{code} Registered Agent Office (new address)"),
                   "address": demo_address(code, 2), "page_size": config.page_size}),
        )
        .await?;
    let run_id = uuid_field(&superseded, "run_id")?;
    let new_id: Uuid = superseded["new"]["contact_id"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    println!(
        "2. POST /v1/contacts/{old_id}/supersede -> 202 Accepted\n   new primary contact {new_id}\n   run {run_id}, status at {}",
        superseded["status_url"].as_str().unwrap_or_default()
    );

    // 3. Watch the chained pages.
    println!("3. watching the run (pages of {}):", config.page_size);
    let status = watch(&pool, run_id).await?;
    println!(
        "   completed: {} replaced, {} skipped, {} failed in {} pages, {:.1} s; longest page {:.0} ms",
        status.replaced,
        status.skipped,
        status.failed,
        status.pages,
        status.elapsed_seconds,
        status.longest_page_ms
    );

    // 4. Audit answers, before and after.
    let at = before.to_rfc3339_opts(SecondsFormat::Micros, true);
    println!("4. audit answers:");
    print_agent(
        &format!("   RA at {at} (before the supersede) of business"),
        sample,
        &api.get(&format!("{agent_path}?at={at}")).await?,
    );
    print_agent(
        "   RA now of business",
        sample,
        &api.get(&agent_path).await?,
    );
    let lineage = api.get(&format!("/v1/contacts/{new_id}/lineage")).await?;
    if let Some(contacts) = lineage.as_array() {
        println!("   lineage of the new contact:");
        for contact in contacts {
            println!(
                "     {} {} ({}), {}",
                contact["contact_id"].as_str().unwrap_or_default(),
                contact["status"].as_str().unwrap_or_default(),
                contact["created_at"].as_str().unwrap_or_default(),
                address_text(&contact["address"])
            );
        }
    }

    // 5. What reached Kafka.
    let correlation = status.correlation_id.to_string();
    let expected = 2 * status.replaced as usize;
    println!("5. waiting for the run's events on Kafka (relay -> broker)…");
    let counts = kafka
        .count(&correlation, expected, Duration::from_secs(120))
        .await?;
    println!(
        "   Kafka carried {} assignment events ({} expected: one end and one start per row) and {} reassignment events (page requests and completion) for this run",
        counts.assignment, expected, counts.reassignment
    );
    if counts.assignment < expected {
        println!("   (not all arrived yet: is the relay running? `deploy/stack status`)");
    }
    Ok(())
}

fn demo_address(region: &str, variant: u32) -> Value {
    json!({"line1": format!("{} Congress Ave", 100 * variant), "line2": format!("Suite {}", 200 + variant),
           "city": "Capital City", "region": region, "postal_code": "78701"})
}

fn address_text(address: &Value) -> String {
    ["line1", "line2", "city", "region", "postal_code"]
        .iter()
        .filter_map(|field| address[field].as_str())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_agent(label: &str, business: Uuid, answer: &Value) {
    println!(
        "{label} {business}: contact {} ({}), {}",
        answer["contact"]["contact_id"].as_str().unwrap_or("-"),
        answer["contact_status"].as_str().unwrap_or("-"),
        address_text(&answer["contact"]["address"])
    );
}

fn uuid_field(body: &Value, field: &str) -> anyhow::Result<Uuid> {
    body[field]
        .as_str()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("the API answered without {field}: {body}"))
}

/// A minimal HTTP/1.1 JSON client for the demo (one connection per request).
struct Api {
    host: String,
    token: String,
}

impl Api {
    fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        let host = base
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("--api {base:?}: only http:// URLs are supported"))?
            .trim_end_matches('/')
            .to_owned();
        Ok(Self {
            host,
            token: token.to_owned(),
        })
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.request("GET", path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.request("POST", path, Some(body)).await
    }

    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut stream = tokio::net::TcpStream::connect(&self.host)
            .await
            .with_context(|| format!("connecting to {}", self.host))?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.host,
            self.token,
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        let text = String::from_utf8_lossy(&response);
        let (head, payload) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| anyhow::anyhow!("malformed HTTP response from {}", self.host))?;
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let payload = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(payload)
        } else {
            payload.to_owned()
        };
        let value: Value = serde_json::from_str(&payload).unwrap_or(Value::String(payload));
        anyhow::ensure!(
            (200..300).contains(&status),
            "{method} {path} -> {status}: {value}"
        );
        Ok(value)
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}

/// Counts events of one correlation id on the assignment and reassignment topics, read from
/// the end offsets at the moment it started.
struct KafkaCount {
    consumer: BaseConsumer,
    assignment_topic: String,
}

/// What [`KafkaCount`] saw.
struct Counts {
    assignment: usize,
    reassignment: usize,
}

impl KafkaCount {
    fn start(brokers: &str, prefix: &str) -> anyhow::Result<Self> {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set(
                "group.id",
                format!("ledger-demo-{}", Uuid::new_v4().simple()),
            )
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "10")
            .create()?;
        let assignment_topic = format!("{prefix}assignment");
        let mut partitions = rdkafka::TopicPartitionList::new();
        for topic in [assignment_topic.clone(), format!("{prefix}reassignment")] {
            let metadata = consumer
                .fetch_metadata(Some(&topic), Duration::from_secs(10))
                .with_context(|| format!("reading metadata of {topic} from {brokers}"))?;
            for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
                let (_, high) =
                    consumer.fetch_watermarks(&topic, partition.id(), Duration::from_secs(10))?;
                partitions.add_partition_offset(
                    &topic,
                    partition.id(),
                    rdkafka::Offset::Offset(high),
                )?;
            }
        }
        anyhow::ensure!(
            partitions.count() > 0,
            "no partitions found; is the broker up with the outbox topics?"
        );
        consumer.assign(&partitions)?;
        Ok(Self {
            consumer,
            assignment_topic,
        })
    }

    async fn count(
        self,
        correlation: &str,
        expected: usize,
        timeout: Duration,
    ) -> anyhow::Result<Counts> {
        let correlation = correlation.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut seen = std::collections::HashSet::new();
            let mut counts = Counts {
                assignment: 0,
                reassignment: 0,
            };
            let deadline = Instant::now() + timeout;
            let mut quiet_since = Instant::now();
            while Instant::now() < deadline {
                // Done once every expected event arrived and the topic went quiet.
                if counts.assignment >= expected && quiet_since.elapsed() > Duration::from_secs(2) {
                    break;
                }
                let Some(message) = self.consumer.poll(Duration::from_millis(200)) else {
                    continue;
                };
                let Ok(message) = message else { continue };
                let Ok(envelope) =
                    ra_ledger_cdc::consumer::decode(message.payload().unwrap_or_default())
                else {
                    continue;
                };
                if envelope.correlation_id != correlation || !seen.insert(envelope.event_id) {
                    continue;
                }
                quiet_since = Instant::now();
                if message.topic() == self.assignment_topic {
                    counts.assignment += 1;
                } else {
                    counts.reassignment += 1;
                }
            }
            counts
        })
        .await
        .map_err(Into::into)
    }
}
