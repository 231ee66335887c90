//! Batches of assignments: all of them or none, an item's error naming its index.

use uuid::Uuid;

use super::assignments::new_assignment;
use super::{Assign, CommandError, Ledger, MAX_BATCH, NewAssignment, Race};
use crate::domain::{Jurisdiction, ValidationError};
use crate::queries::{self, AssignmentView, LockMode, PrimaryContactLock};
use crate::store::{self, AppendError, Metadata};
use crate::write;

impl Ledger {
    /// Starts many assignments in one transaction: all of them or none (a provider's
    /// portfolio arrives as a unit; a retry of a failed batch never half-applies). Items are
    /// named by their index in errors: `items[3].jurisdiction`, `items[3]: business … already
    /// has …`. At most [`MAX_BATCH`]; a business may appear once per jurisdiction.
    pub async fn assign_batch(
        &self,
        items: Vec<Assign>,
        metadata: &Metadata,
    ) -> Result<Vec<AssignmentView>, CommandError> {
        check_batch_size(items.len())?;
        let items = items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                NewAssignment::checked(item)
                    .map_err(|error| CommandError::from(error).in_item(index))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let outcomes = self.batch(&items, WhenAssigned::Refuse, metadata).await?;
        Ok(outcomes
            .into_iter()
            .filter_map(|outcome| match outcome {
                BatchItem::Started(view) => Some(view),
                BatchItem::AlreadyAssigned(_) => None,
            })
            .collect())
    }

    /// [`Ledger::assign_batch`] for an import that may run again: an item whose business
    /// already has an active assignment in the jurisdiction (on any contact) is skipped
    /// instead of refusing the batch. The others start, all or none.
    pub async fn import_batch(
        &self,
        items: &[NewAssignment],
        metadata: &Metadata,
    ) -> Result<Vec<BatchItem>, CommandError> {
        check_batch_size(items.len())?;
        self.batch(items, WhenAssigned::Skip, metadata).await
    }

    /// The batch both share. The shared primary-contact locks of every jurisdiction are
    /// taken first, in code order (so two batches cannot deadlock on them); then, in one
    /// round trip, every stream's head and every item's context; then one append of every
    /// event with its outbox row and projection rows. An error of one item is
    /// [`CommandError::Item`], with its index.
    async fn batch(
        &self,
        items: &[NewAssignment],
        when_assigned: WhenAssigned,
        metadata: &Metadata,
    ) -> Result<Vec<BatchItem>, CommandError> {
        check_distinct(items)?;
        self.write(|tx, _| {
            Box::pin(async move {
                let mut codes: Vec<Jurisdiction> =
                    items.iter().map(|item| item.jurisdiction).collect();
                codes.sort_by_key(|j| j.code());
                codes.dedup();
                for jurisdiction in &codes {
                    PrimaryContactLock::prepare(tx, *jurisdiction, LockMode::Shared)
                        .await?
                        .take(tx)
                        .await?;
                }
                let keys: Vec<(Uuid, Jurisdiction)> = items
                    .iter()
                    .map(|item| (item.business_id, item.jurisdiction))
                    .collect();
                let streams: Vec<String> = items.iter().map(NewAssignment::stream).collect();
                // Each statement reads its own snapshot. The heads go first: a concurrent
                // start that commits between the two reads is then seen by the lookups (an
                // item already assigned) or not at all (its event then takes the version
                // this append wants), and either names the item. The other way round, an
                // old lookup on a new head is caught only by the projection's unique index.
                let (heads, contexts) = tokio::try_join!(
                    biased;
                    store::read_heads(tx, &streams),
                    queries::assign_contexts(tx, &keys),
                )?;
                let mut appends = Vec::with_capacity(items.len());
                let mut outcomes = Vec::with_capacity(items.len());
                for (index, (item, context)) in items.iter().zip(&contexts).enumerate() {
                    if let (WhenAssigned::Skip, Some(active)) =
                        (when_assigned, context.active_assignment)
                    {
                        outcomes.push(BatchItem::AlreadyAssigned(active));
                        continue;
                    }
                    let (append, view) = new_assignment(item, context, heads.now)
                        .map_err(|error| error.in_item(index))?;
                    appends.push(append);
                    outcomes.push(BatchItem::Started(view));
                }
                if !appends.is_empty() {
                    write::record(tx, &appends, &heads, metadata).await?;
                }
                Ok(outcomes)
            })
        })
        .await
        .map_err(|error| name_raced_item(error, items))
    }
}

/// What a batch does with an item whose business already has an active assignment in the
/// jurisdiction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenAssigned {
    /// Refuse the whole batch with a conflict naming the item.
    Refuse,
    /// Skip the item: an import running again.
    Skip,
}

/// One item of a batch, once it committed.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchItem {
    /// The assignment it started.
    Started(AssignmentView),
    /// Skipped: the business already has this active assignment in the jurisdiction.
    AlreadyAssigned(Uuid),
}

/// A batch that lost a race to a concurrent writer, for a stream or for the active
/// assignment of a business: the error names the item.
fn name_raced_item(error: CommandError, items: &[NewAssignment]) -> CommandError {
    let index = match &error {
        CommandError::Append(AppendError::Conflict { stream, .. }) => {
            items.iter().position(|item| item.stream() == *stream)
        }
        CommandError::Raced(Race::ActiveAssignment {
            key: Some((business_id, code)),
        }) => items
            .iter()
            .position(|item| item.business_id == *business_id && item.jurisdiction.code() == code),
        _ => None,
    };
    match index {
        Some(index) => error.in_item(index),
        None => error,
    }
}

/// A batch holds 1 to [`MAX_BATCH`] items.
fn check_batch_size(items: usize) -> Result<(), ValidationError> {
    if items == 0 || items > MAX_BATCH {
        return Err(ValidationError::new(
            "items",
            format!("must hold 1 to {MAX_BATCH} assignments, not {items}"),
        ));
    }
    Ok(())
}

/// A batch names each business once per jurisdiction.
fn check_distinct(items: &[NewAssignment]) -> Result<(), CommandError> {
    let mut seen = std::collections::HashMap::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if let Some(first) = seen.insert((item.business_id, item.jurisdiction), index) {
            let duplicate = ValidationError::new(
                "business_id",
                format!(
                    "{} in {} is already items[{first}]; a batch names each once",
                    item.business_id,
                    item.jurisdiction.code()
                ),
            );
            return Err(CommandError::from(duplicate).in_item(index));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(business: u128, code: &str) -> NewAssignment {
        NewAssignment {
            business_id: Uuid::from_u128(business),
            jurisdiction: Jurisdiction::parse("jurisdiction", code).unwrap(),
            effective_at: None,
        }
    }

    #[test]
    fn a_lost_race_names_the_item_by_its_stream_or_its_key() {
        let items = [item(1, "TX"), item(2, "TX"), item(2, "CA")];
        let stream = CommandError::Append(AppendError::Conflict {
            stream: items[2].stream(),
            expected: 0,
            actual: 1,
        });
        assert!(matches!(
            name_raced_item(stream, &items),
            CommandError::Item { index: 2, .. }
        ));
        let key = CommandError::from(Race::ActiveAssignment {
            key: Some((Uuid::from_u128(2), "TX".into())),
        });
        let named = name_raced_item(key, &items);
        assert!(matches!(named, CommandError::Item { index: 1, .. }));
        assert!(named.to_string().starts_with("items[1]: business "));
        // A race the batch cannot place stays as it is.
        let unknown = CommandError::from(Race::ActiveAssignment { key: None });
        assert!(matches!(
            name_raced_item(unknown, &items),
            CommandError::Raced(_)
        ));
    }

    #[test]
    fn a_batch_names_a_business_twice_by_the_later_index() {
        let items = [item(1, "TX"), item(2, "TX"), item(1, "TX")];
        let error = check_distinct(&items).unwrap_err();
        assert!(matches!(error, CommandError::Item { index: 2, .. }));
        assert!(error.to_string().contains("is already items[0]"), "{error}");
        assert!(check_distinct(&items[..2]).is_ok());
        assert!(check_batch_size(0).is_err());
        assert!(check_batch_size(MAX_BATCH).is_ok());
        assert!(check_batch_size(MAX_BATCH + 1).is_err());
    }
}
