//! What the relay depends on in the database, broken under a running relay. Each way a
//! publication stops carrying the outbox used to lose committed events for good, in silence
//! (heartbeats confirmed the slot past them, and retention deleted them). Now the relay
//! stops and names the cause and the fix, the slot is not confirmed past the rows, the rows
//! stay, and `ledger relay recover` publishes them: nothing is lost.
//!
//! The guard of migration V17 refuses each of these commands unless the session allows it
//! (its own test is here too); the relay tests allow it, to reach the relay's own check, as
//! a superuser can bypass any trigger.

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_cdc::relay::publication::PublicationError;
use ra_ledger_cdc::relay::recover::{RecoverOptions, recover};
use ra_ledger_tests::relay::{Collector, RunningRelay, insert_backlog, parse_lsn, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use tokio_postgres::Client;

/// What a session says to run a command the guard would refuse.
const ALLOW: &str = "SET ra_ledger.allow_outbox_publication_change = on";

/// The relay's publication in a test database (migration V1's).
const PUBLICATION: &str = "ra_ledger_outbox";

/// A relay streaming at least once, its first events in Kafka (so its slot is registered
/// with the publication's identity), and a probe: a slot of the test's own on a publication
/// nobody alters, which tells at which LSN each transaction committed.
struct Streaming {
    _database: TestDatabase,
    _topics: TestTopics,
    config: RelayConfig,
    client: Client,
    relay: RunningRelay,
    collector: Collector,
    expected: HashSet<String>,
    probe: String,
}

async fn streaming() -> anyhow::Result<Streaming> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    // The publication is named the same in every test's database (the rebuilt outbox
    // joins it by name); slots are the cluster's.
    let probe = format!("probe_{}", ra_ledger_tests::random_suffix());
    client
        .batch_execute("CREATE PUBLICATION probe FOR TABLE outbox WITH (publish = 'insert')")
        .await?;
    client
        .execute(
            "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&probe],
        )
        .await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let expected: HashSet<String> = insert_backlog(&client, 3, 2, 32)
        .await?
        .into_iter()
        .collect();
    anyhow::ensure!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await,
        "the first events did not reach Kafka"
    );
    Ok(Streaming {
        _database: database,
        _topics: topics,
        config,
        client,
        relay,
        collector,
        expected,
        probe,
    })
}

/// Where the transaction that wrote `event_id` committed: the start of its commit record,
/// as pgoutput's Begin message gives it on the `probe` slot (publication `probe`). PostgreSQL skips a transaction
/// whose commit starts below a slot's confirmed position.
async fn commit_lsn_of(client: &Client, probe: &str, event_id: &str) -> anyhow::Result<u64> {
    let xid: i64 = client
        .query_one(
            "SELECT txid::text::bigint & 4294967295 FROM outbox WHERE event_id = $1::text::uuid",
            &[&event_id],
        )
        .await?
        .get(0);
    let changes = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes($1::text::name, NULL, NULL, \
             'proto_version', '1', 'publication_names', 'probe') WHERE xid::text::bigint = $2",
            &[&probe, &xid],
        )
        .await?;
    for change in changes {
        let data: Vec<u8> = change.get(0);
        if data.first() == Some(&b'B') && data.len() >= 9 {
            return Ok(u64::from_be_bytes(data[1..9].try_into()?));
        }
    }
    anyhow::bail!("the probe saw no transaction {xid}")
}

async fn slot_confirmed(client: &Client, slot: &str) -> anyhow::Result<u64> {
    let text: Option<String> = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .get(0);
    Ok(text.as_deref().map_or(0, parse_lsn))
}

/// A way of breaking the publication under a streaming relay.
struct Break {
    /// Run (with the guard allowing it) before the rows are written.
    before_rows: &'static str,
    /// Run after them (an operator putting it back), or nothing.
    after_rows: &'static str,
    /// Whether the rows are written in the same transaction as the two: altered and
    /// altered back before any check could see it.
    one_transaction: bool,
    /// Puts the publication right, before `ledger relay recover`.
    fix: &'static str,
    /// The refusal expected.
    refusal: fn(&RelayError) -> bool,
}

const INSERT_ROWS: &str = "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
     SELECT gen_random_uuid(), 'contact', 'agg-' || n, 'TestEvent', '\\x0a'::bytea \
     FROM generate_series(1, 3) n RETURNING event_id::text";

const RESTORE: &str = "DROP PUBLICATION IF EXISTS ra_ledger_outbox; \
     CREATE PUBLICATION ra_ledger_outbox FOR TABLE outbox WITH (publish = 'insert')";

/// Breaks the publication as `way` says while the relay streams, writes three rows, and
/// checks: the relay stops with the refusal expected, the slot is not confirmed past the
/// rows, the rows stay; then puts the publication right, recovers, restarts, and checks that
/// every event reached Kafka.
async fn refused_then_recovered(way: Break) -> anyhow::Result<()> {
    let Streaming {
        _database,
        _topics,
        config,
        client,
        relay,
        mut collector,
        mut expected,
        probe,
    } = streaming().await?;
    client.batch_execute(ALLOW).await?;
    if way.one_transaction {
        client.batch_execute("BEGIN").await?;
    }
    client.batch_execute(way.before_rows).await?;
    let rows: Vec<String> = client
        .query(INSERT_ROWS, &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if !way.after_rows.is_empty() {
        client.batch_execute(way.after_rows).await?;
    }
    if way.one_transaction {
        client.batch_execute("COMMIT").await?;
    }
    let error = relay.refusal(Duration::from_secs(30)).await?;
    assert!(
        (way.refusal)(&error),
        "stopped for another reason: {error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("ledger relay recover"),
        "names the fix: {text}"
    );
    // Heartbeats used to confirm the slot past the rows within seconds: give them time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let committed = commit_lsn_of(&client, &probe, &rows[0]).await?;
    let confirmed = slot_confirmed(&client, &config.slot).await?;
    assert!(
        confirmed <= committed,
        "the slot was confirmed to {confirmed:X}, past the rows the stream left out (committed at {committed:X})"
    );
    let kept: i64 = client
        .query_one(
            "SELECT count(*) FROM outbox WHERE event_id::text = ANY($1)",
            &[&rows],
        )
        .await?
        .get(0);
    assert_eq!(kept, 3, "the rows stay");
    let left_out: HashSet<String> = rows.iter().cloned().collect();
    assert!(
        !collector.until_all(Duration::from_secs(1), &left_out).await,
        "the broken publication carried the rows after all: this test proves nothing"
    );

    client.batch_execute(way.fix).await?;
    let recovered = recover(&config, &RecoverOptions::default()).await?;
    assert!(recovered.outbox_rows >= 3, "{recovered:?}");
    let relay = RunningRelay::start(config.clone());
    let later = insert_backlog(&client, 2, 1, 32).await?;
    expected.extend(rows);
    expected.extend(later);
    let all = collector
        .until_all(Duration::from_secs(60), &expected)
        .await;
    relay.stop().await?;
    assert!(all, "events missing after the recovery");
    Ok(())
}

fn wrong(reason: &'static str) -> impl Fn(&RelayError) -> bool {
    move |error| {
        matches!(
            error,
            RelayError::Publication(PublicationError::Wrong { reason: found, .. })
                if found.contains(reason)
        )
    }
}

fn publication(error: &RelayError) -> Option<&PublicationError> {
    match error {
        RelayError::Publication(error) => Some(error),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_dropped_from_the_publication_is_refused() -> anyhow::Result<()> {
    refused_then_recovered(Break {
        before_rows: "ALTER PUBLICATION ra_ledger_outbox DROP TABLE outbox",
        after_rows: "",
        one_transaction: false,
        fix: "ALTER PUBLICATION ra_ledger_outbox ADD TABLE outbox",
        refusal: |error| wrong("it does not carry")(error),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_filter_is_refused() -> anyhow::Result<()> {
    refused_then_recovered(Break {
        before_rows: "ALTER PUBLICATION ra_ledger_outbox SET TABLE outbox WHERE (aggregate_type <> 'contact')",
        after_rows: "",
        one_transaction: false,
        fix: RESTORE,
        refusal: |error| wrong("row filter")(error),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_list_is_refused() -> anyhow::Result<()> {
    refused_then_recovered(Break {
        // Without the payload: the check, or the Relation message that comes with the
        // first row, whichever is first.
        before_rows: "ALTER PUBLICATION ra_ledger_outbox SET TABLE outbox (id, event_id, aggregate_type, aggregate_id, event_type, created_at)",
        after_rows: "",
        one_transaction: false,
        fix: RESTORE,
        refusal: |error| {
            wrong("column list")(error)
                || matches!(
                    error,
                    RelayError::Outbox(ra_ledger_cdc::outbox::OutboxError::MissingColumn {
                        column: "payload",
                        ..
                    })
                )
        },
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_without_inserts_is_refused() -> anyhow::Result<()> {
    refused_then_recovered(Break {
        before_rows: "ALTER PUBLICATION ra_ledger_outbox SET (publish = 'update, delete')",
        after_rows: "",
        one_transaction: false,
        fix: "ALTER PUBLICATION ra_ledger_outbox SET (publish = 'insert')",
        refusal: |error| wrong("not 'insert' alone")(error),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_publication_is_refused_and_never_re_created_in_silence() -> anyhow::Result<()> {
    // PostgreSQL 15 to 17 end the stream ("publication does not exist") at the first change
    // decoded after the drop; 18 sends nothing. Either way the relay must not re-create it.
    refused_then_recovered(Break {
        before_rows: "DROP PUBLICATION ra_ledger_outbox",
        after_rows: "",
        one_transaction: false,
        fix: "CREATE PUBLICATION ra_ledger_outbox FOR TABLE outbox WITH (publish = 'insert')",
        refusal: |error| matches!(publication(error), Some(PublicationError::Missing { .. })),
    })
    .await
}

/// Item 13: the relay took any relation named `outbox`, in any schema. The publication now
/// carries another schema's outbox instead of the relay's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_schemas_outbox_is_refused() -> anyhow::Result<()> {
    refused_then_recovered(Break {
        before_rows: "CREATE SCHEMA audit; \
             CREATE TABLE audit.outbox (LIKE public.outbox INCLUDING ALL); \
             ALTER PUBLICATION ra_ledger_outbox SET TABLE audit.outbox",
        after_rows: "",
        one_transaction: false,
        fix: RESTORE,
        refusal: |error| wrong("it carries audit.outbox too")(error),
    })
    .await
}

/// Item 13: a column of another type used to be read as the type the relay expects (in
/// binary mode any 8 bytes pass as a `bigint`, any UTF-8 as text): a mangled Kafka key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_of_another_type_is_refused() -> anyhow::Result<()> {
    refused_then_recovered(Break {
        before_rows: "ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE varchar(200)",
        after_rows: "",
        one_transaction: false,
        fix: "ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE text",
        refusal: |error| {
            error.to_string().contains(
                "aggregate_id is of type character varying(200), and the relay reads text",
            ) || matches!(
                error,
                RelayError::Outbox(ra_ledger_cdc::outbox::OutboxError::ColumnType {
                    column: "aggregate_id",
                    ..
                })
            )
        },
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_outbox_is_refused() -> anyhow::Result<()> {
    // Create, copy, drop, rename (the idea the retention module discusses), the new table
    // added back to the publication before any row is written.
    refused_then_recovered(Break {
        before_rows: "CREATE TABLE outbox_new (LIKE outbox INCLUDING ALL); \
             INSERT INTO outbox_new OVERRIDING SYSTEM VALUE SELECT * FROM outbox; \
             SELECT setval(pg_get_serial_sequence('outbox_new', 'id'), max(id)) FROM outbox; \
             DROP TABLE outbox; ALTER TABLE outbox_new RENAME TO outbox; \
             ALTER PUBLICATION ra_ledger_outbox ADD TABLE outbox; \
             ALTER PUBLICATION probe ADD TABLE outbox",
        after_rows: "",
        one_transaction: false,
        fix: "SELECT 1",
        refusal: |error| {
            matches!(
                publication(error),
                Some(PublicationError::Changed { .. } | PublicationError::ForeignRelation { .. })
            )
        },
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_altered_and_altered_back_is_refused() -> anyhow::Result<()> {
    // In one transaction: no check can see the outbox out of the publication, and the rows
    // written meanwhile are not in the stream. The identity tells.
    refused_then_recovered(Break {
        before_rows: "ALTER PUBLICATION ra_ledger_outbox DROP TABLE outbox",
        after_rows: "ALTER PUBLICATION ra_ledger_outbox ADD TABLE outbox",
        one_transaction: true,
        fix: "SELECT 1",
        refusal: |error| matches!(publication(error), Some(PublicationError::Changed { .. })),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_altered_while_the_relay_was_stopped_is_refused_at_start()
-> anyhow::Result<()> {
    let Streaming {
        _database,
        _topics,
        config,
        client,
        relay,
        mut collector,
        mut expected,
        ..
    } = streaming().await?;
    relay.stop().await?;
    // Dropped, written, added back: right again when the relay starts.
    client
        .batch_execute(&format!(
            "{ALLOW}; ALTER PUBLICATION ra_ledger_outbox DROP TABLE outbox"
        ))
        .await?;
    let rows = insert_backlog(&client, 1, 2, 32).await?;
    client
        .batch_execute("ALTER PUBLICATION ra_ledger_outbox ADD TABLE outbox")
        .await?;
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(30))
        .await?;
    assert!(
        matches!(
            error,
            RelayError::Publication(PublicationError::Changed { .. })
        ),
        "{error}"
    );
    recover(&config, &RecoverOptions::default()).await?;
    let relay = RunningRelay::start(config.clone());
    expected.extend(rows);
    let all = collector
        .until_all(Duration::from_secs(60), &expected)
        .await;
    relay.stop().await?;
    assert!(all, "events missing after the recovery");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_setting_naming_another_publication_is_refused() -> anyhow::Result<()> {
    let Streaming {
        _database,
        _topics,
        config,
        client,
        relay,
        ..
    } = streaming().await?;
    relay.stop().await?;
    // Another publication, right in itself: the slot never streamed through it.
    client
        .batch_execute("CREATE PUBLICATION elsewhere FOR TABLE outbox WITH (publish = 'insert')")
        .await?;
    let switched = RelayConfig {
        publication: "elsewhere".into(),
        ..config
    };
    let error = RunningRelay::start(switched)
        .refusal(Duration::from_secs(30))
        .await?;
    let text = error.to_string();
    assert!(
        matches!(
            &error,
            RelayError::Publication(PublicationError::OtherPublication { streamed, configured, .. })
                if streamed == PUBLICATION && configured == "elsewhere"
        ),
        "{text}"
    );
    Ok(())
}

/// Item 11 of issue 50: a transaction that commits while the relay creates its first slot
/// is in no slot (it committed before the slot's consistent point). The relay used to check
/// the outbox was empty, then create the slot, and never publish it; it now creates the slot
/// with a snapshot and publishes the rows the snapshot holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_committed_while_the_first_slot_is_created_is_published() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let admin = database.connect().await?;
    // The database's first slot: the relay creates it.
    admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&config.slot])
        .await?;
    let writer = database.connect().await?;
    writer.batch_execute("BEGIN").await?;
    let committing: Vec<String> = writer
        .query(INSERT_ROWS, &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    // Creating a slot waits for the transactions running when it began: this one commits
    // meanwhile, before the slot's consistent point.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: bool = admin
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
                 WHERE NOT l.granted AND l.locktype = 'transactionid' \
                   AND a.backend_type = 'walsender')",
                &[],
            )
            .await?
            .get(0);
        if waiting {
            break;
        }
        if relay.task.is_finished() || std::time::Instant::now() > deadline {
            let activity: Vec<String> = admin
                .query(
                    "SELECT concat_ws(' ', backend_type, application_name, state, \
                     wait_event_type, wait_event, query) \
                     FROM pg_stat_activity WHERE datname = current_database()",
                    &[],
                )
                .await?
                .iter()
                .map(|row| row.get(0))
                .collect();
            relay.shutdown.cancel();
            let outcome = relay.task.await;
            anyhow::bail!("the relay never waited to create its slot ({outcome:?}): {activity:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writer.batch_execute("COMMIT").await?;
    let after = insert_backlog(&admin, 2, 1, 32).await?;
    let expected: HashSet<String> = committing.into_iter().chain(after).collect();
    let all = collector
        .until_all(Duration::from_secs(60), &expected)
        .await;
    relay.stop().await?;
    assert!(all, "a row committed while the slot was created is missing");
    let registered: (String, bool) = admin
        .query_one(
            "SELECT registered_by, ready FROM relay_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await
        .map(|row| (row.get(0), row.get(1)))?;
    assert_eq!(registered, ("relay".to_owned(), true));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_refuses_what_takes_the_outbox_out_of_the_publication() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let client = database.connect().await?;
    // Nothing is guarded before a relay streamed through the publication: its first slot
    // publishes what its snapshot holds.
    client
        .batch_execute("ALTER PUBLICATION ra_ledger_outbox SET (publish = 'insert, update'); ALTER PUBLICATION ra_ledger_outbox SET (publish = 'insert')")
        .await?;
    // A relay's live slot streams through it (the guard guards live slots only).
    let slot = live_slot(&client).await?;
    let before: String = client
        .query_one(
            "SELECT p.oid::text || array_agg(r.oid ORDER BY r.oid)::text \
             FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid \
             WHERE p.pubname = $1 GROUP BY p.oid",
            &[&PUBLICATION],
        )
        .await?
        .get(0);
    for command in [
        "ALTER PUBLICATION ra_ledger_outbox DROP TABLE outbox",
        "ALTER PUBLICATION ra_ledger_outbox SET TABLE outbox WHERE (aggregate_type <> 'contact')",
        "ALTER PUBLICATION ra_ledger_outbox SET TABLE outbox (id, event_id, aggregate_type, aggregate_id, event_type, payload)",
        "ALTER PUBLICATION ra_ledger_outbox SET (publish = 'update')",
        "ALTER PUBLICATION ra_ledger_outbox ADD TABLE events",
        "ALTER PUBLICATION ra_ledger_outbox RENAME TO elsewhere",
        "DROP PUBLICATION ra_ledger_outbox",
        "DROP TABLE outbox",
        "ALTER TABLE outbox RENAME TO outbox_old",
        "ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE varchar(200)",
        "ALTER TABLE outbox DROP COLUMN payload",
    ] {
        let error = client
            .batch_execute(command)
            .await
            .expect_err(&format!("the guard let `{command}` through"));
        let database_error = error.as_db_error().expect("a database error");
        assert_eq!(
            database_error.code(),
            &tokio_postgres::error::SqlState::OBJECT_IN_USE,
            "{command}: {database_error:?}"
        );
        assert!(
            database_error
                .hint()
                .is_some_and(|hint| hint.contains("ra_ledger.allow_outbox_publication_change")),
            "{command}: names the way through: {database_error:?}"
        );
    }
    let after: String = client
        .query_one(
            "SELECT p.oid::text || array_agg(r.oid ORDER BY r.oid)::text \
             FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid \
             WHERE p.pubname = $1 GROUP BY p.oid",
            &[&PUBLICATION],
        )
        .await?
        .get(0);
    assert_eq!(after, before, "every refused command was rolled back");
    // What leaves the outbox as the relay reads it passes.
    client
        .batch_execute(
            "ALTER TABLE outbox ADD COLUMN note text; \
             ALTER TABLE outbox_parked ADD COLUMN note text; \
             CREATE TABLE unrelated (id int); DROP TABLE unrelated",
        )
        .await?;
    // An operator who means it says so.
    client
        .batch_execute(&format!(
            "{ALLOW}; ALTER PUBLICATION ra_ledger_outbox DROP TABLE outbox"
        ))
        .await?;
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}

/// A slot of the relay's registered with the stack's publication, as a relay that streamed
/// leaves it; its name (drop it before the test ends: a slot keeps its database).
async fn live_slot(client: &Client) -> anyhow::Result<String> {
    let slot = format!("guarded_{}", ra_ledger_tests::random_suffix());
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await?;
    client
        .execute(
            "INSERT INTO relay_slots (slot_name, registered_by, publication) \
             VALUES ($1, 'relay', $2)",
            &[&slot, &PUBLICATION],
        )
        .await?;
    Ok(slot)
}

/// Issue 55, item 3: a registration naming a publication later dropped with the override
/// (its slot long gone) made the guard refuse every DDL of the database, a temp table's
/// DROP and future migrations included. The guard now guards live slots only, and a
/// publication already wrong blocks no DDL on other objects; what breaks a right one is
/// still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_blocks_no_ddl_once_a_guarded_publication_is_gone() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let client = database.connect().await?;
    client
        .batch_execute(&format!(
            "CREATE PUBLICATION old_pub FOR TABLE outbox WITH (publish = 'insert'); \
             INSERT INTO relay_slots (slot_name, registered_by, publication) \
             VALUES ('gone_{suffix}', 'relay', 'old_pub'); \
             {ALLOW}; DROP PUBLICATION old_pub; RESET ra_ledger.allow_outbox_publication_change",
            suffix = ra_ledger_tests::random_suffix()
        ))
        .await?;
    let unrelated = "CREATE TABLE scratch_x (a int); ALTER TABLE scratch_x ADD COLUMN b text; \
                     CREATE TEMP TABLE scratch_t (a int); DROP TABLE scratch_t; DROP TABLE scratch_x";
    client.batch_execute(unrelated).await?;
    // A live slot whose publication is already wrong (broken past the guard, with the
    // override): the relay refuses to stream through it; other DDL goes on.
    let slot = live_slot(&client).await?;
    client
        .batch_execute(&format!(
            "{ALLOW}; ALTER PUBLICATION ra_ledger_outbox SET (publish = 'insert, update'); \
             RESET ra_ledger.allow_outbox_publication_change"
        ))
        .await?;
    client.batch_execute(unrelated).await?;
    // Put right again, it is guarded again.
    client
        .batch_execute("ALTER PUBLICATION ra_ledger_outbox SET (publish = 'insert')")
        .await?;
    let refused = client
        .batch_execute("ALTER PUBLICATION ra_ledger_outbox DROP TABLE outbox")
        .await
        .expect_err("the guard let a right publication lose the outbox");
    assert_eq!(
        refused.as_db_error().map(|error| error.code().clone()),
        Some(tokio_postgres::error::SqlState::OBJECT_IN_USE),
        "{refused:?}"
    );
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}

/// Issue 55, item 4: a no-op `ALTER PUBLICATION … SET (publish = 'insert')` and `OWNER TO`
/// passed the guard, and the relay then refused (exit 78), with `recover` the only way on.
/// The guard now records the new identity of a change it saw harmless, and the relay
/// streams on; the same change made past the guard (the override) is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harmless_change_the_guard_saw_passes_the_relay_too() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let owner = format!("owner_{}", ra_ledger_tests::random_suffix());
    client
        .batch_execute(&format!("CREATE ROLE {owner} SUPERUSER"))
        .await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let mut expected: HashSet<String> = HashSet::new();
    for command in [
        "ALTER PUBLICATION ra_ledger_outbox SET (publish = 'insert')".to_owned(),
        format!("ALTER PUBLICATION ra_ledger_outbox OWNER TO {owner}"),
        "ALTER PUBLICATION ra_ledger_outbox OWNER TO CURRENT_USER".to_owned(),
    ] {
        expected.extend(insert_backlog(&client, 1, 5, 16).await?);
        assert!(
            collector
                .until_all(Duration::from_secs(60), &expected)
                .await,
            "before `{command}`"
        );
        // Two checks at least, so the registration is the relay's before the change.
        tokio::time::sleep(Duration::from_millis(500)).await;
        client.batch_execute(&command).await?;
        expected.extend(insert_backlog(&client, 1, 5, 16).await?);
        assert!(
            collector
                .until_all(Duration::from_secs(60), &expected)
                .await,
            "after `{command}`, the relay stopped: {:?}",
            relay.task.is_finished()
        );
    }
    assert!(
        !relay.task.is_finished(),
        "the relay refused a harmless change"
    );
    // The same no-op past the guard: nothing vouches for it.
    client
        .batch_execute(&format!(
            "{ALLOW}; ALTER PUBLICATION ra_ledger_outbox SET (publish = 'insert')"
        ))
        .await?;
    let error = relay.refusal(Duration::from_secs(60)).await?;
    assert!(
        matches!(
            error,
            RelayError::Publication(PublicationError::Changed { .. })
        ),
        "{error}"
    );
    client.batch_execute(&format!("DROP ROLE {owner}")).await?;
    Ok(())
}

/// The catalogue of drifts (docs/operators.md, "What the relay checks"): the publication
/// re-created `FOR ALL TABLES` carries every table of the database, the outbox among them:
/// the relay refuses it (a Relation of another table would follow), and once it is put
/// right and recovered, every event is on Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_re_created_for_all_tables_is_refused() -> anyhow::Result<()> {
    let Streaming {
        _database,
        _topics,
        config,
        client,
        relay,
        mut collector,
        mut expected,
        probe: _,
    } = streaming().await?;
    client
        .batch_execute(&format!(
            "{ALLOW}; DROP PUBLICATION ra_ledger_outbox; \
             CREATE PUBLICATION ra_ledger_outbox FOR ALL TABLES WITH (publish = 'insert')"
        ))
        .await?;
    expected.extend(insert_backlog(&client, 1, 3, 16).await?);
    let error = relay.refusal(Duration::from_secs(30)).await?;
    assert!(wrong("FOR ALL TABLES")(&error), "{error:?}");
    client.batch_execute(RESTORE).await?;
    recover(&config, &RecoverOptions::default()).await?;
    let relay = RunningRelay::start(config.clone());
    expected.extend(insert_backlog(&client, 1, 3, 16).await?);
    let all = collector
        .until_all(Duration::from_secs(60), &expected)
        .await;
    relay.stop().await?;
    assert!(all, "events missing after the recovery");
    Ok(())
}

/// The catalogue: the publication dropped and re-created, right again before any check
/// could see it gone (one transaction): the rows committed between are not in the stream;
/// its new identity gives it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_dropped_and_re_created_between_two_checks_is_refused() -> anyhow::Result<()>
{
    refused_then_recovered(Break {
        before_rows: "DROP PUBLICATION ra_ledger_outbox",
        after_rows: "CREATE PUBLICATION ra_ledger_outbox FOR TABLE outbox WITH (publish = 'insert')",
        one_transaction: true,
        fix: "",
        refusal: |error| {
            matches!(
                publication(error),
                Some(PublicationError::Changed { .. } | PublicationError::Missing { .. })
            )
        },
    })
    .await
}

/// The catalogue: a second publication carrying the outbox (another consumer's) changes
/// nothing the relay streams: it passes the guard and the relay, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_publication_of_the_outbox_is_harmless() -> anyhow::Result<()> {
    let Streaming {
        _database,
        _topics,
        config: _,
        client,
        relay,
        mut collector,
        mut expected,
        probe: _,
    } = streaming().await?;
    client
        .batch_execute("CREATE PUBLICATION someone_else FOR TABLE outbox")
        .await?;
    expected.extend(insert_backlog(&client, 2, 3, 16).await?);
    assert!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await
    );
    assert!(!relay.task.is_finished(), "the relay stopped");
    relay.stop().await?;
    Ok(())
}

/// The catalogue: the slot dropped and created again by hand (`pg_create_logical_replication_
/// slot`) starts now, past whatever committed since the old one's position: the relay
/// refuses (the slot is ahead of the position Kafka holds), retention removes none of the
/// rows it skipped, and `ledger relay recover` publishes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_re_created_by_hand_is_refused_and_loses_nothing() -> anyhow::Result<()> {
    let Streaming {
        _database,
        _topics,
        config,
        client,
        relay,
        mut collector,
        mut expected,
        probe: _,
    } = streaming().await?;
    relay.stop().await?;
    let skipped = insert_backlog(&client, 2, 10, 16).await?;
    expected.extend(skipped.iter().cloned());
    ra_ledger_tests::relay::drop_slot_once_released(&client, &config.slot).await?;
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&config.slot],
        )
        .await?;
    let pool = ra_ledger::db::pool(&client_url(&_database), "test-drift", 1)?;
    for _ in 0..3 {
        let pruned = ra_ledger::retention::prune(&pool, &config.slot, 500).await?;
        assert_eq!(pruned.removed, 0, "{pruned:?}");
    }
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(
            error,
            RelayError::History(ra_ledger_cdc::history::HistoryError::Gap { .. })
        ),
        "{error}"
    );
    recover(&config, &RecoverOptions::default()).await?;
    assert!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await,
        "rows the re-created slot skipped are missing"
    );
    Ok(())
}

fn client_url(database: &TestDatabase) -> String {
    database.url.as_str().to_owned()
}

/// Issue 55, item 6: what switches the guard off and the relay can see is named on its
/// gauge (and in its log) while it streams: the override set for a role, then the trigger
/// disabled; put right, the gauge goes back to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_names_each_bypass_of_the_guard_it_can_see() -> anyhow::Result<()> {
    let Streaming {
        _database,
        _topics,
        config: _,
        client,
        relay,
        collector: _,
        expected: _,
        probe: _,
    } = streaming().await?;
    let bypasses = || {
        relay
            .metrics
            .render()
            .lines()
            .find_map(|line| {
                line.strip_prefix("ra_relay_outbox_guard_bypasses ")?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(u64::MAX)
    };
    let until = async |want: u64, what: &str| -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while bypasses() != want {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "{what}: the gauge says {}, not {want}",
                bypasses()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    };
    until(0, "installed ALWAYS, nothing set").await?;
    let role = format!("ops_{}", ra_ledger_tests::random_suffix());
    client
        .batch_execute(&format!(
            "CREATE ROLE {role}; \
             ALTER ROLE {role} SET ra_ledger.allow_outbox_publication_change = on"
        ))
        .await?;
    until(1, "the override set for a role").await?;
    client
        .batch_execute("ALTER EVENT TRIGGER ra_ledger_outbox_guard DISABLE")
        .await?;
    until(2, "and the trigger disabled").await?;
    client
        .batch_execute(&format!(
            "ALTER EVENT TRIGGER ra_ledger_outbox_guard ENABLE ALWAYS; DROP ROLE {role}"
        ))
        .await?;
    until(0, "put right").await?;
    relay.stop().await?;
    Ok(())
}
