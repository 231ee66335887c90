//! `ledger-bench demo`: the whole supersede flow on the local stack, with visible progress. It
//! seeds a jurisdiction, supersedes its contact over the HTTP API like the customer-service
//! tool does, watches the run, asks audit questions before and after, and counts the run's
//! events that reached Kafka. On topics framed for a schema registry (the relay's
//! `confluent_protobuf`, `RA_VALUE_FORMAT=confluent_protobuf deploy/stack up`) it reads the
//! events back as a registry's reader does: each record's schema id looked up in the
//! registry, and the record decoded only if that schema is this build's events.proto.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use deadpool_postgres::Pool;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::{db, queries, reassign};
use ra_ledger_cdc::infra::settings::{env, local};
use rdkafka::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::{Value, json};
use uuid::Uuid;

use ra_ledger::command_line::progress::watch;

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
    #[arg(long, env = env::API_URL, default_value = local::API_URL)]
    pub api: String,
    /// A writer token of that API.
    #[arg(
        long,
        env = env::WRITER_TOKEN,
        default_value = "dev-writer-token",
        hide_env_values = true
    )]
    pub token: String,
    /// Kafka bootstrap servers.
    #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
    pub brokers: String,
    /// Topic prefix the relay publishes under.
    #[arg(long, env = env::TOPIC_PREFIX, default_value = local::TOPIC_PREFIX)]
    pub topic_prefix: String,
    /// The schema registry of framed topics (its Confluent-compatible API).
    #[arg(long, env = env::SCHEMA_REGISTRY_URL, default_value = local::SCHEMA_REGISTRY_URL)]
    pub schema_registry_url: String,
}

/// Runs the demo; seeds through `database_url`.
pub async fn run(database_url: &str, config: DemoOptions) -> anyhow::Result<()> {
    reassign::page_size(Some(config.page_size))?;
    let api = Api::new(&config.api, &config.token)?;
    api.get("/readyz").await.with_context(|| {
        format!(
            "the ledger API at {} is not ready; start the stack with `deploy/stack up`",
            config.api
        )
    })?;
    let pool = db::pool(database_url, "ledger-demo", 2)?;
    let code = config.jurisdiction.code();
    outln!(
        "== RA Ledger demo: supersede a {code} contact with {} active assignments ==",
        config.rows
    );
    let (old_id, sample) = seed(&api, &pool, &config).await?;
    let before: DateTime<Utc> = Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let agent_path = format!("/v1/businesses/{sample}/jurisdictions/{code}/registered-agent");
    print_agent(
        "   who is the RA of business",
        sample,
        &api.get(&agent_path).await?,
    );
    // Listen on Kafka from now on, then supersede like the CS tool does.
    let kafka = KafkaCount::start(&config.brokers, &config.topic_prefix)?;
    let (run_id, new_id) = supersede(&api, &config, old_id).await?;
    outln!("3. watching the run (pages of {}):", config.page_size);
    let status = watch(&pool, run_id).await?;
    outln!(
        "   completed: {} replaced, {} skipped, {} failed in {} pages, {:.1} s; longest page {:.0} ms",
        status.replaced,
        status.skipped,
        status.failed,
        status.pages,
        status.elapsed_seconds,
        status.longest_page_ms
    );
    audit(&api, &agent_path, sample, before, new_id).await?;
    let correlation = status.correlation_id.to_string();
    let expected = 2 * status.replaced as usize;
    outln!("5. waiting for the run's events on Kafka (relay -> broker)…");
    let counts = kafka
        .count(&correlation, expected, Duration::from_secs(120))
        .await?;
    outln!(
        "   Kafka carried {} assignment events ({} expected: one end and one start per row) and {} reassignment events (page requests and completion) for this run",
        counts.assignment,
        expected,
        counts.reassignment
    );
    if counts.assignment < expected {
        outln!("   (not all arrived yet: is the relay running? `deploy/stack status`)");
    }
    read_back_through_the_registry(&config.schema_registry_url, &counts).await
}

/// Step 6, on framed topics: the schema of every id the run's records carried, as the
/// registry answers it, and what was decoded with it.
async fn read_back_through_the_registry(url: &str, counts: &Counts) -> anyhow::Result<()> {
    if counts.framed.is_empty() {
        outln!(
            "   (the values are bare protobuf; `RA_VALUE_FORMAT=confluent_protobuf deploy/stack up` frames them for the schema registry)"
        );
        return Ok(());
    }
    let registry = ra_ledger_cdc::registry::SchemaRegistry::new(url)?;
    outln!("6. the values are framed for the schema registry at {url}:");
    for ((topic, schema_id), records) in &counts.framed {
        let schema = registry.schema(*schema_id).await.with_context(|| {
            format!("{topic}'s records name schema {schema_id}: the registry must have it")
        })?;
        let verdict = if schema == ra_ledger_proto::EVENTS_PROTO {
            "events.proto, the same as this build's"
        } else {
            "an events.proto other than this build's"
        };
        outln!(
            "   {topic}: {records} records with schema id {schema_id}, message ra.ledger.v1.Envelope; the registry answers {verdict} ({} bytes)",
            schema.len()
        );
    }
    let compatibility = registry
        .compatibility(&ra_ledger_cdc::registry::value_subject(
            &counts.framed.keys().next().expect("not empty").0,
        ))
        .await?;
    outln!(
        "   compatibility of the subjects: {compatibility}; the events above were decoded after their framing"
    );
    Ok(())
}

/// Step 1: a primary contact in the jurisdiction, and the businesses it serves. Returns the
/// contact and one of the businesses.
async fn seed(api: &Api, pool: &Pool, config: &DemoOptions) -> anyhow::Result<(Uuid, Uuid)> {
    let code = config.jurisdiction.code();
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
    outln!("1. {code} primary contact: {old_id}");
    let rows = config.rows as usize;
    let started = Instant::now();
    let terminal = std::io::stdout().is_terminal();
    let businesses = ra_ledger_testing::seed_assignments(
        pool,
        config.jurisdiction,
        old_id,
        rows,
        1_000,
        |done| {
            if terminal {
                out!("\r   seeding assignments: {done}/{rows}");
                let _ = std::io::stdout().flush();
            }
        },
    )
    .await?;
    outln!(
        "{}   seeded {} active assignments on it in {:.1} s",
        if terminal { "\r\x1b[2K" } else { "" },
        businesses.len(),
        started.elapsed().as_secs_f64()
    );
    Ok((old_id, businesses[businesses.len() / 2]))
}

/// Step 2: the supersede over HTTP. Returns the run and the new contact.
async fn supersede(api: &Api, config: &DemoOptions, old_id: Uuid) -> anyhow::Result<(Uuid, Uuid)> {
    let code = config.jurisdiction.code();
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
    outln!(
        "2. POST /v1/contacts/{old_id}/supersede -> 202 Accepted\n   new primary contact {new_id}\n   run {run_id}, status at {}",
        superseded["status_url"].as_str().unwrap_or_default()
    );
    Ok((run_id, new_id))
}

/// Step 4: the audit answers, before and after, and the new contact's lineage.
async fn audit(
    api: &Api,
    agent_path: &str,
    sample: Uuid,
    before: DateTime<Utc>,
    new_id: Uuid,
) -> anyhow::Result<()> {
    let at = before.to_rfc3339_opts(SecondsFormat::Micros, true);
    outln!("4. audit answers:");
    print_agent(
        &format!("   RA at {at} (before the supersede) of business"),
        sample,
        &api.get(&format!("{agent_path}?at={at}")).await?,
    );
    print_agent("   RA now of business", sample, &api.get(agent_path).await?);
    let lineage = api.get(&format!("/v1/contacts/{new_id}/lineage")).await?;
    if let Some(contacts) = lineage.as_array() {
        outln!("   lineage of the new contact:");
        for contact in contacts {
            outln!(
                "     {} {} ({}), {}",
                contact["contact_id"].as_str().unwrap_or_default(),
                contact["status"].as_str().unwrap_or_default(),
                contact["created_at"].as_str().unwrap_or_default(),
                address_text(&contact["address"])
            );
        }
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
    outln!(
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

/// The ledger's HTTP API, as a JSON client.
struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/').to_owned();
        anyhow::ensure!(
            base.starts_with("http://") || base.starts_with("https://"),
            "--api {base:?} is not an http:// or https:// URL"
        );
        Ok(Self {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
            base,
            token: token.to_owned(),
        })
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.client.get(format!("{}{path}", self.base)), "GET", path)
            .await
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let request = self.client.post(format!("{}{path}", self.base)).json(&body);
        self.send(request, "POST", path).await
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        method: &str,
        path: &str,
    ) -> anyhow::Result<Value> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("{method} {}{path}", self.base))?;
        let status = response.status();
        let text = response.text().await?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        anyhow::ensure!(status.is_success(), "{method} {path} -> {status}: {value}");
        Ok(value)
    }
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
    /// Framed records of the run per (topic, schema id).
    framed: std::collections::BTreeMap<(String, u32), usize>,
}

impl KafkaCount {
    fn start(brokers: &str, prefix: &str) -> anyhow::Result<Self> {
        let consumer: BaseConsumer = ra_ledger_testing::kafka_client(brokers)?
            .set(
                "group.id",
                format!("ledger-demo-{}", Uuid::new_v4().simple()),
            )
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "100")
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
                framed: std::collections::BTreeMap::new(),
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
                let payload = message.payload().unwrap_or_default();
                let Ok(envelope) = ra_ledger_cdc::consumer::decode(payload) else {
                    continue;
                };
                if envelope.correlation_id != correlation || !seen.insert(envelope.event_id) {
                    continue;
                }
                if let Ok(framed) = ra_ledger_cdc::confluent_wire::Framed::parse(payload) {
                    *counts
                        .framed
                        .entry((message.topic().to_owned(), framed.schema_id))
                        .or_default() += 1;
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
