//! The JSON payloads of the document against the protobuf descriptor: a message whose
//! payload is the canonical JSON of a protobuf message (`x-relay-value-format: json`, with
//! `x-protobuf-message`) must describe exactly that message's fields, by the names and JSON
//! types the proto3 JSON mapping gives them, all the way down. A field added to
//! `events.proto` and not to `docs/asyncapi.yaml` (or the reverse, or a changed type, or an
//! enum value) fails here, with no broker and no relay: the document is checked against the
//! compiled `.proto`, not against whatever records a test run happened to produce.

use std::collections::BTreeSet;

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorSet};
use serde_json::Value;

use super::Contract;

/// `events.proto` compiled, with the compiler the build uses.
pub fn events_descriptor() -> anyhow::Result<FileDescriptorSet> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/proto");
    Ok(protox::compile(
        [ra_ledger_proto::EVENTS_PROTO_PATH],
        [root],
    )?)
}

impl Contract {
    /// Each difference between a JSON rendering's payload schema and the protobuf message
    /// it renders, named by the document's message and the property's path.
    pub fn json_payloads_against(&self, descriptor: &FileDescriptorSet) -> Vec<String> {
        let mut walk = Walk {
            contract: self,
            descriptor,
            problems: Vec::new(),
        };
        let messages = self.document["components"]["messages"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut checked = 0;
        for (id, message) in &messages {
            if message["x-relay-value-format"] != "json" {
                continue;
            }
            let Some(name) = message["x-protobuf-message"].as_str() else {
                walk.problems
                    .push(format!("{id}: a JSON rendering without x-protobuf-message"));
                continue;
            };
            let Some(proto) = find_message(descriptor, name) else {
                walk.problems
                    .push(format!("{id}: events.proto has no message {name}"));
                continue;
            };
            checked += 1;
            walk.message_schema(proto, &message["payload"], id);
        }
        if checked == 0 {
            walk.problems
                .push("the document has no JSON rendering of a protobuf message".into());
        }
        walk.problems
    }
}

/// One check of the document against the descriptor, and what it found.
struct Walk<'a> {
    contract: &'a Contract,
    descriptor: &'a FileDescriptorSet,
    problems: Vec<String>,
}

impl<'a> Walk<'a> {
    /// `schema`, or what its `$ref` names; `None`, with the problem noted, when it names
    /// nothing.
    fn resolve(&mut self, schema: &'a Value, path: &str) -> Option<&'a Value> {
        self.contract
            .resolve(schema)
            .map_err(|problem| self.problems.push(format!("{path}: {problem}")))
            .ok()
    }

    /// `schema` describes `proto`'s fields, no more and no fewer.
    fn message_schema(&mut self, proto: &'a DescriptorProto, schema: &'a Value, path: &str) {
        let Some(schema) = self.resolve(schema, path) else {
            return;
        };
        if schema["type"] != "object" {
            self.problems
                .push(format!("{path}: {} is not an object", proto.name()));
        }
        let properties = schema["properties"].as_object();
        let fields: BTreeSet<&str> = proto.field.iter().map(|field| field.json_name()).collect();
        for name in properties
            .into_iter()
            .flat_map(|properties| properties.keys())
        {
            if !fields.contains(name.as_str()) {
                self.problems
                    .push(format!("{path}.{name}: {} has no such field", proto.name()));
            }
        }
        for name in schema["required"].as_array().into_iter().flatten() {
            if !name.as_str().is_some_and(|name| fields.contains(name)) {
                self.problems
                    .push(format!("{path}: required {name} is no field"));
            }
        }
        for field in &proto.field {
            let at = format!("{path}.{}", field.json_name());
            match properties.and_then(|properties| properties.get(field.json_name())) {
                Some(property) => self.field_schema(field, property, &at),
                None => self.problems.push(format!(
                    "{at}: field {} of {} is not described",
                    field.name(),
                    proto.name()
                )),
            }
        }
    }

    /// `schema` is the JSON of `field` in the proto3 mapping.
    fn field_schema(&mut self, field: &'a FieldDescriptorProto, schema: &'a Value, path: &str) {
        let Some(schema) = self.resolve(schema, path) else {
            return;
        };
        if field.label() == Label::Repeated {
            if schema["type"] != "array" {
                self.problems
                    .push(format!("{path}: a repeated field is a JSON array"));
            }
            return;
        }
        let json_type = match field.r#type() {
            Type::String | Type::Bytes => "string",
            // The canonical mapping writes 64-bit integers as decimal strings.
            Type::Int64 | Type::Uint64 | Type::Sint64 | Type::Fixed64 | Type::Sfixed64 => "string",
            Type::Int32 | Type::Uint32 | Type::Sint32 | Type::Fixed32 | Type::Sfixed32 => "integer",
            Type::Bool => "boolean",
            Type::Double | Type::Float => "number",
            Type::Enum => return self.enum_schema(field, schema, path),
            Type::Message | Type::Group => {
                let name = field.type_name().trim_start_matches('.');
                return match find_message(self.descriptor, name) {
                    Some(proto) => self.message_schema(proto, schema, path),
                    None => self
                        .problems
                        .push(format!("{path}: events.proto has no message {name}")),
                };
            }
        };
        if schema["type"] != json_type {
            self.problems.push(format!(
                "{path}: a {:?} field is a JSON {json_type}, the document says {}",
                field.r#type(),
                schema["type"]
            ));
        }
        if json_type == "string"
            && matches!(
                field.r#type(),
                Type::Int64 | Type::Uint64 | Type::Sint64 | Type::Fixed64 | Type::Sfixed64
            )
            && schema.get("pattern").is_none()
        {
            self.problems
                .push(format!("{path}: a 64-bit integer's string has no pattern"));
        }
    }

    /// An enum is written by its value names; its zero value, the default, never is.
    fn enum_schema(&mut self, field: &'a FieldDescriptorProto, schema: &'a Value, path: &str) {
        let name = field.type_name().trim_start_matches('.');
        let Some(values) = find_enum(self.descriptor, name) else {
            return self
                .problems
                .push(format!("{path}: events.proto has no enum {name}"));
        };
        let expected: BTreeSet<&str> = values
            .iter()
            .filter(|value| value.number() != 0)
            .map(|value| value.name())
            .collect();
        let listed: BTreeSet<&str> = schema["enum"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if listed != expected {
            self.problems.push(format!(
                "{path}: enum {name} is written as one of {expected:?}, the document lists {listed:?}"
            ));
        }
    }
}

/// The message of full name `name` (`package.Message` or `package.Outer.Inner`).
fn find_message<'a>(descriptor: &'a FileDescriptorSet, name: &str) -> Option<&'a DescriptorProto> {
    descriptor.file.iter().find_map(|file| {
        let local = name.strip_prefix(file.package())?.strip_prefix('.')?;
        let mut parts = local.split('.');
        let first = parts.next()?;
        let mut message = file.message_type.iter().find(|m| m.name() == first)?;
        for part in parts {
            message = message.nested_type.iter().find(|m| m.name() == part)?;
        }
        Some(message)
    })
}

/// The values of the top-level enum of full name `name`.
fn find_enum<'a>(
    descriptor: &'a FileDescriptorSet,
    name: &str,
) -> Option<&'a [prost_types::EnumValueDescriptorProto]> {
    descriptor.file.iter().find_map(|file| {
        let local = name.strip_prefix(file.package())?.strip_prefix('.')?;
        file.enum_type
            .iter()
            .find(|e| e.name() == local)
            .map(|e| e.value.as_slice())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract() -> Contract {
        Contract::load().unwrap()
    }

    #[test]
    fn the_json_payloads_describe_exactly_the_fields_of_events_proto() {
        let descriptor = events_descriptor().unwrap();
        let problems = contract().json_payloads_against(&descriptor);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// Changes one property list of the document.
    type Doctor = fn(&mut Value);

    /// Each way the document can drift from the `.proto` is caught: the check is not a pass.
    #[test]
    fn a_doctored_document_or_descriptor_is_caught() {
        let descriptor = events_descriptor().unwrap();
        let envelope = "/components/schemas/EnvelopeJson/properties";
        let cases: [(&str, Doctor); 5] = [
            (
                "contactId: field contact_id of AssignmentStarted is not described",
                |d| {
                    d["assignmentStarted"]["properties"]
                        .as_object_mut()
                        .unwrap()
                        .remove("contactId");
                },
            ),
            ("extra: Envelope has no such field", |d| {
                d.as_object_mut()
                    .unwrap()
                    .insert("extra".into(), serde_json::json!({"type": "string"}));
            }),
            ("a Uint32 field is a JSON integer", |d| {
                d["reassignmentPageRequested"]["properties"]["page"] =
                    serde_json::json!({"type": "string"});
            }),
            ("enum ra.ledger.v1.EndReason is written as one of", |d| {
                d["assignmentEnded"]["properties"]["reason"]["enum"] =
                    serde_json::json!(["END_REASON_REPLACED"]);
            }),
            ("a 64-bit integer's string has no pattern", |d| {
                d["streamVersion"] = serde_json::json!({"type": "string"});
            }),
        ];
        for (expected, doctor) in cases {
            let mut contract = contract();
            doctor(contract.document_mut().pointer_mut(envelope).unwrap());
            let problems = contract.json_payloads_against(&descriptor);
            assert!(
                problems.iter().any(|problem| problem.contains(expected)),
                "expected {expected:?} among {problems:?}"
            );
        }

        // A field added to the `.proto` alone.
        let mut added = descriptor.clone();
        let file = &mut added.file[0];
        let started = file
            .message_type
            .iter_mut()
            .find(|m| m.name() == "AssignmentStarted")
            .unwrap();
        let mut field = started.field[0].clone();
        field.name = Some("office_hours".into());
        field.json_name = Some("officeHours".into());
        field.number = Some(99);
        started.field.push(field);
        let problems = contract().json_payloads_against(&added);
        assert!(
            problems.iter().any(
                |problem| problem.contains("assignmentStarted.officeHours: field office_hours")
            ),
            "{problems:?}"
        );
    }
}
