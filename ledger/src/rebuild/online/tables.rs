//! The new tables, made like the live ones: same owner, indexes (by the live names),
//! constraints, foreign keys and grants.

use deadpool_postgres::Object;

use super::{RETIRED, SCHEMA, quote_ident};
use crate::rebuild::{RebuildError, TABLES, refuse_outside_references};

/// A foreign key added to the new tables only in the swapping transaction: (table, name,
/// ADD statement).
pub(super) type DeferredKey = (&'static str, String, String);

/// The new tables, empty, like the live ones: indexes, constraints, foreign keys (to each
/// other where the live ones point at each other), grants.
///
/// Returns the deferrable foreign keys, which are checked at commit: the bulk's chunks end
/// in the middle of the original transactions (a REPLACE ends one assignment pointing at the
/// next, started by the next event), so those keys are added only in the swapping
/// transaction, `NOT VALID`, and validated after it: (table, name, ADD statement).
pub(super) async fn prepare(work: &Object) -> Result<Vec<DeferredKey>, RebuildError> {
    work.batch_execute("SET search_path = public").await?;
    let owner = owner_we_may_act_as(work).await?;
    refuse_outside_references(work).await?;
    // Definitions read with search_path = public: they name the projections unqualified,
    // so with the rebuild's schema first they point at the new tables.
    let mut copied = Copied::default();
    for table in TABLES {
        copy_foreign_keys(work, table, &mut copied).await?;
        copy_grants(work, table, &owner, &mut copied).await?;
    }
    create_tables(work).await?;
    let renames = index_renames(work).await?;
    let owned: Vec<String> = TABLES
        .iter()
        .map(|table| {
            format!(
                "ALTER TABLE {SCHEMA}.{table} OWNER TO {}",
                quote_ident(&owner)
            )
        })
        .collect();
    for statement in renames
        .iter()
        .chain(&owned)
        .chain(&copied.foreign_keys)
        .chain(&copied.grants)
    {
        work.batch_execute(statement).await?;
    }
    Ok(copied.deferred)
}

/// What the new tables take over from the live ones, as statements.
#[derive(Debug, Default)]
struct Copied {
    /// Foreign keys added with the tables.
    foreign_keys: Vec<String>,
    /// Deferrable ones, added at the swap.
    deferred: Vec<DeferredKey>,
    /// Grants.
    grants: Vec<String>,
}

/// The projections' owner, if the rebuild's role may act as it.
async fn owner_we_may_act_as(work: &Object) -> Result<String, RebuildError> {
    let owner: String = work
        .query_one(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'public.contacts'::regclass",
            &[],
        )
        .await?
        .get(0);
    let may: bool = work
        .query_one(
            "SELECT pg_has_role(current_user, $1::text, 'USAGE')",
            &[&owner],
        )
        .await?
        .get(0);
    if !may {
        return Err(RebuildError::NotOwner(owner));
    }
    Ok(owner)
}

/// The live `table`'s foreign keys, as statements on the new one.
async fn copy_foreign_keys(
    work: &Object,
    table: &'static str,
    copied: &mut Copied,
) -> Result<(), RebuildError> {
    for row in work
        .query(
            "SELECT conname, pg_get_constraintdef(oid), condeferrable FROM pg_constraint \
             WHERE conrelid = $1::text::regclass AND contype = 'f' ORDER BY conname",
            &[&format!("public.{table}")],
        )
        .await?
    {
        let (name, definition, deferrable): (String, String, bool) =
            (row.get(0), row.get(1), row.get(2));
        // A key a killed rebuild left unvalidated is validated on the new tables.
        let definition = definition.trim_end_matches(" NOT VALID");
        let add = format!(
            "ALTER TABLE {SCHEMA}.{table} ADD CONSTRAINT {} {definition}",
            quote_ident(&name)
        );
        if deferrable {
            copied.deferred.push((table, name, add));
        } else {
            copied.foreign_keys.push(add);
        }
    }
    Ok(())
}

/// The live `table`'s grants to roles other than its owner, as statements on the new one.
async fn copy_grants(
    work: &Object,
    table: &str,
    owner: &str,
    copied: &mut Copied,
) -> Result<(), RebuildError> {
    for row in work
        .query(
            "SELECT grantee, string_agg(privilege_type, ', ') \
             FROM information_schema.role_table_grants \
             WHERE table_schema = 'public' AND table_name = $1 AND grantee <> $2 \
             GROUP BY grantee",
            &[&table, &owner],
        )
        .await?
    {
        let (grantee, privileges): (String, String) = (row.get(0), row.get(1));
        let grantee = if grantee == "PUBLIC" {
            grantee
        } else {
            quote_ident(&grantee)
        };
        copied.grants.push(format!(
            "GRANT {privileges} ON {SCHEMA}.{table} TO {grantee}"
        ));
    }
    Ok(())
}

/// The rebuild's schema afresh (what a killed rebuild left is dropped), with the tables
/// `LIKE` the live ones, and the session pointed at them.
async fn create_tables(work: &Object) -> Result<(), RebuildError> {
    work.batch_execute(&format!(
        "SET client_min_messages = warning; \
         DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; DROP SCHEMA IF EXISTS {RETIRED} CASCADE; \
         RESET client_min_messages; \
         CREATE SCHEMA {SCHEMA}; \
         CREATE TABLE {SCHEMA}.contacts (LIKE public.contacts INCLUDING ALL); \
         CREATE TABLE {SCHEMA}.assignments (LIKE public.assignments INCLUDING ALL); \
         SET search_path = {SCHEMA}, public; \
         SET synchronous_commit = off"
    ))
    .await?;
    Ok(())
}

/// `LIKE` names the copied indexes after their columns: statements giving them the live
/// ones' names, matching by what they index.
async fn index_renames(work: &Object) -> Result<Vec<String>, RebuildError> {
    let mut renames = Vec::new();
    for table in TABLES {
        let indexes = |schema: &str| {
            format!(
                "SELECT c.relname, substr(pg_get_indexdef(i.indexrelid), \
                        strpos(pg_get_indexdef(i.indexrelid), ' USING ')), i.indisunique \
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 WHERE i.indrelid = '{schema}.{table}'::regclass"
            )
        };
        let live = work.query(&indexes("public"), &[]).await?;
        for row in work.query(&indexes(SCHEMA), &[]).await? {
            let (name, shape, unique): (String, String, bool) =
                (row.get(0), row.get(1), row.get(2));
            let twin = live
                .iter()
                .find(|live| live.get::<_, &str>(1) == shape && live.get::<_, bool>(2) == unique);
            if let Some(twin) = twin
                .map(|live| live.get::<_, String>(0))
                .filter(|twin| *twin != name)
            {
                renames.push(format!(
                    "ALTER INDEX {SCHEMA}.{} RENAME TO {}",
                    quote_ident(&name),
                    quote_ident(&twin)
                ));
            }
        }
    }
    Ok(renames)
}
