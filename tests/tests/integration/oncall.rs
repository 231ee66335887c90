//! The on-call engineer's page (issue 48), in a real headless Chromium against a real relay,
//! PostgreSQL and Kafka, with retention and the gauges at `ledger serve`'s pace (10 s):
//!
//! - **One figure, said by three.** Two bursts of 1,000 events; every 200 ms the relay's own
//!   `ra_relay_oldest_unconfirmed_commit_age_seconds`, the service's
//!   `ra_outbox_oldest_unpublished_commit_age_seconds` and the operations page's figure are
//!   read: never more than a second apart, and the gauge and the page read 0 within a
//!   second of the relay's last confirm (but for a heartbeat's moment every 10 s). The bound
//!   the database alone gives (the figure before) still said more than a second then, so
//!   the test tells the two apart.
//! - **The verdict.** Healthy while the relay streams; failing, with "no relay streams" and
//!   its runbook, when it stops, the figure then labelled a bound; healthy again when it is
//!   back. `GET /status` says the same (503 while failing).
//! - The operator lands on the operations page after sign-in; `/favicon.ico` is no 404; the
//!   screenshots of the page for the docs (`docs/console/operations-*.png`) are taken here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use fantoccini::{Client, Locator};
use ra_ledger::lag;
use ra_ledger::metrics::ServiceMetrics;
use ra_ledger_tests::api::{OPERATOR, TestApi};
use ra_ledger_tests::browser::{Driver, screenshot, sign_in};
use ra_ledger_tests::relay::{RunningRelay, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use tokio_util::sync::CancellationToken;

/// `ledger serve`'s default retention and gauge round.
const ROUND: Duration = Duration::from_secs(10);
/// How often the three figures are read.
const SAMPLE: Duration = Duration::from_millis(200);
/// "Caught up", allowing for a heartbeat waiting at that moment (see below).
const CAUGHT_UP: f64 = 1.0;

/// The value of the metric `name` in Prometheus text `text`.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn relay_figure(relay: &RunningRelay) -> f64 {
    metric(
        &relay.metrics.render(),
        ra_ledger_cdc::metrics::OLDEST_UNCONFIRMED_COMMIT_AGE.name,
    )
}

fn gauge(gauges: &ServiceMetrics) -> f64 {
    metric(
        &gauges.render(),
        ra_ledger::metrics::OLDEST_UNPUBLISHED_COMMIT_AGE.name,
    )
}

/// The page's figure (seconds, and whether it is a bound), reloaded.
async fn page_figure(browser: &Client, base: &str) -> anyhow::Result<(f64, bool)> {
    browser.goto(&format!("{base}/operations")).await?;
    let figure = browser.find(Locator::Id("lag-seconds")).await?;
    let seconds = figure.attr("data-seconds").await?.unwrap_or_default();
    let bound = figure.attr("data-bound").await?.unwrap_or_default();
    Ok((seconds.parse()?, bound == "true"))
}

/// The verdict the page shows: its state and reason.
async fn page_verdict(browser: &Client, base: &str) -> anyhow::Result<(String, String)> {
    browser.goto(&format!("{base}/operations")).await?;
    let state = browser
        .find(Locator::Id("verdict-state"))
        .await?
        .text()
        .await?;
    let reason = browser
        .find(Locator::Id("verdict-reason"))
        .await?
        .text()
        .await?;
    Ok((state, reason))
}

/// Reloads until the page's verdict is `state`, for at most `within`.
async fn until_verdict(
    browser: &Client,
    base: &str,
    state: &str,
    within: Duration,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + within;
    loop {
        let (now, reason) = page_verdict(browser, base).await?;
        if now == state {
            return Ok(reason);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the verdict stayed {now} ({reason}), not {state}"
        );
        tokio::time::sleep(SAMPLE).await;
    }
}

/// One reading of the three figures, with the database's bound beside them.
#[derive(Debug)]
struct Sample {
    at: Duration,
    relay_before: f64,
    gauge: f64,
    page: f64,
    page_bound: bool,
    relay_after: f64,
    database_bound: f64,
}

// One scenario read top to bottom: healthy, a burst sampled, stopped, back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_the_gauge_and_the_relay_say_one_lag_and_the_verdict_follows_the_relay()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    // The relay's default heartbeat (the tests' 200 ms keeps a heartbeat waiting all the
    // time, and its figure never 0).
    let config = ra_ledger_cdc::config::RelayConfig {
        heartbeat_interval_ms: 10_000,
        ..test_config(&database, &mut topics).await?
    };
    let slot = config.slot.clone();
    let api = TestApi::with_relay_slot(&database, &slot)?;
    let base = format!("http://{}", api.serve().await?);
    let pool = ra_ledger::db::pool(&database.url, "test-oncall", 4)?;
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    // Retention and the gauges as `ledger serve` runs them, at its pace.
    tokio::spawn(ra_ledger::retention::run(
        pool.clone(),
        slot.clone(),
        ROUND,
        500,
        stop.clone(),
    ));
    let gauges = Arc::new(ServiceMetrics::default());
    tokio::spawn(ra_ledger::gauges::run(
        pool.clone(),
        ra_ledger::gauges::Gauges {
            slot: slot.clone(),
            interval: ROUND,
            digests: false,
        },
        Arc::clone(&gauges),
        stop.clone(),
    ));
    tokio::spawn(ra_ledger::gauges::follow_relay(
        pool.clone(),
        slot.clone(),
        Arc::clone(&gauges),
        stop.clone(),
    ));
    let relay = RunningRelay::start(config.clone());
    let metadata = ra_ledger::store::Metadata {
        actor: "oncall-test".into(),
        correlation_id: uuid::Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    };
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    let contact = ra_ledger_testing::primary_contact(&api.ledger, "TX", &metadata).await?;

    let driver = Driver::start().await?;
    let browser = driver.browser(false).await?;
    browser.set_window_size(1280, 1400).await?;
    sign_in(&browser, &base, OPERATOR).await?;
    assert_eq!(
        browser.current_url().await?.path(),
        "/operations",
        "an operator lands on the operations page"
    );
    until_verdict(&browser, &base, "healthy", Duration::from_secs(60)).await?;
    // The icon a browser asks for on its own, not a 404.
    let icon = reqwest::get(format!("{base}/favicon.ico")).await?;
    assert_eq!(icon.status().as_u16(), 200);
    assert_eq!(
        icon.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"image/svg+xml"[..])
    );

    // Two bursts of 1,000 events, each one transaction, sampled from the first to 8 s after
    // the second.
    let started = Instant::now();
    let mut samples = Vec::new();
    for _burst in 0..2 {
        ra_ledger_testing::seed_assignments(&pool, texas, contact, 1_000, 1_000, |_| {}).await?;
        let until = Instant::now() + Duration::from_secs(8);
        while Instant::now() < until {
            let relay_before = relay_figure(&relay);
            let gauge = gauge(&gauges);
            let (page, page_bound) = page_figure(&browser, &base).await?;
            let relay_after = relay_figure(&relay);
            let database_bound = lag::slot_progress(&pool.get().await?, &slot)
                .await?
                .map_or(f64::NAN, |progress| {
                    progress.waited_seconds(chrono::Utc::now())
                });
            samples.push(Sample {
                at: started.elapsed(),
                relay_before,
                gauge,
                page,
                page_bound,
                relay_after,
                database_bound,
            });
            tokio::time::sleep(SAMPLE).await;
        }
    }
    let table = samples
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join("\n");
    println!("the three figures and the database's bound, every {SAMPLE:?}:\n{table}");
    for sample in &samples {
        let (low, high) = (
            sample.relay_before.min(sample.relay_after),
            sample.relay_before.max(sample.relay_after),
        );
        assert!(
            (sample.gauge - sample.relay_before).abs() <= 1.0,
            "the gauge is more than a second from the relay: {sample:?}\n{table}"
        );
        assert!(
            low - 1.0 <= sample.page && sample.page <= high + 1.0 && !sample.page_bound,
            "the page is more than a second from the relay: {sample:?}\n{table}"
        );
    }
    // Caught up: from the relay's last confirm on, the gauge and the page are too within a
    // second, while the database's bound still said more.
    let settled = samples
        .iter()
        .rposition(|s| s.relay_before >= CAUGHT_UP || s.relay_after >= CAUGHT_UP)
        .map_or(0, |last| last + 1);
    let confirmed_at = samples
        .get(settled)
        .map(|s| s.at)
        .ok_or_else(|| anyhow::anyhow!("the relay never caught up:\n{table}"))?;
    let after: Vec<_> = samples[settled..]
        .iter()
        .filter(|s| s.at >= confirmed_at + Duration::from_secs(1))
        .collect();
    anyhow::ensure!(
        !after.is_empty(),
        "no sample a second after the confirm:\n{table}"
    );
    for sample in &after {
        assert!(
            sample.gauge < CAUGHT_UP && sample.page < CAUGHT_UP,
            "not caught up a second after the relay: {sample:?}\n{table}"
        );
    }
    // 0, not merely small: a heartbeat every 10 s waits for a moment (at most about 0.6 s
    // seen through the report), so nearly every sample reads exactly 0.
    let zero = after
        .iter()
        .filter(|s| s.gauge == 0.0 && s.page == 0.0)
        .count();
    assert!(
        zero * 5 >= after.len() * 4,
        "{zero} of {} samples after the confirm read 0:\n{table}",
        after.len()
    );
    assert!(
        samples.iter().any(|s| s.database_bound > 1.0 + s.page),
        "the database's bound never differed from the relay's figure: not a test of it\n{table}"
    );
    screenshot(&browser, "operations-verdict").await?;

    // The relay stops: failing, the runbook named, the figure a bound, /status 503.
    // The open verdict is read at most once a second (verdict::OPEN_FOR): asked again
    // until it says `state`, for a while.
    let status = |code: StatusCode, state: &'static str| {
        let base = base.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let reply = reqwest::get(format!("{base}/status")).await?;
                let got = reply.status();
                let body: serde_json::Value = reply.json().await?;
                if got.as_u16() == code.as_u16() && body["state"] == state {
                    return anyhow::Ok(body);
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "/status answered {got} {body}, not {code} {state}"
                );
                tokio::time::sleep(SAMPLE).await;
            }
        }
    };
    status(StatusCode::OK, "healthy").await?;
    relay.stop().await?;
    let reason = until_verdict(&browser, &base, "failing", Duration::from_secs(10)).await?;
    assert!(reason.starts_with("no relay streams from slot"), "{reason}");
    let runbook = browser.find(Locator::Id("verdict-runbook")).await?;
    assert_eq!(
        runbook.attr("href").await?.as_deref(),
        Some("/runbooks/rarelaydown")
    );
    let (_, bound) = page_figure(&browser, &base).await?;
    assert!(bound, "without a relay the figure is the database's bound");
    let text = browser
        .find(Locator::Id("lag-seconds"))
        .await?
        .text()
        .await?;
    assert!(text.contains("no relay streams from the slot"), "{text}");
    let body = status(StatusCode::SERVICE_UNAVAILABLE, "failing").await?;
    assert_eq!(body["runbook"], "docs/operators.md#rarelaydown", "{body}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(
        &gauges.render(),
        "ra_outbox_oldest_unpublished_commit_age_is_bound",
    ) != 1.0
    {
        anyhow::ensure!(Instant::now() < deadline, "{}", gauges.render());
        tokio::time::sleep(SAMPLE).await;
    }
    // `deploy/stack status` prints the same verdict (the stack's other parts are not
    // running here: an empty stack folder; the service is this test's).
    let stack_dir = std::env::temp_dir().join(format!("oncall-stack-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&stack_dir)?;
    let port = base.rsplit(':').next().unwrap_or_default().to_owned();
    let printed =
        tokio::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/stack"))
            .arg("status")
            .env("RA_STACK_DIR", &stack_dir)
            .env("RA_HTTP_PORT", &port)
            .output()
            .await?;
    std::fs::remove_dir_all(&stack_dir)?;
    let printed = String::from_utf8_lossy(&printed.stdout);
    let line = printed
        .lines()
        .find(|line| line.starts_with("verdict"))
        .unwrap_or_default();
    assert!(
        line.contains("failing")
            && line.contains("no relay streams from the relay's slot")
            && line.ends_with("(runbook: docs/operators.md#rarelaydown)"),
        "{printed}"
    );
    page_verdict(&browser, &base).await?;
    screenshot(&browser, "operations-relay-stopped").await?;
    // The runbook the verdict links to, served by the console.
    browser
        .goto(&format!("{base}/runbooks/rarelaydown"))
        .await?;
    let runbook = browser
        .find(Locator::Css("pre.runbook"))
        .await?
        .text()
        .await?;
    assert!(
        runbook.contains("systemctl status ra-ledger-relay"),
        "{runbook}"
    );

    // Back: healthy again.
    let relay = RunningRelay::start(config);
    until_verdict(&browser, &base, "healthy", Duration::from_secs(60)).await?;
    status(StatusCode::OK, "healthy").await?;
    relay.stop().await?;
    Ok(())
}

/// A relay that refuses to go on (here: the slot it streamed from was dropped) records why,
/// and the verdict says it in the relay's words, ahead of the missing slot; `/status` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_refuses_to_start_says_why_in_the_verdict() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let api = TestApi::with_relay_slot(&database, &config.slot)?;
    let base = format!("http://{}", api.serve().await?);
    let status = |token: Option<&'static str>| {
        let base = base.clone();
        async move {
            let mut request = reqwest::Client::new().get(format!("{base}/status"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let reply = request.send().await?;
            let code = reply.status().as_u16();
            anyhow::Ok((code, reply.json::<serde_json::Value>().await?))
        }
    };
    // Streaming: healthy.
    let relay = RunningRelay::start(config.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = status(None).await?;
        if code == 200 && body["state"] == "healthy" {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "never healthy: {code} {body}");
        tokio::time::sleep(SAMPLE).await;
    }
    relay.stop().await?;
    let client = database.connect().await?;
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&config.slot])
        .await?;
    let refusal = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?
        .to_string();
    // An operator reads the refusal in the relay's words; anyone reads that it refused.
    let (code, body) = status(Some(OPERATOR)).await?;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["state"], "failing", "{body}");
    assert_eq!(
        body["reason"],
        format!("the relay refused to go on and stopped: {refusal}"),
        "{body}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let open = loop {
        let (code, open) = status(None).await?;
        if code == 503 {
            break open;
        }
        anyhow::ensure!(Instant::now() < deadline, "never failing: {code} {open}");
        tokio::time::sleep(SAMPLE).await;
    };
    assert!(
        open["reason"].as_str().is_some_and(|reason| reason
            .starts_with("the relay refused to go on and stopped; why is for operators")),
        "{open}"
    );
    assert!(!open.to_string().contains(&config.slot), "{open}");
    assert_eq!(open["runbook"], body["runbook"], "{open}");
    let (code, unknown) = status(Some("not-a-token")).await?;
    assert_eq!(code, 401, "{unknown}");
    assert_eq!(body["runbook"], "docs/operators.md#rarelaydown", "{body}");
    assert_eq!(
        body["also"][0]["runbook"], "docs/operators.md#raslotmissing",
        "{body}"
    );
    Ok(())
}

/// `/status` is open, so anyone asking cannot load the database: 200 anonymous requests at
/// once are answered from at most one reading per `verdict::OPEN_FOR` of the time they
/// took, counted as the connections taken from a pool of one (deadpool counts each reuse);
/// an operator's request reads afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anyone_asking_at_once_costs_one_reading_a_second() -> anyhow::Result<()> {
    use axum::body::Body;
    use axum::http::Request;
    use ra_ledger::api::{Role, Tokens, token_entry};
    use ra_ledger::verdict::{OPEN_FOR, router};
    use tower::ServiceExt as _;

    let database = TestDatabase::new().await?;
    let pool = ra_ledger::db::pool(&database.url, "status-test", 1)?;
    let tokens = Tokens::parse(&token_entry(Role::Operator, "ops", OPERATOR))?;
    let status = router(pool.clone(), "ra_ledger_relay".into(), None, tokens);
    let ask = |token: Option<&'static str>| {
        let status = status.clone();
        tokio::spawn(async move {
            let mut request = Request::get("/status");
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            let reply = status.oneshot(request.body(Body::empty())?).await?;
            anyhow::Ok(reply.status().as_u16())
        })
    };
    let readings = || async {
        let connection = pool.get().await?;
        anyhow::Ok(deadpool_postgres::Object::metrics(&connection).recycle_count)
    };
    let started = Instant::now();
    let asked: Vec<_> = (0..200).map(|_| ask(None)).collect();
    for answer in asked {
        // No relay has made the slot: failing.
        assert_eq!(answer.await??, 503);
    }
    let periods = started.elapsed().as_secs_f64() / OPEN_FOR.as_secs_f64();
    // Readings so far, this count's own connection included.
    let anonymous = readings().await?;
    assert!(
        anonymous <= 2 + periods.ceil() as usize,
        "200 anonymous requests in {periods:.1} periods read the database {anonymous} times"
    );
    for _ in 0..5 {
        assert_eq!(ask(Some(OPERATOR)).await??, 503);
    }
    assert_eq!(
        readings().await? - anonymous,
        6,
        "an operator's request reads afresh (five, and this count's own)"
    );
    Ok(())
}
