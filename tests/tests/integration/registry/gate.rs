//! The schema gate, run by the registry: the released baseline (`proto/baseline/`)
//! registered under a subject of its own at the relay's compatibility level, the working
//! copy (`proto/proto/`) checked with the registry's compatibility endpoint, and breaking
//! changes refused in the registry's own words. What the registry lets through and the
//! repository's gate (`proto/tests/schema_gate`) catches is held here too, so the docs'
//! comparison (docs/event-schema-evolution.md) stays true.

use ra_ledger_cdc::registry::{COMPATIBILITY, RegistryError, value_subject};
use ra_ledger_proto::EVENTS_PROTO;

use super::registry_client;

/// The released contract.
const BASELINE: &str = include_str!("../../../../proto/baseline/ra/ledger/v1/events.proto");

/// `text` with `find` replaced by `replace`, `find` matching exactly once.
fn edited(text: &str, edits: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (find, replace) in edits {
        assert_eq!(text.matches(find).count(), 1, "{find:?} must match once");
        text = text.replacen(find, replace, 1);
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_takes_the_working_copy_and_refuses_breaking_changes_in_its_own_words()
-> anyhow::Result<()> {
    let registry = registry_client();
    let subject = value_subject(&format!(
        "gate{}.outbox.event.assignment",
        ra_ledger_tests::random_suffix()
    ));
    registry.set_compatibility(&subject, COMPATIBILITY).await?;
    let baseline_id = registry.register(&subject, BASELINE).await?;

    assert!(
        registry.is_compatible(&subject, EVENTS_PROTO).await?,
        "the working copy of events.proto breaks the released baseline, by the registry's rules"
    );

    let replaces = "  string replaces = 5;\n";
    let breaking = [
        (
            "a field's type changed",
            edited(
                BASELINE,
                &[(
                    "  int64 stream_version = 3;",
                    "  string stream_version = 3;",
                )],
            ),
            "Field type changed",
        ),
        (
            "a field removed without reserved",
            edited(BASELINE, &[(replaces, "")]),
            "fields removed without reservation",
        ),
        (
            "a field removed with its number reserved but not its name",
            edited(BASELINE, &[(replaces, "  reserved 5;\n")]),
            "fields removed without reservation",
        ),
    ];
    for (change, text, words) in breaking {
        assert!(
            !registry.is_compatible(&subject, &text).await?,
            "{change}: the registry calls it compatible"
        );
        match registry.register(&subject, &text).await {
            Err(RegistryError::Incompatible { reason, level, .. }) => {
                assert_eq!(level, COMPATIBILITY);
                assert!(
                    reason.contains(words),
                    "{change}: the registry said {reason}"
                );
                eprintln!("{change}: {reason}");
            }
            other => panic!("{change}: registered anyway: {other:?}"),
        }
    }

    // Removal done right passes, and so does an added field.
    let removed_right = edited(
        BASELINE,
        &[(replaces, "  reserved 5;\n  reserved \"replaces\";\n")],
    );
    assert!(registry.is_compatible(&subject, &removed_right).await?);
    let added = edited(
        BASELINE,
        &[(replaces, "  string replaces = 5;\n  string note = 6;\n")],
    );
    assert!(registry.is_compatible(&subject, &added).await?);

    // What only the repository's gate catches: a field moved into or out of a oneof. The
    // bytes read the same, but generated code reads a oneof member as clearing its
    // siblings (schema_gate's field_moved_out_of_its_oneof_is_reported).
    let into_oneof = edited(
        BASELINE,
        &[
            ("  string causation_id = 10;\n", ""),
            (
                "    ContactCreated contact_created = 20;",
                "    string causation_id = 10;\n    ContactCreated contact_created = 20;",
            ),
        ],
    );
    let out_of_oneof = edited(
        BASELINE,
        &[
            ("    ContactSuperseded contact_superseded = 21;\n", ""),
            (
                "  string causation_id = 10;\n",
                "  string causation_id = 10;\n  ContactSuperseded contact_superseded = 21;\n",
            ),
        ],
    );
    assert!(registry.is_compatible(&subject, &into_oneof).await?);
    assert!(registry.is_compatible(&subject, &out_of_oneof).await?);

    // Nothing refused was registered.
    assert_eq!(registry.latest_id(&subject).await?, Some(baseline_id));
    Ok(())
}
