//! Many writers ending, replacing and assigning while a run pages through the same rows,
//! over several seeds.

use super::*;

/// What one writer saw: statuses by code.
type Statuses = HashMap<u16, usize>;

/// A writer ending and replacing random assignments of `businesses` until `stop`.
async fn writer(
    api: TestApi,
    businesses: Vec<Uuid>,
    seed: u64,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<Statuses> {
    let mut rng = StdRng::seed_from_u64(seed);
    let pool = api.ledger.pool().clone();
    let client = pool.get().await?;
    let mut statuses = Statuses::new();
    while !stop.is_cancelled() {
        let business = businesses[rng.random_range(0..businesses.len())];
        let active: Option<Uuid> = client
            .query_opt(
                "SELECT assignment_id FROM assignments WHERE business_id = $1 AND ended_at IS NULL",
                &[&business],
            )
            .await?
            .map(|row| row.get(0));
        let reply = match (active, rng.random_range(0..3)) {
            (None, _) => {
                api.post(
                    "/v1/assignments",
                    json!({"business_id": business, "jurisdiction": TX}),
                )
                .await
            }
            (Some(id), 0) => {
                api.post(&format!("/v1/assignments/{id}/end"), json!({}))
                    .await
            }
            (Some(id), _) => {
                api.post(&format!("/v1/assignments/{id}/replace"), json!({}))
                    .await
            }
        };
        assert!(
            !reply.status.is_server_error(),
            "a race must not be a 500: {:?}",
            reply.body
        );
        *statuses.entry(reply.status.as_u16()).or_default() += 1;
    }
    Ok(statuses)
}

/// One seed of the concurrency test: three writers against a run of 600 rows.
// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
async fn writers_against_a_run(seed: u64) -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (api, old, businesses) = seeded(&database, 600).await?;
    let client = database.connect().await?;
    let (run, new) = supersede(&api, old, 50).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let writers: Vec<_> = (0..3)
        .map(|index| {
            tokio::spawn(writer(
                api.clone(),
                businesses.clone(),
                seed * 10 + index,
                stop.clone(),
            ))
        })
        .collect();
    let status = follow_chain(&database, run).await;
    stop.cancel();
    let mut seen = Statuses::new();
    for writer in writers {
        for (code, n) in writer.await?? {
            *seen.entry(code).or_default() += n;
        }
    }
    let status: RunStatus = status?;
    eprintln!("seed {seed}: writers saw {seen:?}; run {status:?}");
    assert!(
        seen.keys().all(|code| [200, 201, 409].contains(code)),
        "{seen:?}"
    );
    assert_eq!(status.status, RunState::Completed);
    assert_eq!(status.failed, 0, "{status:#?}");
    assert_eq!(
        active_on(&client, old).await,
        0,
        "nothing left on the old contact"
    );
    assert_eq!(status.remaining, 0);
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM assignments WHERE ended_at IS NULL AND business_id = ANY($1) \
             AND contact_id <> $2",
            &[&businesses, &new]
        )
        .await,
        0,
        "every active assignment is on the new contact"
    );
    assert_invariants(&client).await;
    // The counts add up: every row active on the old contact at the start ended exactly
    // once, the run's own events match its count of rows it moved (the others a writer
    // changed first)...
    let request_ids: Vec<Uuid> = page_requests(&client, run)
        .await?
        .iter()
        .map(|request| request.request_id)
        .collect();
    let moved_by_run = count(
        &client,
        "SELECT count(*) FROM events WHERE event_type = 'AssignmentEnded' AND causation_id = ANY($1)",
        &[&request_ids],
    )
    .await;
    assert_eq!(
        moved_by_run, status.replaced,
        "the run's events match its count"
    );
    let ended_on_old = count(
        &client,
        "SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NOT NULL",
        &[&old],
    )
    .await;
    assert_eq!(
        ended_on_old, status.total_at_start,
        "every original row ended, once"
    );
    // ...and the pages account for every candidate they read.
    let candidates = count(
        &client,
        "SELECT coalesce(sum(candidates), 0)::bigint FROM reassignment_pages WHERE run_id = $1",
        &[&run],
    )
    .await;
    assert_eq!(
        status.replaced + status.skipped + status.failed,
        candidates,
        "{status:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_ending_and_replacing_while_a_run_pages_never_get_a_500() -> anyhow::Result<()> {
    for seed in 1..=4 {
        writers_against_a_run(seed).await?;
    }
    Ok(())
}
