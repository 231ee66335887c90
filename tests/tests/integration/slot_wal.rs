//! The relay slot's WAL as `ledger serve`'s gauges read it ([`ra_ledger::gauges::round`],
//! rendered as on its `/metrics`), on a PostgreSQL server of the test's own with
//! `max_slot_wal_keep_size = 64MB`: a slot nobody consumes (the relay stopped) while another
//! database writes WAL, one segment switch at a time.
//!
//! - `max_wal_size` above the limit (1 GB): every switch takes about a segment off
//!   `safe_wal_size` while the slot stays `reserved`; one segment past the limit it is
//!   `unreserved`, `safe_wal_size` negative; the test's `CHECKPOINT` removes the WAL: `lost`,
//!   no `safe_wal_size` any more, and the kept-WAL series still there and growing.
//! - `max_wal_size` below the limit (32 MB, reloaded): a second slot goes from `reserved` to
//!   `extended` (past `max_wal_size`, still kept, headroom left), then `lost`.
//!
//! Only the test's statements run a checkpoint in the first shape (`max_wal_size` far above
//! the WAL written, `checkpoint_timeout = 1d`), so `unreserved` holds until its `CHECKPOINT`.
//! In the second, PostgreSQL asks for a checkpoint at every segment (`max_wal_size` is two):
//! harmless within the limit, and why the moment between the switch past the limit and the
//! test's `CHECKPOINT` is not read there.

use std::time::{Duration, Instant};

use ra_ledger::gauges::{self, Gauges};
use ra_ledger::lag::SlotProgress;
use ra_ledger::lag::slot_wal::WalStatus;
use ra_ledger::metrics::{
    SLOT_RETAINED_WAL, SLOT_SAFE_WAL, SLOT_WAL_KEEP_LIMIT, SLOT_WAL_STATUS, SLOT_WAL_STATUS_LABEL,
    ServiceMetrics,
};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::database::connect;
use ra_ledger_tests::stack::unstarted_postgres;
use tokio_postgres::Client;

/// The server's `max_slot_wal_keep_size`, in bytes: a few segments of the default 16 MB.
const LIMIT: i64 = 64 << 20;

/// One round of the service's gauges: the slot as read, and the `/metrics` text.
async fn read(
    pool: &deadpool_postgres::Pool,
    slot: &str,
) -> anyhow::Result<(SlotProgress, String)> {
    let gauges = Gauges {
        slot: slot.to_owned(),
        interval: Duration::from_secs(10),
        digests: false,
    };
    let read = gauges::round(pool, &gauges).await?;
    let progress = read.slot.ok_or_else(|| anyhow::anyhow!("no slot {slot}"))?;
    let metrics = ServiceMetrics::default();
    metrics.read(read);
    Ok((progress, metrics.render()))
}

/// The value of `series` (a name, with its labels if any) in `text`.
fn value<'a>(text: &'a str, series: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
}

/// `text` says the slot is `status`: 1 for it, 0 for every other.
fn assert_status(text: &str, status: WalStatus) {
    for each in WalStatus::ALL {
        let series = format!(
            "{}{{{SLOT_WAL_STATUS_LABEL}=\"{}\"}}",
            SLOT_WAL_STATUS.name,
            each.as_str()
        );
        let expected = if each == status { "1" } else { "0" };
        assert_eq!(value(text, &series), Some(expected), "{series} in\n{text}");
    }
}

/// What the slot keeps plus what can still be written is the limit and the rest of the
/// segment `restart_lsn` is in (PostgreSQL counts whole segments from there), plus at most a
/// page for WAL the server's own processes wrote between the statement's two reads of its end.
fn assert_headroom_adds_up(slot: &SlotProgress, segment: i64) {
    let (Some(safe), Some(retained)) = (slot.wal.safe_bytes, slot.retained_bytes) else {
        panic!("no headroom or kept WAL: {slot:?}");
    };
    let total = safe + retained;
    assert!(
        total > LIMIT && total <= LIMIT + segment + 8_192,
        "safe {safe} + kept {retained} = {total}, limit {LIMIT}, segment {segment}"
    );
}

/// Another database writes a row and switches to a new WAL segment (a switch with nothing
/// written since the last one would do nothing).
async fn switch_segment(other: &Client) -> anyhow::Result<()> {
    other
        .batch_execute("INSERT INTO filler VALUES (now()); SELECT pg_switch_wal()")
        .await?;
    Ok(())
}

/// Switches segments until the slot is no longer `reserved`; checks on the way that it
/// keeps headroom, less after every switch. Returns the readings while reserved, the first
/// one after, and its text.
async fn switch_until_not_reserved(
    pool: &deadpool_postgres::Pool,
    other: &Client,
    slot: &str,
) -> anyhow::Result<(Vec<SlotProgress>, SlotProgress, String)> {
    let (first, text) = read(pool, slot).await?;
    assert_eq!(first.wal.status, Some(WalStatus::Reserved), "{first:?}");
    assert_status(&text, WalStatus::Reserved);
    let mut reserved = vec![first];
    loop {
        switch_segment(other).await?;
        let (now, text) = read(pool, slot).await?;
        if now.wal.status != Some(WalStatus::Reserved) {
            return Ok((reserved, now, text));
        }
        let before = reserved.last().expect("the first reading");
        let safe = now.wal.safe_bytes.expect("a limit is set");
        assert!(
            safe > 0 && safe < before.wal.safe_bytes.expect("a limit is set"),
            "a switch later: {now:?}, before: {before:?}"
        );
        assert_eq!(
            value(&text, SLOT_SAFE_WAL.name),
            Some(safe.to_string().as_str())
        );
        reserved.push(now);
        anyhow::ensure!(
            reserved.len() < 64,
            "still reserved after 64 switches: {now:?}"
        );
    }
}

/// The readings as `status (safe_wal_size)`, one after another, for the test's output.
fn walk(reserved: &[SlotProgress], past: &SlotProgress) -> String {
    let reading = |slot: &SlotProgress| {
        let status = slot.wal.status.map_or("none", WalStatus::as_str);
        format!("{status} ({:?})", slot.wal.safe_bytes)
    };
    let mut all: Vec<String> = reserved.iter().map(reading).collect();
    all.push(reading(past));
    all.join(" -> ")
}

/// The slot's row as JSON (its columns differ between versions, as the relay reads it).
async fn slot_row(client: &Client, slot: &str) -> anyhow::Result<serde_json::Value> {
    let json: String = client
        .query_one(
            "SELECT to_jsonb(s)::text FROM pg_replication_slots s WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .get(0);
    Ok(serde_json::from_str(&json)?)
}

// One server, read top to bottom: the first slot to its loss, then a second past
// max_wal_size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_warn_before_a_slot_is_lost_and_go_on_saying_so() -> anyhow::Result<()> {
    let server = unstarted_postgres()?;
    server.configure(
        "max_slot_wal_keep_size = 64MB\nmax_wal_size = 1GB\ncheckpoint_timeout = 1d\n\
         wal_init_zero = off",
    )?;
    server.start()?;
    let database = TestDatabase::on(&server.admin_url()).await?;
    let pool = ra_ledger::db::pool(&database.url, "test-slot-wal", 1)?;
    let ledger = database.connect().await?;
    let other = connect(&server.admin_url()).await?;
    other
        .batch_execute("CREATE TABLE filler (at timestamptz)")
        .await?;
    let row = other
        .query_one(
            "SELECT pg_size_bytes(current_setting('wal_segment_size')), \
                    current_setting('server_version_num')::int",
            &[],
        )
        .await?;
    let (segment, version): (i64, i32) = (row.get(0), row.get(1));
    anyhow::ensure!(
        LIMIT % segment == 0 && LIMIT / segment >= 4,
        "the test wants a limit of several whole segments; segments are {segment} bytes"
    );

    // Shape 1: max_wal_size above the limit. A pgoutput slot, as the relay's, never read
    // from.
    let slot = format!("{}_relay", database.name);
    ledger
        .execute(
            "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await?;
    let (reserved, past, text) = switch_until_not_reserved(&pool, &other, &slot).await?;
    println!(
        "server {version}, segments of {segment} bytes, limit {LIMIT}; max_wal_size 1GB: {}",
        walk(&reserved, &past)
    );
    assert_eq!(reserved[0].wal.limit_bytes, Some(LIMIT));
    assert_eq!(
        value(&text, SLOT_WAL_KEEP_LIMIT.name),
        Some(LIMIT.to_string().as_str())
    );
    for reading in &reserved {
        assert_headroom_adds_up(reading, segment);
    }
    // Reserved while the segments from restart_lsn's on are within the limit's; one more
    // and the next checkpoint would remove WAL the slot needs.
    assert_eq!(
        reserved.len() as i64,
        LIMIT / segment + 1,
        "switches while reserved: {reserved:#?}"
    );
    assert_eq!(past.wal.status, Some(WalStatus::Unreserved), "{past:?}");
    assert_status(&text, WalStatus::Unreserved);
    let safe = past.wal.safe_bytes.expect("a limit is set");
    assert!(safe < 0, "past the limit, yet {safe} bytes of headroom");
    assert_eq!(
        value(&text, SLOT_SAFE_WAL.name),
        Some(safe.to_string().as_str())
    );
    assert_headroom_adds_up(&past, segment);

    // The checkpoint removes the WAL: lost, and it stays lost as the WAL goes on.
    other.batch_execute("CHECKPOINT").await?;
    let (lost, text) = read(&pool, &slot).await?;
    assert_eq!(lost.wal.status, Some(WalStatus::Lost), "{lost:?}");
    assert_status(&text, WalStatus::Lost);
    assert_eq!(
        (lost.retained_bytes, lost.wal.safe_bytes),
        (None, None),
        "{lost:?}"
    );
    assert_eq!(value(&text, SLOT_SAFE_WAL.name), None, "{text}");
    // The kept-WAL series goes on, from the confirmed position: still past the limit, so
    // an alert on it does not resolve at the loss.
    let needed = lost.lag_bytes.expect("the slot has a confirmed position");
    assert!(needed > LIMIT, "{lost:?}");
    assert_eq!(
        value(&text, SLOT_RETAINED_WAL.name),
        Some(needed.to_string().as_str())
    );
    let row = slot_row(&ledger, &slot).await?;
    assert_eq!(row["restart_lsn"], serde_json::Value::Null, "{row}");
    assert_eq!(row["wal_status"], "lost", "{row}");
    if version >= 170_000 {
        assert_eq!(row["invalidation_reason"], "wal_removed", "{row}");
    } else {
        assert!(row.get("invalidation_reason").is_none(), "{row}");
    }
    switch_segment(&other).await?;
    let (later, text) = read(&pool, &slot).await?;
    assert_status(&text, WalStatus::Lost);
    assert!(
        later.lag_bytes.is_some_and(|bytes| bytes > needed),
        "{later:?}"
    );
    assert_eq!(value(&text, SLOT_SAFE_WAL.name), None, "{text}");

    // Shape 2: max_wal_size below the limit, reloaded; the gauges' connection has it once
    // it shows it.
    // One statement a query: ALTER SYSTEM refuses a transaction block, implicit or not.
    for statement in [
        "ALTER SYSTEM SET max_wal_size = '32MB'",
        "ALTER SYSTEM SET min_wal_size = '32MB'",
        "SELECT pg_reload_conf()",
    ] {
        other.batch_execute(statement).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown: String = pool
            .get()
            .await?
            .query_one("SHOW max_wal_size", &[])
            .await?
            .get(0);
        if shown == "32MB" {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "max_wal_size still {shown}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = format!("{}_second", database.name);
    ledger
        .execute(
            "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&second],
        )
        .await?;
    let (reserved, past, text) = switch_until_not_reserved(&pool, &other, &second).await?;
    println!("max_wal_size 32MB: {}", walk(&reserved, &past));
    // Reserved within max_wal_size's segments (and the one being written); one more is
    // beyond max_wal_size, still within the limit.
    assert_eq!(
        reserved.len() as i64,
        (32 << 20) / segment + 2,
        "switches while reserved: {reserved:#?}"
    );
    assert_eq!(past.wal.status, Some(WalStatus::Extended), "{past:?}");
    assert_status(&text, WalStatus::Extended);
    assert!(
        past.wal.safe_bytes.is_some_and(|safe| safe > 0),
        "extended, within the limit: {past:?}"
    );
    assert_headroom_adds_up(&past, segment);
    switch_segment(&other).await?;
    other.batch_execute("CHECKPOINT").await?;
    let (lost, text) = read(&pool, &second).await?;
    assert_eq!(lost.wal.status, Some(WalStatus::Lost), "{lost:?}");
    assert_status(&text, WalStatus::Lost);

    drop((ledger, other, pool));
    drop(database);
    server.stop("INT")?;
    Ok(())
}
