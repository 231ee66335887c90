//! The compatibility gate on the event contracts.
//!
//! `proto/baseline/` holds the `.proto` files as of the last release; `proto/proto/` is the
//! schema this build generates code from. Both are compiled with protox and compared: a
//! change that would break a consumer built against the baseline (or the ledger decoding
//! events it stored under the baseline) fails this test, and the failure lists every such
//! change, one per line. The rules and how to move the baseline: docs/event-schema-evolution.md.

mod breaking;
mod schema;
mod variants;

use std::path::{Path, PathBuf};

use breaking::{Break, breaking_changes};
use schema::Sources;

/// The baseline's `.proto` files: the schema of the last release.
fn baseline_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("baseline")
}

/// The schema this build compiles (`build.rs`).
fn current_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("proto")
}

/// The baseline's sources, read from disk.
fn baseline() -> Sources {
    Sources::read_dir(&baseline_dir()).expect("read the baseline schema")
}

/// Every breaking change from `baseline` to `current`, compiling both; the file names the
/// baseline declares are the contract. Panics when either side does not compile.
fn compare(baseline: &Sources, current: &Sources) -> Vec<Break> {
    let before = baseline.compile().expect("compile the baseline schema");
    let now = current.compile().expect("compile the current schema");
    let files: Vec<&str> = baseline.names().collect();
    breaking_changes(&before, &now, &files)
}

/// The failure text: a header that says what to do, then one line per breaking change.
fn report(breaks: &[Break]) -> String {
    let mut text = format!(
        "{} breaking change(s) in proto/proto against the baseline in proto/baseline \
         (rules: docs/event-schema-evolution.md):\n",
        breaks.len()
    );
    for change in breaks {
        text.push_str(&format!("  {change}\n"));
    }
    text
}

#[test]
fn current_schema_is_compatible_with_the_baseline() {
    let current = Sources::read_dir(&current_dir()).expect("read the current schema");
    let breaks = compare(&baseline(), &current);
    assert!(breaks.is_empty(), "{}", report(&breaks));
}

#[test]
fn baseline_holds_every_file_of_the_current_schema_it_names() {
    // A baseline file that no longer exists under proto/proto would fail to compile above;
    // this says so directly.
    let current = Sources::read_dir(&current_dir()).expect("read the current schema");
    let current_names: Vec<&str> = current.names().collect();
    for name in baseline().names() {
        assert!(
            current_names.contains(&name),
            "proto/baseline/{name} has no counterpart proto/proto/{name}: a contract file was \
             removed or moved, which breaks every consumer importing it"
        );
    }
}
