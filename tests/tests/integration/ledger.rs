//! The ledger against a real PostgreSQL: commands, conflicts, rollbacks, immutability,
//! bad input, rebuild and verify.

use axum::http::{Method, StatusCode};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{AUDITOR, TestApi, WRITER, contact_body, one_assignment};
use serde_json::json;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_write_events_outbox_and_projections_together() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (contact_id, business, assignment_id) = one_assignment(&api).await;

    let replaced = api
        .post(
            &format!("/v1/assignments/{assignment_id}/replace"),
            json!({}),
        )
        .await;
    replaced.expect(StatusCode::CREATED);
    assert_eq!(replaced.body["replaces"], json!(assignment_id));
    let old = api.get(&format!("/v1/assignments/{assignment_id}")).await;
    assert_eq!(old.body["end_reason"], json!("replaced"));
    assert_eq!(old.body["replaced_by"], replaced.body["assignment_id"]);
    assert_eq!(
        old.body["ended_at"], replaced.body["started_at"],
        "REPLACE happens at one instant"
    );

    // Every event has exactly one outbox row with the same id and bytes.
    let client = database.connect().await?;
    let rows = client
        .query(
            "SELECT e.event_type, o.aggregate_type, o.aggregate_id, e.payload = o.payload \
             FROM events e JOIN outbox o USING (event_id) ORDER BY e.position",
            &[],
        )
        .await?;
    let got: Vec<(String, String, String, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let registration = format!("{business}-TX");
    assert_eq!(
        got,
        vec![
            (
                "ContactCreated".into(),
                "contact".into(),
                contact_id.clone(),
                true
            ),
            (
                "AssignmentStarted".into(),
                "assignment".into(),
                registration.clone(),
                true
            ),
            (
                "AssignmentEnded".into(),
                "assignment".into(),
                registration.clone(),
                true
            ),
            (
                "AssignmentStarted".into(),
                "assignment".into(),
                registration,
                true
            ),
        ]
    );
    assert_eq!(database.counts().await?.ledger(), [4, 4, 1, 2]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_on_the_same_stream_version_get_exactly_one_conflict() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (_, _, assignment_id) = one_assignment(&api).await;
    // Both saw the registration stream at version 1.
    let uri = format!("/v1/assignments/{assignment_id}/replace");
    let (first, second) = tokio::join!(
        api.post(&uri, json!({"expected_version": 1})),
        api.post(&uri, json!({"expected_version": 1}))
    );
    let mut statuses = [first.status, second.status];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::CREATED, StatusCode::CONFLICT],
        "{first:?} {second:?}"
    );
    let loser = if first.status == StatusCode::CONFLICT {
        first
    } else {
        second
    };
    assert_eq!(loser.error_code(), "conflict");

    // A stale expected version is refused outright.
    let stale = api.post(&uri, json!({"expected_version": 1})).await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert_eq!(database.counts().await?.ledger(), [4, 4, 1, 2]);
    Ok(())
}

/// Log lines written while the guard lives, on this thread.
#[derive(Clone, Default)]
pub(crate) struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the log").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("the log")).into_owned()
    }

    /// Runs `work` on this thread and returns what it logged at `debug` and above, records
    /// of the `log` crate included (rdkafka logs through it), bridged into tracing as
    /// `ledger`'s own subscriber does.
    pub(crate) fn while_running<T>(work: impl FnOnce() -> T) -> (T, String) {
        let _ = tracing_log::LogTracer::init();
        let log = CapturedLog::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let outcome = tracing::subscriber::with_default(subscriber, || {
            // Another test's thread may have registered a callsite of `work` just then, its
            // interest worked out before this subscriber existed and kept after (tracing
            // caches it per callsite): it would then never reach this subscriber, and the
            // log came back empty once under load. Worked out again now, with this
            // subscriber in place.
            tracing::callsite::rebuild_interest_cache();
            work()
        });
        (outcome, log.text())
    }
}

// One thread: the request runs on the thread whose log is captured.
#[tokio::test(flavor = "current_thread")]
async fn a_command_that_fails_midway_leaves_no_trace_and_logs_its_cause() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (_, _, _) = one_assignment(&api).await;
    let before = database.counts().await?.ledger();
    // Make the projection step fail after the events and outbox rows were inserted.
    let poisoned = Uuid::now_v7();
    database
        .connect()
        .await?
        .batch_execute(&format!(
            "CREATE FUNCTION fail_projection() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'injected failure'; END $$; \
             CREATE TRIGGER fail_projection BEFORE INSERT ON assignments FOR EACH ROW \
             WHEN (NEW.business_id = '{poisoned}') EXECUTE FUNCTION fail_projection();"
        ))
        .await?;
    let log = CapturedLog::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .finish();
    let reply = {
        let _guard = tracing::subscriber::set_default(subscriber);
        api.post(
            "/v1/assignments",
            json!({"business_id": poisoned, "jurisdiction": "TX"}),
        )
        .await
    };
    reply.expect_error(StatusCode::INTERNAL_SERVER_ERROR, "internal");
    assert_eq!(
        database.counts().await?.ledger(),
        before,
        "no event, outbox row or projection row"
    );
    // The client learns only that it failed, and the reference to quote.
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.contains("injected"), "{message}");
    let reference = message
        .rsplit(' ')
        .next()
        .and_then(|word| word.parse::<Uuid>().ok())
        .unwrap_or_else(|| panic!("a reference in {message:?}"));
    // The log has the cause under that reference: SQLSTATE, message, table.
    let logged = log.text();
    let line = logged
        .lines()
        .find(|line| line.contains(&reference.to_string()))
        .unwrap_or_else(|| panic!("the reference in the log:\n{logged}"));
    for part in ["injected failure", "SQLSTATE P0001"] {
        assert!(line.contains(part), "{part} in {line}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_refuses_to_rewrite_events() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    one_assignment(&api).await;
    let client = database.connect().await?;
    for statement in [
        "UPDATE events SET actor = 'mallory'",
        "DELETE FROM events",
        "TRUNCATE events CASCADE",
    ] {
        let error = client.batch_execute(statement).await.expect_err(statement);
        let db_error = error.as_db_error().expect("a server error");
        assert_eq!(db_error.code().code(), "RAL01", "{statement}: {db_error}");
        assert!(
            db_error.message().contains("append-only"),
            "{}",
            db_error.message()
        );
    }
    assert_eq!(database.counts().await?.ledger()[0], 2);
    Ok(())
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_4xx_and_writes_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (contact_id, business, assignment_id) = one_assignment(&api).await;
    let before = database.counts().await?.ledger();
    let unknown = Uuid::now_v7();
    let long_ago = "2001-01-01T00:00:00Z";

    let mut missing_field = contact_body("CA", "Golden Agents");
    missing_field.as_object_mut().unwrap().remove("name");
    let cases = [
        (
            "unknown jurisdiction",
            api.post("/v1/contacts", contact_body("XX", "Nowhere"))
                .await,
            422,
            "invalid_field",
        ),
        (
            "missing field",
            api.post("/v1/contacts", missing_field).await,
            400,
            "bad_request",
        ),
        (
            "unknown contact",
            api.post(
                &format!("/v1/contacts/{unknown}/supersede"),
                json!({"name": "N", "address": contact_body("TX", "x")["address"]}),
            )
            .await,
            404,
            "not_found",
        ),
        (
            "second primary",
            api.post("/v1/contacts", contact_body("TX", "Another"))
                .await,
            409,
            "conflict",
        ),
        (
            "second active assignment",
            api.post(
                "/v1/assignments",
                json!({"business_id": business, "jurisdiction": "TX"}),
            )
            .await,
            409,
            "conflict",
        ),
        (
            "backdated effective_at",
            api.post(
                &format!("/v1/assignments/{assignment_id}/end"),
                json!({"effective_at": long_ago}),
            )
            .await,
            422,
            "backdated_effective_at",
        ),
        (
            "malformed cursor",
            api.get(&format!(
                "/v1/businesses/{business}/assignments?cursor=not-a-cursor"
            ))
            .await,
            400,
            "invalid_cursor",
        ),
        (
            "huge limit",
            api.get(&format!(
                "/v1/businesses/{business}/assignments?limit=100000000000000000000"
            ))
            .await,
            400,
            "bad_request",
        ),
        (
            "no token",
            api.call(
                Method::POST,
                "/v1/contacts",
                None,
                Some(contact_body("CA", "Golden")),
            )
            .await,
            401,
            "unauthorized",
        ),
        (
            "wrong role",
            api.call(
                Method::POST,
                "/v1/contacts",
                Some(AUDITOR),
                Some(contact_body("CA", "Golden")),
            )
            .await,
            403,
            "forbidden",
        ),
        (
            "unknown token",
            api.call(
                Method::GET,
                &format!("/v1/contacts/{contact_id}"),
                Some("not-a-real-token"),
                None,
            )
            .await,
            401,
            "unauthorized",
        ),
        (
            "malformed id",
            api.get("/v1/contacts/not-a-uuid").await,
            400,
            "bad_request",
        ),
        (
            "future effective_at",
            api.post(
                &format!("/v1/assignments/{assignment_id}/end"),
                json!({"effective_at": "2999-01-01T00:00:00Z"}),
            )
            .await,
            422,
            "invalid_field",
        ),
    ];
    for (name, reply, status, code) in cases {
        assert_eq!(reply.status.as_u16(), status, "{name}: {:?}", reply.body);
        assert_eq!(reply.error_code(), code, "{name}: {:?}", reply.body);
        assert!(
            !reply.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{name} has a message"
        );
    }
    assert_eq!(
        database.counts().await?.ledger(),
        before,
        "refused requests wrote nothing"
    );

    // A large but valid limit is clamped, not refused.
    let clamped = api
        .get(&format!(
            "/v1/businesses/{business}/assignments?limit=1000000"
        ))
        .await;
    assert_eq!(clamped.status, StatusCode::OK);
    assert_eq!(clamped.body["limit"], json!(500));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_equals_live_and_verify_finds_an_edited_event() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (contact_id, _, assignment_id) = one_assignment(&api).await;
    api.post(
        &format!("/v1/assignments/{assignment_id}/replace"),
        json!({}),
    )
    .await;
    let superseded = api
        .post(
            &format!("/v1/contacts/{contact_id}/supersede"),
            json!({"name": "New Office", "address": contact_body("TX", "x")["address"]}),
        )
        .await;
    superseded.expect(StatusCode::ACCEPTED);

    let mut client = ra_ledger::db::pool(&database.url, "rebuild-test", 1)?
        .get()
        .await?;
    let report = ra_ledger::rebuild::rebuild(&mut client, true, |_, _| {}).await?;
    // Contact created, assignment started, REPLACE (2), supersede (2), the run's first
    // page request.
    assert_eq!(report.events, 7);
    assert_eq!(
        report.differences,
        vec![("contacts".into(), 0), ("assignments".into(), 0)]
    );

    // A projection row drifts: verify notices, rebuild repairs.
    client
        .batch_execute("UPDATE contacts SET name = 'drifted' WHERE status = 'primary'")
        .await?;
    let drifted = ra_ledger::rebuild::rebuild(&mut client, true, |_, _| {}).await?;
    assert_eq!(
        drifted.differences,
        vec![("contacts".into(), 2), ("assignments".into(), 0)]
    );
    ra_ledger::rebuild::rebuild(&mut client, false, |_, _| {}).await?;
    let repaired = ra_ledger::rebuild::rebuild(&mut client, true, |_, _| {}).await?;
    assert_eq!(
        repaired.differences,
        vec![("contacts".into(), 0), ("assignments".into(), 0)]
    );

    // The chains verify; then a superuser edits an event with the guard disabled.
    let clean = ra_ledger::verify::verify(&client, |_| {}).await?;
    assert_eq!((clean.events, clean.broken), (7, None));
    client
        .batch_execute(
            "ALTER TABLE events DISABLE TRIGGER events_append_only_rows; \
             UPDATE events SET actor = 'mallory' WHERE event_type = 'AssignmentEnded'; \
             ALTER TABLE events ENABLE TRIGGER events_append_only_rows;",
        )
        .await?;
    let tampered = ra_ledger::verify::verify(&client, |_| {}).await?;
    let broken = tampered.broken.expect("the edit is detected");
    assert_eq!(broken.stream_version, 2);
    assert!(broken.stream.starts_with("assignment-"), "{broken}");
    assert!(broken.problem.contains("altered"), "{broken}");
    Ok(())
}

/// Issue 35, item 10: a table of the operator's with a foreign key to `contacts`, `ON
/// DELETE CASCADE`. The offline rebuild swapped with DELETE and had no check: it went
/// through and the cascade took the table's rows with it. Both rebuilds now refuse, name
/// the key, and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_rebuilds_refuse_projections_that_other_tables_reference() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (contact_id, _, _) = one_assignment(&api).await;
    let client = database.connect().await?;
    client
        .batch_execute(&format!(
            "CREATE TABLE crm_notes (contact_id uuid REFERENCES contacts ON DELETE CASCADE, \
                                     note text); \
             INSERT INTO crm_notes VALUES ('{contact_id}', 'call back on Monday')"
        ))
        .await?;
    let before = database.counts().await?.ledger();

    let pool = ra_ledger::db::pool(&database.url, "rebuild-test", 2)?;
    let mut work = pool.get().await?;
    let offline = ra_ledger::rebuild::rebuild(&mut work, false, |_, _| {}).await;
    drop(work);
    let online = ra_ledger::rebuild::online::rebuild_online(
        &pool,
        ra_ledger::rebuild::online::OnlineOptions {
            verify_only: false,
            chunk: 100,
            pause_ratio: 0.0,
        },
        |_, _, _| {},
    )
    .await;
    for (how, outcome) in [("offline", offline.err()), ("online", online.err())] {
        match outcome {
            Some(ra_ledger::rebuild::RebuildError::Referenced(keys)) => {
                assert_eq!(keys, "crm_notes_contact_id_fkey on crm_notes", "{how}")
            }
            other => panic!("{how}: {other:?}"),
        }
    }
    let notes: i64 = client
        .query_one("SELECT count(*) FROM crm_notes", &[])
        .await?
        .get(0);
    assert_eq!(notes, 1, "the cascade took the operator's rows");
    assert_eq!(database.counts().await?.ledger(), before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_is_routed() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let document = api.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(document.status, StatusCode::OK);
    assert_eq!(document.body["openapi"], json!("3.1.0"));
    let paths = document.body["paths"].as_object().expect("paths");
    assert!(paths.len() >= 13, "{} paths documented", paths.len());
    let id = Uuid::now_v7().to_string();
    for (path, operations) in paths {
        let uri = path
            .replace("{id}", &id)
            .replace("{business_id}", &id)
            .replace("{jurisdiction}", "TX");
        for method in operations.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes())?;
            let body = (method == Method::POST).then(|| json!({}));
            let reply = api.call(method.clone(), &uri, Some(WRITER), body).await;
            // An unrouted path gets axum's bare 404 or 405; our handlers answer their errors
            // in JSON (a contract file, `/contracts/…`, is YAML or .proto text when found).
            let bare_not_found = reply.status == StatusCode::NOT_FOUND && reply.body.is_null();
            assert!(
                !bare_not_found && reply.status != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is documented but not routed ({})",
                reply.status
            );
        }
    }
    Ok(())
}

/// Whether a session named `application_name` waits for a lock in this database.
async fn waits_for_a_lock(
    client: &tokio_postgres::Client,
    application_name: &str,
) -> anyhow::Result<bool> {
    Ok(client
        .query_one(
            "SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
             WHERE NOT l.granted AND a.application_name = $1 AND a.datname = current_database()",
            &[&application_name],
        )
        .await?
        .get(0))
}

/// A writer locks projection rows, then appends events; an offline rebuild that took
/// `events` first and the projections at its end closed a cycle with it, and PostgreSQL
/// aborted one of the two (the rebuild, after all its work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_rebuild_and_a_writer_mid_command_both_finish() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let (_, _, assignment_id) = one_assignment(&api).await;
    let assignment_id: Uuid = assignment_id.parse()?;
    // A writer mid-command, as `end` is: its assignment row locked, its events not yet in.
    let writer = database.connect().await?;
    writer.batch_execute("BEGIN").await?;
    writer
        .execute(
            "SELECT 1 FROM assignments WHERE assignment_id = $1 FOR UPDATE",
            &[&assignment_id],
        )
        .await?;
    let pool = ra_ledger::db::pool(&database.url, "rebuild-under-a-writer", 1)?;
    let rebuild = tokio::spawn(async move {
        let mut client = pool.get().await?;
        anyhow::Ok(ra_ledger::rebuild::rebuild(&mut client, false, |_, _| {}).await?)
    });
    let observer = database.connect().await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !waits_for_a_lock(&observer, "rebuild-under-a-writer").await? {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the rebuild never waited for the writer"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    // The writer appends: the lock an INSERT INTO events takes. Then it commits.
    let appended = writer
        .batch_execute("LOCK TABLE events IN ROW EXCLUSIVE MODE")
        .await;
    let committed = writer.batch_execute("COMMIT").await;
    assert!(
        appended.is_ok() && committed.is_ok(),
        "the writer failed: {appended:?} {committed:?}"
    );
    let report = rebuild.await??;
    assert!(report.events >= 2, "{report:?}");
    let mut client = ra_ledger::db::pool(&database.url, "rebuild-check", 1)?
        .get()
        .await?;
    let check = ra_ledger::rebuild::rebuild(&mut client, true, |_, _| {}).await?;
    assert_eq!(
        check.differences,
        vec![("contacts".into(), 0), ("assignments".into(), 0)]
    );
    Ok(())
}
