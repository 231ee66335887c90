//! Property: the audit answers equal folding the ledger's events up to the asked instant.
//!
//! Random histories of one business in one jurisdiction (assign, end, replace, supersede
//! the contact, with random backdated business times) run through the real commands; then
//! "who was the RA at T, as known at K" is asked for many T and K and compared with a pure
//! fold over the events read back from the ledger.

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use prost::Message as _;
use ra_ledger::commands::{Assign, ChangeAssignment, CreateContact, Ledger, SupersedeContact};
use ra_ledger::domain::{Jurisdiction, PostalAddress};
use ra_ledger::projections::from_micros;
use ra_ledger::queries;
use ra_ledger::store::Metadata;
use ra_ledger_proto::v1::{self, envelope::Event};
use ra_ledger_tests::TestDatabase;
use uuid::Uuid;

#[derive(Debug, Clone, Copy)]
enum Op {
    Assign,
    End,
    Replace,
    Supersede,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Assign),
        Just(Op::End),
        Just(Op::Replace),
        Just(Op::Supersede)
    ]
}

fn address(n: usize) -> PostalAddress {
    PostalAddress {
        line1: format!("{n} Congress Ave"),
        line2: String::new(),
        city: "Austin".into(),
        region: "TX".into(),
        postal_code: "78701".into(),
    }
}

fn metadata() -> Metadata {
    Metadata {
        actor: "property-test".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
    }
}

/// Folds the events of the ledger: the (assignment, contact) in force at business time
/// `at`, counting only events recorded by `known_at`.
fn fold(
    events: &[v1::Envelope],
    business: &str,
    at: DateTime<Utc>,
    known_at: DateTime<Utc>,
) -> Option<(String, String)> {
    let mut active: Option<(String, String)> = None;
    for envelope in events {
        if from_micros(envelope.effective_at_micros) > at
            || from_micros(envelope.recorded_at_micros) > known_at
        {
            continue;
        }
        match &envelope.event {
            Some(Event::AssignmentStarted(started)) if started.business_id == business => {
                active = Some((started.assignment_id.clone(), started.contact_id.clone()));
            }
            Some(Event::AssignmentEnded(ended))
                if ended.business_id == business
                    && active
                        .as_ref()
                        .is_some_and(|(id, _)| *id == ended.assignment_id) =>
            {
                active = None;
            }
            _ => {}
        }
    }
    active
}

async fn run_case(ops: Vec<(Op, u32)>, probes: Vec<(u32, usize)>) -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let pool = ra_ledger::db::pool(&database.url, "as-of-property", 4)?;
    let ledger = Ledger::new(pool.clone());
    let texas = Jurisdiction::parse("j", "TX")?;
    let business = Uuid::now_v7();
    let base = Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap();
    let mut clock = base;
    let mut contact = ledger
        .create_contact(
            CreateContact {
                jurisdiction: "TX".into(),
                name: "Agent 0".into(),
                address: address(0),
                effective_at: Some(clock),
            },
            &metadata(),
        )
        .await?
        .contact_id;
    let mut active: Option<Uuid> = None;
    for (index, (op, gap_hours)) in ops.into_iter().enumerate() {
        clock += Duration::hours(i64::from(gap_hours));
        let change = ChangeAssignment {
            effective_at: Some(clock),
            expected_version: None,
        };
        match (op, active) {
            (Op::Assign, None) => {
                let assigned = ledger
                    .assign(
                        Assign {
                            business_id: business,
                            jurisdiction: "TX".into(),
                            effective_at: Some(clock),
                        },
                        &metadata(),
                    )
                    .await?;
                active = Some(assigned.assignment_id);
            }
            (Op::End, Some(id)) => {
                ledger.end_assignment(id, change, &metadata()).await?;
                active = None;
            }
            (Op::Replace, Some(id)) => {
                active = Some(
                    ledger
                        .replace_assignment(id, change, &metadata())
                        .await?
                        .assignment_id,
                );
            }
            (Op::Supersede, _) => {
                let superseded = ledger
                    .supersede_contact(
                        contact,
                        SupersedeContact {
                            name: format!("Agent {}", index + 1),
                            address: address(index + 1),
                            effective_at: Some(clock),
                            expected_version: None,
                            page_size: None,
                        },
                        &metadata(),
                    )
                    .await?;
                contact = superseded.new.contact_id;
            }
            _ => {} // Not valid in this state: the model skips it, like a careful user.
        }
    }

    let client = pool.get().await?;
    let events: Vec<v1::Envelope> = client
        .query("SELECT payload FROM events ORDER BY position", &[])
        .await?
        .iter()
        .map(|row| v1::Envelope::decode(row.get::<_, &[u8]>(0)))
        .collect::<Result<_, _>>()?;
    let recorded: Vec<DateTime<Utc>> = events
        .iter()
        .map(|e| from_micros(e.recorded_at_micros))
        .collect();
    let business_text = business.to_string();
    let span_hours = (clock - base).num_hours().max(1) as u32;
    // Probe random instants, every event's exact instant and one microsecond before it.
    let mut instants: Vec<DateTime<Utc>> = probes
        .iter()
        .map(|(hours, _)| base + Duration::minutes(i64::from(hours % (span_hours + 2)) * 60 - 30))
        .collect();
    for envelope in &events {
        let instant = from_micros(envelope.effective_at_micros);
        instants.push(instant);
        instants.push(instant - Duration::microseconds(1));
    }
    let mut known: Vec<DateTime<Utc>> = probes
        .iter()
        .map(|(_, pick)| recorded[pick % recorded.len()])
        .collect();
    known.push(Utc::now());
    for at in &instants {
        for known_at in &known {
            let expected = fold(&events, &business_text, *at, *known_at);
            let answer =
                queries::registered_agent_at(&client, business, texas, *at, *known_at).await?;
            let got = answer.as_ref().map(|ra| {
                (
                    ra.assignment.assignment_id.to_string(),
                    ra.contact.contact_id.to_string(),
                )
            });
            anyhow::ensure!(
                got == expected,
                "at {at} known at {known_at}: ledger answered {got:?}, the fold says {expected:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn as_of_answers_equal_the_fold_of_the_events() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        proptest::collection::vec((op(), 0u32..72), 1..14),
        proptest::collection::vec((0u32..2000, 0usize..100), 1..6),
    );
    runner
        .run(&strategy, |(ops, probes)| {
            runtime
                .block_on(run_case(ops, probes))
                .map_err(|error| TestCaseError::fail(format!("{error:#}")))
        })
        .unwrap();
}
