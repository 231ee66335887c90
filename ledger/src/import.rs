//! Bulk onboarding from a CSV file: `ledger import`.
//!
//! The file is read and checked whole before anything is written, so a bad line costs
//! nothing: its error names the line and the value. Then the rows go in batches of up to
//! [`MAX_BATCH`] through [`Ledger::import_batch`], the same transaction as
//! `POST /v1/assignments/batch` (events, hash chains, outbox rows and projection rows
//! together), with a row whose business already has an active assignment in the
//! jurisdiction skipped. A run that stopped (an error, Ctrl-C, kill -9) is resumed by
//! running it again: what committed is skipped, the rest starts.
//!
//! The file: a header naming the columns `business_id` and `jurisdiction`, and optionally
//! `effective_at` (RFC 3339; empty or absent means the time of the import), in any order,
//! then one assignment per line.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::stream::{self, StreamExt, TryStreamExt};
use uuid::Uuid;

use crate::commands::{BatchItem, CommandError, Ledger, MAX_BATCH, NewAssignment};
use crate::domain::{self, Jurisdiction};
use crate::store::Metadata;

/// One line of an import file, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportRow {
    /// Its line in the file (the header is line 1).
    pub line: u64,
    /// The business.
    pub business_id: Uuid,
    /// The jurisdiction.
    pub jurisdiction: Jurisdiction,
    /// Business time; `None` for the time of the import.
    pub effective_at: Option<DateTime<Utc>>,
}

impl ImportRow {
    /// The assignment the line asks for, as a batch takes it.
    fn assignment(&self) -> NewAssignment {
        NewAssignment {
            business_id: self.business_id,
            jurisdiction: self.jurisdiction,
            effective_at: self.effective_at,
        }
    }
}

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file cannot be read.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// Why (in the message, not a source, so it is said once).
        cause: std::io::Error,
    },
    /// A line of the file is not a valid assignment; nothing was written.
    #[error("line {line}: {reason}")]
    Line {
        /// The line.
        line: u64,
        /// What is wrong, naming the value.
        reason: String,
    },
    /// A batch was refused by the ledger; it wrote nothing, the batches before it stay.
    #[error(
        "{reason}; the batch of lines {first_line}-{last_line} wrote nothing: fix the cause and run the import again (what committed is skipped)"
    )]
    Batch {
        /// The batch's first line.
        first_line: u64,
        /// Its last line.
        last_line: u64,
        /// The ledger's answer, its item named by line.
        reason: String,
        /// The ledger's error (its item named by index in the batch).
        error: CommandError,
    },
}

/// Reads and checks a whole import file: every line a valid assignment, no business twice
/// in a jurisdiction.
pub fn read(path: &Path) -> Result<Vec<ImportRow>, ImportError> {
    let io = |cause| ImportError::Io {
        path: path.display().to_string(),
        cause,
    };
    if path.is_dir() {
        return Err(io(std::io::Error::other("it is a directory, not a file")));
    }
    parse(&std::fs::read(path).map_err(io)?)
}

/// [`read`] of a file's bytes.
pub fn parse(text: &[u8]) -> Result<Vec<ImportRow>, ImportError> {
    let text = with_unix_line_ends(text);
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(&text[..]);
    let header_error = |reason: String| ImportError::Line { line: 1, reason };
    let headers = reader
        .headers()
        .map_err(|error| header_error(csv_reason(&error)))?
        .clone();
    let column = |name: &str| headers.iter().position(|header| header == name);
    let (Some(business_column), Some(jurisdiction_column)) =
        (column("business_id"), column("jurisdiction"))
    else {
        return Err(header_error(format!(
            "the header must name the columns business_id and jurisdiction (and optionally \
             effective_at), found {:?}",
            headers.iter().collect::<Vec<_>>().join(",")
        )));
    };
    let effective_column = column("effective_at");
    if let Some(unknown) = headers
        .iter()
        .find(|header| !["business_id", "jurisdiction", "effective_at"].contains(header))
    {
        return Err(header_error(format!(
            "unknown column {unknown:?}; the columns are business_id, jurisdiction and effective_at"
        )));
    }
    let mut rows = Vec::new();
    let mut seen: HashMap<(Uuid, Jurisdiction), u64> = HashMap::new();
    let mut lines = LineCounter::default();
    for record in reader.records() {
        let record = record.map_err(|error| ImportError::Line {
            line: lines.line_at(&text, error.position()),
            reason: csv_reason(&error),
        })?;
        let line = lines.line_at(&text, record.position());
        let bad = |reason: String| ImportError::Line { line, reason };
        let field = |index: usize| record.get(index).unwrap_or_default();
        let business = field(business_column);
        let business_id: Uuid = business.parse().map_err(|_| {
            bad(format!(
                "business_id: {business:?} is not a UUID (e.g. 0192f7a8-3c3e-7f1a-9c1e-5d2a4b6c8d90)"
            ))
        })?;
        let jurisdiction = Jurisdiction::parse("jurisdiction", field(jurisdiction_column))
            .map_err(|error| bad(error.to_string()))?;
        let effective_at = match effective_column.map(field) {
            None | Some("") => None,
            Some(text) => {
                let time = DateTime::parse_from_rfc3339(text).map_err(|_| {
                    bad(format!(
                        "effective_at: {text:?} is not an RFC 3339 time (e.g. 2026-03-01T00:00:00Z)"
                    ))
                })?;
                Some(
                    domain::instant("effective_at", time.with_timezone(&Utc))
                        .map_err(|error| bad(error.to_string()))?,
                )
            }
        };
        if let Some(first) = seen.insert((business_id, jurisdiction), line) {
            return Err(bad(format!(
                "business {business_id} in {} is already on line {first}; a file names each once",
                jurisdiction.code()
            )));
        }
        rows.push(ImportRow {
            line,
            business_id,
            jurisdiction,
            effective_at,
        });
    }
    Ok(rows)
}

/// `text` with every line end as a single LF: CRLF (as Excel saves CSV) and a lone CR.
///
/// The csv crate ends a record at either, but counts lines by LF alone, and the LF of a
/// CRLF only when it reads the next record: every record after the first Windows line end
/// was numbered one line too early, and errors named the line above the bad one
/// (BurntSushi/rust-csv#395). No field of an import can hold a line end, so nothing of
/// value changes.
fn with_unix_line_ends(text: &[u8]) -> Vec<u8> {
    let mut unix = Vec::with_capacity(text.len());
    for (at, &byte) in text.iter().enumerate() {
        match byte {
            b'\r' if text.get(at + 1) == Some(&b'\n') => {}
            b'\r' => unix.push(b'\n'),
            byte => unix.push(byte),
        }
    }
    unix
}

/// Numbers the lines records start on, counting in `text` (with Unix line ends) from the
/// byte the csv crate gives as a record's start, not from the crate's line number: that one
/// counts the blank and comment lines skipped before a record as the record's own, so a
/// record after `# a comment` was numbered one line too early. From the start byte, skipped
/// lines are stepped over here the way the reader skips them.
///
/// Records come in file order, so the count goes on from where the last one ended: one pass
/// over the file in all (counting from the start for every record made checking a
/// 100,000-row file take 98 s).
#[derive(Debug, Default)]
struct LineCounter {
    /// Bytes of `text` already counted.
    counted_to: usize,
    /// Line ends among them.
    line_ends: u64,
}

impl LineCounter {
    fn line_at(&mut self, text: &[u8], position: Option<&csv::Position>) -> u64 {
        let Some(position) = position else {
            return 0;
        };
        let mut at = usize::try_from(position.byte()).map_or(text.len(), |at| at.min(text.len()));
        loop {
            match text.get(at) {
                Some(b'\n') => at += 1,
                Some(b'#') => {
                    at = text[at..]
                        .iter()
                        .position(|&byte| byte == b'\n')
                        .map_or(text.len(), |end| at + end + 1)
                }
                _ => break,
            }
        }
        if at < self.counted_to {
            // Never for records read in order; counted afresh rather than wrong.
            *self = Self::default();
        }
        self.line_ends += text[self.counted_to..at]
            .iter()
            .filter(|&&byte| byte == b'\n')
            .count() as u64;
        self.counted_to = at;
        1 + self.line_ends
    }
}

/// A CSV error's reason, without the position the caller reports as the line.
fn csv_reason(error: &csv::Error) -> String {
    match error.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("{len} fields where the header has {expected_len}"),
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".into(),
        csv::ErrorKind::Io(error) => error.to_string(),
        _ => error.to_string(),
    }
}

/// How far an import has got.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImportProgress {
    /// Rows in the file.
    pub total: u64,
    /// Rows whose batch committed.
    pub done: u64,
    /// Of those, assignments started.
    pub started: u64,
    /// Of those, skipped: the business was already assigned in the jurisdiction.
    pub skipped: u64,
    /// Rows per second so far.
    pub rate: f64,
}

/// Options of an import run.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Rows per transaction, 1 to [`MAX_BATCH`].
    pub batch_size: usize,
    /// Batches in flight at once.
    pub concurrency: usize,
    /// Who imports, and the correlation id every event of the import carries.
    pub metadata: Metadata,
}

/// Imports `rows` (from [`read`]), reporting progress after every committed batch. Stops
/// at the first refused batch; the batches in flight with it may still commit.
pub async fn run(
    ledger: &Ledger,
    rows: &[ImportRow],
    options: &ImportOptions,
    mut on_progress: impl FnMut(&ImportProgress),
) -> Result<ImportProgress, ImportError> {
    let batch_size = options.batch_size.clamp(1, MAX_BATCH);
    let began = Instant::now();
    let mut progress = ImportProgress {
        total: rows.len() as u64,
        done: 0,
        started: 0,
        skipped: 0,
        rate: 0.0,
    };
    on_progress(&progress);
    // By start index, not `chunks()`: a closure over a borrowed chunk would make the
    // future's lifetime higher-ranked, and not `Send` for a spawned caller.
    let mut batches = stream::iter((0..rows.len()).step_by(batch_size))
        .map(|start| {
            let chunk = &rows[start..(start + batch_size).min(rows.len())];
            import_chunk(ledger, chunk, &options.metadata)
        })
        .buffer_unordered(options.concurrency.max(1));
    while let Some(outcomes) = batches.try_next().await? {
        progress.done += outcomes.len() as u64;
        for outcome in &outcomes {
            match outcome {
                BatchItem::Started(_) => progress.started += 1,
                BatchItem::AlreadyAssigned(_) => progress.skipped += 1,
            }
        }
        progress.rate =
            progress.done as f64 / began.elapsed().max(Duration::from_micros(1)).as_secs_f64();
        on_progress(&progress);
    }
    Ok(progress)
}

/// One batch, its errors naming lines instead of items.
async fn import_chunk(
    ledger: &Ledger,
    chunk: &[ImportRow],
    metadata: &Metadata,
) -> Result<Vec<BatchItem>, ImportError> {
    let items: Vec<NewAssignment> = chunk.iter().map(ImportRow::assignment).collect();
    let mut attempts = 1;
    loop {
        match ledger.import_batch(&items, metadata).await {
            // Another writer (say, the same file imported twice at once) started one of
            // these assignments first: read again, and skip it now.
            Err(error) if error.lost_a_race() && attempts < RACE_ATTEMPTS => {
                tracing::info!(%error, attempts, "a batch lost a race to another writer; reading again");
                attempts += 1;
            }
            outcome => return outcome.map_err(|error| batch_error(chunk, error)),
        }
    }
}

/// Attempts of a batch that keeps losing races for its streams to other writers.
const RACE_ATTEMPTS: u32 = 5;

/// A refused batch's error, its item named by line: `line 7 effective_at: …` for a bad
/// field, `line 7: …` for anything else.
fn batch_error(chunk: &[ImportRow], error: CommandError) -> ImportError {
    let reason = match &error {
        CommandError::Item { index, error } if *index < chunk.len() => {
            let line = chunk[*index].line;
            match error.as_ref() {
                CommandError::Validation(invalid) => {
                    format!("line {line} {}: {}", invalid.field, invalid.reason)
                }
                other => format!("line {line}: {other}"),
            }
        }
        other => other.to_string(),
    };
    ImportError::Batch {
        first_line: chunk.first().map_or(0, |row| row.line),
        last_line: chunk.last().map_or(0, |row| row.line),
        reason,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Result<Vec<ImportRow>, ImportError> {
        parse(text.as_bytes())
    }

    fn error(text: &str) -> String {
        lines(text).unwrap_err().to_string()
    }

    const A: &str = "0192f7a8-3c3e-7f1a-9c1e-5d2a4b6c8d90";
    const B: &str = "0192f7a8-3c3e-7f1a-9c1e-5d2a4b6c8d91";

    #[test]
    fn reads_columns_in_any_order_with_optional_times() {
        let rows = lines(&format!(
            "jurisdiction,effective_at,business_id\nTX,,{A}\n ny , 2026-03-01T00:00:00+02:00 ,{B}\n"
        ))
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].line, rows[0].jurisdiction.code()), (2, "TX"));
        assert_eq!(rows[0].effective_at, None);
        assert_eq!((rows[1].line, rows[1].jurisdiction.code()), (3, "NY"));
        assert_eq!(
            rows[1].effective_at.unwrap().to_rfc3339(),
            "2026-02-28T22:00:00+00:00"
        );
        let rows = lines(&format!("business_id,jurisdiction\n{A},TX\n")).unwrap();
        assert_eq!(rows[0].business_id.to_string(), A);
    }

    #[test]
    fn names_the_line_and_the_value_of_every_bad_input() {
        let cases = [
            ("id,jurisdiction\n", "line 1: the header must name"),
            (
                "business_id,jurisdiction,contact\n",
                "line 1: unknown column \"contact\"",
            ),
            (
                "business_id,jurisdiction\nnot-a-uuid,TX\n",
                "line 2: business_id: \"not-a-uuid\" is not a UUID",
            ),
            (
                &format!("business_id,jurisdiction\n{A},TX\n{B},ZZ\n"),
                "line 3: jurisdiction: unknown jurisdiction \"ZZ\"",
            ),
            (
                &format!("business_id,jurisdiction,effective_at\n{A},TX,yesterday\n"),
                "line 2: effective_at: \"yesterday\" is not an RFC 3339 time",
            ),
            (
                &format!("business_id,jurisdiction,effective_at\n{A},TX,0000-01-01T00:00:00Z\n"),
                "line 2: effective_at: 0000-01-01 00:00:00 UTC is outside the years",
            ),
            (
                &format!("business_id,jurisdiction\n{A},TX\n{A},tx\n"),
                "line 3: business 0192f7a8-3c3e-7f1a-9c1e-5d2a4b6c8d90 in TX is already on line 2",
            ),
            (
                &format!("business_id,jurisdiction\n{A},TX,extra\n"),
                "line 2: 3 fields where the header has 2",
            ),
            (
                "business_id,jurisdiction\n\u{0}\u{0},\u{0}\n",
                "line 2: business_id",
            ),
        ];
        for (input, expected) in cases {
            let got = error(input);
            assert!(got.starts_with(expected), "{input:?}: {got}");
        }
        let invalid_utf8 = parse(&b"business_id,jurisdiction\n\xff\xfe,TX\n"[..]).unwrap_err();
        assert!(
            invalid_utf8
                .to_string()
                .starts_with("line 2: not valid UTF-8"),
            "{invalid_utf8}"
        );
    }

    #[test]
    fn windows_line_ends_name_the_same_lines_as_unix_ones() {
        // As Excel saves CSV: CRLF after every line; a comment and a blank line among them,
        // which the csv crate's own line numbers count as part of the next record.
        let mut text = String::from("# exported\r\nbusiness_id,jurisdiction\r\n");
        for i in 0..13 {
            text.push_str(&format!("0192f7a8-3c3e-7f1a-9c1e-5d2a4b6c{i:04x},TX\r\n"));
        }
        text.push_str("\r\nnot-a-uuid,TX\r\n");
        let crlf = error(&text);
        assert!(crlf.starts_with("line 17: business_id"), "{crlf}");
        assert_eq!(crlf, error(&text.replace("\r\n", "\n")));
        let rows = lines(&text.replace("\r\nnot-a-uuid,TX\r\n", "")).unwrap();
        let numbered: Vec<u64> = rows.iter().map(|row| row.line).collect();
        assert_eq!(numbered, (3..=15).collect::<Vec<_>>());
        // A lone CR (old Mac files) ends a line too.
        let cr = error(&format!(
            "business_id,jurisdiction\r{A},TX\rnot-a-uuid,TX\r"
        ));
        assert!(cr.starts_with("line 3: business_id"), "{cr}");
        let after_comment = error(&format!("business_id,jurisdiction\n# a note\n\n{A},TX,x\n"));
        assert!(
            after_comment.starts_with("line 4: 3 fields"),
            "{after_comment}"
        );
    }

    #[test]
    fn an_empty_file_or_a_header_alone_imports_nothing() {
        assert!(error("").starts_with("line 1: the header must name"));
        assert!(lines("business_id,jurisdiction\n").unwrap().is_empty());
        assert!(
            lines("# a comment\nbusiness_id,jurisdiction\n# another\n")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_batch_error_names_lines_not_items() {
        let row = |line| ImportRow {
            line,
            business_id: Uuid::nil(),
            jurisdiction: Jurisdiction::parse("j", "TX").unwrap(),
            effective_at: None,
        };
        let chunk = [row(10), row(11), row(12)];
        let reason = |error: CommandError| match batch_error(&chunk, error) {
            ImportError::Batch { reason, .. } => reason,
            other => panic!("not a batch error: {other}"),
        };
        let too_early =
            CommandError::from(domain::ValidationError::new("effective_at", "too early"));
        assert_eq!(
            reason(too_early.in_item(2)),
            "line 12 effective_at: too early"
        );
        let taken = CommandError::Conflict("taken".into());
        assert_eq!(reason(taken.in_item(1)), "line 11: taken");
        // An index the chunk does not have is left as the ledger said it.
        let beyond = CommandError::Conflict("x".into()).in_item(9);
        assert_eq!(reason(beyond), "items[9]: x");
    }
}
