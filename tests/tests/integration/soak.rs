//! `ledger-bench soak` in its short mode, on the run's PostgreSQL and broker: a minute at
//! 200 events/s through `ledger serve`, the relay and the worker, each a process. What the
//! command prints and writes must have its shape (a sample row every `--every`, a verdict
//! per series, reconcile's counts with nothing lost) and the CSV and the picture must hold
//! the same samples. `LEDGER_SOAK_MINUTES`, `LEDGER_SOAK_RATE` and `LEDGER_SOAK_EVERY` make
//! it a longer run (`-- --nocapture soak` prints the figures), `LEDGER_SOAK_OUT` keeps its
//! files there, `LEDGER_SOAK_DIGESTS=false` runs the service without digests.

use std::process::Stdio;
use std::time::Duration;

/// The series the command judges, as its verdict lines name them.
const SERIES: [&str; 7] = [
    "ledger serve resident memory",
    "ledger relay resident memory",
    "ledger worker resident memory",
    "outbox rows",
    "outbox on disk",
    "WAL the slot retains",
    "relay lag",
];

/// Columns of the CSV: the time, the events written, a column per series.
const COLUMNS: usize = 2 + SERIES.len();

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_samples_every_series_loses_nothing_and_writes_its_csv_and_picture()
-> anyhow::Result<()> {
    let stack = ra_ledger_tests::stack();
    let (minutes, rate, every) = (
        setting("LEDGER_SOAK_MINUTES", "1"),
        setting("LEDGER_SOAK_RATE", "200"),
        setting("LEDGER_SOAK_EVERY", "10s"),
    );
    // LEDGER_SOAK_OUT keeps the files of a longer run; else they go with the test.
    let kept = std::env::var_os("LEDGER_SOAK_OUT").map(std::path::PathBuf::from);
    let out = kept.clone().unwrap_or_else(|| {
        ra_ledger_tests::stack::run_dir().join(format!("soak-{}", ra_ledger_tests::random_suffix()))
    });
    let child = tokio::process::Command::new(ra_ledger_tests::cli::bench_binary()?)
        .args(["--database-url", &stack.admin_url, "soak"])
        .args(["--minutes", &minutes, "--rate", &rate, "--every", &every])
        .args(["--digests", &setting("LEDGER_SOAK_DIGESTS", "true")])
        .args(["--brokers", &stack.kafka_brokers])
        .arg("--out")
        .arg(&out)
        .env_remove("LEDGER_DATABASE_PASSWORD_FILE")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // The run, the relay's catching up and reconcile's settling, with room for a loaded
    // machine.
    let longest = Duration::from_secs_f64(minutes.parse::<f64>()? * 60.0 + 600.0);
    let output = tokio::time::timeout(longest, child.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("ledger-bench soak still ran after {longest:?}"))??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "ledger-bench soak exited {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );

    let rows = sample_rows(&stdout);
    assert!(rows.len() >= 5, "a minute sampled every 10 s: {stdout}");
    let verdicts: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.starts_with("verdicts after"))
        .skip(1)
        .take(SERIES.len())
        .collect();
    for (line, series) in verdicts.iter().zip(SERIES) {
        assert!(line.trim_start().starts_with(series), "{line}");
        assert!(
            line.contains(" flat ") || line.contains(" GROWING "),
            "a verdict on {series}: {line}"
        );
    }
    assert_eq!(verdicts.len(), SERIES.len(), "{stdout}");
    let reconciled = stdout
        .lines()
        .find(|line| line.starts_with("reconcile:"))
        .ok_or_else(|| anyhow::anyhow!("no reconcile line: {stdout}"))?;
    assert!(
        reconciled.contains("| lost 0 |") && reconciled.contains("| phantom 0 |"),
        "{reconciled}"
    );
    let events = count_after(reconciled, "events ");
    let written = rows.last().map_or(0.0, |row| row[1]);
    assert!(
        written > 0.0 && events >= written as u64,
        "the ledger holds the {written} events the load wrote: {reconciled}"
    );

    let csv = std::fs::read_to_string(out.join("samples.csv"))?;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0].split(',').count(), COLUMNS, "{csv}");
    assert_eq!(
        lines.len(),
        rows.len() + 1,
        "a CSV line per sample printed: {csv}"
    );
    for (line, row) in lines[1..].iter().zip(&rows) {
        let values: Vec<f64> = line.split(',').map(str::parse).collect::<Result<_, _>>()?;
        assert_eq!(values.len(), COLUMNS, "{line}");
        assert_eq!(values[1], row[1], "the same events written: {line}");
        assert!(
            values[2..5].iter().all(|mib| *mib > 1.0),
            "resident memory read: {line}"
        );
    }
    let svg = std::fs::read_to_string(out.join("soak.svg"))?;
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg}"
    );
    let charts: Vec<&str> = svg.split("<polyline").skip(1).collect();
    assert_eq!(charts.len(), SERIES.len(), "a chart per series");
    for chart in charts {
        let points = chart
            .split("points=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        assert_eq!(
            points.map(|p| p.split(' ').count()),
            Some(rows.len()),
            "{chart}"
        );
    }
    if kept.is_none() {
        let _ = std::fs::remove_dir_all(&out);
    }
    Ok(())
}

/// The table's sample rows: every line of nine numbers.
fn sample_rows(stdout: &str) -> Vec<Vec<f64>> {
    stdout
        .lines()
        .filter_map(|line| {
            line.split_whitespace()
                .map(str::parse::<f64>)
                .collect::<Result<Vec<_>, _>>()
                .ok()
                .filter(|values| values.len() == COLUMNS)
        })
        .collect()
}

/// The count after `label` in `line` (`events 12 | …`), 0 when absent.
fn count_after(line: &str, label: &str) -> u64 {
    line.split(label)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}
