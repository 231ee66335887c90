//! The edges of a run: double clicks, poison rows, bad input, two runs racing, an assign
//! racing a supersede.

use super::*;

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_clicks_one_after_the_other_and_at_the_same_moment() -> anyhow::Result<()> {
    let (database, _topics, relay, config) = relayed().await?;
    let seeded = seeded(&database, 1_000).await?;
    let old = seeded.contact_id;

    // Two supersede clicks at the same moment: one wins, the other is refused; one run.
    let body = json!({"name": "Second Office", "address": contact_body(TX, "x")["address"], "page_size": 50});
    let uri = format!("/v1/contacts/{old}/supersede");
    let (a, b) = tokio::join!(
        seeded.api.post(&uri, body.clone()),
        seeded.api.post(&uri, body.clone())
    );
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::ACCEPTED, StatusCode::CONFLICT],
        "{a:?} {b:?}"
    );
    let winner = if a.status == StatusCode::ACCEPTED {
        a
    } else {
        b
    };
    let first_run: Uuid = winner.str("run_id").parse()?;
    let new: Uuid = winner.body["new"]["contact_id"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    assert_eq!(
        count(
            &seeded.client,
            "SELECT count(*) FROM reassignment_runs",
            &[]
        )
        .await,
        1
    );

    // A second run for the same contact started at the same moment as the first one's
    // pages: both chains go at once, on two workers.
    let second = seeded
        .api
        .post(
            &format!("/v1/contacts/{old}/reassignment-runs"),
            json!({"page_size": 50}),
        )
        .await;
    second.expect(StatusCode::ACCEPTED);
    let second_run: Uuid = second.str("run_id").parse()?;
    let workers = [
        RunningWorker::start(config.clone()),
        RunningWorker::start(config.clone()),
    ];
    // And a third racer driving the second run's first page directly.
    let first_page = page_requests(&seeded.client, second_run).await?.remove(0);
    let _ = reassign::handle(seeded.api.ledger.pool(), &first_page, 3).await;
    let a = wait_for_run(&database, first_run, Duration::from_secs(120), completed).await?;
    let b = wait_for_run(&database, second_run, Duration::from_secs(120), completed).await?;
    assert_eq!(a.replaced + b.replaced, 1_000, "{a:#?}\n{b:#?}");
    assert_eq!(a.failed + b.failed, 0);
    assert_all_moved(&seeded, old, new).await;
    println!(
        "same moment: run 1 replaced {} skipped {}, run 2 replaced {} skipped {}",
        a.replaced, a.skipped, b.replaced, b.skipped
    );

    // One after the other: a third run finds everything done and writes nothing.
    let assignment_events = "SELECT count(*) FROM events WHERE stream LIKE 'assignment-%'";
    let before = count(&seeded.client, assignment_events, &[]).await;
    let third = seeded
        .api
        .post(&format!("/v1/contacts/{old}/reassignment-runs"), json!({}))
        .await;
    third.expect(StatusCode::ACCEPTED);
    let third_run: Uuid = third.str("run_id").parse()?;
    let c = wait_for_run(&database, third_run, Duration::from_secs(60), completed).await?;
    assert_eq!((c.replaced, c.skipped, c.failed, c.pages), (0, 0, 0, 1));
    assert_eq!(count(&seeded.client, assignment_events, &[]).await, before);
    // And a second supersede of the same contact is refused, naming its successor.
    let again = seeded.api.post(&uri, body).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(
        again.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&new.to_string())
    );

    for worker in workers {
        worker.stop().await?;
    }
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_row_in_the_first_page_is_recorded_and_the_chain_moves_past_it()
-> anyhow::Result<()> {
    let (database, _topics, relay, config) = relayed().await?;
    let worker = RunningWorker::start(config.clone());
    let (seeded, poison) = poisoned_then_seeded(&database, 1, 249).await?;
    let (contact_id, poisoned_business) = (seeded.contact_id, poison[0]);
    let (run_id, new) = supersede(&seeded.api, contact_id, 100).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    assert_eq!(
        (status.replaced, status.failed, status.pages),
        (249, 1, 3),
        "{status:#?}"
    );
    let failure = &status.failures[0];
    assert_eq!(failure.business_id, poisoned_business);
    assert_eq!(
        failure.attempts, 4,
        "three whole-page attempts and one on its own"
    );
    assert!(
        failure.reason.contains("earlier than the previous event"),
        "{}",
        failure.reason
    );
    assert_all_moved(&seeded, contact_id, new).await;
    assert_eq!(
        count(&seeded.client, "SELECT count(*) FROM assignments WHERE business_id = $1 AND ended_at IS NULL AND contact_id = $2", &[&poisoned_business, &contact_id]).await,
        1,
        "the poison row stays where it was"
    );
    let row_failed = count(
        &seeded.client,
        "SELECT count(*) FROM events WHERE stream = $1 AND event_type = 'ReassignmentRowFailed'",
        &[&format!("reassignment-{run_id}")],
    )
    .await;
    assert_eq!(row_failed, 1);
    let isolated = count(
        &seeded.client,
        "SELECT count(*) FROM reassignment_pages WHERE run_id = $1 AND isolated",
        &[&run_id],
    )
    .await;
    assert_eq!(isolated, 1, "only the poisoned page ran row by row");
    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reassignment_requests_get_clear_errors_and_change_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 3).await?;
    let old = seeded.contact_id;
    let events = "SELECT count(*) FROM events";
    let before = count(&seeded.client, events, &[]).await;
    let address = contact_body(TX, "x")["address"].clone();
    for (uri, body, status, needle) in [
        (
            format!("/v1/contacts/{old}/supersede"),
            json!({"name": "N", "address": address, "page_size": 0}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "page_size",
        ),
        (
            format!("/v1/contacts/{old}/supersede"),
            json!({"name": "N", "address": address, "page_size": 10_001}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "page_size",
        ),
        (
            format!("/v1/contacts/{old}/reassignment-runs"),
            json!({}),
            StatusCode::CONFLICT,
            "supersede it first",
        ),
        (
            format!("/v1/contacts/{}/reassignment-runs", Uuid::now_v7()),
            json!({}),
            StatusCode::NOT_FOUND,
            "not found",
        ),
        (
            "/v1/contacts/not-a-uuid/reassignment-runs".to_owned(),
            json!({}),
            StatusCode::BAD_REQUEST,
            "not a UUID",
        ),
        (
            format!("/v1/contacts/{old}/reassignment-runs"),
            json!({"page_sise": 5}),
            StatusCode::BAD_REQUEST,
            "page_sise",
        ),
    ] {
        let reply = seeded.api.post(&uri, body).await;
        assert_eq!(reply.status, status, "{uri}: {:?}", reply.body);
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{uri}: {message}");
    }
    let missing = seeded
        .api
        .get(&format!("/v1/reassignment-runs/{}", Uuid::now_v7()))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let garbage = seeded.api.get("/v1/reassignment-runs/nope").await;
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST);
    let unauthenticated = seeded
        .api
        .call(
            axum::http::Method::GET,
            &format!("/v1/reassignment-runs/{}", Uuid::now_v7()),
            None,
            None,
        )
        .await;
    assert_eq!(unauthenticated.status, StatusCode::UNAUTHORIZED);
    assert_eq!(count(&seeded.client, events, &[]).await, before);
    assert_eq!(
        count(
            &seeded.client,
            "SELECT count(*) FROM reassignment_runs",
            &[]
        )
        .await,
        0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_racing_for_the_same_rows_skip_cleanly() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 100).await?;
    let pool = seeded.api.ledger.pool().clone();
    let old = seeded.contact_id;
    let (first_run, new) = supersede(&seeded.api, old, 100).await;
    let second = seeded
        .api
        .post(
            &format!("/v1/contacts/{old}/reassignment-runs"),
            json!({"page_size": 100}),
        )
        .await;
    let second_run: Uuid = second.str("run_id").parse()?;
    let first = page_requests(&seeded.client, first_run).await?.remove(0);
    let second = page_requests(&seeded.client, second_run).await?.remove(0);

    // Hold the first row so both pages read the same candidates and queue on its lock.
    let mut blocker = database.connect().await?;
    let hold = blocker.transaction().await?;
    hold.execute(
        "SELECT 1 FROM assignments WHERE contact_id = $1 AND ended_at IS NULL \
         ORDER BY assignment_id LIMIT 1 FOR UPDATE",
        &[&old],
    )
    .await?;
    let a = tokio::spawn({
        let pool = pool.clone();
        async move { reassign::handle(&pool, &first, 3).await }
    });
    lock_waiters_reach(&seeded.client, 1, "the first page queues on the row lock").await;
    let b = tokio::spawn({
        let pool = pool.clone();
        async move { reassign::handle(&pool, &second, 3).await }
    });
    lock_waiters_reach(&seeded.client, 2, "the second page queues behind it").await;
    hold.rollback().await?;
    let reports: Vec<(usize, usize)> = [a.await??, b.await??]
        .into_iter()
        .map(|outcome| match outcome {
            PageOutcome::Processed(report) => (report.replaced, report.skipped),
            other => panic!("both pages must run: {other:?}"),
        })
        .collect();
    assert_eq!(
        reports,
        vec![(100, 0), (0, 100)],
        "the second found every row finished"
    );
    assert_all_moved(&seeded, old, new).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_poison_rows_than_a_page_cannot_starve_the_rows_behind_them() -> anyhow::Result<()> {
    // The bounded-read starvation case: every row of the first pages fails for good, and a
    // page holds fewer rows than fail. The cursor must still move past them to the rows
    // that can move.
    let (database, _topics, relay, config) = relayed().await?;
    let worker = RunningWorker::start(config.clone());
    let (seeded, poisoned) = poisoned_then_seeded(&database, 12, 8).await?;
    let contact_id = seeded.contact_id;
    let (run_id, new) = supersede(&seeded.api, contact_id, 5).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    // Pages: 5 poisoned, 5 poisoned, 2 poisoned + 3 good, 5 good, then the empty short page.
    assert_eq!(
        (status.replaced, status.failed, status.pages),
        (8, 12, 5),
        "{status:#?}"
    );
    let failed: HashSet<Uuid> = status.failures.iter().map(|f| f.business_id).collect();
    assert_eq!(failed, poisoned.into_iter().collect::<HashSet<_>>());
    assert_all_moved(&seeded, contact_id, new).await;
    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assign_racing_a_supersede_never_lands_on_the_old_contact_afterwards()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 10).await?;
    let old = seeded.contact_id;
    let texas = Jurisdiction::parse("jurisdiction", TX)?;
    // An assign in flight: it holds the jurisdiction's shared lock, as `assign` does from
    // before it reads the primary contact until it commits.
    let mut in_flight = database.connect().await?;
    let assigning = in_flight.transaction().await?;
    let (class, object) = ra_ledger::queries::primary_contact_lock(texas);
    assigning
        .query_one(
            ra_ledger::queries::SHARE_PRIMARY_CONTACT,
            &[&class, &object],
        )
        .await?;
    // The supersede waits for it...
    let supersede = tokio::spawn({
        let api = seeded.api.clone();
        async move { supersede(&api, old, 100).await }
    });
    lock_waiters_reach(
        &seeded.client,
        1,
        "the supersede waits for the assign in flight",
    )
    .await;
    assert_eq!(lock_waiters(&seeded.client).await, 1);
    assert!(!supersede.is_finished());
    // ...and an assign that arrives meanwhile waits for the supersede, then gets the new
    // contact.
    let late = Uuid::now_v7();
    let assign = tokio::spawn({
        let api = seeded.api.clone();
        async move {
            api.post(
                "/v1/assignments",
                json!({"business_id": late, "jurisdiction": TX}),
            )
            .await
        }
    });
    lock_waiters_reach(
        &seeded.client,
        2,
        "the late assign queues behind the supersede",
    )
    .await;
    assert_eq!(lock_waiters(&seeded.client).await, 2);
    assigning.commit().await?;
    let (_, new) = supersede.await?;
    let assigned = assign.await?;
    assigned.expect(StatusCode::CREATED);
    assert_eq!(assigned.body["contact_id"], json!(new.to_string()));
    Ok(())
}
