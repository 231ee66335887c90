//! Paths and query strings: control characters, malformed and out-of-range times.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_paths_and_queries_of_reads_are_refused() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = database.counts().await?;
    let business = &world.business;
    for bad in ["%00", "%1B%5B31m", "%0A", "%7F", "%E2%80%AE"] {
        for (uri, code) in [
            (format!("/v1/contacts/{bad}"), "bad_request"),
            (format!("/v1/contacts/{bad}/lineage"), "bad_request"),
            (
                format!("/v1/contacts/{bad}/reassignment-runs"),
                "bad_request",
            ),
            (format!("/v1/reassignment-runs/{bad}"), "bad_request"),
            (format!("/v1/assignments/{bad}"), "bad_request"),
            (
                format!("/v1/businesses/{bad}/jurisdictions/TX/registered-agent"),
                "bad_request",
            ),
            (
                format!("/v1/businesses/{business}/jurisdictions/T{bad}X/registered-agent"),
                "bad_request",
            ),
            (
                format!("/v1/businesses/{business}/jurisdictions/TX/registered-agent?at=2026{bad}"),
                "bad_request",
            ),
            (
                format!(
                    "/v1/businesses/{business}/jurisdictions/TX/registered-agents?from={bad}&to=2026-01-01T00:00:00Z"
                ),
                "bad_request",
            ),
            (
                format!("/v1/businesses/{business}/assignments?cursor={bad}"),
                "invalid_cursor",
            ),
            (
                format!("/v1/businesses/{business}/assignments?limit={bad}"),
                "bad_request",
            ),
        ] {
            let reply = world.api.get(&uri).await;
            check(&format!("GET {uri}"), &reply, 400, code);
        }
    }
    assert_eq!(
        database.counts().await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_and_malformed_times_are_refused() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = database.counts().await?;
    let registration = format!("/v1/businesses/{}/jurisdictions/TX", world.business);
    // Query times: a year PostgreSQL cannot store, a year RFC 3339 cannot write, and text.
    for (value, status, code) in [
        ("-5000-01-01T00:00:00Z", 400, "invalid_field"),
        ("0000-12-31T00:00:00Z", 400, "invalid_field"),
        ("%2B10000-01-01T00:00:00Z", 400, "invalid_field"),
        ("%2B275760-09-13T00:00:00Z", 400, "bad_request"),
        ("yesterday", 400, "bad_request"),
        ("2026-02-30T00:00:00Z", 400, "bad_request"),
        ("", 400, "bad_request"),
    ] {
        for uri in [
            format!("{registration}/registered-agent?at={value}"),
            format!("{registration}/registered-agent?known_at={value}"),
            format!("{registration}/registered-agents?from={value}&to=2026-01-01T00:00:00Z"),
            format!("{registration}/registered-agents?from=2026-01-01T00:00:00Z&to={value}"),
        ] {
            let reply = world.api.get(&uri).await;
            check(&format!("GET {uri}"), &reply, status, code);
        }
    }
    // Body times.
    for (uri, body) in world.writes() {
        if uri.ends_with("/reassignment-runs") {
            continue; // Takes no time.
        }
        for (value, status, code) in [
            ("-5000-01-01T00:00:00Z", 422, "invalid_field"),
            ("+10000-01-01T00:00:00Z", 422, "invalid_field"),
            ("not a time", 400, "bad_request"),
        ] {
            let reply = world
                .api
                .post(&uri, with(&body, "effective_at", json!(value)))
                .await;
            check(
                &format!("POST {uri} effective_at={value}"),
                &reply,
                status,
                code,
            );
        }
    }
    assert_eq!(
        database.counts().await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}
