//! The gate proved on copies of the baseline: one broken copy per kind of breaking change,
//! each reported by message, field or value, and number; and extended copies that pass.
//!
//! Each copy is the baseline's text with small edits. An edit must match the text exactly
//! once, so when the baseline moves at a release and an edit no longer applies, the test
//! says which one instead of silently testing nothing.

use super::{baseline, compare, report};
use crate::schema::Sources;

/// The contract file every copy edits.
const EVENTS: &str = "ra/ledger/v1/events.proto";

/// `sources` with `edits` (find, replace) applied to `events.proto`, each matching once.
fn edited(sources: &Sources, edits: &[(&str, &str)]) -> Sources {
    let mut text = sources.text(EVENTS).to_owned();
    for (find, replace) in edits {
        let found = text.matches(find).count();
        assert_eq!(
            found, 1,
            "the edit {find:?} matches {found} times in the baseline's {EVENTS}, not once: \
             adapt it to the baseline"
        );
        text = text.replacen(find, replace, 1);
    }
    sources.with_text(EVENTS, text)
}

/// The breaking changes, rendered, of the baseline edited by `edits`.
fn breaks_of(edits: &[(&str, &str)]) -> Vec<String> {
    let baseline = baseline();
    let copy = edited(&baseline, edits);
    compare(&baseline, &copy)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// `AssignmentStarted.replaces`, the field most copies remove, renumber or reuse.
const REPLACES: &str = "  string replaces = 5;\n";

#[test]
fn extended_copy_passes() {
    let breaks = breaks_of(&[
        // A new optional field.
        (
            REPLACES,
            "  string replaces = 5;\n  // Free text from the operator.\n  optional string note = 6;\n",
        ),
        // A new message, used by a new case of the envelope's oneof.
        (
            "    ReassignmentCompleted reassignment_completed = 26;\n",
            "    ReassignmentCompleted reassignment_completed = 26;\n    ContactNoted contact_noted = 27;\n",
        ),
        (
            "message ContactSuperseded {",
            "message ContactNoted {\n  string contact_id = 1;\n  string note = 2;\n}\n\nmessage ContactSuperseded {",
        ),
        // A new enum value.
        (
            "  END_REASON_CANCELLED = 2;\n",
            "  END_REASON_CANCELLED = 2;\n  END_REASON_EXPIRED = 3;\n",
        ),
    ]);
    assert_eq!(breaks, Vec::<String>::new());
}

#[test]
fn removed_field_with_its_number_and_name_reserved_passes() {
    let breaks = breaks_of(&[(REPLACES, "  reserved 5;\n  reserved \"replaces\";\n")]);
    assert_eq!(breaks, Vec::<String>::new());
}

#[test]
fn removed_field_is_reported() {
    assert_eq!(
        breaks_of(&[(REPLACES, "")]),
        [
            "ra.ledger.v1.AssignmentStarted: field 5 (replaces) removed without reserving it; \
          add `reserved 5;` `reserved \"replaces\";`"
        ]
    );
}

#[test]
fn removed_field_with_only_its_number_reserved_is_reported() {
    assert_eq!(
        breaks_of(&[(REPLACES, "  reserved 5;\n")]),
        [
            "ra.ledger.v1.AssignmentStarted: field 5 (replaces) removed without reserving it; \
          add `reserved \"replaces\";`"
        ]
    );
}

#[test]
fn renumbered_field_is_reported() {
    assert_eq!(
        breaks_of(&[(REPLACES, "  string replaces = 7;\n")]),
        ["ra.ledger.v1.AssignmentStarted: field 5 (replaces) renumbered 5 -> 7"]
    );
}

#[test]
fn changed_field_type_is_reported() {
    assert_eq!(
        breaks_of(&[(
            "message AssignmentStarted {\n  string assignment_id = 1;\n  string business_id = 2;",
            "message AssignmentStarted {\n  string assignment_id = 1;\n  bytes business_id = 2;",
        )]),
        ["ra.ledger.v1.AssignmentStarted: field 2 (business_id) changed type string -> bytes"]
    );
}

#[test]
fn changed_field_label_is_reported() {
    assert_eq!(
        breaks_of(&[(
            "  string supersedes = 6;",
            "  repeated string supersedes = 6;"
        )]),
        ["ra.ledger.v1.ContactCreated: field 6 (supersedes) changed label singular -> repeated"]
    );
    assert_eq!(
        breaks_of(&[(
            "  string supersedes = 6;",
            "  optional string supersedes = 6;"
        )]),
        ["ra.ledger.v1.ContactCreated: field 6 (supersedes) changed label singular -> optional"]
    );
}

#[test]
fn field_moved_out_of_its_oneof_is_reported() {
    assert_eq!(
        breaks_of(&[
            ("    ContactCreated contact_created = 20;\n", ""),
            (
                "  oneof event {\n",
                "  ContactCreated contact_created = 20;\n\n  oneof event {\n"
            ),
        ]),
        ["ra.ledger.v1.Envelope: field 20 (contact_created) moved from oneof event to no oneof"]
    );
}

#[test]
fn reused_field_number_is_reported() {
    assert_eq!(
        breaks_of(&[(REPLACES, "  uint64 sequence = 5;\n")]),
        [
            "ra.ledger.v1.AssignmentStarted: field 5 (replaces) removed and its number reused by \
          sequence"
        ]
    );
}

#[test]
fn reused_reserved_number_is_reported() {
    // A release that removed `replaces` properly, then a change that takes its number back.
    let retired = edited(
        &baseline(),
        &[(REPLACES, "  reserved 5;\n  reserved \"replaces\";\n")],
    );
    let reused = edited(&retired, &[("  reserved 5;\n", "  uint64 sequence = 5;\n")]);
    let breaks: Vec<String> = compare(&retired, &reused)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        breaks,
        [
            "ra.ledger.v1.AssignmentStarted: reserved 5 is no longer reserved (now used by field 5 \
          (sequence))"
        ]
    );
}

#[test]
fn removed_enum_value_with_its_number_and_name_reserved_passes() {
    let breaks = breaks_of(&[(
        "  END_REASON_CANCELLED = 2;\n",
        "  reserved 2;\n  reserved \"END_REASON_CANCELLED\";\n",
    )]);
    assert_eq!(breaks, Vec::<String>::new());
}

#[test]
fn removed_enum_value_is_reported() {
    assert_eq!(
        breaks_of(&[("  END_REASON_CANCELLED = 2;\n", "")]),
        [
            "ra.ledger.v1.EndReason: value 2 (END_REASON_CANCELLED) removed without reserving it; \
          add `reserved 2;` `reserved \"END_REASON_CANCELLED\";`"
        ]
    );
}

#[test]
fn renumbered_enum_value_is_reported() {
    assert_eq!(
        breaks_of(&[(
            "  END_REASON_CANCELLED = 2;\n",
            "  END_REASON_CANCELLED = 3;\n"
        )]),
        ["ra.ledger.v1.EndReason: value 2 (END_REASON_CANCELLED) renumbered 2 -> 3"]
    );
}

#[test]
fn removed_message_in_use_is_reported() {
    // The envelope retires its case properly; the message itself is still gone.
    let breaks = breaks_of(&[
        (
            "    ReassignmentRowFailed reassignment_row_failed = 25;\n",
            "",
        ),
        (
            "  oneof event {\n",
            "  reserved 25;\n  reserved \"reassignment_row_failed\";\n\n  oneof event {\n",
        ),
        (
            "message ReassignmentRowFailed {\n  string run_id = 1;\n  string assignment_id = 2;\n  \
             string business_id = 3;\n  uint32 attempts = 4;\n  string reason = 5;\n}\n",
            "",
        ),
    ]);
    assert_eq!(
        breaks,
        ["ra.ledger.v1.ReassignmentRowFailed: message removed"]
    );
}

#[test]
fn renamed_message_in_use_is_reported() {
    assert_eq!(
        breaks_of(&[
            ("message ContactSuperseded {", "message ContactReplaced {"),
            (
                "    ContactSuperseded contact_superseded = 21;",
                "    ContactReplaced contact_superseded = 21;"
            ),
        ]),
        [
            "ra.ledger.v1.Envelope: field 21 (contact_superseded) changed type \
             ra.ledger.v1.ContactSuperseded -> ra.ledger.v1.ContactReplaced",
            "ra.ledger.v1.ContactSuperseded: message removed (renamed to \
             ra.ledger.v1.ContactReplaced?)",
        ]
    );
}

#[test]
fn changed_package_is_reported() {
    let breaks = breaks_of(&[("package ra.ledger.v1;", "package ra.ledger.v2;")]);
    assert_eq!(
        breaks.first().map(String::as_str),
        Some("ra/ledger/v1/events.proto: package changed ra.ledger.v1 -> ra.ledger.v2")
    );
    // Every message and enum of the package now has another full name.
    let baseline = baseline().compile().expect("compile the baseline schema");
    let types = baseline.all_messages().count() + baseline.all_enums().count();
    assert_eq!(breaks.len(), 1 + types, "{breaks:#?}");
    assert!(
        breaks.contains(
            &"ra.ledger.v1.Envelope: message removed (renamed to ra.ledger.v2.Envelope?)".into()
        ),
        "{breaks:#?}"
    );
}

#[test]
fn every_breaking_change_is_listed_one_per_line() {
    let baseline = baseline();
    let copy = edited(
        &baseline,
        &[
            (
                "message AssignmentStarted {\n  string assignment_id = 1;\n  string business_id = 2;",
                "message AssignmentStarted {\n  string assignment_id = 1;\n  bytes business_id = 2;",
            ),
            (REPLACES, ""),
            ("  END_REASON_CANCELLED = 2;\n", ""),
        ],
    );
    assert_eq!(
        report(&compare(&baseline, &copy)),
        "3 breaking change(s) in proto/proto against the baseline in proto/baseline \
         (rules: docs/event-schema-evolution.md):\n\
         \x20 ra.ledger.v1.AssignmentStarted: field 2 (business_id) changed type string -> bytes\n\
         \x20 ra.ledger.v1.AssignmentStarted: field 5 (replaces) removed without reserving it; \
         add `reserved 5;` `reserved \"replaces\";`\n\
         \x20 ra.ledger.v1.EndReason: value 2 (END_REASON_CANCELLED) removed without reserving \
         it; add `reserved 2;` `reserved \"END_REASON_CANCELLED\";`\n"
    );
}

#[test]
fn changed_map_value_type_is_reported() {
    // The baseline has no map; a release that added one, then a change of its value type.
    let with_map = edited(
        &baseline(),
        &[(
            "  string causation_id = 10;\n",
            "  string causation_id = 10;\n  map<string, string> labels = 11;\n",
        )],
    );
    let changed = edited(
        &with_map,
        &[(
            "  map<string, string> labels = 11;\n",
            "  map<string, int64> labels = 11;\n",
        )],
    );
    let breaks: Vec<String> = compare(&with_map, &changed)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        breaks,
        [
            "ra.ledger.v1.Envelope: field 11 (labels) changed type map<string, string> -> \
             map<string, int64>",
            "ra.ledger.v1.Envelope.LabelsEntry: field 2 (value) changed type string -> int64",
        ]
    );
}
