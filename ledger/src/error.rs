//! Why a command was refused or failed, and what a database error means for it.
//!
//! The classification is by SQLSTATE and constraint name, in one place: a unique violation
//! of an invariant's index is a conflict between two writers (HTTP 409), a deadlock or a
//! serialization failure is worth retrying the whole transaction, a lock that could not be
//! had in time is a conflict the client may retry, and anything else is a failure to report
//! with its cause.

use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::domain::ValidationError;
use crate::projections::ProjectionError;
use crate::store::AppendError;

/// Why a command was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A field is invalid.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// Something the command refers to does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// Kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The command conflicts with the current state or a concurrent writer.
    #[error("{0}")]
    Conflict(String),
    /// A concurrent command got there first, and the database's index settled it.
    #[error(transparent)]
    Raced(#[from] Race),
    /// One item of a batch was refused: the whole batch wrote nothing.
    #[error("{}", item_message(*.index, .error, &.error.to_string()))]
    Item {
        /// Its index in the batch, from 0.
        index: usize,
        /// Why the item was refused.
        error: Box<CommandError>,
    },
    /// The event store refused the append.
    #[error(transparent)]
    Append(AppendError),
    /// Projecting failed: ledger and projections disagree.
    #[error(transparent)]
    Projection(ProjectionError),
    /// No database connection.
    #[error("no database connection: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// The database failed.
    #[error("database error: {}", crate::db::describe(.0))]
    Database(tokio_postgres::Error),
}

impl CommandError {
    /// The database error behind this one, if any.
    pub fn database_error(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Self::Database(error)
            | Self::Append(AppendError::Database(error))
            | Self::Projection(ProjectionError::Database(error)) => Some(error),
            _ => None,
        }
    }

    /// Whether a concurrent writer appended to the same stream, or started the same
    /// business's assignment, first: read again and the command sees what it did.
    pub fn lost_a_race(&self) -> bool {
        match self {
            Self::Append(AppendError::Conflict { .. })
            | Self::Raced(Race::ActiveAssignment { .. }) => true,
            Self::Item { error, .. } => error.lost_a_race(),
            _ => false,
        }
    }

    /// This error as the refusal of the batch item at `index`.
    pub fn in_item(self, index: usize) -> Self {
        Self::Item {
            index,
            error: Box::new(self),
        }
    }

    /// Whether running the whole transaction again may succeed: it lost a deadlock or a
    /// serialization failure to a concurrent transaction, which PostgreSQL rolled back.
    pub fn is_transient(&self) -> bool {
        self.database_error()
            .and_then(tokio_postgres::Error::code)
            .is_some_and(|code| {
                *code == SqlState::T_R_DEADLOCK_DETECTED
                    || *code == SqlState::T_R_SERIALIZATION_FAILURE
            })
    }
}

/// What a client may read of a failure: a stable code and a sentence, the shape of the
/// API's errors. A run's `last_error` and a failed row's `reason` are this, written as
/// `code: sentence`, because they reach every reader and, in `ReassignmentRowFailed`,
/// Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disclosed {
    /// Stable, machine-readable: `invalid_field`, `not_found`, `conflict`,
    /// `backdated_effective_at`, `unavailable` or `internal`; a replay's error has a few
    /// codes of its own (`crate::replay::run::RunError::disclosed`, docs/security.md).
    pub code: &'static str,
    /// For a person; never the database's text.
    pub message: String,
}

impl std::fmt::Display for Disclosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl Disclosed {
    /// A failure inside the service: its cause goes to the log under a fresh reference,
    /// the client gets the reference only.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        let reference = uuid::Uuid::now_v7();
        tracing::error!(%reference, cause = %cause, "request failed");
        Self {
            code: "internal",
            message: format!(
                "internal error; the service log has the cause under reference {reference}"
            ),
        }
    }
}

impl CommandError {
    /// What a client may read of this error. Refusals (bad input, conflicts, what is not
    /// found) are the client's to read as they are: their messages are ours. A failure
    /// of the database or the projections carries SQLSTATEs, constraint and table names:
    /// it is logged under a reference ([`Disclosed::internal`]) and only the reference is
    /// disclosed.
    pub fn disclosed(&self) -> Disclosed {
        let refusal = |code| Disclosed {
            code,
            message: self.to_string(),
        };
        match self {
            Self::Item { index, error } => {
                let inner = error.disclosed();
                Disclosed {
                    code: inner.code,
                    message: item_message(*index, error, &inner.message),
                }
            }
            Self::Validation(_) => refusal("invalid_field"),
            Self::NotFound { .. } => refusal("not_found"),
            Self::Conflict(_) | Self::Raced(_) | Self::Append(AppendError::Conflict { .. }) => {
                refusal("conflict")
            }
            Self::Append(AppendError::Backdated { .. }) => refusal("backdated_effective_at"),
            Self::Pool(error) => {
                tracing::warn!(%error, "no database connection for a request");
                Disclosed {
                    code: "unavailable",
                    message: "the ledger database is unavailable; retry later".into(),
                }
            }
            Self::Append(AppendError::Database(_)) | Self::Projection(_) | Self::Database(_) => {
                Disclosed::internal(self)
            }
        }
    }
}

/// How a batch item's refusal reads: `items[3].effective_at: …` for a bad field,
/// `items[3]: …` for anything else. `text` is the item's error as it is disclosed.
fn item_message(index: usize, error: &CommandError, text: &str) -> String {
    match error {
        CommandError::Validation(invalid) => {
            format!("items[{index}].{}: {}", invalid.field, invalid.reason)
        }
        _ => format!("items[{index}]: {text}"),
    }
}

/// A race between two commands that an index of the database settled: the loser's
/// transaction rolled back, and reading again shows what the winner did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Race {
    /// Another command made a primary contact of the jurisdiction first.
    #[error("the jurisdiction already has a primary contact")]
    PrimaryContact,
    /// Another command started an active assignment of the business in the jurisdiction
    /// first. The key is the database's (from the violation's detail), when it names one.
    #[error("{}", match .key {
        Some((business_id, jurisdiction)) => format!(
            "business {business_id} in {jurisdiction} was assigned by a concurrent request meanwhile"
        ),
        None => "the business already has an active assignment in this jurisdiction".to_owned(),
    })]
    ActiveAssignment {
        /// The business and jurisdiction code.
        key: Option<(Uuid, String)>,
    },
}

impl Race {
    /// The race a unique violation of `assignments_one_active` means; its detail reads
    /// `Key (business_id, jurisdiction)=(0192…, TX) already exists.`
    fn active_assignment(detail: Option<&str>) -> Self {
        let key = detail.and_then(|detail| {
            let values = detail.split_once(")=(")?.1.split_once(')')?.0;
            let (business, jurisdiction) = values.split_once(", ")?;
            Some((business.parse().ok()?, jurisdiction.to_owned()))
        });
        Self::ActiveAssignment { key }
    }
}

impl From<tokio_postgres::Error> for CommandError {
    /// Unique violations of the invariants' indexes are conflicts, not failures: they are
    /// how a race between two commands is settled. A lock not granted within the
    /// connection's `lock_timeout` is a conflict too: another transaction holds the rows.
    fn from(error: tokio_postgres::Error) -> Self {
        let code = error.code();
        if code == Some(&SqlState::UNIQUE_VIOLATION) {
            let db = error.as_db_error();
            match db.and_then(|db| db.constraint()) {
                Some("contacts_one_primary") => return Race::PrimaryContact.into(),
                Some("assignments_one_active") => {
                    return Race::active_assignment(db.and_then(|db| db.detail())).into();
                }
                _ => {}
            }
        }
        if code == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            return Self::Conflict(
                "another transaction holds the rows this command changes (a reassignment page, \
                 or a long-running session); retry in a moment"
                    .into(),
            );
        }
        Self::Database(error)
    }
}

impl From<AppendError> for CommandError {
    fn from(error: AppendError) -> Self {
        match error {
            AppendError::Database(error) => Self::from(error),
            other => Self::Append(other),
        }
    }
}

impl From<ProjectionError> for CommandError {
    fn from(error: ProjectionError) -> Self {
        match error {
            ProjectionError::Database(error) => Self::from(error),
            other => Self::Projection(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_active_assignment_race_carries_the_key_the_database_names() {
        let business: Uuid = "0192f7a8-3c3e-7f1a-9c1e-5d2a4b6c8d90".parse().unwrap();
        let detail = format!("Key (business_id, jurisdiction)=({business}, TX) already exists.");
        assert_eq!(
            Race::active_assignment(Some(&detail)),
            Race::ActiveAssignment {
                key: Some((business, "TX".into()))
            }
        );
        for unreadable in [None, Some("Key (x)=(y) already exists."), Some("")] {
            assert_eq!(
                Race::active_assignment(unreadable),
                Race::ActiveAssignment { key: None }
            );
        }
        let raced = CommandError::from(Race::active_assignment(Some(&detail)));
        assert!(raced.lost_a_race());
        assert!(raced.in_item(3).lost_a_race());
    }

    #[test]
    fn an_item_error_names_its_index_and_keeps_its_code() {
        let invalid = CommandError::from(ValidationError::new("effective_at", "too early"));
        let item = invalid.in_item(2);
        assert_eq!(item.to_string(), "items[2].effective_at: too early");
        assert_eq!(
            item.disclosed(),
            Disclosed {
                code: "invalid_field",
                message: "items[2].effective_at: too early".into()
            }
        );
        let raced = CommandError::from(Race::PrimaryContact).in_item(0);
        assert_eq!(raced.disclosed().code, "conflict");
        assert_eq!(
            raced.to_string(),
            "items[0]: the jurisdiction already has a primary contact"
        );
        assert!(!raced.lost_a_race(), "only a lost start is read again");
    }
}
