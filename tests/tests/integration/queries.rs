//! The read views' one column list each (issue 49, item 3): every statement whose rows the
//! ledger reads as an [`AssignmentView`] or a [`ContactView`] selects exactly the view's
//! `COLUMNS`, as PostgreSQL describes the prepared statement, and the readers find each
//! column by name. A column forgotten in one file, or named wrong, fails here, naming the
//! file; a column moved changes nothing, as the readers go by name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chrono::Utc;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::queries::{self, AssignmentView, ContactView};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;

use crate::layout::rust_files;
use uuid::Uuid;

/// The views a statement's rows are read as.
#[derive(Debug, Default)]
struct Reads {
    assignment: bool,
    contact: bool,
    joined_contact: bool,
}

impl Reads {
    /// The columns the statement must select, each once.
    fn columns(&self) -> BTreeSet<String> {
        let mut columns = BTreeSet::new();
        if self.assignment {
            columns.extend(AssignmentView::COLUMNS.map(str::to_owned));
        }
        if self.contact {
            columns.extend(ContactView::COLUMNS.map(str::to_owned));
        }
        if self.joined_contact {
            columns.extend(
                ContactView::COLUMNS.map(|name| format!("{}{name}", ContactView::JOINED_PREFIX)),
            );
        }
        columns
    }
}

/// Every statement read as a view, found in the source of the ledger and of the crates that
/// call its readers (`ledger-bench`'s reassignment comparison): each call of a view's reader
/// takes the `include_str!` statement last named before it in its function.
fn statements_read_as_views() -> anyhow::Result<BTreeMap<PathBuf, Reads>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for src in ["ledger/src", "bench/src", "testing/src"] {
        rust_files(&root.join(src), &mut files)?;
    }
    let include = regex::Regex::new(r#"include_str!\("([^"]+\.sql)"\)"#)?;
    let function = regex::Regex::new(r"^\s*(pub(\([a-z]+\))? )?(async )?fn ")?;
    let mut statements: BTreeMap<PathBuf, Reads> = BTreeMap::new();
    // A statement named once as a constant of its module (`const X_SQL: &str =
    // include_str!(…)`), then by that name in a function.
    let constant = regex::Regex::new(r#"const (\w+): &str =\s*include_str!\("([^"]+\.sql)"\)"#)?;
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let constants: Vec<(regex::Regex, PathBuf)> = constant
            .captures_iter(&text)
            .map(|found| {
                let name = regex::Regex::new(&format!(r"\b{}\b", &found[1]))?;
                anyhow::Ok((name, file.parent().unwrap().join(&found[2])))
            })
            .collect::<Result<_, _>>()?;
        let mut statement: Option<PathBuf> = None;
        for (number, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if function.is_match(line) {
                statement = None;
            }
            if let Some(found) = include.captures(line) {
                statement = Some(file.parent().unwrap().join(&found[1]));
            } else if let Some((_, path)) = constants.iter().find(|(name, _)| name.is_match(line)) {
                statement = Some(path.clone());
            }
            let reader = [
                ("AssignmentView::from_row", 0),
                ("ContactView::from_row", 1),
                ("ContactView::from_joined_row", 2),
            ]
            .into_iter()
            .find(|(call, _)| line.contains(call));
            let Some((call, view)) = reader else {
                continue;
            };
            let Some(sql) = &statement else {
                anyhow::bail!(
                    "{}:{}: {call} reads rows whose statement is not an include_str! earlier \
                     in its function, so this test cannot hold it to the view's columns",
                    file.display(),
                    number + 1
                );
            };
            let reads = statements.entry(sql.canonicalize()?).or_default();
            match view {
                0 => reads.assignment = true,
                1 => reads.contact = true,
                _ => reads.joined_contact = true,
            }
        }
    }
    Ok(statements)
}

#[tokio::test]
async fn every_statement_read_as_a_view_selects_its_columns() -> anyhow::Result<()> {
    let statements = statements_read_as_views()?;
    // The statements known today: the scan found them all (a new one is found as well).
    let names: BTreeSet<String> = statements
        .keys()
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for known in [
        "assignment",
        "assignment_for_update",
        "assignment_history",
        "lock_page_rows",
        "lock_active_of_contact",
        "contact",
        "contacts",
        "primary_contact",
        "lineage",
        "search_contacts",
        "registered_agent_at",
        "registered_agents_during",
    ] {
        assert!(names.contains(known), "{known} not found in {names:?}");
    }

    let database = TestDatabase::new().await?;
    let client = database.connect().await?;
    // A column's type, the same in every statement that selects it.
    let mut types: BTreeMap<String, (tokio_postgres::types::Type, String)> = BTreeMap::new();
    for (path, reads) in &statements {
        let file = path.display().to_string();
        let sql = std::fs::read_to_string(path)?;
        let prepared = client
            .prepare(&sql)
            .await
            .map_err(|error| anyhow::anyhow!("{file}: {error}"))?;
        let selected: Vec<String> = prepared
            .columns()
            .iter()
            .map(|column| column.name().to_owned())
            .collect();
        let distinct: BTreeSet<String> = selected.iter().cloned().collect();
        assert_eq!(
            distinct.len(),
            selected.len(),
            "{file} selects a name twice: {selected:?}"
        );
        let expected = reads.columns();
        let missing: Vec<_> = expected.difference(&distinct).collect();
        let extra: Vec<_> = distinct.difference(&expected).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{file} is read as {reads:?}: missing {missing:?}, not in the view {extra:?}"
        );
        for column in prepared.columns() {
            let (ty, first) = types
                .entry(column.name().to_owned())
                .or_insert_with(|| (column.type_().clone(), file.clone()));
            assert_eq!(
                ty,
                column.type_(),
                "{} is {} in {file}, {ty} in {first}",
                column.name(),
                column.type_()
            );
        }
    }

    // Each reader once, on a real row: it finds every name it reads (the statements above
    // select exactly those), and the joined contact is the contact, not its assignment's
    // columns of the same name.
    let api = TestApi::new(&database)?;
    let client = api.ledger.pool().get().await?;
    let contact_id: Uuid = api.contact("TX", "Columns Office").await.parse()?;
    let business = Uuid::now_v7();
    let assignment_id: Uuid = api.assign(business).await.parse()?;
    let assignment = queries::assignment(&client, assignment_id)
        .await?
        .expect("the assignment just made");
    assert_eq!(
        (assignment.business_id, assignment.contact_id),
        (business, contact_id)
    );
    let contact = queries::contact(&client, contact_id)
        .await?
        .expect("the contact just made");
    assert_eq!(contact.name, "Columns Office");
    let agent = queries::registered_agent_at(
        &client,
        business,
        Jurisdiction::parse("jurisdiction", "TX")?,
        Utc::now(),
        Utc::now(),
    )
    .await?
    .expect("the RA now");
    assert_eq!(agent.assignment, assignment);
    assert_eq!(agent.contact, contact);
    assert_ne!(agent.contact.recorded_at, assignment.recorded_at);
    Ok(())
}

/// Columns a projection fills from the envelope (its times and version), not from a field
/// of its event.
const FROM_ENVELOPE: [&str; 8] = [
    "started_at",
    "ended_at",
    "recorded_at",
    "ended_recorded_at",
    "created_at",
    "superseded_at",
    "superseded_recorded_at",
    "stream_version",
];

/// The columns that hold an event's field: its own name, but for these.
fn columns_of(message: &str, field: &str) -> Vec<String> {
    match (message, field) {
        ("AssignmentEnded", "reason") => vec!["end_reason".into()],
        ("ContactCreated", "address") => [
            "address_line1",
            "address_line2",
            "city",
            "region",
            "postal_code",
        ]
        .map(str::to_owned)
        .to_vec(),
        _ => vec![field.to_owned()],
    }
}

/// A field added to an event of the projections, to its table, or to its view is in all
/// three or this test names where it is missing: each field of `events.proto`'s contact and
/// assignment events has its column in the projection table, each column is a field's or
/// the envelope's, and the table's columns are the view's `COLUMNS`, which the test above
/// holds every statement and reader to.
#[tokio::test]
async fn the_projections_hold_every_field_of_their_events_and_the_views_every_column()
-> anyhow::Result<()> {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/proto");
    let files = protox::compile([ra_ledger_proto::EVENTS_PROTO_PATH], [include])?;
    let fields = |message: &str| -> Vec<String> {
        files
            .file
            .iter()
            .flat_map(|file| &file.message_type)
            .find(|described| described.name() == message)
            .unwrap_or_else(|| panic!("{message} is not in events.proto"))
            .field
            .iter()
            .map(|field| field.name().to_owned())
            .collect()
    };
    let database = TestDatabase::new().await?;
    let client = database.connect().await?;
    for (table, events, view) in [
        (
            "assignments",
            ["AssignmentStarted", "AssignmentEnded"],
            &AssignmentView::COLUMNS[..],
        ),
        (
            "contacts",
            ["ContactCreated", "ContactSuperseded"],
            &ContactView::COLUMNS[..],
        ),
    ] {
        let columns: BTreeSet<String> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'public' AND table_name = $1",
                &[&table],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let viewed: BTreeSet<String> = view.iter().map(|name| (*name).to_owned()).collect();
        assert_eq!(
            columns, viewed,
            "the columns of {table} (left) and of its view's COLUMNS (right)"
        );
        let mut filled: BTreeSet<String> = FROM_ENVELOPE
            .iter()
            .map(|name| (*name).to_owned())
            .filter(|name| columns.contains(name))
            .collect();
        for event in events {
            for field in fields(event) {
                for column in columns_of(event, &field) {
                    assert!(
                        columns.contains(&column),
                        "{event}.{field} has no column {column} in {table}: add it (a \
                         migration, the projection's SQL, the view, openapi.json), or say \
                         here why the projection does not hold it"
                    );
                    filled.insert(column);
                }
            }
        }
        let unfilled: Vec<_> = columns.difference(&filled).collect();
        assert!(
            unfilled.is_empty(),
            "{table} has columns no field of {events:?} and no envelope time fills: {unfilled:?}"
        );
    }
    Ok(())
}
