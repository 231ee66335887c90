//! The Prometheus rules of `deploy/prometheus/`, with Debian's real `prometheus` package:
//! `promtool check` and `promtool test rules` (series for each alert, firing and not), a
//! runbook in `docs/operators.md` for every alert, and a real Prometheus that scrapes the
//! relay, the worker and the service of a test stack, sees every target up, and puts the
//! relay's alert in pending once the relay is stopped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ra_ledger::api::{Role, token_entry};
use ra_ledger::config::ServeConfig;
use ra_ledger_tests::api::WRITER;
use ra_ledger_tests::process::free_port;
use ra_ledger_tests::relay::test_config;
use ra_ledger_tests::{TestDatabase, TestTopics, worker};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::relay_faults::spawn_relay_with;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_owned()
}

fn rules_dir() -> PathBuf {
    repository().join("deploy/prometheus")
}

/// A program of Debian's `prometheus` package (`LEDGER_PROMETHEUS_BINDIR`, default
/// `/usr/bin`).
fn program(name: &str) -> PathBuf {
    let dir = std::env::var("LEDGER_PROMETHEUS_BINDIR")
        .ok()
        .filter(|dir| !dir.is_empty())
        .unwrap_or_else(|| "/usr/bin".into());
    let path = Path::new(&dir).join(name);
    assert!(
        path.exists(),
        "no {} : the Prometheus tests need Debian's prometheus package (apt-get install \
         prometheus; deploy/test installs it)",
        path.display()
    );
    path
}

/// Runs promtool with `args` in the rules' folder; its output when it fails.
fn promtool(args: &[&str]) -> String {
    let output = Command::new(program("promtool"))
        .args(args)
        .current_dir(rules_dir())
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_rules_check_and_their_unit_tests_pass_with_promtool() {
    let checked = promtool(&["check", "rules", "ra-ledger.rules.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    promtool(&["check", "config", "prometheus.yml"]);
    let tested = promtool(&["test", "rules", "ra-ledger.rules.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Every alert has a runbook, `docs/operators.md#<name in lower case>`, under a heading of
/// its name there, and a unit test that expects it to fire.
#[test]
fn every_alert_has_a_runbook_and_a_test_that_fires_it() {
    let rules: Value = serde_norway::from_str(
        &std::fs::read_to_string(rules_dir().join("ra-ledger.rules.yml")).expect("the rules"),
    )
    .expect("YAML");
    let tests = std::fs::read_to_string(rules_dir().join("ra-ledger.rules.test.yml"))
        .expect("the rules' tests");
    let operators =
        std::fs::read_to_string(repository().join("docs/operators.md")).expect("operators.md");
    let mut alerts = 0;
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            assert_eq!(
                rule["annotations"]["runbook_url"].as_str(),
                Some(format!("docs/operators.md#{}", alert.to_lowercase()).as_str()),
                "{alert}"
            );
            assert!(
                operators.lines().any(|line| line == format!("### {alert}")),
                "docs/operators.md has no heading \"### {alert}\""
            );
            let firing = format!("alertname: {alert}\n        exp_alerts:\n          - exp_labels");
            assert!(tests.contains(&firing), "no test fires {alert}");
        }
    }
    assert!(alerts >= 12, "{alerts} alerts");
}

/// Polls Prometheus's HTTP API at `path` until `done` holds; returns the last answer.
async fn until(
    base: &str,
    path: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + within;
    loop {
        let answer = match client.get(format!("{base}{path}")).send().await {
            Ok(reply) => reply.json::<Value>().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        if done(&answer) {
            return Ok(answer);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: {answer:#}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// One scenario read top to bottom: the stack, Prometheus on it, then the relay stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_stack_and_the_stopped_relay_goes_pending()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let relay_config = test_config(&database, &mut topics).await?;
    let (relay_port, worker_port, serve_port) = (free_port()?, free_port()?, free_port()?);
    let mut relay = spawn_relay_with(
        &relay_config,
        &[("LEDGER_METRICS_LISTEN", &format!("127.0.0.1:{relay_port}"))],
    )?;
    let mut worker_config = worker::test_config(&database, &topics);
    worker_config.metrics_listen = Some(format!("127.0.0.1:{worker_port}").parse()?);
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    tokio::spawn(ra_ledger::worker::run_process(worker_config));
    let serve = ServeConfig {
        database_url: database.url.as_str().into(),
        listen: format!("127.0.0.1:{}", free_port()?),
        tokens: token_entry(Role::Writer, "prometheus-test", WRITER),
        relay_slot: relay_config.slot.clone(),
        outbox_retention_interval_ms: 500,
        metrics_listen: format!("127.0.0.1:{serve_port}"),
        ..ServeConfig::default()
    };
    tokio::spawn(ra_ledger::service::run(serve.validate()?, stop.clone()));

    // Prometheus with the shipped rules, scraping and evaluating every second.
    let dir = ra_ledger_tests::stack::run_dir()
        .join(format!("prometheus-{}", ra_ledger_tests::random_suffix()));
    std::fs::create_dir_all(&dir)?;
    let rules = rules_dir().join("ra-ledger.rules.yml");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{rules:?}]\n\
             scrape_configs:\n\
             - {{job_name: ra-ledger-relay, static_configs: [{{targets: ['127.0.0.1:{relay_port}']}}]}}\n\
             - {{job_name: ra-ledger-worker, static_configs: [{{targets: ['127.0.0.1:{worker_port}']}}]}}\n\
             - {{job_name: ra-ledger-serve, static_configs: [{{targets: ['127.0.0.1:{serve_port}']}}]}}\n"
        ),
    )?;
    let prometheus_port = free_port()?;
    let mut prometheus = Command::new("setpriv")
        .args(["--pdeathsig", "SIGKILL", "--"])
        .arg(program("prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log"))?)
        .spawn()?;
    let base = format!("http://127.0.0.1:{prometheus_port}");

    let targets = until(
        &base,
        "/api/v1/targets",
        Duration::from_secs(60),
        "every target up",
        |answer| {
            let active = answer["data"]["activeTargets"].as_array();
            active.is_some_and(|targets| {
                targets.len() == 3 && targets.iter().all(|target| target["health"] == "up")
            })
        },
    )
    .await?;
    let mut jobs: Vec<&str> = targets["data"]["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|target| target["labels"]["job"].as_str())
        .collect();
    jobs.sort();
    assert_eq!(
        jobs,
        ["ra-ledger-relay", "ra-ledger-serve", "ra-ledger-worker"]
    );
    // The rules loaded, and the service's gauge of the idle ledger reads 0.
    until(
        &base,
        "/api/v1/query?query=ra:outbox_oldest_unpublished_commit_age_seconds:max",
        Duration::from_secs(30),
        "the recorded wait",
        |answer| answer["data"]["result"][0]["value"][1] == "0",
    )
    .await?;
    // And it is the relay's own figure, reported by the relay and read by the service
    // between rounds, not the database's bound (issue 48).
    let is_bound = "/api/v1/query?query=ra_outbox_oldest_unpublished_commit_age_is_bound";
    until(
        &base,
        is_bound,
        Duration::from_secs(30),
        "the relay's figure",
        |answer| answer["data"]["result"][0]["value"][1] == "0",
    )
    .await?;
    // Nothing fires; and nothing of the relay is pending once its first scrapes are in (at
    // the first evaluation, before any scrape, `absent(up)` holds for a moment).
    until(
        &base,
        "/api/v1/alerts",
        Duration::from_secs(30),
        "a healthy stack with alerts",
        |answer| {
            answer["data"]["alerts"].as_array().is_some_and(|alerts| {
                alerts.iter().all(|alert| {
                    alert["state"] != "firing" && alert["labels"]["alertname"] != "RaRelayDown"
                })
            })
        },
    )
    .await?;

    // The relay stopped: its alert goes pending (it fires only after 2 minutes).
    relay.kill()?;
    relay.wait()?;
    let pending = until(
        &base,
        "/api/v1/alerts",
        Duration::from_secs(30),
        "RaRelayDown pending",
        |answer| {
            answer["data"]["alerts"].as_array().is_some_and(|alerts| {
                alerts.iter().any(|alert| {
                    alert["labels"]["alertname"] == "RaRelayDown"
                        && alert["labels"]["instance"] == format!("127.0.0.1:{relay_port}")
                        && alert["state"] == "pending"
                })
            })
        },
    )
    .await?;
    println!("after the relay stopped: {}", pending["data"]["alerts"]);
    // Without the relay, the service's figure is the database's bound, and says so.
    until(
        &base,
        is_bound,
        Duration::from_secs(30),
        "the bound",
        |answer| answer["data"]["result"][0]["value"][1] == "1",
    )
    .await?;
    prometheus.kill()?;
    prometheus.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The worker's stalled-run gauge reads the pages: 0 with no run in progress, and a run that
/// ran no page since it started (no worker consumes its requests) ages with the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_runs_no_page_ages_on_the_stalled_run_gauge() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    let pool = ra_ledger::db::pool(&database.url, "test-run-idle", 1)?;
    let client = pool.get().await?;
    assert_eq!(
        ra_ledger::reassign::in_progress_summary(&client).await?,
        (0, 0.0)
    );
    let contact = api.contact("TX", "First Office").await;
    for _ in 0..3 {
        api.assign(uuid::Uuid::now_v7()).await;
    }
    let reply = api
        .post(
            &format!("/v1/contacts/{contact}/supersede"),
            serde_json::json!({"name": "Second Office",
                               "address": ra_ledger_tests::api::contact_body("TX", "x")["address"],
                               "page_size": 1}),
        )
        .await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (running, idle) = ra_ledger::reassign::in_progress_summary(&client).await?;
    assert!(running == 1 && idle >= 1.5, "{running} runs, idle {idle} s");
    Ok(())
}
