//! What the publication's checks vouch for, and the checks a session makes: one at its
//! start ([`at_start`]) and one every [`CHECK_INTERVAL`] while it streams ([`recheck`]). The
//! slot is never confirmed past [`Coverage::covered`]. The rules themselves, and why a
//! passed check vouches for the WAL the check before it read, are
//! [`super::publication`]'s (its module doc).

use std::collections::VecDeque;

use tokio_postgres::Client;
use tracing::info;

use super::RelayError;
#[cfg(doc)]
use super::publication::CHECK_INTERVAL;
use super::publication::{Catalog, Checked, PublicationError, check, ensure, read};
use super::slot::Registration;
use crate::config::RelayConfig;
use crate::lsn::format_lsn;

/// One check while streaming, the reader's every [`CHECK_INTERVAL`]: reads the catalog,
/// applies rules 1 to 4, then rule 5 against `coverage`, and adds what the check vouches
/// for. A new identity passes only when the slot's registration records it: the guard
/// writes there the identity of a change it saw harmless (a no-op `SET`, `OWNER TO`; issue
/// 55, item 4, migration V20). Returns the catalog, for what else the reader watches.
pub async fn recheck(
    sql: &Client,
    config: &RelayConfig,
    coverage: &mut Coverage,
) -> Result<Catalog, RelayError> {
    let catalog = read(sql, &config.publication).await?;
    let checked = check(&config.publication, &catalog)?;
    if checked.identity != coverage.identity {
        let registered = super::slot::registration(sql, &config.slot)
            .await?
            .and_then(|registration| registration.publication_identity);
        if registered.as_deref() == Some(checked.identity.as_str()) {
            info!(
                before = %coverage.identity,
                now = %checked.identity,
                "the publication changed in a way the outbox guard saw harmless: streaming on"
            );
            coverage.vouched_change(&checked.identity);
        }
    }
    coverage.passed(&checked, &catalog)?;
    Ok(catalog)
}

/// The check at a session's start: rules 1 to 4, then rule 5 against what the slot's
/// registration remembers (the publication and its identity when last found right). The
/// first check of the session's [`Coverage`].
pub async fn at_start(
    sql: &Client,
    config: &RelayConfig,
    registration: Option<&Registration>,
) -> Result<(Coverage, Checked), RelayError> {
    let streamed = registration.and_then(|registration| registration.publication.as_deref());
    if let Some(streamed) = streamed
        && streamed != config.publication
    {
        return Err(PublicationError::OtherPublication {
            slot: config.slot.clone(),
            streamed: streamed.to_owned(),
            configured: config.publication.clone(),
        }
        .into());
    }
    let (checked, catalog) = ensure(sql, config, registration.is_none()).await?;
    // The ways the guard is switched off are named by the reader's first check, at once.
    if let Some(before) =
        registration.and_then(|registration| registration.publication_identity.as_deref())
        && before != checked.identity
    {
        return Err(PublicationError::Changed {
            publication: config.publication.clone(),
            before: before.to_owned(),
            now: checked.identity.clone(),
            covered: "its confirmed position".into(),
        }
        .into());
    }
    let mut coverage = Coverage::new(&config.publication, &checked);
    coverage.passed(&checked, &catalog)?;
    Ok((coverage, checked))
}

/// One WAL position a check read, waiting to be vouched for.
///
/// Why the transactions it waits for are enough (issue 55, item 5): a command that changes
/// what pgoutput sends of the outbox changes a catalog row the check reads (the
/// publication's row, its tables' rows, the outbox's `pg_class` row: `publish`, a table
/// dropped from it, a filter, the publication or the outbox dropped, renamed or rebuilt),
/// and a change committed before the earlier check's WAL position is, at the later check,
/// either visible (the check judges it), committed but not yet visible (waited for), or not
/// yet marked committed in the commit log because its commit record is still being
/// flushed: then the row the check reads is the old version, whose xmax names the running
/// transaction (`pending`, waited for too). Once all have ended, the next check sees the
/// change. Changes that only add catalog rows (another table, a schema) leave no xmax, and
/// lose nothing: what they add is refused when its first Relation message arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    wal: u64,
    /// Transactions committed but invisible to the check after it, or running with a
    /// change to a catalog row it read: vouched for once all have ended.
    waiting: Vec<String>,
}

/// How many positions may wait at once; older ones are merged into newer ones.
const MAX_CANDIDATES: usize = 64;

/// What the passed checks of a publication vouch for (the module doc): the slot may be
/// confirmed up to [`Coverage::covered`] and no further.
#[derive(Debug, Clone)]
pub struct Coverage {
    publication: String,
    identity: String,
    outbox_oid: u32,
    outbox: String,
    covered: u64,
    /// The WAL position the previous passed check read.
    previous: Option<u64>,
    candidates: VecDeque<Candidate>,
}

impl Coverage {
    /// Coverage of `publication`, whose identity must stay `checked.identity`; nothing is
    /// vouched for yet.
    pub fn new(publication: &str, checked: &Checked) -> Self {
        Self {
            publication: publication.to_owned(),
            identity: checked.identity.clone(),
            outbox_oid: checked.outbox_oid,
            outbox: checked.outbox.clone(),
            covered: 0,
            previous: None,
            candidates: VecDeque::new(),
        }
    }

    /// The WAL position up to which the slot may be confirmed.
    pub fn covered(&self) -> u64 {
        self.covered
    }

    /// The outbox's OID.
    pub fn outbox_oid(&self) -> u32 {
        self.outbox_oid
    }

    /// The publication's identity changed in a way the guard saw harmless: the
    /// registration records `identity` (the guard writes it, issue 55 item 4, migration
    /// V20), so the checks hold the publication to it from now on. What was vouched for
    /// stays: the publication carried the outbox at the end of every command between.
    fn vouched_change(&mut self, identity: &str) {
        identity.clone_into(&mut self.identity);
    }

    /// A check whose rules held found `checked` in `catalog`: refused when the identity
    /// changed, else what it vouches for is added. Pure.
    pub fn passed(&mut self, checked: &Checked, catalog: &Catalog) -> Result<(), PublicationError> {
        if checked.identity != self.identity {
            return Err(PublicationError::Changed {
                publication: self.publication.clone(),
                before: self.identity.clone(),
                now: checked.identity.clone(),
                covered: format_lsn(self.covered),
            });
        }
        let wal = catalog.wal;
        if let Some(previous) = self.previous.replace(wal) {
            self.candidates.push_back(Candidate {
                wal: previous,
                waiting: catalog
                    .committed_invisible
                    .iter()
                    .chain(&catalog.pending)
                    .cloned()
                    .collect(),
            });
        }
        for candidate in &mut self.candidates {
            candidate
                .waiting
                .retain(|xid| catalog.running.contains(xid));
        }
        while self
            .candidates
            .front()
            .is_some_and(|candidate| candidate.waiting.is_empty())
        {
            if let Some(candidate) = self.candidates.pop_front() {
                self.covered = self.covered.max(candidate.wal);
            }
        }
        while self.candidates.len() > MAX_CANDIDATES {
            // Waiting for both sets before vouching for the newer position is only slower.
            if let Some(older) = self.candidates.pop_front()
                && let Some(newer) = self.candidates.front_mut()
            {
                newer.waiting.extend(older.waiting);
            }
        }
        Ok(())
    }

    /// A Relation message for `oid`, `schema.name`: refused unless it is the outbox.
    pub fn relation(&self, oid: u32, table: &str) -> Result<(), PublicationError> {
        if oid == self.outbox_oid {
            return Ok(());
        }
        Err(PublicationError::ForeignRelation {
            publication: self.publication.clone(),
            table: table.to_owned(),
            oid,
            outbox: self.outbox.clone(),
            outbox_oid: self.outbox_oid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsn::parse_lsn;
    use crate::relay::publication::tests::ours;

    fn at(wal: &str, committed_invisible: &[&str], running: &[&str]) -> Catalog {
        Catalog {
            wal: parse_lsn(wal).unwrap(),
            committed_invisible: committed_invisible.iter().map(|x| x.to_string()).collect(),
            running: running.iter().map(|x| x.to_string()).collect(),
            ..ours()
        }
    }

    #[test]
    fn a_check_vouches_for_the_wal_the_check_before_it_read() {
        let checked = check("pub", &ours()).unwrap();
        let mut coverage = Coverage::new("pub", &checked);
        coverage.passed(&checked, &at("0/1000", &[], &[])).unwrap();
        assert_eq!(coverage.covered(), 0, "one check vouches for nothing yet");
        coverage.passed(&checked, &at("0/2000", &[], &[])).unwrap();
        assert_eq!(coverage.covered(), 0x1000);
        coverage.passed(&checked, &at("0/3000", &[], &[])).unwrap();
        assert_eq!(coverage.covered(), 0x2000);
    }

    #[test]
    fn a_commit_not_visible_yet_is_waited_out() {
        let checked = check("pub", &ours()).unwrap();
        let mut coverage = Coverage::new("pub", &checked);
        coverage.passed(&checked, &at("0/1000", &[], &[])).unwrap();
        // 900 committed (its standby has not answered) but is not visible: it could be a
        // change of the publication written before 0/1000.
        coverage
            .passed(&checked, &at("0/2000", &["900"], &["900", "901"]))
            .unwrap();
        assert_eq!(coverage.covered(), 0);
        coverage
            .passed(&checked, &at("0/3000", &[], &["900"]))
            .unwrap();
        assert_eq!(coverage.covered(), 0, "900 still running");
        coverage.passed(&checked, &at("0/4000", &[], &[])).unwrap();
        assert_eq!(coverage.covered(), 0x3000, "900 ended, and nothing changed");
    }

    #[test]
    fn a_running_change_of_a_catalog_row_read_is_waited_out() {
        let checked = check("pub", &ours()).unwrap();
        let mut coverage = Coverage::new("pub", &checked);
        coverage.passed(&checked, &at("0/1000", &[], &[])).unwrap();
        // 900 updated the publication's row and is still "in progress" in the commit log,
        // its commit record perhaps already before 0/1000.
        let pending = Catalog {
            pending: vec!["900".into()],
            ..at("0/2000", &[], &["900", "901"])
        };
        coverage.passed(&checked, &pending).unwrap();
        assert_eq!(
            coverage.covered(),
            0,
            "900 may have changed the publication"
        );
        coverage
            .passed(&checked, &at("0/3000", &[], &["901"]))
            .unwrap();
        assert_eq!(
            coverage.covered(),
            0x2000,
            "900 ended, and the check after it found the publication unchanged"
        );
    }

    #[test]
    fn another_identity_is_refused_and_says_how_far_the_slot_went() {
        let checked = check("pub", &ours()).unwrap();
        let mut coverage = Coverage::new("pub", &checked);
        coverage.passed(&checked, &at("0/1000", &[], &[])).unwrap();
        coverage.passed(&checked, &at("0/2000", &[], &[])).unwrap();
        let mut altered_back = ours();
        altered_back.publication.as_mut().unwrap().xmin = "802".into();
        let again = check("pub", &altered_back).unwrap();
        let error = coverage
            .passed(&again, &at("0/3000", &[], &[]))
            .unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, PublicationError::Changed { .. })
                && text.contains("publication 16400@802")
                && text.contains("confirmed only up to 0/1000"),
            "{text}"
        );
        assert_eq!(coverage.covered(), 0x1000, "nothing more vouched for");
    }

    #[test]
    fn positions_waiting_on_a_long_commit_stay_bounded() {
        let checked = check("pub", &ours()).unwrap();
        let mut coverage = Coverage::new("pub", &checked);
        for step in 1..=200u64 {
            coverage
                .passed(&checked, &at(&format_lsn(step * 0x100), &["900"], &["900"]))
                .unwrap();
        }
        assert!(coverage.candidates.len() <= MAX_CANDIDATES);
        assert_eq!(coverage.covered(), 0);
        coverage.passed(&checked, &at("0/FFFF0", &[], &[])).unwrap();
        assert_eq!(
            coverage.covered(),
            200 * 0x100,
            "all vouched for once 900 ended"
        );
    }

    #[test]
    fn only_the_checked_outbox_may_appear_in_the_stream() {
        let checked = check("pub", &ours()).unwrap();
        let coverage = Coverage::new("pub", &checked);
        assert!(coverage.relation(16_390, "public.outbox").is_ok());
        let text = coverage
            .relation(17_000, "audit.outbox")
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("audit.outbox (OID 17000)") && text.contains("public.outbox, OID 16390"),
            "{text}"
        );
    }
}
