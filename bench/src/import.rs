//! `ledger-bench import`: `ledger import` of a generated file, against a raw ceiling
//! measured in the same run: a `COPY` of the very rows the import wrote (events, outbox,
//! assignments) into the same tables of a fresh database, in transactions of the same size,
//! with the same concurrency, without the ledger's logic (locks, checks, hash chains,
//! projections folded from events).

use std::io::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{SinkExt, StreamExt, TryStreamExt, pin_mut};
use ra_ledger::commands::Ledger;
use ra_ledger::db;
use ra_ledger::import::{self, ImportOptions};
use ra_ledger_testing::ScratchDatabase;
use uuid::Uuid;

use crate::scratch;

/// Jurisdictions the generated file spreads its rows over.
const JURISDICTIONS: [&str; 4] = ["TX", "CA", "NY", "DE"];

/// The tables the ceiling fills, in an order their foreign keys accept, with the columns an
/// import writes (the rest keep their defaults).
const TABLES: [(&str, &str); 3] = [
    (
        "events",
        "event_id, stream, stream_version, event_type, schema_version, payload, recorded_at, \
         effective_at, actor, correlation_id, causation_id, prev_hash, hash, traceparent",
    ),
    (
        "outbox",
        "event_id, aggregate_type, aggregate_id, event_type, payload, traceparent",
    ),
    (
        "assignments",
        "assignment_id, business_id, jurisdiction, contact_id, started_at, replaces, recorded_at",
    ),
];

/// `rounds` rounds of the import and its ceiling, each in fresh databases, then the median
/// and lowest ratio of the two.
pub async fn run(
    database_url: &str,
    rows: usize,
    batch_size: usize,
    concurrency: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    if rows == 0
        || concurrency == 0
        || rounds == 0
        || !(1..=ra_ledger::commands::MAX_BATCH).contains(&batch_size)
    {
        anyhow::bail!(
            "--rows, --concurrency and --rounds must be at least 1, --batch-size 1 to {}",
            ra_ledger::commands::MAX_BATCH
        );
    }
    outln!(
        "import of {rows} assignments over {} jurisdictions, {batch_size} per transaction, {concurrency} in flight, {rounds} round(s)",
        JURISDICTIONS.len()
    );
    let mut ratios = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        // Each round in fresh databases: both start from empty tables.
        let ledger_db = scratch::database(database_url).await?;
        let ceiling_db = scratch::database(database_url).await?;
        let outcome = measure(&ledger_db, &ceiling_db, rows, batch_size, concurrency).await;
        ledger_db.drop().await?;
        ceiling_db.drop().await?;
        let f = outcome?;
        let ledger_rate = rows as f64 / f.import.as_secs_f64();
        let ceiling_rate = rows as f64 / f.ceiling.as_secs_f64();
        outln!(
            "round {round}: file of {} bytes read and checked in {:.3} s; ledger import {:.3} s, {ledger_rate:.0} events/s; raw COPY {:.3} s, {ceiling_rate:.0} events/s; import / ceiling = {:.2}",
            f.file_bytes,
            f.read.as_secs_f64(),
            f.import.as_secs_f64(),
            f.ceiling.as_secs_f64(),
            ledger_rate / ceiling_rate
        );
        ratios.push(ledger_rate / ceiling_rate);
    }
    ratios.sort_by(f64::total_cmp);
    outln!(
        "import / ceiling: median {:.2}, lowest {:.2} (target >= 0.60). Each event is one AssignmentStarted with its outbox row and projection row; the ceiling is a COPY of the very rows the import wrote into the same tables, in transactions of the same size",
        ratios[ratios.len() / 2],
        ratios[0]
    );
    Ok(())
}

/// Figures of one run.
struct ImportFigures {
    file_bytes: u64,
    read: Duration,
    import: Duration,
    ceiling: Duration,
}

/// One round: the ledger's import into `ledger_db`, then the raw COPY of the rows it wrote
/// into `ceiling_db`.
async fn measure(
    ledger_db: &ScratchDatabase,
    ceiling_db: &ScratchDatabase,
    rows: usize,
    batch_size: usize,
    concurrency: usize,
) -> anyhow::Result<ImportFigures> {
    let pool = db::pool(&ledger_db.url, "ledger-bench", concurrency)?;
    let ledger = Ledger::new(pool.clone());
    let metadata = ra_ledger::store::Metadata {
        actor: "bench".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    };
    for code in JURISDICTIONS {
        ra_ledger_testing::primary_contact(&ledger, code, &metadata).await?;
    }
    let (file_bytes, import_rows, read) = generated_file(rows)?;
    let client = db::connect(&ledger_db.url, "ledger-bench").await?;
    client.batch_execute(SETTLE).await?;
    let options = ImportOptions {
        batch_size,
        concurrency,
        metadata,
    };
    let import = timed_import(&ledger, &import_rows, &options, rows).await?;
    let tables = written_rows(&client, rows).await?;
    copy_contacts(&client, ceiling_db).await?;
    pool.close();
    let ceiling = timed_ceiling(ceiling_db, &tables, rows, batch_size, concurrency).await?;
    Ok(ImportFigures {
        file_bytes,
        read,
        import,
        ceiling,
    })
}

/// Run after each database is filled and before it is timed: both start from fresh
/// statistics and no dead tuples.
const SETTLE: &str = "VACUUM ANALYZE events, outbox, assignments, contacts";

/// A generated file of `rows` assignments, read and checked as `ledger import` does (the
/// file removed after): its size, its rows and the time the reading took.
fn generated_file(rows: usize) -> anyhow::Result<(u64, Vec<import::ImportRow>, Duration)> {
    let path = std::env::temp_dir().join(format!("ledger-bench-import-{}.csv", Uuid::new_v4()));
    let file_bytes = write_file(&path, rows)?;
    let began = Instant::now();
    let read = import::read(&path);
    let _ = std::fs::remove_file(&path);
    let import_rows = read?;
    Ok((file_bytes, import_rows, began.elapsed()))
}

/// The ledger's import of `import_rows`, timed; every row must have started an assignment,
/// or the rate printed would be of less work than claimed.
async fn timed_import(
    ledger: &Ledger,
    import_rows: &[import::ImportRow],
    options: &ImportOptions,
    rows: usize,
) -> anyhow::Result<Duration> {
    eprintln!("ledger import…");
    let began = Instant::now();
    let progress = import::run(ledger, import_rows, options, |_| {}).await?;
    let import = began.elapsed();
    anyhow::ensure!(
        progress.started == rows as u64,
        "the import started {} of {rows}",
        progress.started
    );
    Ok(import)
}

/// The rows the import wrote to each of [`TABLES`], as COPY text lines: the ceiling copies
/// what the import wrote, the same bytes, into the same tables.
async fn written_rows(
    client: &tokio_postgres::Client,
    rows: usize,
) -> anyhow::Result<Vec<Vec<Vec<u8>>>> {
    let mut tables = Vec::new();
    for (table, columns) in TABLES {
        let filter = match table {
            "assignments" => "",
            _ => " WHERE event_type = 'AssignmentStarted'",
        };
        let sql = format!("COPY (SELECT {columns} FROM {table}{filter}) TO STDOUT");
        let out = client.copy_out(sql.as_str()).await?;
        let data: Vec<Bytes> = out.try_collect().await?;
        tables.push(lines(&data.concat()));
    }
    anyhow::ensure!(
        tables.iter().all(|lines| lines.len() == rows),
        "the import wrote {:?} rows to {TABLES:?}, not {rows} each",
        tables.iter().map(Vec::len).collect::<Vec<_>>()
    );
    Ok(tables)
}

/// The ledger database's contacts into the ceiling's database, untimed: the assignments'
/// foreign keys need them there.
async fn copy_contacts(
    client: &tokio_postgres::Client,
    ceiling_db: &ScratchDatabase,
) -> anyhow::Result<()> {
    let contacts = client
        .copy_out("COPY contacts TO STDOUT")
        .await?
        .try_collect::<Vec<Bytes>>()
        .await?
        .concat();
    let mut ceiling_client = db::connect(&ceiling_db.url, "ledger-bench").await?;
    let tx = ceiling_client.transaction().await?;
    copy(&tx, "contacts", "", contacts).await?;
    tx.commit().await?;
    ceiling_client.batch_execute(SETTLE).await?;
    Ok(())
}

/// The ceiling, timed: `tables`' rows copied into `ceiling_db` in transactions of
/// `batch_size` rows of each table, `concurrency` at a time, as the import ran.
async fn timed_ceiling(
    ceiling_db: &ScratchDatabase,
    tables: &[Vec<Vec<u8>>],
    rows: usize,
    batch_size: usize,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    eprintln!("raw COPY ceiling…");
    let ceiling_pool = db::pool(&ceiling_db.url, "ledger-bench", concurrency)?;
    let began = Instant::now();
    let batches = (0..rows).step_by(batch_size).map(|start| {
        let end = (start + batch_size).min(rows);
        let chunk: Vec<Vec<u8>> = tables
            .iter()
            .map(|lines| lines[start..end].concat())
            .collect();
        let pool = ceiling_pool.clone();
        async move {
            let mut client = pool.get().await?;
            let tx = client.transaction().await?;
            for ((table, columns), data) in TABLES.iter().zip(chunk) {
                copy(&tx, table, columns, data).await?;
            }
            tx.commit().await?;
            anyhow::Ok(())
        }
    });
    futures::stream::iter(batches)
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    let ceiling = began.elapsed();
    ceiling_pool.close();
    Ok(ceiling)
}

/// Writes an import file of `rows` assignments with fresh business ids, spread over the
/// jurisdictions; returns its size.
fn write_file(path: &std::path::Path, rows: usize) -> anyhow::Result<u64> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(file, "business_id,jurisdiction")?;
    for row in 0..rows {
        writeln!(
            file,
            "{},{}",
            Uuid::now_v7(),
            JURISDICTIONS[row % JURISDICTIONS.len()]
        )?;
    }
    file.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// COPY text output split into its rows (one line each: the format escapes newlines).
fn lines(data: &[u8]) -> Vec<Vec<u8>> {
    data.split_inclusive(|byte| *byte == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// `COPY table (columns) FROM STDIN` of `data` in text format.
async fn copy(
    client: &tokio_postgres::Transaction<'_>,
    table: &str,
    columns: &str,
    data: Vec<u8>,
) -> anyhow::Result<()> {
    let columns = if columns.is_empty() {
        String::new()
    } else {
        format!(" ({columns})")
    };
    let sink = client
        .copy_in(format!("COPY {table}{columns} FROM STDIN").as_str())
        .await?;
    pin_mut!(sink);
    sink.send(Bytes::from(data)).await?;
    sink.finish().await?;
    Ok(())
}
