//! The web console: its sign-in, CSRF and role checks over HTTP, and the pages in a real
//! headless Chromium against the real service, relay, broker and worker.

use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use fantoccini::{Client, Locator};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{AUDITOR, OPERATOR, TestApi, WRITER, contact_body};
use ra_ledger_tests::browser::{Driver, screenshot, sign_in, wait_for_path};
use ra_ledger_tests::runs::count;
use ra_ledger_tests::worker::RunningWorker;
use reqwest::redirect::Policy;
use reqwest::{StatusCode, header};
use uuid::Uuid;

use crate::reassignment::{relayed, seeded};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .expect("an HTTP client")
}

/// A POST to `/sign-in` as a browser's form sends it: with this site's `Origin`.
pub(crate) fn sign_in_post(web: &reqwest::Client, base: &str) -> reqwest::RequestBuilder {
    web.post(format!("{base}/sign-in"))
        .header(header::ORIGIN, base)
}

/// Signs in over plain HTTP; returns the `name=value` of the session cookie.
pub(crate) async fn session_cookie(base: &str, token: &str) -> String {
    let reply = sign_in_post(&http(), base)
        .form(&[("token", token), ("next", "/search")])
        .send()
        .await
        .expect("sign-in answers");
    assert_eq!(reply.status(), StatusCode::SEE_OTHER);
    let cookie = reply.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    cookie.split(';').next().unwrap().to_owned()
}

/// A page's CSRF token (the sign-out form carries it on every page).
pub(crate) async fn csrf_of(base: &str, cookie: &str) -> String {
    let page = http()
        .get(format!("{base}/search"))
        .header(header::COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    page[at..at + page[at..].find('"').unwrap()].to_owned()
}

pub(crate) async fn events(client: &tokio_postgres::Client) -> i64 {
    count(client, "SELECT count(*) FROM events", &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_refuses_forged_writes_bad_input_and_foreign_sites() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let created = api.post("/v1/contacts", contact_body("TX", "Office")).await;
    let contact = created.str("contact_id");
    let base = format!("http://{}", api.serve().await?);
    let client = database.connect().await?;
    let web = http();

    // Signed out: pages send the browser to sign in and back; the feed is 401.
    let reply = web.get(format!("{base}/contacts/{contact}")).send().await?;
    assert_eq!(reply.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        reply.headers()[header::LOCATION],
        format!("/sign-in?next=/contacts/{contact}").as_str()
    );
    assert_eq!(reply.headers()[header::CONTENT_SECURITY_POLICY], CSP);
    let reply = web
        .get(format!("{base}/runs/{}/progress", Uuid::now_v7()))
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::UNAUTHORIZED);

    // Sign-in: an unknown token is 401; a form from another site is refused; a next that
    // leaves the site is replaced by the start page.
    let reply = sign_in_post(&web, &base)
        .form(&[("token", "not-a-token")])
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::UNAUTHORIZED);
    assert!(reply.text().await?.contains("Unknown token."));
    let reply = web
        .post(format!("{base}/sign-in"))
        .header(header::ORIGIN, "https://evil.example")
        .form(&[("token", WRITER)])
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::FORBIDDEN);
    assert!(reply.headers().get(header::SET_COOKIE).is_none());
    for next in [
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
    ] {
        let reply = sign_in_post(&web, &base)
            .form(&[("token", WRITER), ("next", next)])
            .send()
            .await?;
        assert_eq!(reply.headers()[header::LOCATION], "/", "next {next:?}");
    }
    let reply = sign_in_post(&web, &base)
        .form(&[("token", WRITER)])
        .send()
        .await?;
    let set_cookie = reply.headers()[header::SET_COOKIE].to_str()?.to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"), "plain HTTP: {set_cookie}");

    let writer = session_cookie(&base, WRITER).await;
    let auditor = session_cookie(&base, AUDITOR).await;
    let writer_csrf = csrf_of(&base, &writer).await;
    let auditor_csrf = csrf_of(&base, &auditor).await;
    assert_ne!(writer_csrf, auditor_csrf);

    // An edited cookie (its expiry moved on) is no session at all.
    let dot = auditor.find('.').expect("expiry.seen.nonce.entry");
    let mut forged = auditor.clone().into_bytes();
    forged[dot - 1] = if forged[dot - 1] == b'9' {
        b'0'
    } else {
        forged[dot - 1] + 1
    };
    let forged = String::from_utf8(forged)?;
    assert_ne!(forged, auditor);
    let reply = web
        .get(format!("{base}/search"))
        .header(header::COOKIE, &forged)
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::SEE_OTHER);

    // Pages: strict CSP, no inline script or style.
    for path in ["/search", &format!("/contacts/{contact}"), "/operations"] {
        let reply = web
            .get(format!("{base}{path}"))
            .header(header::COOKIE, &writer)
            .send()
            .await?;
        assert_eq!(reply.status(), StatusCode::OK, "{path}");
        assert_eq!(reply.headers()[header::CONTENT_SECURITY_POLICY], CSP);
        assert_eq!(reply.headers()[header::CACHE_CONTROL], "no-store");
        let page = reply.text().await?;
        assert!(
            !page.contains("<script>") && !page.contains(" style="),
            "{path}"
        );
    }

    // Writes that must be refused, each writing nothing.
    let supersede = format!("{base}/contacts/{contact}/supersede");
    let good = |csrf: &str| {
        vec![
            ("csrf", csrf.to_owned()),
            ("name", "New Office".to_owned()),
            ("line1", "1 Main St".to_owned()),
            ("city", "Austin".to_owned()),
            ("region", "TX".to_owned()),
            ("postal_code", "78701".to_owned()),
        ]
    };
    let before = events(&client).await;
    // (what, session cookie, form, Origin header, expected status)
    type Case<'a> = (
        &'a str,
        &'a str,
        Vec<(&'a str, String)>,
        Option<&'a str>,
        StatusCode,
    );
    let cases: Vec<Case> = vec![
        (
            "auditor, own valid CSRF token",
            &auditor,
            good(&auditor_csrf),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "writer, no CSRF token",
            &writer,
            good("")[1..].to_vec(),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "writer, the auditor's CSRF token",
            &writer,
            good(&auditor_csrf),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "writer, from another site",
            &writer,
            good(&writer_csrf),
            Some("https://evil.example"),
            StatusCode::FORBIDDEN,
        ),
        (
            "no session",
            "",
            good(&writer_csrf),
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "bad ZIP",
            &writer,
            [good(&writer_csrf), vec![("postal_code", "7870".into())]].concat(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "page size not a number",
            &writer,
            [good(&writer_csrf), vec![("page_size", "many".into())]].concat(),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            "page size too large",
            &writer,
            [good(&writer_csrf), vec![("page_size", "10001".into())]].concat(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "effective_at not a time",
            &writer,
            [
                good(&writer_csrf),
                vec![("effective_at", "yesterday".into())],
            ]
            .concat(),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            "stale version",
            &writer,
            [good(&writer_csrf), vec![("expected_version", "7".into())]].concat(),
            None,
            StatusCode::CONFLICT,
        ),
    ];
    for (what, cookie, form, origin, expected) in cases {
        // Later fields win in the form (a HashMap), so overrides come last.
        let mut request = web.post(&supersede).form(&form);
        if !cookie.is_empty() {
            request = request.header(header::COOKIE, cookie);
        }
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        let reply = request.send().await?;
        assert_eq!(reply.status(), expected, "{what}");
        assert!(
            reply.headers()[header::CONTENT_TYPE]
                .to_str()?
                .starts_with("text/html"),
            "{what}"
        );
        assert_eq!(events(&client).await, before, "{what} wrote something");
    }
    let reply = web
        .post(format!("{base}/runs/{}/resume", Uuid::now_v7()))
        .header(header::COOKIE, &auditor)
        .form(&[("csrf", auditor_csrf.as_str())])
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::FORBIDDEN);

    // Bad input on read pages: 4xx pages naming the value, never a 500.
    for (path, expected, names) in [
        (
            "/businesses/not-a-uuid".to_owned(),
            StatusCode::BAD_REQUEST,
            "not-a-uuid",
        ),
        (
            format!("/businesses/{}", Uuid::now_v7()),
            StatusCode::NOT_FOUND,
            "no assignment",
        ),
        (
            format!("/businesses/{}?at=yesterday", Uuid::now_v7()),
            StatusCode::BAD_REQUEST,
            "yesterday",
        ),
        (
            format!("/businesses/{}?at=10000-01-01", Uuid::now_v7()),
            StatusCode::BAD_REQUEST,
            "10000",
        ),
        (
            format!("/businesses/{}?jurisdiction=ZZ", Uuid::now_v7()),
            StatusCode::BAD_REQUEST,
            "ZZ",
        ),
        (
            format!("/contacts/{}", Uuid::now_v7()),
            StatusCode::NOT_FOUND,
            "no contact",
        ),
        ("/runs/12".to_owned(), StatusCode::BAD_REQUEST, "12"),
        (
            format!("/runs/{}", Uuid::now_v7()),
            StatusCode::NOT_FOUND,
            "no reassignment run",
        ),
        (
            "/search?jurisdiction=Texas".to_owned(),
            StatusCode::BAD_REQUEST,
            "Texas",
        ),
        (
            "/search?id=%00".to_owned(),
            StatusCode::BAD_REQUEST,
            "not a UUID",
        ),
        (
            format!("/search?name={}", "x".repeat(201)),
            StatusCode::BAD_REQUEST,
            "200",
        ),
        (
            format!("/events/{}/proof", Uuid::now_v7()),
            StatusCode::NOT_FOUND,
            "",
        ),
    ] {
        let reply = web
            .get(format!("{base}{path}"))
            .header(header::COOKIE, &writer)
            .send()
            .await?;
        assert_eq!(reply.status(), expected, "{path}");
        let page = reply.text().await?;
        assert!(page.contains(names), "{path}: {page}");
    }
    // Search: by name (wildcards are literal), by id.
    let found = web
        .get(format!("{base}/search?jurisdiction=TX&name=off"))
        .header(header::COOKIE, &writer)
        .send()
        .await?
        .text()
        .await?;
    assert!(found.contains(&format!("/contacts/{contact}")));
    let none = web
        .get(format!("{base}/search?name=%25"))
        .header(header::COOKIE, &writer)
        .send()
        .await?
        .text()
        .await?;
    assert!(none.contains("No contact matches."));
    let by_id = web
        .get(format!("{base}/search?id={contact}"))
        .header(header::COOKIE, &auditor)
        .send()
        .await?;
    assert_eq!(
        by_id.headers()[header::LOCATION],
        format!("/contacts/{contact}").as_str()
    );

    // The operations page checks the newest digest's signature.
    let key = ra_ledger::digest::DigestKey::from_seed(&[3; 32]);
    ra_ledger::digest::build::build(api.ledger.pool(), &key).await?;
    let operations = |cookie: String| {
        let url = format!("{base}/operations");
        async move {
            http()
                .get(url)
                .header(header::COOKIE, cookie)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    assert!(
        operations(auditor.clone())
            .await
            .contains("signature verifies with the key the digest names")
    );
    // Tampered behind the append-only trigger's back (as a superuser could).
    client
        .batch_execute(
            "BEGIN; SET LOCAL session_replication_role = replica; \
             UPDATE digests SET signature = set_byte(signature, 0, get_byte(signature, 0) # 1); \
             COMMIT",
        )
        .await?;
    assert!(
        operations(auditor.clone())
            .await
            .contains("SIGNATURE DOES NOT VERIFY")
    );

    // Signing out takes the CSRF token too, and removes the cookie.
    let reply = web
        .post(format!("{base}/sign-out"))
        .header(header::COOKIE, &writer)
        .form(&[("csrf", "wrong")])
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::FORBIDDEN);
    let reply = web
        .post(format!("{base}/sign-out"))
        .header(header::COOKIE, &writer)
        .form(&[("csrf", writer_csrf.as_str())])
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::SEE_OTHER);
    assert!(
        reply.headers()[header::SET_COOKIE]
            .to_str()?
            .contains("Max-Age=0")
    );
    Ok(())
}

async fn text(browser: &Client, id: &str) -> anyhow::Result<String> {
    Ok(browser.find(Locator::Id(id)).await?.text().await?)
}

async fn fill(browser: &Client, id: &str, value: &str) -> anyhow::Result<()> {
    let field = browser.find(Locator::Id(id)).await?;
    field.clear().await?;
    field.send_keys(value).await?;
    Ok(())
}

/// The contact id of the console's as-of answer on the current page ("" for none).
async fn console_answer(browser: &Client) -> anyhow::Result<String> {
    let answer = browser
        .find(Locator::Css("#answer [data-contact-id]"))
        .await?;
    Ok(answer.attr("data-contact-id").await?.unwrap_or_default())
}

/// The API's answer ("" for 404).
async fn api_answer(
    api: &TestApi,
    business: Uuid,
    at: DateTime<Utc>,
    known_at: Option<DateTime<Utc>>,
) -> String {
    let mut uri = format!(
        "/v1/businesses/{business}/jurisdictions/TX/registered-agent?at={}",
        stamp(at)
    );
    if let Some(known) = known_at {
        uri.push_str(&format!("&known_at={}", stamp(known)));
    }
    let reply = api.get(&uri).await;
    match reply.status.as_u16() {
        200 => reply.body["contact"]["contact_id"]
            .as_str()
            .unwrap()
            .to_owned(),
        404 => String::new(),
        other => panic!("{uri}: {other} {:?}", reply.body),
    }
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

// One scenario read top to bottom: the setup (relay, broker, 2,000 assignments) is shared by
// every step, and the steps build on each other (the run the writer starts is the one the
// auditor looks at).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() -> anyhow::Result<()> {
    let (database, _topics, _relay, config) = relayed().await?;
    let seeded = seeded(&database, 2_000).await?;
    let old = seeded.contact_id;
    let base = format!("http://{}", seeded.api.serve().await?);
    let driver = Driver::start().await?;
    let writer = driver.browser(true).await?;

    sign_in(&writer, &base, WRITER).await?;
    screenshot(&writer, "search").await?;
    // The contact page, then its supersede form; the worker is not running yet, so the run
    // page opens at 0% and must advance by itself.
    writer.goto(&format!("{base}/contacts/{old}")).await?;
    assert_eq!(text(&writer, "active-count").await?, "2000");
    screenshot(&writer, "contact-writer").await?;
    fill(&writer, "new-name", "Congress Avenue Office").await?;
    fill(&writer, "line1", "100 Congress Ave").await?;
    fill(&writer, "city", "Austin").await?;
    fill(&writer, "postal_code", "78701").await?;
    fill(&writer, "page_size", "100").await?;
    let supersede_submitted = Utc::now();
    writer
        .find(Locator::Css("#supersede button[type=submit]"))
        .await?
        .click()
        .await?;
    wait_for_path(&writer, "/runs/").await?;
    let run_id: Uuid = writer
        .current_url()
        .await?
        .path()
        .trim_start_matches("/runs/")
        .parse()?;
    assert_eq!(text(&writer, "percent").await?, "0.0");
    writer
        .execute("window.loadedOnce = 'yes'; return true;", vec![])
        .await?;
    let _worker = RunningWorker::start(config);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut shot = false;
    loop {
        let percent = text(&writer, "percent").await?;
        if seen.last() != Some(&percent) {
            seen.push(percent.clone());
        }
        if !shot && percent != "0.0" && percent != "100.0" {
            screenshot(&writer, "run-in-progress").await?;
            shot = true;
        }
        if percent == "100.0" && text(&writer, "state").await? == "completed" {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the run page stayed at {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("run page progress without a reload: {seen:?}");
    assert!(seen.len() >= 2, "{seen:?}");
    let kept = writer
        .execute("return window.loadedOnce || 'reloaded';", vec![])
        .await?;
    assert_eq!(kept, serde_json::json!("yes"), "the run page was reloaded");
    assert_eq!(text(&writer, "replaced").await?, "2000");
    assert_eq!(text(&writer, "failed").await?, "0");
    assert!(
        writer.find(Locator::Id("resume")).await.is_err(),
        "resume gone when done"
    );
    screenshot(&writer, "run-completed").await?;
    let new: Uuid = seeded
        .client
        .query_one(
            "SELECT new_contact_id FROM reassignment_runs WHERE run_id = $1",
            &[&run_id],
        )
        .await?
        .get(0);

    // A business: its timeline, then "who was the RA on D" for 20 instants, the first typed
    // into the form, one with "as known at" before the supersede was recorded.
    let business = seeded.businesses[7];
    let started: DateTime<Utc> = seeded
        .client
        .query_one(
            "SELECT min(started_at) FROM assignments WHERE business_id = $1",
            &[&business],
        )
        .await?
        .get(0);
    let replaced_at: DateTime<Utc> = seeded
        .client
        .query_one(
            "SELECT max(started_at) FROM assignments WHERE business_id = $1",
            &[&business],
        )
        .await?
        .get(0);
    let now = Utc::now();
    let mut instants: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)> = vec![
        (started - chrono::Duration::days(400), None),
        (started - chrono::Duration::microseconds(1), None),
        (started, None),
        (replaced_at - chrono::Duration::microseconds(1), None),
        (replaced_at, None),
        (now + chrono::Duration::days(30), None),
        // As known just before the supersede was submitted: still the old contact.
        (
            now,
            Some(supersede_submitted - chrono::Duration::milliseconds(1)),
        ),
    ];
    let span = (now - started).num_microseconds().unwrap_or(1);
    for step in 0..13 {
        instants.push((
            started + chrono::Duration::microseconds(span / 13 * step),
            None,
        ));
    }
    assert_eq!(instants.len(), 20);
    writer
        .goto(&format!("{base}/businesses/{business}"))
        .await?;
    for (index, (at, known_at)) in instants.iter().enumerate() {
        if index == 0 {
            fill(&writer, "at", &stamp(*at)).await?;
            writer
                .find(Locator::Css("form.asof button[type=submit]"))
                .await?
                .click()
                .await?;
            writer.wait().for_element(Locator::Id("answer")).await?;
        } else {
            let mut url = format!(
                "{base}/businesses/{business}?jurisdiction=TX&at={}",
                stamp(*at)
            );
            if let Some(known) = known_at {
                url.push_str(&format!("&known_at={}", stamp(*known)));
            }
            writer.goto(&url).await?;
        }
        let console = console_answer(&writer).await?;
        let api = api_answer(&seeded.api, business, *at, *known_at).await;
        assert_eq!(console, api, "at {at} known at {known_at:?}");
        if index == 4 {
            assert_eq!(console, new.to_string());
            screenshot(&writer, "business").await?;
        }
        if known_at.is_some() {
            assert_eq!(console, old.to_string(), "as known before the supersede");
        }
    }
    assert_eq!(
        writer
            .find_all(Locator::Css("section.timeline > table.list > tbody > tr"))
            .await?
            .len(),
        2,
        "two assignments: the seeded one and its replacement"
    );
    writer.goto(&format!("{base}/operations")).await?;
    assert_eq!(text(&writer, "runs-active").await?, "0");
    screenshot(&writer, "operations").await?;

    // An auditor: no write control anywhere, and a forged write with its cookie is refused.
    let auditor = driver.browser(true).await?;
    sign_in(&auditor, &base, AUDITOR).await?;
    let write_forms = "return Array.from(document.querySelectorAll('form'))\
        .filter(f => f.method === 'post' && !f.action.endsWith('/sign-out')).length;";
    for path in [
        format!("/contacts/{new}"),
        format!("/contacts/{old}"),
        format!("/runs/{run_id}"),
        format!("/businesses/{business}"),
        "/operations".into(),
        "/search".into(),
    ] {
        auditor.goto(&format!("{base}{path}")).await?;
        assert_eq!(
            auditor.execute(write_forms, vec![]).await?,
            serde_json::json!(0),
            "{path}"
        );
        assert!(
            auditor.find(Locator::Id("supersede")).await.is_err(),
            "{path}"
        );
    }
    auditor.goto(&format!("{base}/contacts/{new}")).await?;
    screenshot(&auditor, "contact-auditor").await?;
    let cookie = auditor.get_named_cookie("ra_session").await?;
    let csrf = auditor
        .find(Locator::Css("input[name=csrf]"))
        .await?
        .attr("value")
        .await?
        .unwrap_or_default();
    let before = events(&seeded.client).await;
    let forged = http()
        .post(format!("{base}/contacts/{new}/supersede"))
        .header(header::COOKIE, format!("ra_session={}", cookie.value()))
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", "Forged Office"),
            ("line1", "1 Main St"),
            ("city", "Austin"),
            ("region", "TX"),
            ("postal_code", "78701"),
        ])
        .send()
        .await?;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        events(&seeded.client).await,
        before,
        "the forged write changed something"
    );
    let status: String = seeded
        .client
        .query_one("SELECT status FROM contacts WHERE contact_id = $1", &[&new])
        .await?
        .get(0);
    assert_eq!(status, "primary");

    // JavaScript off: sign-in and the read pages still work.
    let plain = driver.browser(false).await?;
    sign_in(&plain, &base, AUDITOR).await?;
    plain.goto(&format!("{base}/runs/{run_id}")).await?;
    assert!(
        plain
            .find(Locator::LinkText("Reload"))
            .await?
            .is_displayed()
            .await?,
        "scripts are off: the run page offers a reload"
    );
    plain.goto(&format!("{base}/businesses/{business}")).await?;
    let (at, _) = instants[10];
    fill(&plain, "at", &stamp(at)).await?;
    plain
        .find(Locator::Css("form.asof button[type=submit]"))
        .await?
        .click()
        .await?;
    plain.wait().for_element(Locator::Id("answer")).await?;
    assert_eq!(
        console_answer(&plain).await?,
        api_answer(&seeded.api, business, at, None).await
    );
    screenshot(&plain, "business-without-javascript").await?;
    for path in [
        format!("/contacts/{new}"),
        "/operations".into(),
        "/search?jurisdiction=TX".into(),
    ] {
        plain.goto(&format!("{base}{path}")).await?;
        assert!(
            !plain
                .find(Locator::Css("main h1"))
                .await?
                .text()
                .await?
                .is_empty(),
            "{path}"
        );
    }
    let shots = ra_ledger_tests::browser::artifacts()?;
    println!("screenshots in {}", shots.display());
    for browser in [writer, auditor, plain] {
        browser.close().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_republishes_a_parked_message_from_the_operations_page() -> anyhow::Result<()> {
    use ra_ledger_tests::relay::{Collector, RunningRelay, oversized_backlog};
    let database = TestDatabase::new().await?;
    let mut topics = ra_ledger_tests::TestTopics::new();
    let client = database.connect().await?;
    // Kafka refuses the big event for good: it is parked.
    let (mut config, big, after) =
        oversized_backlog(&database, &mut topics, &client, (1, 1)).await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r
                .iter()
                .any(|m| m.id() == after[0]))
            .await
    );
    let parked_id: i64 = client
        .query_one(
            "SELECT id FROM outbox_parked WHERE event_id = $1::text::uuid",
            &[&big],
        )
        .await?
        .get(0);
    relay.stop().await?;

    let api = TestApi::new(&database)?;
    let base = format!("http://{}", api.serve().await?);
    let operator = session_cookie(&base, OPERATOR).await;
    let writer = session_cookie(&base, WRITER).await;
    let auditor = session_cookie(&base, AUDITOR).await;
    let page = |cookie: String| {
        let base = base.clone();
        async move {
            http()
                .get(format!("{base}/operations"))
                .header(header::COOKIE, cookie)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let action = format!("/operations/parked/{parked_id}/republish");
    assert!(
        page(operator.clone()).await.contains(&action),
        "operators get the button"
    );
    for other in [&writer, &auditor] {
        assert!(
            !page(other.clone()).await.contains(&action),
            "writers and auditors do not"
        );
    }
    let post = |cookie: &str, csrf: &str, path: &str| {
        http()
            .post(format!("{base}{path}"))
            .header(header::COOKIE, cookie)
            .form(&[("csrf", csrf.to_owned())])
            .send()
    };
    for other in [&auditor, &writer] {
        let other_csrf = csrf_of(&base, other).await;
        assert_eq!(
            post(other, &other_csrf, &action).await?.status(),
            StatusCode::FORBIDDEN
        );
    }
    let operator_csrf = csrf_of(&base, &operator).await;
    assert_eq!(
        post(&operator, "", &action).await?.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        post(&operator, &operator_csrf, "/operations/parked/x/republish")
            .await?
            .status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        post(
            &operator,
            &operator_csrf,
            "/operations/parked/999999/republish"
        )
        .await?
        .status(),
        StatusCode::NOT_FOUND
    );
    let requested: Option<DateTime<Utc>> = client
        .query_one(
            "SELECT republish_requested_at FROM outbox_parked WHERE id = $1",
            &[&parked_id],
        )
        .await?
        .get(0);
    assert_eq!(requested, None, "refused requests wrote nothing");

    // With the limit unchanged, the relay tries, Kafka refuses again, and the page says so.
    let relay = RunningRelay::start(config.clone());
    assert_eq!(
        post(&operator, &operator_csrf, &action).await?.status(),
        StatusCode::SEE_OTHER
    );
    assert!(page(writer.clone()).await.contains("requested "));
    let deadline = Instant::now() + Duration::from_secs(60);
    let refusal = loop {
        let row = client
            .query_one(
                "SELECT republish_requested_at, republish_error FROM outbox_parked WHERE id = $1",
                &[&parked_id],
            )
            .await?;
        let (at, error): (Option<DateTime<Utc>>, Option<String>) = (row.get(0), row.get(1));
        if at.is_none() && error.is_some() {
            break error.unwrap_or_default();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the relay did not try the request"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(refusal.to_lowercase().contains("too large"), "{refusal}");
    assert!(page(writer.clone()).await.contains("Last attempt refused"));
    relay.stop().await?;

    // The cause fixed (a larger limit), a second request publishes it with its headers.
    config
        .kafka
        .insert("message.max.bytes".into(), "1000000".into());
    let relay = RunningRelay::start(config);
    assert_eq!(
        post(&operator, &operator_csrf, &action).await?.status(),
        StatusCode::SEE_OTHER
    );
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.iter().any(|m| m.id() == big))
            .await,
        "the parked message reached Kafka"
    );
    let republished = collector.received.iter().find(|m| m.id() == big).unwrap();
    assert!(republished.headers.contains_key("commit_lsn"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(
        &client,
        "SELECT count(*) FROM outbox_parked WHERE republished_at IS NULL",
        &[],
    )
    .await
        > 0
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the row was not marked republished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        page(writer).await.contains("id=\"parked-none\""),
        "nothing left parked"
    );
    relay.stop().await?;
    Ok(())
}
