//! The page request a `ReassignmentPageRequested` event carries: built by the run's start,
//! each page and `runs resume`; decoded by the worker from the Kafka message.

use chrono::{DateTime, Utc};
use ra_ledger_proto::v1::{self, envelope::Event};
use uuid::Uuid;

use super::MAX_PAGE_SIZE;
use crate::domain::{Jurisdiction, ValidationError};
use crate::store::NewEvent;

/// Why a `ReassignmentPageRequested` event is not a page request the worker can run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageRequestError {
    /// An id that should be a UUID is not.
    #[error("{field} {value:?} is not a UUID")]
    NotUuid {
        /// The event's field (`run_id`, `cursor`, ...).
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// The page number is 0 or the page size outside 1 to [`MAX_PAGE_SIZE`].
    #[error("page {page} with page size {page_size} is out of range")]
    OutOfRange {
        /// The page number.
        page: u32,
        /// Rows per page.
        page_size: u32,
    },
    /// The jurisdiction is not one the ledger serves.
    #[error(transparent)]
    Jurisdiction(#[from] ValidationError),
}

/// One page request, as carried by a `ReassignmentPageRequested` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// The request's event id.
    pub request_id: Uuid,
    /// Run id.
    pub run_id: Uuid,
    /// Contact whose assignments move.
    pub old_contact_id: Uuid,
    /// Contact they moved to when the request was raised (a page moves them to the
    /// jurisdiction's primary contact at the time it runs).
    pub new_contact_id: Uuid,
    /// The jurisdiction of both contacts: whose primary-contact lock the page takes.
    pub jurisdiction: Jurisdiction,
    /// 1-based page number, counted across passes.
    pub page: u32,
    /// Process assignment ids greater than this; `None` at the start of a pass.
    pub cursor: Option<Uuid>,
    /// Rows per page.
    pub page_size: u32,
}

impl PageRequest {
    /// The `ReassignmentPageRequested` event carrying this request (its id is the event id).
    pub fn event(&self, effective_at: DateTime<Utc>) -> NewEvent {
        NewEvent {
            event_id: self.request_id,
            event: Event::ReassignmentPageRequested(v1::ReassignmentPageRequested {
                run_id: self.run_id.to_string(),
                old_contact_id: self.old_contact_id.to_string(),
                new_contact_id: self.new_contact_id.to_string(),
                jurisdiction: self.jurisdiction.code().to_owned(),
                page: self.page,
                cursor: self.cursor.map(|c| c.to_string()).unwrap_or_default(),
                page_size: self.page_size,
            }),
            effective_at,
        }
    }

    /// The request an envelope carries; `Ok(None)` for any other event.
    pub fn from_envelope(envelope: &v1::Envelope) -> Result<Option<Self>, PageRequestError> {
        let Some(Event::ReassignmentPageRequested(request)) = &envelope.event else {
            return Ok(None);
        };
        let parse = |field: &'static str, value: &str| {
            value
                .parse::<Uuid>()
                .map_err(|_| PageRequestError::NotUuid {
                    field,
                    value: value.to_owned(),
                })
        };
        let page_size = request.page_size;
        if !(1..=MAX_PAGE_SIZE).contains(&page_size) || request.page == 0 {
            return Err(PageRequestError::OutOfRange {
                page: request.page,
                page_size,
            });
        }
        Ok(Some(Self {
            request_id: parse("event_id", &envelope.event_id)?,
            run_id: parse("run_id", &request.run_id)?,
            old_contact_id: parse("old_contact_id", &request.old_contact_id)?,
            new_contact_id: parse("new_contact_id", &request.new_contact_id)?,
            jurisdiction: Jurisdiction::parse("jurisdiction", &request.jurisdiction)?,
            page: request.page,
            cursor: if request.cursor.is_empty() {
                None
            } else {
                Some(parse("cursor", &request.cursor)?)
            },
            page_size,
        }))
    }
}

/// A cursor as people read it.
pub(super) fn display(cursor: Option<Uuid>) -> String {
    cursor.map_or_else(|| "(start)".to_owned(), |cursor| cursor.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(request: v1::ReassignmentPageRequested) -> v1::Envelope {
        v1::Envelope {
            event_id: Uuid::now_v7().to_string(),
            event: Some(Event::ReassignmentPageRequested(request)),
            ..v1::Envelope::default()
        }
    }

    fn request(cursor: &str, page: u32, page_size: u32) -> v1::ReassignmentPageRequested {
        v1::ReassignmentPageRequested {
            run_id: Uuid::now_v7().to_string(),
            old_contact_id: Uuid::now_v7().to_string(),
            new_contact_id: Uuid::now_v7().to_string(),
            jurisdiction: "TX".into(),
            page,
            cursor: cursor.into(),
            page_size,
        }
    }

    #[test]
    fn decodes_page_requests_and_ignores_other_events() {
        let cursor = Uuid::now_v7();
        let decoded = PageRequest::from_envelope(&envelope(request(&cursor.to_string(), 3, 100)))
            .unwrap()
            .unwrap();
        assert_eq!(
            (decoded.page, decoded.cursor, decoded.page_size),
            (3, Some(cursor), 100)
        );
        assert_eq!(decoded.jurisdiction.code(), "TX");
        let first = PageRequest::from_envelope(&envelope(request("", 1, 100)))
            .unwrap()
            .unwrap();
        assert_eq!(first.cursor, None);
        let other = v1::Envelope {
            event: Some(Event::ReassignmentCompleted(
                v1::ReassignmentCompleted::default(),
            )),
            ..v1::Envelope::default()
        };
        assert_eq!(PageRequest::from_envelope(&other), Ok(None));
    }

    #[test]
    fn a_request_survives_its_event() {
        let request = PageRequest {
            request_id: Uuid::now_v7(),
            run_id: Uuid::now_v7(),
            old_contact_id: Uuid::now_v7(),
            new_contact_id: Uuid::now_v7(),
            jurisdiction: Jurisdiction::parse("j", "MS").unwrap(),
            page: 7,
            cursor: Some(Uuid::now_v7()),
            page_size: 250,
        };
        let event = request.event(Utc::now());
        let envelope = v1::Envelope {
            event_id: event.event_id.to_string(),
            event: Some(event.event),
            ..v1::Envelope::default()
        };
        assert_eq!(PageRequest::from_envelope(&envelope), Ok(Some(request)));
    }

    #[test]
    fn refuses_malformed_page_requests() {
        let bad_cursor = PageRequest::from_envelope(&envelope(request("nope", 2, 100)));
        assert!(
            bad_cursor
                .unwrap_err()
                .to_string()
                .contains("cursor \"nope\"")
        );
        let zero_page = PageRequest::from_envelope(&envelope(request("", 0, 100)));
        assert!(zero_page.is_err());
        let huge = PageRequest::from_envelope(&envelope(request("", 1, MAX_PAGE_SIZE + 1)));
        assert!(huge.is_err());
        let mut foreign = request("", 1, 100);
        foreign.jurisdiction = "XX".into();
        assert!(
            PageRequest::from_envelope(&envelope(foreign))
                .unwrap_err()
                .to_string()
                .contains("jurisdiction")
        );
    }
}
