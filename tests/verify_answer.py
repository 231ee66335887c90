"""The audit-answer half of tests/verify_digest.py (kept beside it; Python's standard library
only, written from proto/proto/ra/ledger/v1/events.proto and docs/auditors.md, not from the
Rust code): it decodes the proven events' protobuf payloads, folds them as the ledger's
projections do, and checks a proof's answer against its question.

What it checks of a proof with "question" and "answer" (issue 56, item 1):
- the streams are exactly the question's assignment stream (`assignment-<business>-<code>`)
  and, when an assignment is in force at the question's instant as known at its known_at,
  that assignment's contact stream (`contact-<contact>`); each once, each whole from
  version 1. An answer of null ("no registered agent") therefore needs the assignment
  stream, and its events must show no assignment in force; or, when the business has no
  assignment stream in that jurisdiction at all, no streams and the answer null: then the
  proof's index (log.index, checked by verify_digest.py's check_log) must prove that the
  stream is absent, and a proof without a log does not hold;
- the events recorded by known_at fold to the answer, field by field.
And, given the question the auditor states (--business, --jurisdiction, --at, --known-at),
that the proof answers that question.
"""

import datetime
import json
import uuid

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

# --- Protobuf (the wire format: varints and length-delimited fields) ----------------------


def _varint(data, i):
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("a truncated varint")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def _fields(data):
    """{field number: [values]}: ints for varints, bytes for length-delimited fields."""
    fields, i = {}, 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            if i + length > len(data):
                raise ValueError("a truncated field")
            value, i = data[i : i + length], i + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i : i + size], i + size
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        fields.setdefault(number, []).append(value)
    return fields


def _int64(fields, number):
    value = fields.get(number, [0])[-1]
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(fields, number):
    return fields.get(number, [b""])[-1].decode("utf-8")


# The events the fold reads, by their Envelope field number, with their string fields.
EVENTS = {
    20: ("ContactCreated", {1: "contact_id", 2: "jurisdiction", 3: "name", 6: "supersedes"}),
    21: ("ContactSuperseded", {1: "contact_id", 3: "superseded_by"}),
    22: ("AssignmentStarted", {1: "assignment_id", 2: "business_id", 3: "jurisdiction",
                               4: "contact_id", 5: "replaces"}),
    23: ("AssignmentEnded", {1: "assignment_id", 6: "replaced_by"}),
}
ADDRESS = {1: "line1", 2: "line2", 3: "city", 4: "region", 5: "postal_code"}
END_REPLACED = 1


def envelope(payload):
    """The Envelope's fields the fold reads, from its protobuf bytes."""
    fields = _fields(payload)
    decoded = {
        "event_id": _text(fields, 1),
        "stream": _text(fields, 2),
        "stream_version": _int64(fields, 3),
        "recorded_at_micros": _int64(fields, 6),
        "effective_at_micros": _int64(fields, 7),
        "type": None,
    }
    for number, (name, strings) in EVENTS.items():
        if number in fields:
            event = _fields(fields[number][-1])
            decoded["type"] = name
            decoded.update({field: _text(event, n) for n, field in strings.items()})
            if name == "ContactCreated":
                address = _fields(event.get(4, [b""])[-1])
                decoded["address"] = {field: _text(address, n) for n, field in ADDRESS.items()}
            if name == "AssignmentEnded":
                decoded["reason"] = _int64(event, 5)
    return decoded


# --- The fold (as ledger/src/queries/fold.rs documents it) --------------------------------


def rfc3339(micros):
    """An instant as the ledger's JSON writes it: seconds, then 3 or 6 fraction digits when
    they are not zero, then Z."""
    time = EPOCH + datetime.timedelta(microseconds=micros)
    fraction = micros % 1_000_000
    text = time.strftime("%Y-%m-%dT%H:%M:%S")
    if fraction % 1000 == 0 and fraction:
        text += f".{fraction // 1000:03d}"
    elif fraction:
        text += f".{fraction:06d}"
    return text + "Z"


def _id(text):
    return str(uuid.UUID(text)) if text else None


def fold(events, known_at):
    """(contacts, assignments) by id, from the events recorded by known_at, or a ValueError
    naming an event the fold cannot place."""
    contacts, assignments = {}, {}
    for e in events:
        if e["recorded_at_micros"] > known_at:
            continue
        recorded, effective = e["recorded_at_micros"], e["effective_at_micros"]
        kind = e["type"]
        if kind == "ContactCreated":
            contacts[_id(e["contact_id"])] = {
                "contact_id": _id(e["contact_id"]), "jurisdiction": e["jurisdiction"],
                "name": e["name"], "address": e["address"], "status": "primary",
                "supersedes": _id(e["supersedes"]), "superseded_by": None,
                "created_at": effective, "recorded_at": recorded, "superseded_at": None,
                "superseded_recorded_at": None, "version": e["stream_version"],
            }
        elif kind == "ContactSuperseded":
            contact = contacts.get(_id(e["contact_id"]))
            if contact is None:
                raise ValueError(f"event {e['event_id']}: contact {e['contact_id']} superseded before it was created")
            contact.update(status="on_file", superseded_by=_id(e["superseded_by"]),
                           superseded_at=effective, superseded_recorded_at=recorded,
                           version=e["stream_version"])
        elif kind == "AssignmentStarted":
            assignments[_id(e["assignment_id"])] = {
                "assignment_id": _id(e["assignment_id"]), "business_id": _id(e["business_id"]),
                "jurisdiction": e["jurisdiction"], "contact_id": _id(e["contact_id"]),
                "started_at": effective, "ended_at": None, "end_reason": None,
                "replaces": _id(e["replaces"]), "replaced_by": None, "recorded_at": recorded,
                "ended_recorded_at": None,
            }
        elif kind == "AssignmentEnded":
            assignment = assignments.get(_id(e["assignment_id"]))
            if assignment is None:
                raise ValueError(f"event {e['event_id']}: assignment {e['assignment_id']} ended before it started")
            assignment.update(ended_at=effective, ended_recorded_at=recorded,
                              end_reason="replaced" if e["reason"] == END_REPLACED else "cancelled",
                              replaced_by=_id(e["replaced_by"]))
    return contacts, assignments


def in_force(assignments, at):
    """The newest assignment with started_at <= at < ended_at, or None."""
    live = [a for a in assignments.values()
            if a["started_at"] <= at and (a["ended_at"] is None or a["ended_at"] > at)]
    return max(live, key=lambda a: (a["started_at"], uuid.UUID(a["assignment_id"])), default=None)


def _times(view, fields):
    return {k: rfc3339(v) if k in fields and v is not None else v for k, v in view.items()}


def registered_agent(contacts, assignments, at):
    """The answer the events give, as the ledger's JSON writes it; None for no RA."""
    assignment = in_force(assignments, at)
    contact = assignment and contacts.get(assignment["contact_id"])
    if contact is None:
        return None
    superseded = contact["superseded_at"]
    return {
        "assignment": _times(assignment, ("started_at", "ended_at", "recorded_at", "ended_recorded_at")),
        "contact": _times(contact, ("created_at", "recorded_at", "superseded_at", "superseded_recorded_at")),
        "contact_status": "on_file" if superseded is not None and superseded <= at else "primary",
    }


def describe(answer):
    if answer is None:
        return "no registered agent"
    contact = answer.get("contact") or {}
    return (f"contact {contact.get('contact_id')} ({json.dumps(contact.get('name'))}) through "
            f"assignment {(answer.get('assignment') or {}).get('assignment_id')}")


# --- The answer against the question -----------------------------------------------------


def check_streams(registration, live, carried):
    """What does not hold of the carried streams' names, or None: exactly `registration`
    and, for an assignment `live` at the instant, its contact's stream, each once."""
    expected = [registration] + ([f"contact-{live['contact_id']}"] if live else [])
    for i, stream in enumerate(carried):
        if stream in carried[:i]:
            return f"the proof carries stream {stream} twice"
        if stream not in expected:
            return (f"the proof carries stream {stream}, which the question and its answer do "
                    f"not name: an answer to this question folds only {', '.join(expected)}")
    if live and expected[1] not in carried:
        return (f"the proof does not prove stream {expected[1]}, the contact of assignment "
                f"{live['assignment_id']}, in force at the question's instant, which the "
                "answer needs")
    return None


def registration_stream(question):
    """The question's assignment stream, `assignment-<business>-<CODE>`, or a ValueError
    naming the jurisdiction that is not one."""
    code = str(question.get("jurisdiction", "")).strip().upper()
    if len(code) != 2 or not code.isalpha():
        raise ValueError(f"question.jurisdiction {question.get('jurisdiction')!r} is not a jurisdiction")
    try:
        business = _id(question["business_id"])
    except (TypeError, ValueError):
        raise ValueError(f"question.business_id {question['business_id']!r} is not a UUID")
    return f"assignment-{business}-{code}"


def check_answer(document):
    """What does not hold of a proof's answer against its question and its streams, or None.
    The streams' chains and paths were checked before. A proof of no streams with the answer
    null holds here: the index's proof that the assignment stream is absent is check_log's."""
    question, streams = document["question"], document["streams"]
    try:
        registration = registration_stream(question)
    except ValueError as problem:
        return str(problem)
    if registration not in [s["stream"] for s in streams]:
        if streams:
            return (f"the proof does not prove stream {registration}, the assignments of business "
                    f"{_id(question['business_id'])} in {registration[-2:]}, which the question names")
        if document.get("answer") is not None:
            return (f"the proof carries no streams, so it can prove at most that {registration} "
                    f"does not exist (no registered agent), but its answer is "
                    f"{describe(document.get('answer'))}")
        return None
    for s in streams:
        if s["events"][0]["stream_version"] != 1:
            return (f"the proof of stream {s['stream']} starts at version "
                    f"{s['events'][0]['stream_version']}: an answer needs whole streams")
    events = []
    for s in streams:
        for event in s["events"]:
            decoded = envelope(bytes.fromhex(event["payload"]))
            if any(decoded[f] != event[f] for f in ("event_id", "stream", "stream_version",
                                                     "recorded_at_micros", "effective_at_micros")):
                return f"event {event['event_id']}: the payload disagrees with the event's fields"
            events.append(decoded)
    at, known_at = question["at_micros"], question["known_at_micros"]
    try:
        _, assignments = fold([e for e in events if e["stream"] == registration], known_at)
        failure = check_streams(registration, in_force(assignments, at), [s["stream"] for s in streams])
        if failure:
            return failure
        folded = registered_agent(*fold(events, known_at), at)
    except ValueError as problem:
        return str(problem)
    if folded != document.get("answer"):
        return (f"the proven events fold to another answer than the one given: they give "
                f"{describe(folded)}, the proof's answer is {describe(document.get('answer'))}")
    return None


def micros(text, flag):
    """The microseconds of an RFC 3339 instant given on the command line."""
    try:
        time = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{flag} {text!r}: not an RFC 3339 time such as 2026-03-01T00:00:00Z")
    if time.tzinfo is None:
        raise ValueError(f"{flag} {text!r}: name the offset (Z or +HH:MM)")
    return (time - EPOCH) // datetime.timedelta(microseconds=1)


def check_question(stated, question):
    """What differs between the question the auditor states ({"business", "jurisdiction",
    "at", "known-at"}, each optional) and the proof's, or None."""
    if not stated:
        return None
    if question is None:
        return ("the proof answers no question (it is an event's proof): drop --business, "
                "--jurisdiction, --at and --known-at, or ask for the answer's proof")
    proven = {
        "business": _id(question["business_id"]),
        "jurisdiction": question["jurisdiction"],
        "at": question["at_micros"],
        "known-at": question["known_at_micros"],
    }
    for field in ("business", "jurisdiction", "at", "known-at"):
        if field in stated and stated[field] != proven[field]:
            show = rfc3339 if field in ("at", "known-at") else str
            return (f"the proof answers another question: you asked {field} "
                    f"{show(stated[field])}, it answers {field} {show(proven[field])}")
    return None


def duration(text):
    """Seconds of `90s`, `5m`, `2h`, `1d`, or a number of seconds."""
    digits = len(text) - len(text.lstrip("0123456789"))
    number, unit = text[:digits], text[digits:]
    scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}.get(unit)
    if not number or scale is None or int(number) == 0:
        raise ValueError(f"--max-age {text!r}: expected a duration such as 90s, 5m or 1h, more than 0")
    return int(number) * scale


def check_age(newest, now, max_age):
    """What is wrong with the newest cosignature's time against --max-age, or None."""
    if newest is None:
        return ("--max-age needs a cosignature of the policy's witnesses, and none verified: "
                "pass --policy with the witnesses' keys")
    age = max(0, now - newest)
    if age > max_age:
        when = datetime.datetime.fromtimestamp(newest, datetime.timezone.utc).isoformat()
        return (f"the newest cosignature is of {when}, {age} s ago, older than --max-age "
                f"{max_age} s: ask the ledger for a fresh proof (or the witnesses are not cosigning)")
    return None
