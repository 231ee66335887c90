//! `docs/asyncapi.yaml` as a checker of real Kafka messages: which channel a topic is, which
//! of the channel's messages a record is (its headers, key and payload all conform), and
//! which channels and messages a run never saw.
//!
//! The JSON Schemas are checked by a validator of the keywords the document uses (`type`,
//! `const`, `enum`, `pattern`, `minimum`, `required`, `properties`, `additionalProperties`,
//! `propertyNames`, `allOf`, local `$ref`, and `x-ledger-writes-no-other`, which holds the
//! ledger to writing nothing a schema does not list while the schema stays open to
//! consumers); any other keyword is an error, so the document cannot promise something this
//! check silently ignores. Protobuf payloads are decoded as the message the document names
//! (`x-protobuf-message`), from the `.proto` it references, after Confluent's framing when
//! the payload's schema says `x-confluent-wire-format`; a JSON payload of a message that
//! names one (its canonical JSON, `x-relay-value-format: json`) is also read back as that
//! message by the canonical JSON parser (pbjson). [`descriptor`] holds those JSON payload
//! schemas to the compiled `.proto`, field by field, without a broker.

mod descriptor;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prost::Message as _;
use ra_ledger_cdc::confluent_wire::Framed;
use ra_ledger_proto::v1::Envelope;
use serde_json::Value;

/// Schema keywords that only annotate.
const ANNOTATIONS: [&str; 5] = ["description", "title", "summary", "examples", "format"];

/// One record as read from Kafka, its topic without the test's prefix.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The topic, e.g. `outbox.event.contact`.
    pub topic: String,
    /// Partition and offset, to name the record.
    pub partition: i32,
    pub offset: i64,
    /// The key; `None` for a null key.
    pub key: Option<String>,
    /// Headers, as UTF-8 text.
    pub headers: BTreeMap<String, String>,
    /// The value.
    pub payload: Vec<u8>,
}

impl Seen {
    fn location(&self) -> String {
        format!("{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

/// The AsyncAPI document, as JSON.
#[derive(Debug, Clone)]
pub struct Contract {
    document: Value,
    /// Where relative `$ref`s to files start (the document's folder).
    base: PathBuf,
}

/// A channel: its id, address pattern and message ids (component names).
#[derive(Debug)]
struct Channel {
    id: String,
    address: regex::Regex,
    messages: Vec<String>,
}

impl Contract {
    /// `docs/asyncapi.yaml` of this repository.
    pub fn load() -> anyhow::Result<Self> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/asyncapi.yaml");
        let text = std::fs::read_to_string(&path)
            .map_err(|error| anyhow::anyhow!("reading {}: {error}", path.display()))?;
        Self::parse(&text, path.parent().unwrap_or(Path::new(".")))
    }

    /// A document from its YAML text; file `$ref`s are relative to `base`.
    pub fn parse(text: &str, base: &Path) -> anyhow::Result<Self> {
        let document: Value = serde_norway::from_str(text)?;
        anyhow::ensure!(
            document["asyncapi"] == "3.0.0",
            "not an AsyncAPI 3.0.0 document: asyncapi is {}",
            document["asyncapi"]
        );
        Ok(Self {
            document,
            base: base.to_owned(),
        })
    }

    /// The document, to doctor in tests.
    pub fn document_mut(&mut self) -> &mut Value {
        &mut self.document
    }

    /// `value`, or what its local `$ref` (`#/a/b`) names, followed to the end.
    fn resolve<'a>(&'a self, mut value: &'a Value) -> Result<&'a Value, String> {
        for _ in 0..16 {
            let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
                return Ok(value);
            };
            let pointer = reference
                .strip_prefix('#')
                .ok_or_else(|| format!("$ref {reference:?} is not local to the document"))?;
            value = self
                .document
                .pointer(pointer)
                .ok_or_else(|| format!("$ref {reference:?} names nothing"))?;
        }
        Err("a $ref chain longer than 16".into())
    }

    fn channels(&self) -> Result<Vec<Channel>, String> {
        let channels = self.document["channels"]
            .as_object()
            .ok_or("the document has no channels")?;
        channels
            .iter()
            .map(|(id, channel)| {
                let address = channel["address"]
                    .as_str()
                    .ok_or_else(|| format!("channel {id} has no address"))?;
                let pattern = regex::Regex::new(&address_pattern(address))
                    .map_err(|error| format!("channel {id}: {error}"))?;
                let messages = channel["messages"]
                    .as_object()
                    .ok_or_else(|| format!("channel {id} has no messages"))?
                    .values()
                    .map(|message| {
                        message["$ref"]
                            .as_str()
                            .and_then(|r| r.strip_prefix("#/components/messages/"))
                            .map(str::to_owned)
                            .ok_or_else(|| format!("channel {id}: a message is not a component"))
                    })
                    .collect::<Result<_, _>>()?;
                Ok(Channel {
                    id: id.clone(),
                    address: pattern,
                    messages,
                })
            })
            .collect()
    }

    /// Which channel and message `seen` is; the error says why it is none of them.
    pub fn identify(&self, seen: &Seen) -> Result<(String, String), String> {
        let channels = self.channels()?;
        let channel = channels
            .iter()
            .find(|channel| channel.address.is_match(&seen.topic))
            .ok_or_else(|| {
                format!(
                    "{}: no channel of the document has this topic",
                    seen.location()
                )
            })?;
        let mut reasons = Vec::new();
        for name in &channel.messages {
            let message = &self.document["components"]["messages"][name];
            match self.conforms(message, seen) {
                Ok(()) => return Ok((channel.id.clone(), name.clone())),
                Err(problems) => reasons.push(format!("not {name}: {}", problems.join("; "))),
            }
        }
        Err(format!(
            "{} (channel {}): {}",
            seen.location(),
            channel.id,
            reasons.join(" | ")
        ))
    }

    /// Every problem of `seen` as `message`.
    fn conforms(&self, message: &Value, seen: &Seen) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let headers: serde_json::Map<String, Value> = seen
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
            .collect();
        self.validate(
            &message["headers"],
            &Value::Object(headers),
            "headers",
            &mut problems,
        );
        let key = seen.key.as_deref().map_or(Value::Null, Value::from);
        self.validate(
            &message["bindings"]["kafka"]["key"],
            &key,
            "key",
            &mut problems,
        );
        match self.resolve(&message["payload"]) {
            Ok(payload) if payload.get("schemaFormat").is_some() => {
                self.protobuf_payload(message, payload, seen, &mut problems)
            }
            Ok(payload) => match serde_json::from_slice::<Value>(&seen.payload) {
                Ok(value) => {
                    self.validate(payload, &value, "payload", &mut problems);
                    if message.get("x-protobuf-message").is_some() {
                        json_envelope(message, seen, &mut problems);
                    }
                }
                Err(error) => problems.push(format!("payload is not JSON: {error}")),
            },
            Err(problem) => problems.push(problem),
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The payload decodes as the named protobuf message of the referenced `.proto`, and
    /// agrees with the headers and key the document ties to it.
    fn protobuf_payload(
        &self,
        message: &Value,
        payload: &Value,
        seen: &Seen,
        problems: &mut Vec<String>,
    ) {
        if payload["schemaFormat"] != "application/vnd.google.protobuf;version=3" {
            problems.push(format!("unknown schemaFormat {}", payload["schemaFormat"]));
            return;
        }
        let Some(name) = message["x-protobuf-message"].as_str() else {
            problems.push("a protobuf payload without x-protobuf-message".into());
            return;
        };
        if let Err(problem) = self.proto_declares(&payload["schema"], name) {
            problems.push(problem);
            return;
        }
        // The one protobuf message the ledger publishes; a document naming another fails here.
        if name != "ra.ledger.v1.Envelope" {
            problems.push(format!("this test cannot decode {name}"));
            return;
        }
        // Framed for schema registries: the envelope after the magic byte, the schema id and
        // its message indexes, which must name the envelope, the first message of the file.
        let bytes = if payload["x-confluent-wire-format"] == true {
            match Framed::parse(&seen.payload) {
                Ok(framed) if framed.indexes == [0] => framed.payload,
                Ok(framed) => {
                    return problems.push(format!(
                        "message indexes {:?} do not name {name}",
                        framed.indexes
                    ));
                }
                Err(error) => return problems.push(format!("payload: {error}")),
            }
        } else {
            seen.payload.as_slice()
        };
        match Envelope::decode(bytes) {
            Ok(envelope) => envelope_agrees(&envelope, seen, problems),
            Err(error) => problems.push(format!("payload is not an {name}: {error}")),
        }
    }

    /// The `.proto` file `schema.$ref` names declares `name` (`package.Message`).
    fn proto_declares(&self, schema: &Value, name: &str) -> Result<(), String> {
        let file = schema["$ref"]
            .as_str()
            .ok_or("a protobuf schema without a $ref to its .proto")?;
        let path = self.base.join(file);
        let text = std::fs::read_to_string(&path)
            .map_err(|error| format!("reading {}: {error}", path.display()))?;
        let (package, message) = name
            .rsplit_once('.')
            .ok_or("a message name without package")?;
        let declared = text.contains(&format!("package {package};"))
            && text.contains(&format!("message {message} {{"));
        if declared {
            Ok(())
        } else {
            Err(format!("{} declares no {name}", path.display()))
        }
    }

    /// Checks `value` against `schema`, adding each problem under `path`.
    fn validate(&self, schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
        let schema = match self.resolve(schema) {
            Ok(schema) => schema,
            Err(problem) => return problems.push(format!("{path}: {problem}")),
        };
        let Some(keywords) = schema.as_object() else {
            return problems.push(format!("{path}: the schema is not an object"));
        };
        for (keyword, argument) in keywords {
            match keyword.as_str() {
                "type" => check_type(argument, value, path, problems),
                "const" if value != argument => {
                    problems.push(format!("{path}: {value} is not {argument}"))
                }
                "enum"
                    if !argument
                        .as_array()
                        .is_some_and(|values| values.contains(value)) =>
                {
                    problems.push(format!("{path}: {value} is not one of {argument}"))
                }
                "pattern" => check_pattern(argument, value, path, problems),
                "minimum" => {
                    if let (Some(number), Some(minimum)) = (value.as_f64(), argument.as_f64())
                        && number < minimum
                    {
                        problems.push(format!("{path}: {value} is below {minimum}"));
                    }
                }
                "required" => {
                    for name in argument.as_array().into_iter().flatten() {
                        let name = name.as_str().unwrap_or_default();
                        if value.get(name).is_none() {
                            problems.push(format!("{path}: {name} is required but missing"));
                        }
                    }
                }
                "properties" => {
                    for (name, property) in argument.as_object().into_iter().flatten() {
                        if let Some(item) = value.get(name) {
                            self.validate(property, item, &format!("{path}.{name}"), problems);
                        }
                    }
                }
                // The ledger writes no property beyond those listed (the schema stays open
                // to consumers): one it writes that the document lacks is a finding.
                "x-ledger-writes-no-other" => {
                    let listed = keywords.get("properties").and_then(Value::as_object);
                    if argument == &Value::Bool(true) {
                        for (name, _) in value.as_object().into_iter().flatten() {
                            if !listed.is_some_and(|listed| listed.contains_key(name)) {
                                problems.push(format!("{path}: {name} is not documented"));
                            }
                        }
                    }
                }
                "additionalProperties" => {
                    let listed = keywords.get("properties").and_then(Value::as_object);
                    for (name, item) in value.as_object().into_iter().flatten() {
                        if listed.is_some_and(|listed| listed.contains_key(name)) {
                            continue;
                        }
                        match argument {
                            Value::Bool(false) => {
                                problems.push(format!("{path}: {name} is not documented"))
                            }
                            Value::Bool(true) => {}
                            schema => {
                                self.validate(schema, item, &format!("{path}.{name}"), problems)
                            }
                        }
                    }
                }
                "propertyNames" => {
                    for name in value
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(name, _)| name)
                    {
                        self.validate(
                            argument,
                            &Value::from(name.as_str()),
                            &format!("{path} key {name:?}"),
                            problems,
                        );
                    }
                }
                "allOf" => {
                    for part in argument.as_array().into_iter().flatten() {
                        self.validate(part, value, path, problems);
                    }
                }
                "const" | "enum" => {}
                annotation if ANNOTATIONS.contains(&annotation) => {}
                other => problems.push(format!("{path}: the check knows no keyword {other:?}")),
            }
        }
    }

    /// Whether message `name` is another rendering of a protobuf one (`x-relay-value-format`:
    /// `json`, `confluent_protobuf`): seen only from a relay configured so (`value_format.rs`
    /// and `registry/` check those).
    pub fn is_rendering(&self, name: &str) -> bool {
        self.document["components"]["messages"][name]
            .get("x-relay-value-format")
            .is_some()
    }

    /// What a whole run's records leave out: channels none of them was on, and messages of
    /// a channel none of them was, but for JSON renderings.
    pub fn unseen(&self, identified: &BTreeSet<(String, String)>) -> Result<Vec<String>, String> {
        let mut unseen = Vec::new();
        for channel in self.channels()? {
            for message in &channel.messages {
                if self.is_rendering(message) {
                    continue;
                }
                if !identified.contains(&(channel.id.clone(), message.clone())) {
                    unseen.push(format!("channel {}: no {message} seen", channel.id));
                }
            }
        }
        Ok(unseen)
    }
}

/// The envelope agrees with the headers and the key the document ties to it.
fn envelope_agrees(envelope: &Envelope, seen: &Seen, problems: &mut Vec<String>) {
    if envelope.event.is_none() {
        problems.push("the envelope carries no event".into());
    }
    let header = |name: &str| seen.headers.get(name).map(String::as_str);
    if header("id") != Some(envelope.event_id.as_str()) {
        problems.push(format!(
            "id header is not the envelope's event_id {}",
            envelope.event_id
        ));
    }
    if header("event_type") != Some(envelope.event_type.as_str()) {
        problems.push(format!(
            "event_type header is not the envelope's {}",
            envelope.event_type
        ));
    }
    // Every key schema of an envelope says: the stream without its aggregate prefix.
    let aggregate_id = envelope.stream.split_once('-').map(|(_, id)| id);
    if seen.key.as_deref() != aggregate_id {
        problems.push(format!(
            "key {:?} is not the aggregate id of stream {}",
            seen.key, envelope.stream
        ));
    }
}

/// A JSON payload of a message naming a protobuf message: the canonical JSON parser reads
/// it as that message (strictly: an unknown field fails), which agrees with headers and key.
fn json_envelope(message: &Value, seen: &Seen, problems: &mut Vec<String>) {
    let name = message["x-protobuf-message"].as_str().unwrap_or_default();
    if name != "ra.ledger.v1.Envelope" {
        return problems.push(format!("this test cannot read {name} from JSON"));
    }
    match serde_json::from_slice::<Envelope>(&seen.payload) {
        Ok(envelope) => envelope_agrees(&envelope, seen, problems),
        Err(error) => problems.push(format!("payload is not the JSON of an {name}: {error}")),
    }
}

/// A regex matching a channel address, each `{parameter}` standing for one name segment.
fn address_pattern(address: &str) -> String {
    let mut pattern = String::from("^");
    let mut rest = address;
    while let Some(start) = rest.find('{') {
        pattern.push_str(&regex::escape(&rest[..start]));
        pattern.push_str("[A-Za-z0-9_-]+");
        rest = rest[start..].split_once('}').map_or("", |(_, after)| after);
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    pattern
}

fn check_type(expected: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    let holds = match expected.as_str() {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("boolean") => value.is_boolean(),
        Some("null") => value.is_null(),
        _ => return problems.push(format!("{path}: the check knows no type {expected}")),
    };
    if !holds {
        problems.push(format!("{path}: {value} is not of type {expected}"));
    }
}

fn check_pattern(pattern: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    let (Some(pattern), Some(text)) = (pattern.as_str(), value.as_str()) else {
        return;
    };
    match regex::Regex::new(pattern) {
        Ok(regex) if regex.is_match(text) => {}
        Ok(_) => problems.push(format!("{path}: {text:?} does not match {pattern}")),
        Err(error) => problems.push(format!("{path}: bad pattern {pattern}: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use ra_ledger_proto::v1::{ContactCreated, envelope::Event};

    use super::*;

    const CONTACT: &str = "0199c3a0-6e4b-7d1a-9f00-4a5b6c7d8e9f";
    const EVENT: &str = "0199c3a0-6e4b-7d1a-9f00-000000000001";

    /// A live contact event as the relay publishes it.
    fn live_contact_event() -> Seen {
        let envelope = Envelope {
            event_id: EVENT.into(),
            stream: format!("contact-{CONTACT}"),
            stream_version: 1,
            event_type: "ContactCreated".into(),
            schema_version: 1,
            event: Some(Event::ContactCreated(ContactCreated {
                contact_id: CONTACT.into(),
                jurisdiction: "TX".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        Seen {
            topic: "outbox.event.contact".into(),
            partition: 0,
            offset: 0,
            key: Some(CONTACT.into()),
            headers: BTreeMap::from([
                ("id".into(), EVENT.into()),
                ("event_type".into(), "ContactCreated".into()),
                ("commit_lsn".into(), "0/16B3748".into()),
                ("txid".into(), "742".into()),
                (
                    "commit_timestamp".into(),
                    "2026-01-01T00:00:00.000001Z".into(),
                ),
                ("ordinal".into(), "0".into()),
            ]),
            payload: envelope.encode_to_vec(),
        }
    }

    fn identify(contract: &Contract, seen: &Seen) -> Result<(String, String), String> {
        contract.identify(seen)
    }

    #[test]
    fn the_document_accepts_a_live_event_and_a_doctored_one_catches_each_difference() {
        let contract = Contract::load().unwrap();
        let seen = live_contact_event();
        assert_eq!(
            identify(&contract, &seen).unwrap(),
            ("contact".to_owned(), "ContactEvent".to_owned())
        );

        // A header the relay sends that the document no longer lists.
        let mut doctored = contract.clone();
        let live = &mut doctored.document_mut()["components"]["schemas"]["LiveHeaders"];
        live["properties"]
            .as_object_mut()
            .unwrap()
            .remove("commit_lsn");
        live["required"]
            .as_array_mut()
            .unwrap()
            .retain(|name| name != "commit_lsn");
        let error = identify(&doctored, &seen).unwrap_err();
        assert!(error.contains("commit_lsn is not documented"), "{error}");

        // A required header the message lacks.
        let mut missing = seen.clone();
        missing.headers.remove("ordinal");
        let error = identify(&contract, &missing).unwrap_err();
        assert!(error.contains("ordinal is required but missing"), "{error}");

        // A key that is not the aggregate id, a payload that is not an envelope, a topic
        // the document lacks, an event type of another topic.
        let mut wrong_key = seen.clone();
        wrong_key.key = Some(EVENT.into());
        let error = identify(&contract, &wrong_key).unwrap_err();
        assert!(error.contains("is not the aggregate id"), "{error}");
        let mut garbage = seen.clone();
        garbage.payload = vec![0xff; 7];
        let error = identify(&contract, &garbage).unwrap_err();
        assert!(error.contains("is not an ra.ledger.v1.Envelope"), "{error}");
        let mut elsewhere = seen.clone();
        elsewhere.topic = "outbox.event.contacts".into();
        let error = identify(&contract, &elsewhere).unwrap_err();
        assert!(error.contains("no channel"), "{error}");
        let mut doctored = contract.clone();
        doctored.document_mut()["components"]["schemas"]["ContactEventType"]["properties"]["event_type"]
            ["enum"] = serde_json::json!(["ContactSuperseded"]);
        let error = identify(&doctored, &seen).unwrap_err();
        assert!(error.contains("is not one of"), "{error}");

        // A channel no record was on is reported.
        let seen_once = BTreeSet::from([("contact".to_owned(), "ContactEvent".to_owned())]);
        let unseen = contract.unseen(&seen_once).unwrap();
        assert!(
            unseen
                .iter()
                .any(|u| u == "channel digest: no DigestSealed seen"),
            "{unseen:?}"
        );
        assert!(
            !unseen.iter().any(|u| u.starts_with("channel contact:")),
            "{unseen:?}"
        );
    }

    #[test]
    fn the_canonical_json_of_an_envelope_is_a_message_of_its_own() {
        let contract = Contract::load().unwrap();
        let mut seen = live_contact_event();
        let envelope = Envelope {
            recorded_at_micros: 1_767_225_600_000_001,
            effective_at_micros: 1_767_225_600_000_001,
            ..Envelope::decode(seen.payload.as_slice()).unwrap()
        };
        seen.payload = serde_json::to_vec(&envelope).unwrap();
        assert_eq!(
            identify(&contract, &seen).unwrap(),
            ("contact".to_owned(), "ContactEventJson".to_owned())
        );
        let json: Value = serde_json::from_slice(&seen.payload).unwrap();
        let reshaped = |change: &dyn Fn(&mut serde_json::Map<String, Value>)| {
            let mut json = json.clone();
            change(json.as_object_mut().unwrap());
            Seen {
                payload: serde_json::to_vec(&json).unwrap(),
                ..seen.clone()
            }
        };
        // Proto field names, and an int64 as a JSON number, are not the canonical mapping.
        let snake_case = reshaped(&|json| {
            let version = json.remove("streamVersion").unwrap();
            json.insert("stream_version".into(), version);
        });
        let error = identify(&contract, &snake_case).unwrap_err();
        assert!(
            error.contains("stream_version is not documented"),
            "{error}"
        );
        let number = reshaped(&|json| {
            json.insert("streamVersion".into(), Value::from(1));
        });
        let error = identify(&contract, &number).unwrap_err();
        assert!(error.contains("payload.streamVersion"), "{error}");
        // The JSON must be of the very envelope the headers describe.
        let other = reshaped(&|json| {
            json.insert("eventId".into(), Value::from(CONTACT));
        });
        let error = identify(&contract, &other).unwrap_err();
        assert!(
            error.contains("id header is not the envelope's event_id"),
            "{error}"
        );
        // A run of a protobuf-only relay leaves the JSON renderings out of what it must see.
        let protobuf_run = BTreeSet::from([("contact".to_owned(), "ContactEvent".to_owned())]);
        let unseen = contract.unseen(&protobuf_run).unwrap();
        assert!(!unseen.iter().any(|u| u.contains("Json")), "{unseen:?}");
    }

    #[test]
    fn a_keyword_the_check_does_not_know_is_an_error_not_a_pass() {
        let mut contract = Contract::load().unwrap();
        contract.document_mut()["components"]["schemas"]["LiveHeaders"]["maxProperties"] =
            Value::from(3);
        let error = identify(&contract, &live_contact_event()).unwrap_err();
        assert!(
            error.contains("knows no keyword \"maxProperties\""),
            "{error}"
        );
    }

    #[test]
    fn replay_addresses_take_the_replay_id_as_one_segment() {
        let pattern = regex::Regex::new(&address_pattern("a.b.replay.{replayId}")).unwrap();
        assert!(pattern.is_match("a.b.replay.0199c3a0-6e4b-7d1a-9f00-4a5b6c7d8e9f"));
        assert!(!pattern.is_match("a.b.replay.x.y"));
        assert!(!pattern.is_match("a.bxreplay.x"));
    }
}
