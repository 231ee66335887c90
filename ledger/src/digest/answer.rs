//! What a proven audit answer must hold beyond its chains and paths (issue 56): the streams
//! it carries are exactly those the question and the answer name, the question is the one
//! the auditor asked, and the witnesses saw the log recently enough.
//!
//! Why whole-set and not "at least": the fold of [`Fold`] answers from whatever events it is
//! given, so a proof with the answer's contact stream left out folds to "no RA", and one
//! with another contact's stream folds to nothing or to that contact. The question names the
//! assignment stream (business and jurisdiction); the assignment in force at the instant
//! names the contact stream; nothing else may come along. A "no RA" answer is accepted only
//! when the proof carries the question's assignment stream, whole, and its events show no
//! assignment in force at the instant, or when it carries no stream and its index part
//! shows the assignment stream has no entry ([`super::indexed`], which also shows each
//! carried head is the stream's newest). docs/auditors.md says what that proves.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::refused::{AskedQuestion, ProvenStream, Refused};
use crate::domain::{Jurisdiction, assignment_stream, contact_stream};
use crate::queries::Fold;

fn instant(field: &'static str, micros: i64) -> Result<DateTime<Utc>, Refused> {
    DateTime::from_timestamp_micros(micros).ok_or(Refused::Instant { field, micros })
}

/// That the proven streams are exactly the question's assignment stream and, when an
/// assignment is in force at the instant, its contact's stream; whole from version 1; and
/// that their events fold to the answer. Returns the answer in words.
pub(super) fn verify_answer(
    question: &AskedQuestion,
    answer: &Value,
    streams: &[ProvenStream],
    envelopes: &[ra_ledger_proto::v1::Envelope],
    digest_time_micros: i64,
    absent: &[String],
) -> Result<String, Refused> {
    let business_id = question.business_id;
    let jurisdiction = Jurisdiction::parse("question.jurisdiction", &question.jurisdiction)
        .map_err(|_| Refused::Jurisdiction(question.jurisdiction.clone()))?;
    let at = instant("at_micros", question.at_micros)?;
    let known_at = instant("known_at_micros", question.known_at_micros)?;
    if known_at.timestamp_micros() > digest_time_micros {
        let sealed = DateTime::from_timestamp_micros(digest_time_micros)
            .map_or_else(|| digest_time_micros.to_string(), |time| time.to_string());
        return Err(Refused::KnownAfterDigest { known_at, sealed });
    }
    let registration = assignment_stream(business_id, jurisdiction);
    let asked = format!(
        "the assignments of business {business_id} in {}, which the question names",
        jurisdiction.code()
    );
    // Not carried: only when the index shows the stream has no entry ("no RA", proven).
    if !streams.iter().any(|proven| proven.stream == registration)
        && !absent.contains(&registration)
    {
        return Err(Refused::MissingStream {
            stream: registration,
            why: asked,
        });
    }
    if let Some(partial) = streams.iter().find(|proven| proven.first_version != 1) {
        return Err(Refused::PartialStream {
            stream: partial.stream.clone(),
            first: partial.first_version,
        });
    }
    // The assignment stream alone says which contact the answer needs.
    let assignments: Vec<_> = envelopes
        .iter()
        .filter(|envelope| envelope.stream == registration)
        .cloned()
        .collect();
    let in_force = Fold::new(&assignments, known_at)
        .map_err(Refused::Fold)?
        .assignment_at(at)
        .map(|assignment| (assignment.assignment_id, assignment.contact_id));
    let named: Vec<String> = streams.iter().map(|proven| proven.stream.clone()).collect();
    check_streams(&registration, in_force, &named)?;
    let folded = Fold::new(envelopes, known_at)
        .map_err(Refused::Fold)?
        .registered_agent_at(at);
    let folded = serde_json::to_value(&folded).expect("an answer always serializes");
    if &folded != answer {
        return Err(Refused::OtherAnswer {
            folded,
            given: answer.clone(),
        });
    }
    Ok(format!(
        "the RA of business {business_id} in {} at {at}, as known at {known_at}, is {}",
        jurisdiction.code(),
        folded["contact"]["contact_id"].as_str().map_or_else(
            || "nobody: no assignment in force".to_owned(),
            |contact| format!("contact {contact}")
        )
    ))
}

/// That `carried` (the proof's streams, in its order) are exactly `registration` and, when
/// `in_force` (an assignment and its contact) is some, that contact's stream, each once.
/// Pure.
pub fn check_streams(
    registration: &str,
    in_force: Option<(Uuid, Uuid)>,
    carried: &[String],
) -> Result<(), Refused> {
    let mut expected = vec![registration.to_owned()];
    let contact = in_force.map(|(assignment, contact)| (assignment, contact_stream(contact)));
    if let Some((_, stream)) = &contact {
        expected.push(stream.clone());
    }
    for (i, stream) in carried.iter().enumerate() {
        if carried[..i].contains(stream) {
            return Err(Refused::StreamTwice(stream.clone()));
        }
        if !expected.contains(stream) {
            return Err(Refused::StreamNotAsked {
                stream: stream.clone(),
                expected: expected.join(", "),
            });
        }
    }
    match contact {
        Some((assignment, stream)) if !carried.contains(&stream) => Err(Refused::MissingStream {
            stream,
            why: format!(
                "the contact of assignment {assignment}, in force at the question's instant, \
                 which the answer needs"
            ),
        }),
        _ => Ok(()),
    }
}

/// The question as the auditor states it (`ledger proof verify --business --jurisdiction
/// --at --known-at`): each given part must be the proof's.
#[derive(Debug, Clone, Default)]
pub struct StatedQuestion {
    /// `--business`.
    pub business_id: Option<Uuid>,
    /// `--jurisdiction`.
    pub jurisdiction: Option<Jurisdiction>,
    /// `--at`.
    pub at: Option<DateTime<Utc>>,
    /// `--known-at`.
    pub known_at: Option<DateTime<Utc>>,
}

impl StatedQuestion {
    /// Whether the auditor stated anything.
    pub fn is_empty(&self) -> bool {
        self.business_id.is_none()
            && self.jurisdiction.is_none()
            && self.at.is_none()
            && self.known_at.is_none()
    }
}

/// That the proof answers the question `stated`, part by part; the refusal names the first
/// part that differs, with both values. Pure.
pub fn check_question(
    stated: &StatedQuestion,
    asked: Option<&AskedQuestion>,
) -> Result<(), Refused> {
    if stated.is_empty() {
        return Ok(());
    }
    let asked = asked.ok_or(Refused::NoQuestion)?;
    let time = |micros: i64| {
        DateTime::from_timestamp_micros(micros).map_or_else(
            || micros.to_string(),
            |time| time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        )
    };
    let stated_time =
        |time: DateTime<Utc>| time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let differs = |field: &'static str, stated: String, proven: String| Refused::OtherQuestion {
        field,
        stated,
        proven,
    };
    if let Some(business) = stated.business_id.filter(|b| *b != asked.business_id) {
        return Err(differs(
            "business",
            business.to_string(),
            asked.business_id.to_string(),
        ));
    }
    if let Some(code) = stated
        .jurisdiction
        .map(Jurisdiction::code)
        .filter(|code| *code != asked.jurisdiction)
    {
        return Err(differs(
            "jurisdiction",
            code.to_owned(),
            asked.jurisdiction.clone(),
        ));
    }
    if let Some(at) = stated
        .at
        .filter(|at| at.timestamp_micros() != asked.at_micros)
    {
        return Err(differs("at", stated_time(at), time(asked.at_micros)));
    }
    if let Some(known_at) = stated
        .known_at
        .filter(|known_at| known_at.timestamp_micros() != asked.known_at_micros)
    {
        return Err(differs(
            "known-at",
            stated_time(known_at),
            time(asked.known_at_micros),
        ));
    }
    Ok(())
}

/// That the newest verified cosignature (Unix seconds; `None`: none verified) is at most
/// `max_age` before `now` (Unix seconds). Pure.
pub fn check_age(newest: Option<u64>, now: u64, max_age: Duration) -> Result<(), Refused> {
    let newest = newest.ok_or(Refused::NoCosignatureTime)?;
    let age = now.saturating_sub(newest);
    if age > max_age.as_secs() {
        return Err(Refused::Stale {
            newest: DateTime::from_timestamp(newest as i64, 0)
                .map_or_else(|| newest.to_string(), |time| time.to_rfc3339()),
            age,
            max_age: max_age.as_secs(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn the_streams_are_exactly_those_the_question_and_the_answer_name() {
        let registration = "assignment-b-TX";
        let contact = contact_stream(id(2));
        let strings = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let in_force = Some((id(1), id(2)));
        check_streams(registration, in_force, &strings(&[registration, &contact])).unwrap();
        check_streams(registration, None, &strings(&[registration])).unwrap();
        let refused = |in_force, names: &[&str]| {
            check_streams(registration, in_force, &strings(names))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(in_force, &[registration]),
            format!(
                "the proof does not prove stream {contact}, the contact of assignment {}, in \
                 force at the question's instant, which the answer needs",
                id(1)
            )
        );
        let other = contact_stream(id(3));
        assert!(
            refused(in_force, &[registration, &other])
                .starts_with(&format!("the proof carries stream {other}, which")),
        );
        // "No RA" carries the assignment stream and nothing else.
        assert!(refused(None, &[registration, &contact]).contains(&contact));
        assert_eq!(
            refused(in_force, &[registration, &contact, &contact]),
            format!("the proof carries stream {contact} twice")
        );
    }

    #[test]
    fn a_stated_question_names_the_part_that_differs() {
        let asked = AskedQuestion {
            business_id: id(1),
            jurisdiction: "TX".into(),
            at_micros: 1_717_200_000_000_000,
            known_at_micros: 1_796_127_623_266_292,
        };
        let at: DateTime<Utc> = "2024-06-01T00:00:00Z".parse().unwrap();
        let same = StatedQuestion {
            business_id: Some(id(1)),
            jurisdiction: Jurisdiction::parse("j", "TX").ok(),
            at: Some(at),
            known_at: None,
        };
        check_question(&same, Some(&asked)).unwrap();
        check_question(&StatedQuestion::default(), None).unwrap();
        let refused = |stated: StatedQuestion| {
            check_question(&stated, Some(&asked))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(StatedQuestion {
                jurisdiction: Jurisdiction::parse("j", "NY").ok(),
                ..same.clone()
            }),
            "the proof answers another question: you asked jurisdiction NY, it answers \
             jurisdiction TX"
        );
        assert_eq!(
            refused(StatedQuestion {
                at: Some(at + chrono::Duration::microseconds(1)),
                ..same.clone()
            }),
            "the proof answers another question: you asked at 2024-06-01T00:00:00.000001Z, it \
             answers at 2024-06-01T00:00:00Z"
        );
        assert!(
            refused(StatedQuestion {
                business_id: Some(id(9)),
                ..same.clone()
            })
            .contains(&format!("you asked business {}", id(9)))
        );
        assert_eq!(
            check_question(&same, None).unwrap_err().to_string(),
            "the proof answers no question (it is an event's proof): drop --business, \
             --jurisdiction, --at and --known-at, or ask for the answer's proof"
        );
    }

    #[test]
    fn a_cosignature_older_than_the_max_age_is_stale() {
        let hour = Duration::from_secs(3_600);
        check_age(Some(1_000_000), 1_000_000 + 3_600, hour).unwrap();
        assert_eq!(
            check_age(Some(1_000_000), 1_000_000 + 3_601, hour)
                .unwrap_err()
                .to_string(),
            "the newest cosignature is of 1970-01-12T13:46:40+00:00, 3601 s ago, older than \
             --max-age 3600 s: ask the ledger for a fresh proof (or the witnesses are not \
             cosigning)"
        );
        // A witness's clock ahead of ours is no age.
        check_age(Some(2_000_000), 1_000_000, hour).unwrap();
        assert!(check_age(None, 1, hour).is_err());
    }
}
