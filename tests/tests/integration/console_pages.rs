//! What the console's record pages show, read over HTTP: a business's page names the
//! contact of every assignment and lists every event of each jurisdiction's stream under
//! that jurisdiction, in version order (the contacts and the events come in one statement
//! each, whatever their number).

use ra_ledger::domain::Jurisdiction;
use reqwest::{StatusCode, header};
use serde_json::json;
use uuid::Uuid;

use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{AUDITOR, TestApi, contact_body};

use crate::console::{http, session_cookie};

/// The HTML of one jurisdiction's timeline section of a business page.
fn timeline<'a>(page: &'a str, jurisdiction: &str) -> &'a str {
    let start = page
        .find(&format!("data-jurisdiction=\"{jurisdiction}\""))
        .unwrap_or_else(|| panic!("a {jurisdiction} timeline in {page}"));
    let rest = &page[start..];
    let end = rest.find("</section>").expect("the section ends");
    &rest[..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_business_page_names_every_contact_and_every_event_under_its_jurisdiction()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let business = Uuid::now_v7();
    let names = [
        ("TX", "Alamo Agents"),
        ("CA", "Bear Flag Agents"),
        ("NY", "Empire Agents"),
    ];
    let mut assignments = Vec::new();
    for (jurisdiction, name) in names {
        let contact = api
            .post("/v1/contacts", contact_body(jurisdiction, name))
            .await;
        assert_eq!(contact.status, 201, "{:?}", contact.body);
        let assigned = api
            .post(
                "/v1/assignments",
                json!({"business_id": business, "jurisdiction": jurisdiction}),
            )
            .await;
        assert_eq!(assigned.status, 201, "{:?}", assigned.body);
        assignments.push(assigned.str("assignment_id"));
    }
    // A second event on the Texas stream.
    let ended = api
        .post(
            &format!("/v1/assignments/{}/end", assignments[0]),
            json!({}),
        )
        .await;
    assert_eq!(ended.status, 200, "{:?}", ended.body);

    let base = format!("http://{}", api.serve().await?);
    let cookie = session_cookie(&base, AUDITOR).await;
    let reply = http()
        .get(format!("{base}/businesses/{business}"))
        .header(header::COOKIE, &cookie)
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::OK);
    let page = reply.text().await?;

    let client = database.connect().await?;
    for (jurisdiction, name) in names {
        let section = timeline(&page, jurisdiction);
        assert!(
            section.contains(name),
            "{jurisdiction} names {name}: {section}"
        );
        for (other, other_name) in names.iter().filter(|(code, _)| *code != jurisdiction) {
            assert!(
                !section.contains(other_name),
                "{jurisdiction} does not name {other}'s contact: {section}"
            );
        }
        let code = Jurisdiction::parse("jurisdiction", jurisdiction)?;
        let stream = ra_ledger::domain::assignment_stream(business, code);
        let events: Vec<Uuid> = client
            .query(
                "SELECT event_id FROM events WHERE stream = $1 ORDER BY stream_version",
                &[&stream],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let expected = if jurisdiction == "TX" { 2 } else { 1 };
        assert_eq!(events.len(), expected, "{stream}");
        let shown: Vec<usize> = events
            .iter()
            .map(|event| {
                section
                    .find(&event.to_string())
                    .unwrap_or_else(|| panic!("{jurisdiction} lists event {event}: {section}"))
            })
            .collect();
        assert!(shown.is_sorted(), "{jurisdiction}: events in version order");
    }
    Ok(())
}
