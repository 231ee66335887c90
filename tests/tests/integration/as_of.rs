//! Property: the audit answers equal folding the ledger's events up to the asked instant.
//!
//! Random histories of one business in one jurisdiction (assign, end, replace, supersede
//! the contact) run through the real commands. The assignment and the contact keep clocks
//! of their own, so business times are backdated (everything is in 2024, recorded now) and
//! later events correct earlier knowledge: an end recorded after a query's `known_at`, a
//! supersede whose business time is earlier than assignment events recorded before it.
//!
//! Then "who was the RA at T, as known at K" is asked for many T and K, and the whole
//! answer, every field, is compared with a pure fold (`queries::Fold`, which proven answers
//! are checked against too) over the events recorded by K read
//! back from the ledger. Period questions are compared with the point answers over the
//! same period: half-open intervals make them agree.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use prost::Message as _;
use ra_ledger::commands::{Assign, ChangeAssignment, CreateContact, Ledger, SupersedeContact};
use ra_ledger::domain::{Jurisdiction, PostalAddress};
use ra_ledger::projections::from_micros;
use ra_ledger::queries::{self, Fold};
use ra_ledger::store::Metadata;
use ra_ledger_proto::v1;
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
        traceparent: None,
    }
}

/// Plays `ops` through the ledger; returns the business.
async fn play(ledger: &Ledger, ops: Vec<(Op, u32)>) -> anyhow::Result<Uuid> {
    let business = Uuid::now_v7();
    let base = Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap();
    // Each stream has its own clock, so business times interleave out of recording order.
    let (mut assignment_clock, mut contact_clock) = (base, base);
    let mut contact = ledger
        .create_contact(
            CreateContact {
                jurisdiction: "TX".into(),
                name: "Agent 0".into(),
                address: address(0),
                effective_at: Some(base),
            },
            &metadata(),
        )
        .await?;
    let mut active: Option<Uuid> = None;
    for (index, (op, gap_hours)) in ops.into_iter().enumerate() {
        let gap = Duration::hours(i64::from(gap_hours));
        match (op, active) {
            (Op::Supersede, _) => {
                contact_clock = (contact_clock + gap).max(contact.created_at);
                contact = ledger
                    .supersede_contact(
                        contact.contact_id,
                        SupersedeContact {
                            name: format!("Agent {}", index + 1),
                            address: address(index + 1),
                            effective_at: Some(contact_clock),
                            expected_version: None,
                            page_size: None,
                        },
                        &metadata(),
                    )
                    .await?
                    .new;
                continue;
            }
            (Op::Assign, None) | (Op::Replace, Some(_)) => {
                // A new assignment cannot start before its contact took effect.
                assignment_clock = (assignment_clock + gap).max(contact.created_at);
            }
            (Op::End, Some(_)) => assignment_clock += gap,
            _ => continue, // Not valid in this state: the model skips it, like a careful user.
        }
        let change = ChangeAssignment {
            effective_at: Some(assignment_clock),
            expected_version: None,
        };
        active = match (op, active) {
            (Op::Assign, _) => Some(
                ledger
                    .assign(
                        Assign {
                            business_id: business,
                            jurisdiction: "TX".into(),
                            effective_at: Some(assignment_clock),
                        },
                        &metadata(),
                    )
                    .await?
                    .assignment_id,
            ),
            (Op::End, Some(id)) => {
                ledger.end_assignment(id, change, &metadata()).await?;
                None
            }
            (Op::Replace, Some(id)) => Some(
                ledger
                    .replace_assignment(id, change, &metadata())
                    .await?
                    .assignment_id,
            ),
            _ => active,
        };
    }
    Ok(business)
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
async fn run_case(ops: Vec<(Op, u32)>, probes: Vec<(u32, usize)>) -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let pool = ra_ledger::db::pool(&database.url, "as-of-property", 4)?;
    let ledger = Ledger::new(pool.clone());
    let texas = Jurisdiction::parse("j", "TX")?;
    let business = play(&ledger, ops).await?;

    let client = pool.get().await?;
    let events: Vec<v1::Envelope> = client
        .query("SELECT payload FROM events ORDER BY position", &[])
        .await?
        .iter()
        .map(|row| v1::Envelope::decode(row.get::<_, &[u8]>(0)))
        .collect::<Result<_, _>>()?;
    let base = Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap();
    let last = events
        .iter()
        .map(|e| from_micros(e.effective_at_micros))
        .max()
        .unwrap_or(base);
    let span_hours = (last - base).num_hours().max(1) as u32;
    // Probe random instants, every event's exact instant and one microsecond before it.
    let mut instants: Vec<DateTime<Utc>> = probes
        .iter()
        .map(|(hours, _)| base + Duration::minutes(i64::from(hours % (span_hours + 2)) * 60 - 30))
        .collect();
    // As known at random recorded instants, each one and the microsecond before, and now.
    let recorded: Vec<DateTime<Utc>> = events
        .iter()
        .map(|e| from_micros(e.recorded_at_micros))
        .collect();
    let mut known: Vec<DateTime<Utc>> = Vec::new();
    for (_, pick) in &probes {
        let instant = recorded[pick % recorded.len()];
        known.extend([instant, instant - Duration::microseconds(1)]);
    }
    known.push(Utc::now());
    for envelope in &events {
        let instant = from_micros(envelope.effective_at_micros);
        instants.extend([instant, instant - Duration::microseconds(1)]);
    }
    for known_at in &known {
        let model = Fold::new(&events, *known_at).map_err(anyhow::Error::msg)?;
        for at in &instants {
            let expected = model.registered_agent_at(*at);
            let answer =
                queries::registered_agent_at(&client, business, texas, *at, *known_at).await?;
            anyhow::ensure!(
                answer == expected,
                "at {at} known at {known_at}:\n ledger answered {answer:#?}\n the fold says {expected:#?}"
            );
        }
    }

    // Periods agree with points: an assignment is listed for [from, to) exactly when the
    // point question names it at some instant of the period. The point answers only change
    // at interval boundaries, so `from` and every boundary inside the period cover them all.
    let model = Fold::new(&events, Utc::now()).map_err(anyhow::Error::msg)?;
    let boundaries: BTreeSet<DateTime<Utc>> = model
        .assignments
        .values()
        .flat_map(|a| [Some(a.started_at), a.ended_at])
        .flatten()
        .collect();
    let mut edges: Vec<DateTime<Utc>> = boundaries.iter().copied().collect();
    edges.extend(instants.iter().copied());
    for (from_pick, _) in &probes {
        for to_pick in [0usize, 1, 3] {
            let from = edges[*from_pick as usize % edges.len()];
            let to = edges[(*from_pick as usize + to_pick) % edges.len()];
            let to = if to <= from {
                from + Duration::hours(1)
            } else {
                to
            };
            let listed: BTreeSet<Uuid> =
                queries::registered_agents_during(&client, business, texas, from, to)
                    .await?
                    .iter()
                    .map(|ra| ra.assignment.assignment_id)
                    .collect();
            let mut named = BTreeSet::new();
            for instant in std::iter::once(from).chain(boundaries.range(from..to).copied()) {
                if let Some(ra) =
                    queries::registered_agent_at(&client, business, texas, instant, Utc::now())
                        .await?
                {
                    named.insert(ra.assignment.assignment_id);
                }
            }
            anyhow::ensure!(
                listed == named,
                "[{from}, {to}): the period lists {listed:?}, the points name {named:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn as_of_answers_equal_the_fold_of_the_events_recorded_by_then() {
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
        proptest::collection::vec((op(), 0u32..72), 1..16),
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
