//! Any bytes through the pgoutput decoder, then through the outbox row decoding: neither
//! may panic, and whatever decodes must be internally consistent.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use ra_ledger_cdc::outbox::OutboxLayout;
use ra_ledger_cdc::pgoutput::{self, ColumnValue, LogicalMessage, TupleData};

fuzz_target!(|data: &[u8]| {
    let message = Bytes::copy_from_slice(data);
    let Ok(decoded) = pgoutput::decode(&message) else {
        return;
    };
    match decoded {
        LogicalMessage::Relation(relation) => {
            if let Ok(layout) = OutboxLayout::from_relation(&relation) {
                // Every needed column exists, so an all-NULL row must be refused, not crash.
                let nulls = TupleData(vec![ColumnValue::Null; relation.columns.len()]);
                assert!(layout.row(&nulls).is_err());
            }
        }
        LogicalMessage::Insert { new, .. } => {
            assert!(new.0.len() <= data.len(), "more values than bytes");
        }
        _ => {}
    }
});
