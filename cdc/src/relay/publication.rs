//! The publication the relay's slot streams through: checked before the slot is used and
//! every [`CHECK_INTERVAL`] while it streams, and the slot is never confirmed past the WAL
//! that a passed check vouches for ([`Coverage`](super::coverage::Coverage)).
//!
//! # Why
//!
//! pgoutput decides what to send with the catalog as it was at each point of the WAL. While
//! the publication does not carry the outbox (a table dropped from it, a row filter, a
//! column list, `publish` without `insert`, the publication dropped, the outbox rebuilt
//! under the same name), the rows committed meanwhile are not in the stream, and never will
//! be: putting the publication right later does not bring them back. Heartbeats go on
//! through the slot, so without a check the relay confirms the slot past those rows, and
//! retention deletes them. The loss is silent and for good.
//!
//! # The rules ([`check`], pure), in the order applied
//!
//! 1. A table named `outbox` is on the relay's search path: a plain table whose columns the
//!    relay reads have the types it reads ([`crate::outbox::COLUMNS`]).
//! 2. The publication exists, is not `FOR ALL TABLES`, and publishes inserts only.
//! 3. It carries no schema, and no table but that outbox (by OID).
//! 4. It carries that outbox, with no row filter and no column list.
//!
//! Then [`Coverage`](super::coverage::Coverage) adds the rule a look at the catalog now cannot make alone:
//!
//! 5. The publication's identity ([`Checked::identity`]: the OIDs and row versions of its
//!    catalog rows) is the one the relay found before, in this session and in the ones
//!    before it (`relay_slots.publication_identity`, migration V17). A publication altered
//!    and altered back, dropped and re-created, or another one configured, has another
//!    identity even when it looks right now: rows may have gone by in between.
//!
//! Each failure stops the relay (no retry helps: only the operator can put the publication
//! right, and `ledger relay recover` publishes from the outbox what the stream left out).
//!
//! # What a passed check vouches for
//!
//! A check reads the catalog in one snapshot and the WAL insert position right after it. A
//! command that changed the publication and committed before that position is seen by the
//! next check at the latest: by then it is visible, or it is a transaction that committed
//! but is not visible yet (a synchronous commit waiting for its standby), which the check
//! names and [`Coverage`](super::coverage::Coverage) waits out. So when two checks in a row pass with the same
//! identity, and every transaction the later one found committed but invisible has ended,
//! the WAL up to the position read by the earlier one was written with the publication
//! right: the slot may be confirmed that far, and no further.

use std::time::Duration;

use serde::Deserialize;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tracing::info;

use super::RelayError;
use crate::config::RelayConfig;
use crate::lsn::parse_lsn;
use crate::outbox::COLUMNS;

/// How often a streaming session checks its publication. The slot is confirmed at most
/// about two of these behind Kafka's acknowledgements, so it is short; a check is one
/// catalog read of a few rows.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// A WAL position as PostgreSQL writes it (`X/Y`).
fn wal_position<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_lsn(&text).ok_or_else(|| {
        serde::de::Error::custom(format!("the server gave the WAL position {text:?}"))
    })
}

/// What [`read`] finds in the catalog, in one snapshot (`sql/publication_state.sql`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Catalog {
    /// The table named `outbox` on the search path.
    pub outbox: Option<Outbox>,
    /// The publication's row.
    pub publication: Option<Publication>,
    /// The tables it carries.
    #[serde(default)]
    pub tables: Vec<Member>,
    /// The schemas it carries (`FOR TABLES IN SCHEMA`).
    #[serde(default)]
    pub schemas: Vec<String>,
    /// Transactions that committed but were not visible to the snapshot yet.
    #[serde(default)]
    pub committed_invisible: Vec<String>,
    /// Every transaction still running at the snapshot.
    #[serde(default)]
    pub running: Vec<String>,
    /// Those of them that changed or removed a catalog row the check read (its xmax): their
    /// commit record may be in the WAL already while the commit log says "in progress".
    #[serde(default)]
    pub pending: Vec<String>,
    /// `pg_event_trigger.evtenabled` of the DDL guard, when installed (`D` is disabled,
    /// `A` fires in every session, `O` not in replica ones, `R` only in those).
    pub guard: Option<String>,
    /// `event_triggers` as this session has it (PostgreSQL 17+; `None` before).
    #[serde(default)]
    pub event_triggers: Option<String>,
    /// Role and database settings that switch the guard or event triggers off.
    #[serde(default)]
    pub overrides: Vec<String>,
    /// The WAL insert position, read after the snapshot; parsed as it is read, so a
    /// position the relay cannot read is the server's answer it does not understand
    /// ([`RelayError::Catalog`]), not a publication to mend.
    #[serde(deserialize_with = "wal_position")]
    pub wal: u64,
}

/// The outbox table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Outbox {
    /// Its OID: what pgoutput's Relation messages name.
    pub oid: u32,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// `pg_class.relkind`: `r` for a plain table.
    pub kind: String,
    /// Its columns, in order.
    pub columns: Vec<Column>,
}

/// One column of the outbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type's OID.
    pub type_oid: u32,
    /// Its type, as PostgreSQL writes it.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// The publication's catalog row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Publication {
    /// Its OID.
    pub oid: u32,
    /// The transaction that wrote this version of its row.
    pub xmin: String,
    /// `FOR ALL TABLES`.
    pub all_tables: bool,
    /// Publishes inserts.
    pub insert: bool,
    /// Publishes updates.
    pub update: bool,
    /// Publishes deletes.
    pub delete: bool,
    /// Publishes truncates.
    pub truncate: bool,
}

/// One table a publication carries (`pg_publication_rel`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Member {
    /// The membership row's OID.
    pub oid: u32,
    /// The transaction that wrote it.
    pub xmin: String,
    /// The table's OID.
    pub relid: u32,
    /// The table, as its name reads on the search path.
    pub table: String,
    /// Whether a row filter applies.
    pub row_filter: bool,
    /// Whether only some columns are carried.
    pub column_list: bool,
}

/// What a passed check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The publication's identity: its row's OID and version, the outbox's OID, and the
    /// membership row's OID and version. Another publication, or this one changed in any
    /// way and changed back, has another.
    pub identity: String,
    /// The outbox's OID: a Relation message of any other table is refused.
    pub outbox_oid: u32,
    /// The outbox, `schema.name`.
    pub outbox: String,
}

/// How to put the publication right, for the messages.
fn fix(publication: &str) -> String {
    format!(
        "As the outbox's owner: `DROP PUBLICATION IF EXISTS {publication}; CREATE PUBLICATION {publication} FOR TABLE outbox WITH (publish = 'insert')` (with SET ra_ledger.allow_outbox_publication_change = on, which the guard of migration V17 asks for). Then run `ledger relay recover`, which publishes from the outbox what the stream left out (docs/operators.md, \"What the relay checks\")"
    )
}

/// Why the relay will not stream through its publication.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublicationError {
    /// No table named outbox on the search path, or not one the relay can read.
    #[error(
        "the outbox is not what the relay reads: {reason}. The relay publishes the table named outbox on its role's search path, as `ledger migrate` creates it; fix the schema, then run `ledger relay recover` if the relay streamed before"
    )]
    Outbox {
        /// What is wrong.
        reason: String,
    },
    /// The publication does not exist.
    #[error(
        "the publication {publication} does not exist, and the slot streamed through it: outbox rows committed since it was dropped are not in the stream (PostgreSQL 15 to 17 end the stream with an error, 18 sends nothing), and the relay does not re-create it in silence. {}",
        fix(.publication)
    )]
    Missing {
        /// The publication.
        publication: String,
    },
    /// The publication does not carry exactly the outbox.
    #[error(
        "the publication {publication} does not carry exactly the outbox ({outbox}): {reason}. While it does not, committed outbox rows are left out of the stream for good. {}",
        fix(.publication)
    )]
    Wrong {
        /// The publication.
        publication: String,
        /// The outbox, `schema.name`.
        outbox: String,
        /// What is wrong.
        reason: String,
    },
    /// The publication is not the one the relay found before.
    #[error(
        "the publication {publication} changed since the relay checked it (it was {before}, it is {now}; the slot is confirmed only up to {covered}): it was altered, dropped and re-created, or another publication is configured, and outbox rows committed meanwhile may be missing from the stream. Run `ledger relay recover`, which publishes from the outbox what the stream may have left out (docs/operators.md, \"What the relay checks\")"
    )]
    Changed {
        /// The publication.
        publication: String,
        /// Its identity when last checked.
        before: String,
        /// Its identity now.
        now: String,
        /// How far the slot may have been confirmed.
        covered: String,
    },
    /// The slot streamed through another publication.
    #[error(
        "the slot {slot} streams through the publication {streamed}, but the setting `publication` names {configured}: switching publications under a slot leaves out what the new one did not carry. Set it back to {streamed}, or run `ledger relay recover` with the new setting (docs/operators.md, \"What the relay checks\")"
    )]
    OtherPublication {
        /// The slot.
        slot: String,
        /// What it streamed through.
        streamed: String,
        /// What the setting names now.
        configured: String,
    },
    /// A Relation message of a table that is not the checked outbox.
    #[error(
        "the stream carries the table {table} (OID {oid}), which is not the outbox the relay reads ({outbox}, OID {outbox_oid}): the publication changed or the outbox was rebuilt. {}",
        fix(.publication)
    )]
    ForeignRelation {
        /// The publication.
        publication: String,
        /// The table in the stream, `schema.name`.
        table: String,
        /// Its OID.
        oid: u32,
        /// The outbox, `schema.name`.
        outbox: String,
        /// Its OID.
        outbox_oid: u32,
    },
}

/// Reads the catalog as [`check`] needs it.
pub async fn read(sql: &Client, publication: &str) -> Result<Catalog, RelayError> {
    let json: String = sql
        .query_one(
            include_str!("../sql/publication_state.sql"),
            &[&publication],
        )
        .await?
        .get(0);
    serde_json::from_str(&json)
        .map_err(|error| RelayError::Catalog(format!("the publication's catalog: {error}")))
}

/// The publication `config` names, checked (rules 1 to 4); created first when it does not
/// exist and `create` allows it (a slot about to be created from a snapshot: nothing
/// streamed through it before). Creating needs the outbox's owner; as another role, the
/// error says what to run.
pub async fn ensure(
    sql: &Client,
    config: &RelayConfig,
    create: bool,
) -> Result<(Checked, Catalog), RelayError> {
    let mut catalog = read(sql, &config.publication).await?;
    if catalog.publication.is_none() && create {
        info!(publication = %config.publication, "creating the outbox publication");
        let created = sql
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE outbox WITH (publish = 'insert')",
                config.publication
            ))
            .await;
        match created {
            Ok(()) => {}
            // Another relay created it at the same moment.
            Err(error) if error.code() == Some(&SqlState::DUPLICATE_OBJECT) => {}
            Err(error) if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                return Err(RelayError::Catalog(format!(
                    "the publication {publication} does not exist, and the relay's role may not create it ({}): as the outbox's owner, run `CREATE PUBLICATION {publication} FOR TABLE outbox WITH (publish = 'insert')` (`ledger migrate` does)",
                    crate::infra::pg::explain(&error),
                    publication = config.publication
                )));
            }
            Err(error) => return Err(error.into()),
        }
        catalog = read(sql, &config.publication).await?;
    }
    let checked = check(&config.publication, &catalog)?;
    Ok((checked, catalog))
}

/// Whether `publication` carries exactly the outbox as the relay reads it (rules 1 to 4 of
/// the module doc). Pure.
pub fn check(publication: &str, catalog: &Catalog) -> Result<Checked, PublicationError> {
    let outbox = catalog
        .outbox
        .as_ref()
        .ok_or_else(|| PublicationError::Outbox {
            reason: "there is no table named outbox on the search path".into(),
        })?;
    let qualified = format!("{}.{}", outbox.schema, outbox.name);
    if let Some(reason) = unreadable(outbox, &qualified) {
        return Err(PublicationError::Outbox { reason });
    }
    let wrong = |reason: String| PublicationError::Wrong {
        publication: publication.to_owned(),
        outbox: qualified.clone(),
        reason,
    };
    let Some(row) = &catalog.publication else {
        return Err(PublicationError::Missing {
            publication: publication.to_owned(),
        });
    };
    if let Some(reason) = not_inserts_alone(row, &catalog.schemas) {
        return Err(wrong(reason));
    }
    let member = outbox_alone(catalog, outbox.oid, &qualified).map_err(wrong)?;
    Ok(Checked {
        identity: format!(
            "publication {}@{} outbox {} membership {}@{}",
            row.oid, row.xmin, outbox.oid, member.oid, member.xmin
        ),
        outbox_oid: outbox.oid,
        outbox: qualified,
    })
}

/// Why the relay cannot read `outbox` (named `qualified`): not a plain table, or a column
/// it reads missing or of another type; `None` when it can. Pure.
fn unreadable(outbox: &Outbox, qualified: &str) -> Option<String> {
    if outbox.kind != "r" {
        return Some(format!(
            "{qualified} is not a plain table (relkind {})",
            outbox.kind
        ));
    }
    for (name, type_oid, required) in COLUMNS {
        match outbox.columns.iter().find(|column| column.name == name) {
            None if required => return Some(format!("{qualified} has no column {name}")),
            Some(column) if column.type_oid != type_oid => {
                return Some(format!(
                    "{qualified}.{name} is of type {}, and the relay reads {}",
                    column.type_name,
                    crate::outbox::type_name(type_oid)
                ));
            }
            _ => {}
        }
    }
    None
}

/// Why the publication `row`, with the schemas it carries, publishes more than the inserts
/// of the tables it lists; `None` when it publishes those alone. Pure.
fn not_inserts_alone(row: &Publication, schemas: &[String]) -> Option<String> {
    if row.all_tables {
        return Some("it is FOR ALL TABLES".into());
    }
    if !row.insert || row.update || row.delete || row.truncate {
        let published: Vec<&str> = [
            (row.insert, "insert"),
            (row.update, "update"),
            (row.delete, "delete"),
            (row.truncate, "truncate"),
        ]
        .into_iter()
        .filter_map(|(on, operation)| on.then_some(operation))
        .collect();
        return Some(format!(
            "it publishes '{}', not 'insert' alone",
            published.join(", ")
        ));
    }
    if !schemas.is_empty() {
        return Some(format!("it carries the schemas {}", schemas.join(", ")));
    }
    None
}

/// The publication's membership of the outbox (OID `outbox_oid`, named `qualified`) when it
/// carries that table alone, whole; why not otherwise. Pure.
fn outbox_alone<'a>(
    catalog: &'a Catalog,
    outbox_oid: u32,
    qualified: &str,
) -> Result<&'a Member, String> {
    let others: Vec<&str> = catalog
        .tables
        .iter()
        .filter(|member| member.relid != outbox_oid)
        .map(|member| member.table.as_str())
        .collect();
    if !others.is_empty() {
        return Err(format!("it carries {} too", others.join(", ")));
    }
    let Some(member) = catalog
        .tables
        .iter()
        .find(|member| member.relid == outbox_oid)
    else {
        return Err(format!("it does not carry {qualified}"));
    };
    if member.row_filter {
        return Err(format!("it carries {qualified} with a row filter"));
    }
    if member.column_list {
        return Err(format!("it carries {qualified} with a column list"));
    }
    Ok(member)
}

/// The ways the outbox guard is switched off that `catalog` shows, each with its fix
/// (issue 55, item 6). Pure. What the relay cannot see: a session's own `SET` of the
/// override, of `event_triggers` or of `session_replication_role` (the guard is enabled
/// ALWAYS, so the last no longer matters); those it catches by its checks, as it does any
/// change the guard let through.
pub fn guard_bypasses(catalog: &Catalog) -> Vec<String> {
    let mut bypasses = Vec::new();
    match catalog.guard.as_deref() {
        None => bypasses.push(
            "not installed: as a superuser, run `SELECT ra_ledger_install_outbox_guard()` in this database".to_owned(),
        ),
        Some("D") => bypasses.push(
            "disabled: `ALTER EVENT TRIGGER ra_ledger_outbox_guard ENABLE ALWAYS`".to_owned(),
        ),
        Some("O") => bypasses.push(
            "skipped by sessions with session_replication_role = replica: `ALTER EVENT TRIGGER ra_ledger_outbox_guard ENABLE ALWAYS`".to_owned(),
        ),
        Some("R") => bypasses.push(
            "fires in replica sessions only: `ALTER EVENT TRIGGER ra_ledger_outbox_guard ENABLE ALWAYS`".to_owned(),
        ),
        Some(_) => {}
    }
    if catalog
        .event_triggers
        .as_deref()
        .is_some_and(|value| matches!(value, "off" | "false" | "no" | "0"))
    {
        bypasses.push(
            "event_triggers = off: no event trigger fires (ALTER SYSTEM RESET event_triggers, then a reload)".to_owned(),
        );
    }
    for setting in &catalog.overrides {
        bypasses.push(format!(
            "set for {setting} (ALTER ROLE … RESET or ALTER DATABASE … RESET that setting)"
        ));
    }
    bypasses
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::outbox::type_oid;

    /// The catalog the migrations make.
    pub(in crate::relay) fn ours() -> Catalog {
        let column = |name: &str, type_oid: u32| Column {
            name: name.into(),
            type_oid,
            type_name: crate::outbox::type_name(type_oid).into(),
        };
        Catalog {
            outbox: Some(Outbox {
                oid: 16_390,
                schema: "public".into(),
                name: "outbox".into(),
                kind: "r".into(),
                columns: vec![
                    column("id", type_oid::INT8),
                    column("event_id", type_oid::UUID),
                    column("aggregate_type", type_oid::TEXT),
                    column("aggregate_id", type_oid::TEXT),
                    column("event_type", type_oid::TEXT),
                    column("payload", type_oid::BYTEA),
                    column("created_at", 1184),
                    column("traceparent", type_oid::TEXT),
                ],
            }),
            publication: Some(Publication {
                oid: 16_400,
                xmin: "745".into(),
                insert: true,
                ..Publication::default()
            }),
            tables: vec![Member {
                oid: 16_401,
                xmin: "745".into(),
                relid: 16_390,
                table: "outbox".into(),
                ..Member::default()
            }],
            wal: 0x1000,
            ..Catalog::default()
        }
    }

    fn reason(catalog: &Catalog) -> String {
        check("pub", catalog).unwrap_err().to_string()
    }

    #[test]
    fn the_publication_the_migrations_make_passes_with_its_identity() {
        let checked = check("pub", &ours()).unwrap();
        assert_eq!(
            checked.identity,
            "publication 16400@745 outbox 16390 membership 16401@745"
        );
        assert_eq!(checked.outbox, "public.outbox");
    }

    #[test]
    fn every_way_a_publication_stops_carrying_the_outbox_is_refused() {
        let mut dropped = ours();
        dropped.publication = None;
        dropped.tables.clear();
        assert_eq!(
            check("pub", &dropped),
            Err(PublicationError::Missing {
                publication: "pub".into()
            })
        );

        let mut table_dropped = ours();
        table_dropped.tables.clear();
        assert!(reason(&table_dropped).contains("it does not carry public.outbox"));

        // Rebuilt (create, copy, drop, rename) and not added back: the new outbox is not
        // carried. Added back, the rules hold, and the identity tells (see Coverage).
        let mut rebuilt = ours();
        rebuilt.outbox.as_mut().unwrap().oid = 17_000;
        rebuilt.tables.clear();
        assert!(reason(&rebuilt).contains("it does not carry public.outbox"));
        rebuilt.tables.push(Member {
            oid: 17_001,
            xmin: "900".into(),
            relid: 17_000,
            table: "outbox".into(),
            ..Member::default()
        });
        let added_back = check("pub", &rebuilt).unwrap();
        assert_ne!(added_back.identity, check("pub", &ours()).unwrap().identity);

        let mut other_schema = ours();
        other_schema.tables[0].relid = 17_000;
        other_schema.tables[0].table = "audit.outbox".into();
        assert!(reason(&other_schema).contains("it carries audit.outbox too"));

        let mut filtered = ours();
        filtered.tables[0].row_filter = true;
        assert!(reason(&filtered).contains("row filter"));

        let mut columns = ours();
        columns.tables[0].column_list = true;
        assert!(reason(&columns).contains("column list"));

        let mut updates_only = ours();
        let publication = updates_only.publication.as_mut().unwrap();
        publication.insert = false;
        publication.update = true;
        assert!(reason(&updates_only).contains("publishes 'update', not 'insert' alone"));

        let mut all = ours();
        all.publication.as_mut().unwrap().all_tables = true;
        assert!(reason(&all).contains("FOR ALL TABLES"));

        let mut schema = ours();
        schema.schemas = vec!["public".into()];
        assert!(reason(&schema).contains("the schemas public"));

        let mut extra = ours();
        extra.tables.push(Member {
            relid: 20_000,
            table: "events".into(),
            ..Member::default()
        });
        assert!(reason(&extra).contains("it carries events too"));

        let text = reason(&dropped);
        assert!(
            text.contains("CREATE PUBLICATION pub FOR TABLE outbox WITH (publish = 'insert')")
                && text.contains("ledger relay recover"),
            "names the fix: {text}"
        );
    }

    #[test]
    fn an_outbox_the_relay_cannot_read_is_refused() {
        let mut missing = ours();
        missing.outbox = None;
        assert!(reason(&missing).contains("no table named outbox"));

        let mut text_payload = ours();
        text_payload.outbox.as_mut().unwrap().columns[5] = Column {
            name: "payload".into(),
            type_oid: type_oid::TEXT,
            type_name: "text".into(),
        };
        let text = reason(&text_payload);
        assert!(
            text.contains("public.outbox.payload is of type text, and the relay reads bytea"),
            "{text}"
        );

        let mut no_event_id = ours();
        no_event_id.outbox.as_mut().unwrap().columns.remove(1);
        assert!(reason(&no_event_id).contains("has no column event_id"));

        let mut no_traceparent = ours();
        no_traceparent.outbox.as_mut().unwrap().columns.pop();
        assert!(
            check("pub", &no_traceparent).is_ok(),
            "traceparent is optional"
        );

        let mut partitioned = ours();
        partitioned.outbox.as_mut().unwrap().kind = "p".into();
        assert!(reason(&partitioned).contains("not a plain table"));
    }

    #[test]
    fn every_bypass_of_the_guard_the_catalog_shows_is_named() {
        let always = Catalog {
            guard: Some("A".into()),
            event_triggers: Some("on".into()),
            ..ours()
        };
        assert_eq!(guard_bypasses(&always), Vec::<String>::new());
        for (guard, says) in [
            (None, "not installed"),
            (Some("D"), "disabled"),
            (Some("O"), "session_replication_role = replica"),
            (Some("R"), "replica sessions only"),
        ] {
            let catalog = Catalog {
                guard: guard.map(str::to_owned),
                ..always.clone()
            };
            let named = guard_bypasses(&catalog);
            assert!(named.len() == 1 && named[0].contains(says), "{named:?}");
        }
        let off = Catalog {
            event_triggers: Some("off".into()),
            overrides: vec![
                "role ops: ra_ledger.allow_outbox_publication_change=on".into(),
                "database ledger: session_replication_role=replica".into(),
            ],
            ..always
        };
        let named = guard_bypasses(&off);
        assert_eq!(named.len(), 3, "{named:?}");
        assert!(named[0].contains("event_triggers = off"));
        assert!(named[1].contains("role ops") && named[1].contains("RESET"));
    }
}
