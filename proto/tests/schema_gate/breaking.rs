//! Which differences between two compiled schemas break a consumer.
//!
//! A consumer holds code generated from some earlier `events.proto` and, on the JSON view,
//! field and enum value names. It reads events written by a newer ledger, and the ledger
//! itself decodes every event it ever stored with the newest schema (rebuilds, proofs). So
//! what must never change is what the bytes and the JSON are keyed by: field numbers, field
//! names, types, cardinalities, enum value numbers and names, message names, the package.
//! Everything is keyed by number and name at once: a field whose number now carries another
//! name was removed and its number reused, whatever the intent.
//!
//! What is compared: every message and enum declared in the baseline's own files, and every
//! type their fields use (an imported type only when it is used). A removed field or enum
//! value passes only when both its number and its name are `reserved`, and reservations
//! themselves must stay.

use std::collections::HashSet;
use std::fmt;
use std::ops::RangeInclusive;

use protox::prost_reflect::{
    Cardinality, DescriptorPool, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor,
};

/// One breaking change: where, and what changed there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    /// Full name of the message or enum (or the file, for a package).
    pub at: String,
    /// What changed.
    pub change: Change,
}

/// The kinds of breaking change the gate knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The file's `package` changed: every type in it now has another full name.
    PackageChanged { from: String, to: String },
    /// A message in use is gone; `renamed_to` when one new message has the same fields.
    MessageRemoved { renamed_to: Option<String> },
    /// An enum in use is gone; `renamed_to` when one new enum has the same values.
    EnumRemoved { renamed_to: Option<String> },
    /// A field or enum value is gone and its number or name is not reserved.
    Removed {
        member: Member,
        number_reserved: bool,
        name_reserved: bool,
    },
    /// The same name now has another number.
    Renumbered { member: Member, to: i64 },
    /// The number of a removed member now carries another name.
    NumberReused { member: Member, by: String },
    /// A number range or a name the baseline reserved is no longer reserved; `used_by` the
    /// fields or values that now take it.
    ReservationDropped {
        reserved: String,
        used_by: Vec<String>,
    },
    /// A field's type changed (its number and name stayed).
    TypeChanged {
        member: Member,
        from: String,
        to: String,
    },
    /// A field's label changed: singular, optional, repeated, map or required.
    LabelChanged {
        member: Member,
        from: &'static str,
        to: &'static str,
    },
    /// A field moved into, out of or between `oneof`s.
    OneofChanged {
        member: Member,
        from: Option<String>,
        to: Option<String>,
    },
}

/// A field of a message or a value of an enum: what the wire and the JSON know it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `field` or `value`.
    pub kind: &'static str,
    pub number: i64,
    pub name: String,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({})", self.kind, self.number, self.name)
    }
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.at)?;
        match &self.change {
            Change::PackageChanged { from, to } => write!(f, "package changed {from} -> {to}"),
            Change::MessageRemoved { renamed_to: None } => write!(f, "message removed"),
            Change::MessageRemoved {
                renamed_to: Some(to),
            } => {
                write!(f, "message removed (renamed to {to}?)")
            }
            Change::EnumRemoved { renamed_to: None } => write!(f, "enum removed"),
            Change::EnumRemoved {
                renamed_to: Some(to),
            } => {
                write!(f, "enum removed (renamed to {to}?)")
            }
            Change::Removed {
                member,
                number_reserved,
                name_reserved,
            } => {
                write!(f, "{member} removed without reserving it; add")?;
                if !number_reserved {
                    write!(f, " `reserved {};`", member.number)?;
                }
                if !name_reserved {
                    write!(f, " `reserved \"{}\";`", member.name)?;
                }
                Ok(())
            }
            Change::Renumbered { member, to } => {
                write!(f, "{member} renumbered {} -> {to}", member.number)
            }
            Change::NumberReused { member, by } => {
                write!(f, "{member} removed and its number reused by {by}")
            }
            Change::ReservationDropped { reserved, used_by } => {
                write!(f, "reserved {reserved} is no longer reserved")?;
                if !used_by.is_empty() {
                    write!(f, " (now used by {})", used_by.join(", "))?;
                }
                Ok(())
            }
            Change::TypeChanged { member, from, to } => {
                write!(f, "{member} changed type {from} -> {to}")
            }
            Change::LabelChanged { member, from, to } => {
                write!(f, "{member} changed label {from} -> {to}")
            }
            Change::OneofChanged { member, from, to } => write!(
                f,
                "{member} moved from {} to {}",
                oneof_label(from.as_deref()),
                oneof_label(to.as_deref())
            ),
        }
    }
}

/// `oneof event`, or `no oneof`.
fn oneof_label(oneof: Option<&str>) -> String {
    oneof.map_or_else(|| "no oneof".to_owned(), |name| format!("oneof {name}"))
}

/// Every breaking change from `baseline` to `current`, in the baseline's declaration order.
/// `files` are the baseline's own files (not what they import): what they declare is the
/// contract.
pub fn breaking_changes(
    baseline: &DescriptorPool,
    current: &DescriptorPool,
    files: &[&str],
) -> Vec<Break> {
    let mut breaks = Vec::new();
    for file in files {
        package_change(baseline, current, file, &mut breaks);
    }
    let (messages, enums) = in_use(baseline, files);
    for message in &messages {
        match current.get_message_by_name(message.full_name()) {
            Some(now) => message_changes(message, &now, &mut breaks),
            None => breaks.push(Break {
                at: message.full_name().to_owned(),
                change: Change::MessageRemoved {
                    renamed_to: renamed_message(message, baseline, current),
                },
            }),
        }
    }
    for enumeration in &enums {
        match current.get_enum_by_name(enumeration.full_name()) {
            Some(now) => enum_changes(enumeration, &now, &mut breaks),
            None => breaks.push(Break {
                at: enumeration.full_name().to_owned(),
                change: Change::EnumRemoved {
                    renamed_to: renamed_enum(enumeration, baseline, current),
                },
            }),
        }
    }
    breaks
}

/// A changed `package` of `file`. A file that is gone does not compile in the first place
/// (the current schema is compiled under the baseline's file names).
fn package_change(
    baseline: &DescriptorPool,
    current: &DescriptorPool,
    file: &str,
    breaks: &mut Vec<Break>,
) {
    let (Some(before), Some(now)) = (
        baseline.get_file_by_name(file),
        current.get_file_by_name(file),
    ) else {
        return;
    };
    if before.package_name() != now.package_name() {
        breaks.push(Break {
            at: file.to_owned(),
            change: Change::PackageChanged {
                from: before.package_name().to_owned(),
                to: now.package_name().to_owned(),
            },
        });
    }
}

/// The messages and enums in use: declared in `files` (at any depth), or reachable from
/// them through field types. In the order they are first met.
fn in_use(pool: &DescriptorPool, files: &[&str]) -> (Vec<MessageDescriptor>, Vec<EnumDescriptor>) {
    let mut messages = Vec::new();
    let mut enums = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = Vec::new();
    for file in files.iter().filter_map(|name| pool.get_file_by_name(name)) {
        queue.extend(file.messages());
        enums.extend(file.enums());
    }
    queue.reverse();
    while let Some(message) = queue.pop() {
        if !seen.insert(message.full_name().to_owned()) {
            continue;
        }
        enums.extend(message.child_enums());
        let mut next: Vec<_> = message.child_messages().collect();
        for field in message.fields() {
            match field.kind() {
                Kind::Message(used) => next.push(used),
                Kind::Enum(used) => enums.push(used),
                _ => {}
            }
        }
        queue.extend(next.into_iter().rev());
        messages.push(message);
    }
    let mut seen_enums = HashSet::new();
    enums.retain(|e| seen_enums.insert(e.full_name().to_owned()));
    (messages, enums)
}

/// Field and reservation changes of a message that still exists.
fn message_changes(before: &MessageDescriptor, now: &MessageDescriptor, breaks: &mut Vec<Break>) {
    let at = before.full_name();
    let members_now = fields(now);
    let reserved_now = message_reservations(now);
    for field in before.fields() {
        let member = field_member(&field);
        match now.get_field(field.number()) {
            Some(same) if same.name() == field.name() => {
                field_changes(at, &member, &field, &same, breaks);
            }
            _ => member_change(at, member, &members_now, &reserved_now, breaks),
        }
    }
    let reserved_before = message_reservations(before);
    reservation_changes(at, &reserved_before, &reserved_now, &members_now, breaks);
}

/// Value and reservation changes of an enum that still exists.
fn enum_changes(before: &EnumDescriptor, now: &EnumDescriptor, breaks: &mut Vec<Break>) {
    let at = before.full_name();
    let members_now = values(now);
    let reserved_now = enum_reservations(now);
    for member in values(before) {
        let same = members_now
            .iter()
            .any(|m| m.number == member.number && m.name == member.name);
        if !same {
            member_change(at, member, &members_now, &reserved_now, breaks);
        }
    }
    let reserved_before = enum_reservations(before);
    reservation_changes(at, &reserved_before, &reserved_now, &members_now, breaks);
}

/// What became of a member whose number no longer carries its name: renumbered (its name
/// is elsewhere), reused (its number carries another name), or removed (neither), which
/// passes only when both number and name are reserved.
fn member_change(
    at: &str,
    member: Member,
    now: &[Member],
    reserved: &Reservations,
    breaks: &mut Vec<Break>,
) {
    let by_name = now.iter().find(|m| m.name == member.name);
    let by_number = now.iter().find(|m| m.number == member.number);
    if let Some(moved) = by_name {
        breaks.push(Break {
            at: at.to_owned(),
            change: Change::Renumbered {
                member: member.clone(),
                to: moved.number,
            },
        });
    }
    if let Some(other) = by_number {
        breaks.push(Break {
            at: at.to_owned(),
            change: Change::NumberReused {
                by: other.name.clone(),
                member,
            },
        });
        return;
    }
    let number_reserved = reserved.has_number(member.number);
    let name_reserved = reserved.has_name(&member.name);
    if by_name.is_none() && !(number_reserved && name_reserved) {
        breaks.push(Break {
            at: at.to_owned(),
            change: Change::Removed {
                member,
                number_reserved,
                name_reserved,
            },
        });
    }
}

/// Type, label and oneof changes of a field that kept its number and name.
fn field_changes(
    at: &str,
    member: &Member,
    before: &FieldDescriptor,
    now: &FieldDescriptor,
    breaks: &mut Vec<Break>,
) {
    let mut push = |change| {
        breaks.push(Break {
            at: at.to_owned(),
            change,
        })
    };
    let (type_before, type_now) = (type_name(before), type_name(now));
    if type_before != type_now {
        push(Change::TypeChanged {
            member: member.clone(),
            from: type_before,
            to: type_now,
        });
    }
    let (label_before, label_now) = (label(before), label(now));
    if label_before != label_now {
        push(Change::LabelChanged {
            member: member.clone(),
            from: label_before,
            to: label_now,
        });
    }
    let (oneof_before, oneof_now) = (oneof(before), oneof(now));
    if oneof_before != oneof_now {
        push(Change::OneofChanged {
            member: member.clone(),
            from: oneof_before,
            to: oneof_now,
        });
    }
}

/// Every baseline reservation must still hold: a dropped one lets a later change reuse a
/// number or name that old events or old consumers still give another meaning.
fn reservation_changes(
    at: &str,
    before: &Reservations,
    now: &Reservations,
    members_now: &[Member],
    breaks: &mut Vec<Break>,
) {
    for range in before.numbers.iter().filter(|range| !now.covers(range)) {
        let reserved = if range.start() == range.end() {
            range.start().to_string()
        } else {
            format!("{} to {}", range.start(), range.end())
        };
        let used_by = members_now
            .iter()
            .filter(|m| range.contains(&m.number))
            .map(Member::to_string)
            .collect();
        breaks.push(Break {
            at: at.to_owned(),
            change: Change::ReservationDropped { reserved, used_by },
        });
    }
    for name in before.names.iter().filter(|name| !now.has_name(name)) {
        let used_by = members_now
            .iter()
            .filter(|m| m.name == *name)
            .map(Member::to_string)
            .collect();
        breaks.push(Break {
            at: at.to_owned(),
            change: Change::ReservationDropped {
                reserved: format!("\"{name}\""),
                used_by,
            },
        });
    }
}

/// A type's name as a `.proto` file spells it: `string`, `ra.ledger.v1.PostalAddress`,
/// `map<string, int64>`.
fn type_name(field: &FieldDescriptor) -> String {
    if field.is_map()
        && let Kind::Message(entry) = field.kind()
    {
        return format!(
            "map<{}, {}>",
            type_name(&entry.map_entry_key_field()),
            type_name(&entry.map_entry_value_field())
        );
    }
    let scalar = match field.kind() {
        Kind::Message(message) => return message.full_name().to_owned(),
        Kind::Enum(enumeration) => return enumeration.full_name().to_owned(),
        Kind::Double => "double",
        Kind::Float => "float",
        Kind::Int32 => "int32",
        Kind::Int64 => "int64",
        Kind::Uint32 => "uint32",
        Kind::Uint64 => "uint64",
        Kind::Sint32 => "sint32",
        Kind::Sint64 => "sint64",
        Kind::Fixed32 => "fixed32",
        Kind::Fixed64 => "fixed64",
        Kind::Sfixed32 => "sfixed32",
        Kind::Sfixed64 => "sfixed64",
        Kind::Bool => "bool",
        Kind::String => "string",
        Kind::Bytes => "bytes",
    };
    scalar.to_owned()
}

/// The field's cardinality. `optional` (explicit presence) is its own label: generated code
/// differs (`Option<String>` in Rust, `has_` methods elsewhere).
fn label(field: &FieldDescriptor) -> &'static str {
    if field.is_map() {
        "map"
    } else if field.is_list() {
        "repeated"
    } else if field.cardinality() == Cardinality::Required {
        "required"
    } else if field.field_descriptor_proto().proto3_optional() {
        "optional"
    } else {
        "singular"
    }
}

/// The real `oneof` a field belongs to; proto3 `optional` fields sit in a synthetic one,
/// which [`label`] covers.
fn oneof(field: &FieldDescriptor) -> Option<String> {
    field
        .containing_oneof()
        .filter(|oneof| !oneof.is_synthetic())
        .map(|oneof| oneof.name().to_owned())
}

fn field_member(field: &FieldDescriptor) -> Member {
    Member {
        kind: "field",
        number: i64::from(field.number()),
        name: field.name().to_owned(),
    }
}

fn fields(message: &MessageDescriptor) -> Vec<Member> {
    message.fields().map(|field| field_member(&field)).collect()
}

fn values(enumeration: &EnumDescriptor) -> Vec<Member> {
    enumeration
        .values()
        .map(|value| Member {
            kind: "value",
            number: i64::from(value.number()),
            name: value.name().to_owned(),
        })
        .collect()
}

/// A message's or enum's `reserved` numbers (inclusive ranges) and names.
#[derive(Debug, Default)]
struct Reservations {
    numbers: Vec<RangeInclusive<i64>>,
    names: Vec<String>,
}

impl Reservations {
    fn has_number(&self, number: i64) -> bool {
        self.numbers.iter().any(|range| range.contains(&number))
    }

    fn has_name(&self, name: &str) -> bool {
        self.names.iter().any(|reserved| reserved == name)
    }

    /// Whether the union of these ranges holds all of `range` (ranges may be split or merged
    /// differently from the baseline's).
    fn covers(&self, range: &RangeInclusive<i64>) -> bool {
        let mut sorted = self.numbers.clone();
        sorted.sort_by_key(|r| *r.start());
        let mut next = *range.start();
        for r in sorted {
            if *r.start() <= next && *r.end() >= next {
                next = r.end() + 1;
            }
            if next > *range.end() {
                return true;
            }
        }
        false
    }
}

fn message_reservations(message: &MessageDescriptor) -> Reservations {
    Reservations {
        // Message ranges end exclusive in descriptors.
        numbers: message
            .reserved_ranges()
            .map(|r| i64::from(r.start)..=i64::from(r.end) - 1)
            .collect(),
        names: message.reserved_names().map(str::to_owned).collect(),
    }
}

fn enum_reservations(enumeration: &EnumDescriptor) -> Reservations {
    Reservations {
        numbers: enumeration
            .reserved_ranges()
            .map(|r| i64::from(*r.start())..=i64::from(*r.end()))
            .collect(),
        names: enumeration.reserved_names().map(str::to_owned).collect(),
    }
}

/// The one message new in `current` with exactly `message`'s field numbers and names: the
/// likely new name of a renamed message (or of every message, when the package changed).
fn renamed_message(
    message: &MessageDescriptor,
    baseline: &DescriptorPool,
    current: &DescriptorPool,
) -> Option<String> {
    let shape = fields(message);
    let candidates = current
        .all_messages()
        .filter(|m| baseline.get_message_by_name(m.full_name()).is_none())
        .filter(|m| fields(m) == shape)
        .map(|m| m.full_name().to_owned());
    only_one(candidates)
}

/// Like [`renamed_message`], for enums by their values.
fn renamed_enum(
    enumeration: &EnumDescriptor,
    baseline: &DescriptorPool,
    current: &DescriptorPool,
) -> Option<String> {
    let shape = values(enumeration);
    let candidates = current
        .all_enums()
        .filter(|e| baseline.get_enum_by_name(e.full_name()).is_none())
        .filter(|e| values(e) == shape)
        .map(|e| e.full_name().to_owned());
    only_one(candidates)
}

/// The single item, or none when there are none or several: a guess must not mislead.
fn only_one(mut items: impl Iterator<Item = String>) -> Option<String> {
    let first = items.next()?;
    items.next().is_none().then_some(first)
}
