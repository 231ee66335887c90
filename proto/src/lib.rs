//! Event contracts of RA Ledger.
//!
//! The `.proto` files under `proto/` are the source of truth; a team in another language
//! generates its own types from them. This crate is the Rust rendering, built with prost,
//! with the proto3 canonical JSON mapping of every message as its serde impls (pbjson):
//! `serde_json::to_vec(&envelope)` is the JSON a topic with `value_formats = "json"` carries,
//! and `serde_json::from_slice::<v1::Envelope>` reads it back.

/// The text of `events.proto`, the whole contract of the Kafka values: what the relay
/// registers in a schema registry for a topic framed for registries (`value_formats`
/// `confluent_protobuf`), and what `ledger serve` serves at `/contracts/events.proto`.
pub const EVENTS_PROTO: &str = include_str!("../proto/ra/ledger/v1/events.proto");

/// The path of [`EVENTS_PROTO`] under the include root, as `import` statements and `protoc
/// -I proto/proto` name it.
pub const EVENTS_PROTO_PATH: &str = "ra/ledger/v1/events.proto";

/// Version 1 of the contracts (`package ra.ledger.v1`).
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/ra.ledger.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/ra.ledger.v1.serde.rs"));
}

/// Where `ra.ledger.v1.Envelope` is in [`EVENTS_PROTO`], as Confluent's wire format names a
/// message: the path of indexes from the file's top-level messages down (`MessageIndexes`
/// in Confluent's serializers). The envelope is the first top-level message, `[0]`; a test
/// holds the file to it, so a message added above the envelope cannot shift every framed
/// record onto another message in silence.
pub const ENVELOPE_MESSAGE_INDEXES: &[i32] = &[0];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_is_where_its_message_indexes_say() {
        let files = protox::compile([EVENTS_PROTO_PATH], ["proto"]).expect("events.proto compiles");
        let file = files
            .file
            .iter()
            .find(|file| file.name() == EVENTS_PROTO_PATH)
            .expect("events.proto is in the set");
        let names: Vec<&str> = file
            .message_type
            .iter()
            .map(|message| message.name())
            .collect();
        assert_eq!(
            names.iter().position(|name| *name == "Envelope"),
            Some(ENVELOPE_MESSAGE_INDEXES[0] as usize),
            "top-level messages of events.proto: {names:?}"
        );
        assert_eq!(
            ENVELOPE_MESSAGE_INDEXES.len(),
            1,
            "the envelope is a top-level message"
        );
        assert_eq!(file.package(), "ra.ledger.v1");
    }
}
