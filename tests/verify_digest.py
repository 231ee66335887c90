#!/usr/bin/env python3
"""A second, independent implementation of RA Ledger's digest checks, written from the byte
layouts documented in ledger/src/digest/mod.rs alone, with Python's standard library only
(Ed25519 is RFC 8032's reference algorithm, section 6).

    verify_digest.py FILE.json... [--public-key PUBLIC.pem] [--policy POLICY]
                     [--saved-checkpoint CHECKPOINT]... [--previous-key OLD.pem]...
                     [--max-age DURATION]
                     [--business ID] [--jurisdiction CODE] [--at TIME] [--known-at TIME]

PUBLIC.pem is the ledger's public key (`GET /v1/digests/public-key`); without it the
document's own key is used, which proves only that the document is self-consistent (and
--policy is refused: a quorum of witnesses over a key nobody vouched for proves nothing).
The answer half lives in verify_answer.py and the Ed25519 and Merkle primitives in
verify_crypto.py, beside this file: keep the three together.

FILE.json:
    {"public_key_pem": "-----BEGIN PUBLIC KEY-----...",
     "digest": {"format": "ra-ledger digest v2", "seq": int, "root": hex,
                "time_micros": int, "stream_count": int, "event_count": int,
                "previous": hex, "signature": hex},
               (a digest without "format", or with "ra-ledger digest v1", is of version 1,
                whose signature does not cover "seq")
     "leaves": [{"stream": str, "version": int, "hash": hex}, ...],       (optional)
     "inclusion": {"stream": str, "version": int, "hash": hex,
                   "index": int, "path": [hex, ...]}}                     (optional)

or a proof (`GET /v1/events/{id}/proof`, `ledger proof`, `registered-agent?...&proof=true`):
"streams" (per stream: "stream", "events" up to the head a digest sealed with every field
their hashes cover, "index" and "path" of the head's leaf), "digest", "public_key_pem",
and "event_id" for an event's proof. For a proven audit answer ("question", "answer"), this
checks the events, that the question's known_at is not after the digest's time (a digest
proves what was recorded by its time, nothing later), that the streams are exactly the
question's assignment stream and the in-force assignment's contact stream (or none at all,
when the business has no assignment stream there: the answer is then null, and the log's
index must prove that stream absent, so such a proof without a log fails), and that the
events fold to the answer (verify_answer.py). --business, --jurisdiction, --at and
--known-at state the question you asked: a proof of another is refused, naming the part.

A proof may carry "log" (issue 47): "checkpoint", a C2SP signed note (origin, size, base64
root) signed by the digest key under the name of its origin (signed-note key id: the first 4
bytes of SHA-256(origin || "\\n" || 0x01 || key)), with witnesses' cosignature/v1 lines;
"heads", per stream the index and path of its head event's leaf SHA-256(0x00 || event hash)
in that checkpoint's RFC 6962 tree, and "positions", the log position of each event of the
stream the proof carries, in order (the last is the head's index); "consistency", RFC 6962
consistency proofs from earlier sizes ({"old_size", "proof"}), each with "index_leaf" and
"index_path" when 0 < old_size < size: the log's leaf at old_size - 1 and its path in the
checkpoint's tree; and "index" (issue 56, item 2), the index of streams the checkpoint ends
with: {"leaf": hex, "path": [hex], "streams": [IndexProof]}.

    The index: one entry per stream, sorted by the name's UTF-8 bytes, its root RFC 9162's
    over their leaf hashes SHA-256(0x00 || entry). Entry (big-endian): 4-byte length L of
    the name, the name (L bytes), 8-byte head version, 32-byte head event hash, 8-byte head
    event's log position, 32-byte positions chain (P_0 = 32 zero bytes, P_v =
    SHA-256(P_(v-1) || 8-byte position of version v)); in JSON {"stream", "version",
    "head_hash", "head_position", "positions"}. The index leaf, the log's leaf at size - 1
    (80 bytes): "ra-ledger index v1" and six zero bytes, the digest's seq (8, signed), its
    time_micros (8, signed), the number of entries (8), the index root (32).
    IndexProof: {"stream", "size" (the number of entries), "entry": {"entry", "index",
    "path"}} for a stream the index holds; without "entry", its absence: "before" and/or
    "after", the neighbouring entries with their paths at consecutive indices ("before"
    alone when it is the last, "after" alone at index 0, neither when the index is empty).

This checks the log's signature; that log.index's leaf is an index leaf, the checkpoint's
last leaf, of the digest's time, seq (a v2 digest's) and stream count; that each head is in
the log; that every IndexProof is of the index's size and holds against its root; that the
index holds each proven stream's head (version, hash, log position), so a proof of an older
head fails; that the positions are one per event carried, increasing, the last the head's,
and chain to the index's when the stream is carried from version 1; and, for a "no RA"
answer that carries no streams, that the index proves the question's assignment stream
absent. With --policy (C2SP tlog-policy: witness, group and quorum lines), that verified
cosignatures meet the quorum, counting each key once (a policy that names one key twice, or
a group whose members share a witness, is refused), and that its `log` line, if any, is the
--public-key's and the checkpoint's origin; with --saved-checkpoint (checkpoints you kept),
that the proof's log extends each one, that it ends with an index leaf (log.index.leaf, or
the consistency entry's index_leaf on its path at old_size - 1), and that every carried
event at a log position at or after its size is recorded after that index leaf's digest
time (else it was backdated); a saved checkpoint may be signed by a --previous-key (a digest
key the ledger used before a rotation, as its operator announced it); with --max-age (90s, 15m, 2h, 1d; needs --policy), that the
newest verified cosignature is not older than that. A proof whose log has no index (sealed
before the index) fails: ask for a new proof.

The saved answer of `registered-agent?...&proof=true` (the answer's fields and the proof
under "proof") is read as it is: its fields must equal the proof's "answer".

Exits 0 when everything given holds; otherwise 1, naming per file the first thing that
does not. With several files, each verdict line starts with the file's name.
"""

import base64
import hashlib
import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verify_answer  # noqa: E402  (beside this file)
from verify_crypto import (  # noqa: E402  (beside this file)
    consistency_holds, ed25519_verify, hash32, index_proof_failure, leaf_bytes, leaf_hash,
    node_hash, parse_index_leaf, positions_chain, public_key_from_pem, self_test, tree_root,
    verify_inclusion,
)

# --- The digest --------------------------------------------------------------------------

# Version 2 signs the digest's number; version 1 (digests sealed before) does not. A
# document without a format is read as version 1.
FORMAT_V2, FORMAT_V1 = "ra-ledger digest v2", "ra-ledger digest v1"
PREFIXES = {
    FORMAT_V2: FORMAT_V2.encode("ascii") + b"\x00" * 5,
    FORMAT_V1: FORMAT_V1.encode("ascii") + b"\x00" * 5,
}


def signed_message(digest):
    """The message the digest's signature is of, or a ValueError naming what is wrong."""
    form = digest.get("format", FORMAT_V1)
    if form not in PREFIXES:
        raise ValueError(f"digest.format {form!r} is not {FORMAT_V2!r} nor {FORMAT_V1!r}")
    number = b""
    if form == FORMAT_V2:
        if not isinstance(digest.get("seq"), int):
            raise ValueError(f"digest.seq is missing: an {FORMAT_V2} digest signs its number")
        number = digest["seq"].to_bytes(8, "big", signed=True)
    return (
        PREFIXES[form]
        + number
        + bytes.fromhex(digest["root"])
        + digest["time_micros"].to_bytes(8, "big", signed=True)
        + digest["stream_count"].to_bytes(8, "big")
        + digest["event_count"].to_bytes(8, "big")
        + bytes.fromhex(digest["previous"])
    )


def event_hash(previous, event):
    """The event's hash (ledger/src/store.rs `event_hash`): SHA-256 over length-prefixed
    parts (8-byte big-endian lengths)."""
    h = hashlib.sha256()

    def part(data):
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)

    part(b"ra-ledger/event/v1")
    part(previous or b"")
    part(uuid.UUID(event["event_id"]).bytes)
    part(event["stream"].encode("utf-8"))
    part(event["stream_version"].to_bytes(8, "big", signed=True))
    part(event["event_type"].encode("utf-8"))
    part(event["schema_version"].to_bytes(4, "big", signed=True))
    part(bytes.fromhex(event["payload"]))
    part(event["recorded_at_micros"].to_bytes(8, "big", signed=True))
    part(event["effective_at_micros"].to_bytes(8, "big", signed=True))
    part(event["actor"].encode("utf-8"))
    part(uuid.UUID(event["correlation_id"]).bytes)
    part(uuid.UUID(event["causation_id"]).bytes if event["causation_id"] else b"")
    return h.digest()


def check_stream(entry):
    """Yields what does not hold in one proven stream's chain of events; returns its head's
    leaf (stream, version, hash) when it holds."""
    stream, events = entry["stream"], entry["events"]
    if not events:
        yield f"the proof of stream {stream} has no events"
        return
    previous = None
    for i, event in enumerate(events):
        prev_hash = bytes.fromhex(event["prev_hash"]) if event["prev_hash"] else None
        if event["stream"] != stream:
            yield f"event {event['event_id']} is of stream {event['stream']}, not {stream}"
            return
        if i > 0:
            if event["stream_version"] != events[i - 1]["stream_version"] + 1:
                yield f"event {event['event_id']} does not follow version {events[i - 1]['stream_version']} of {stream}"
                return
            if prev_hash != previous:
                yield f"event {event['event_id']} does not chain to the event before it"
                return
        elif event["stream_version"] == 1 and prev_hash is not None:
            yield f"event {event['event_id']} is version 1 of {stream} but chains to an earlier one"
            return
        computed = event_hash(prev_hash, event)
        if computed != bytes.fromhex(event["hash"]):
            yield f"event {event['event_id']} (version {event['stream_version']}) does not hash to its recorded hash"
            return
        previous = computed


def no_streams_without_log(question):
    """The failure of an answer's proof that carries no streams and no log to prove why."""
    registration = verify_answer.registration_stream(question)
    return (f"the proof carries no streams and no transparency log: \"no RA\" without stream "
            f"{registration} needs the index's proof that the stream is absent, which only a "
            "proof with a log carries: ask for a new proof")


def check(document, public_pem=None):
    """Yields what does not hold, in order. `public_pem` is the key to trust; without it,
    the document's own key is used, which proves only that the document is consistent."""
    digest = document["digest"]
    public = public_key_from_pem(public_pem or document["public_key_pem"])
    try:
        message = signed_message(digest)
    except ValueError as problem:
        yield str(problem)
        return
    if not ed25519_verify(public, message, bytes.fromhex(digest["signature"])):
        yield "the digest's signature does not verify with the public key"
        return
    question = document.get("question")
    if question is not None:
        known_at = question.get("known_at_micros")
        if not isinstance(known_at, int):
            yield "question.known_at_micros is missing"
            return
        if known_at > digest["time_micros"]:
            yield (
                f"the answer is not proven for known_at {question.get('known_at', known_at)}: "
                f"the digest is of {digest['time_micros']} microseconds, and proves what was "
                "recorded by then, not that nothing else was recorded by known_at"
            )
            return
    root = bytes.fromhex(digest["root"])
    if "leaves" in document:
        leaves = sorted(document["leaves"], key=lambda leaf: leaf["stream"].encode("utf-8"))
        hashes = [
            leaf_hash(leaf_bytes(l["stream"], l["version"], bytes.fromhex(l["hash"])))
            for l in leaves
        ]
        if len(leaves) != digest["stream_count"]:
            yield f"{len(leaves)} leaves, the digest says {digest['stream_count']} streams"
        elif sum(l["version"] for l in leaves) != digest["event_count"]:
            yield "the leaves' versions do not add up to the digest's event count"
        elif tree_root(hashes) != root:
            yield "the leaves do not reproduce the digest's root"
    inclusions = [document["inclusion"]] if "inclusion" in document else []
    if "streams" in document:
        if not document["streams"] and question is None:
            yield "the proof has no streams"
            return
        for entry in document["streams"]:
            failures = list(check_stream(entry))
            if failures:
                yield failures[0]
                return
            head = entry["events"][-1]
            inclusions.append(
                dict(entry, version=head["stream_version"], hash=head["hash"])
            )
        if "event_id" in document and document["streams"][0]["events"][0]["event_id"] != document["event_id"]:
            yield "the proof's first event is not the event it proves"
            return
        if question is not None:
            try:
                failure = verify_answer.check_answer(document)
            except (KeyError, TypeError, ValueError) as problem:
                failure = f"the question or an event does not read: {problem!r}"
            if failure:
                yield failure
                return
        if not document["streams"] and "log" not in document:
            yield no_streams_without_log(question)
            return
    for inc in inclusions:
        leaf = leaf_hash(leaf_bytes(inc["stream"], inc["version"], bytes.fromhex(inc["hash"])))
        path = [bytes.fromhex(h) for h in inc["path"]]
        if not verify_inclusion(leaf, inc["index"], digest["stream_count"], path, root):
            yield f"the inclusion path of stream {inc['stream']} does not lead to the root"
            return


# --- The transparency log (C2SP signed-note, tlog-checkpoint, tlog-cosignature) -------------


def key_id(name, algorithm, public):
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([algorithm]) + public).digest()[:4]


def parse_note(text):
    """(body, [(name, key id, signature bytes)]) of a signed note, or a ValueError."""
    at = text.rfind("\n\n")
    if at < 0 or not text.endswith("\n"):
        raise ValueError("not a signed note")
    body, lines = text[: at + 1], text[at + 2 :].splitlines()
    signatures = []
    for line in lines:
        if not line.startswith("\u2014 "):
            raise ValueError(f"not a signature line: {line!r}")
        name, _, encoded = line[2:].partition(" ")
        raw = base64.b64decode(encoded, validate=True)
        signatures.append((name, raw[:4], raw[4:]))
    return body, signatures


def parse_checkpoint(body):
    lines = body.split("\n")
    if len(lines) < 4 or not lines[1].isdigit() or str(int(lines[1])) != lines[1]:
        raise ValueError("not a checkpoint")
    root = base64.b64decode(lines[2], validate=True)
    if len(root) != 32:
        raise ValueError("the checkpoint's root is not 32 bytes")
    return lines[0], int(lines[1]), root


def read_checkpoint(text, public, what):
    """(origin, size, root, note) of a checkpoint signed by the log (the digest key)."""
    body, signatures = parse_note(text)
    origin, size, root = parse_checkpoint(body)
    want = key_id(origin, 1, public)
    for name, kid, signature in signatures:
        if name == origin and kid == want and ed25519_verify(public, body.encode("utf-8"), signature):
            return origin, size, root, (body, signatures)
    raise ValueError(f"{what}: no valid signature by the log {origin}")


def vkey(text):
    """(name, algorithm, public key) of a signed-note verifier key."""
    name, kid, encoded = text.split("+", 2)
    raw = base64.b64decode(encoded, validate=True)
    if len(raw) != 33 or key_id(name, raw[0], raw[1:]).hex() != kid:
        raise ValueError(f"not a verifier key: {text!r}")
    return name, raw[0], raw[1:]


def parse_policy(text):
    """{"witnesses": {policy name: (key name, public)}, "groups": {...}, "quorum": name}."""
    witnesses, groups, quorum, log = {}, {}, [], None
    under = {}  # name: the witnesses under it
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#")[0].split()
        if not words:
            continue
        if words[0] == "log" and len(words) in (2, 3):
            name, algorithm, public = vkey(words[1])
            if algorithm != 1:
                raise ValueError(f"policy line {number}: the log's key is not an Ed25519 key")
            log = (name, public)
        elif words[0] == "witness" and len(words) in (3, 4):
            name, algorithm, public = vkey(words[2])
            if algorithm != 4:
                raise ValueError(f"policy line {number}: not a cosignature key")
            for other, (_, key) in witnesses.items():
                if key == public:
                    raise ValueError(
                        f"policy line {number}: witness {words[1]} has the key of witness "
                        f"{other}: a quorum counts keys, so give each key one witness line")
            witnesses[words[1]] = (name, public)
            under[words[1]] = {words[1]}
        elif words[0] == "group" and len(words) >= 4:
            members = words[3:]
            seen = set()
            for member in members:
                if member not in under:
                    raise ValueError(f"policy line {number}: group {words[1]}: {member!r} is not defined above")
                for witness in sorted(under[member]):
                    if witness in seen:
                        raise ValueError(
                            f"policy line {number}: group {words[1]}: witness {witness} is under "
                            "two of its members, and would count twice toward its threshold; "
                            "list each witness once")
                    seen.add(witness)
            k = {"all": len(members), "any": 1}.get(words[2]) or int(words[2])
            groups[words[1]] = (k, members)
            under[words[1]] = seen
        elif words[0] == "quorum" and len(words) == 2:
            quorum.append(words[1])
        else:
            raise ValueError(f"policy line {number}: not a policy line: {raw!r}")
    if len(quorum) != 1:
        raise ValueError("a policy has exactly one quorum line")
    return {"witnesses": witnesses, "groups": groups, "quorum": quorum[0], "log": log}


def cosigned_by(note, name, public):
    """The time (Unix seconds) of the witness's verified cosignature, or None."""
    body, signatures = note
    want = key_id(name, 4, public)
    for signer, kid, raw in signatures:
        if signer == name and kid == want and len(raw) == 72:
            when = int.from_bytes(raw[:8], "big")
            message = f"cosignature/v1\ntime {when}\n".encode("ascii") + body.encode("utf-8")
            if ed25519_verify(public, message, raw[8:]):
                return when
    return None


def pinned_log_key(policy, public, origin):
    """What is wrong with the policy's log key against --public-key and the origin, or None."""
    if policy is None or policy["log"] is None:
        return None
    name, key = policy["log"]
    if key != public:
        return (f"the policy's log key {name}+{key_id(name, 1, key).hex()}+... is not "
                "--public-key's: one of them is not the ledger's; get both again from their owners")
    if name != origin:
        return f"the checkpoint is of log {origin!r}, the policy's log key is of {name!r}"
    return None


def quorum_holds(policy, member, cosigned):
    if member == "none":
        return True
    if member in policy["witnesses"]:
        return member in cosigned
    k, members = policy["groups"][member]
    return sum(quorum_holds(policy, m, cosigned) for m in members) >= k


# --- The index of streams each checkpoint ends with (issue 56, item 2) -----------------------

READ_ERRORS = (KeyError, TypeError, ValueError, OverflowError, AttributeError)
NOT_THIS_DIGESTS = "the checkpoint does not end with this digest's index"


def unread(what, call, *args):
    """call(*args): what does not hold, or None; or, when the part does not read, that."""
    try:
        return call(*args)
    except READ_ERRORS as problem:
        return f"{what} does not read: {problem!r}"


def hex_hashes(texts, what):
    return [hash32(h, what) for h in texts]


def index_leaf_failure(log, digest, size, root):
    """What does not hold of log.index's leaf, or None: an index leaf, the last leaf of the
    checkpoint, of the digest's time, number (a v2 digest's) and number of streams."""
    index = log.get("index")
    if index is None:
        return ("the proof carries no index of its checkpoint (sealed before the index): "
                "ask for a new proof")
    raw = bytes.fromhex(index["leaf"])
    leaf = parse_index_leaf(raw)
    if leaf is None:
        return (f"log.index.leaf is not an index leaf: {len(raw)} bytes, an index leaf is 80 "
                "starting with \"ra-ledger index v1\"")
    path = hex_hashes(index["path"], "a hash of log.index.path")
    if size == 0 or not verify_inclusion(leaf_hash(raw), size - 1, size, path, root):
        return (f"the index leaf is not the last leaf of the checkpoint (position {size - 1} of "
                f"its {size}): the checkpoint the witnesses cosigned does not end with this index")
    seq, when, entries, _ = leaf
    if when != digest["time_micros"]:
        return (f"the index leaf is of time {when} microseconds, the digest of "
                f"{digest['time_micros']}: {NOT_THIS_DIGESTS}")
    if digest.get("format", FORMAT_V1) == FORMAT_V2 and seq != digest["seq"]:
        return f"the index leaf is of digest {seq}, the digest is number {digest['seq']}: {NOT_THIS_DIGESTS}"
    if entries != digest["stream_count"]:
        return (f"the index leaf counts {entries} streams, the digest {digest['stream_count']}: "
                f"{NOT_THIS_DIGESTS}")
    return None


def index_proofs(index, entries, index_root):
    """({stream: IndexProof}, None) when each IndexProof in log.index.streams is of the
    index's size and holds against its root; else (None, what does not hold)."""
    proven = {}
    for proof in index["streams"]:
        name = proof["stream"]
        if name in proven:
            return None, f"log.index.streams proves stream {name} twice"
        if proof["size"] != entries:
            return None, (f"the index proof of stream {name} is of an index of {proof['size']} "
                          f"entries, the index leaf counts {entries}")
        failure = index_proof_failure(proof, index_root)
        if failure:
            return None, failure
        proven[name] = proof
    return proven, None


def positions_failure(name, events, head, held, size):
    """What does not hold of log.heads' positions of one stream's carried events, or None:
    one per event, increasing, in the checkpoint, the last the head's; and, when the stream
    is carried from version 1, chaining to the positions the index holds."""
    positions = head.get("positions")
    if not isinstance(positions, list) or len(positions) != len(events):
        return (f"log.heads of stream {name} does not give the log position of each of its "
                f"{len(events)} events carried: ask for a new proof")
    for i, position in enumerate(positions):
        if type(position) is not int or not 0 <= position < size:
            return f"log.heads of stream {name}: position {position!r} is not one of the checkpoint's {size} leaves"
        if i and position <= positions[i - 1]:
            return (f"log.heads of stream {name}: version {events[i]['stream_version']} at log "
                    f"position {position}, not after version {events[i - 1]['stream_version']}'s "
                    f"{positions[i - 1]}")
    if positions[-1] != head["index"]:
        return f"log.heads of stream {name}: the last position {positions[-1]} is not the head's index {head['index']}"
    if events[0]["stream_version"] == 1 and positions_chain(positions) != hash32(
            held["positions"], f"the index entry of {name}: positions"):
        return (f"the log positions log.heads gives stream {name}'s events do not chain to the "
                "positions the index holds: the proof places them elsewhere than the log does")
    return None


def head_failure(entry, head, proof, size):
    """What does not hold of one proven stream against the index, or None: the index holds
    its head (version, hash, log position), and log.heads' positions of its events hold."""
    name, events = entry["stream"], entry["events"]
    last = events[-1]
    if proof is None or proof.get("entry") is None:
        return (f"the proof carries no index entry of stream {name}: nothing the witnesses "
                "cosigned shows that its head is the stream's newest")
    held = proof["entry"]["entry"]
    if held["version"] != last["stream_version"]:
        return (f"the index holds stream {name} at version {held['version']}, the proof's head is "
                f"version {last['stream_version']}: the proof is not of the stream's newest head")
    if hash32(held["head_hash"], f"the index entry of {name}: head_hash") != bytes.fromhex(last["hash"]):
        return (f"the index holds stream {name} at version {held['version']} with head hash "
                f"{held['head_hash']}, the proof's head is {last['hash']}: the proof is not of "
                "the head the index holds")
    if held["head_position"] != head["index"]:
        return (f"the index holds stream {name}'s head at log position {held['head_position']}, "
                f"the proof's head is at {head['index']}: the proof is not of the head the index holds")
    return positions_failure(name, events, head, held, size)


def absence_failure(document, proven):
    """For an answer whose assignment stream the proof does not carry: what does not hold of
    the index's proof that the stream is absent, or None."""
    question = document.get("question")
    if question is None:
        return None
    registration = verify_answer.registration_stream(question)
    if registration in [s["stream"] for s in document["streams"]]:
        return None
    proof = proven.get(registration)
    if proof is None:
        return (f"the proof does not carry stream {registration}, and its index does not prove it "
                "absent: \"no RA\" needs the stream's events or the index's proof that it has none")
    if proof.get("entry") is not None:
        return (f"the index holds stream {registration} at version "
                f"{proof['entry']['entry']['version']}, which the proof does not carry: its "
                "\"no RA\" is not proven")
    if document.get("answer") is not None:
        return f"the index proves stream {registration} absent, and the answer is not \"no RA\""
    return None


def index_failure(document, log, size):
    """What does not hold of log.index's proofs and log.heads against the index, or None."""
    index = log["index"]
    _, _, entries, index_root = parse_index_leaf(bytes.fromhex(index["leaf"]))
    proven, failure = index_proofs(index, entries, index_root)
    if failure:
        return failure
    for entry, head in zip(document["streams"], log["heads"]):
        failure = head_failure(entry, head, proven.get(entry["stream"]), size)
        if failure:
            return failure
    return absence_failure(document, proven)


def saved_time_failure(log, old_size, size, root):
    """(the time of the index leaf your saved checkpoint ends with, None), or (None, what does
    not hold): log.index.leaf when it is of the proof's size, else log.consistency's
    index_leaf for old_size, on its path at old_size - 1 in the proof's tree."""
    lead = f"your saved checkpoint of size {old_size} does not end with an index leaf"
    if old_size == size:
        raw = bytes.fromhex(log["index"]["leaf"])
    else:
        shown = next((c for c in log["consistency"] if c["old_size"] == old_size), {})
        if shown.get("index_leaf") is None:
            return None, (f"{lead}, as far as the proof shows: log.consistency carries no "
                          f"index_leaf for old_size {old_size}: ask for a new proof")
        raw = bytes.fromhex(shown["index_leaf"])
        path = hex_hashes(shown.get("index_path") or [], "a hash of an index_path")
        if not verify_inclusion(leaf_hash(raw), old_size - 1, size, path, root):
            return None, (f"{lead}: the index_leaf the proof shows is not the log's leaf at "
                          f"position {old_size - 1}")
    leaf = parse_index_leaf(raw)
    if leaf is None:
        return None, (f"{lead}: the log's leaf at position {old_size - 1} is not one, so no "
                      "digest sealed the log at that size")
    return leaf[1], None


def backdating_failure(document, log, old_size, size, root):
    """What does not hold of the events carried against a saved checkpoint of old_size, or
    None: each event after it in the log is recorded after its digest's time."""
    if old_size == 0:
        return None
    before, failure = saved_time_failure(log, old_size, size, root)
    if failure:
        return failure
    rfc3339 = verify_answer.rfc3339
    for entry, head in zip(document["streams"], log["heads"]):
        for event, position in zip(entry["events"], head["positions"]):
            if position >= old_size and event["recorded_at_micros"] <= before:
                return (f"event {event['event_id']} is recorded at "
                        f"{rfc3339(event['recorded_at_micros'])} (not after your saved "
                        f"checkpoint's digest time {rfc3339(before)}) but sits at log position "
                        f"{position}, after that checkpoint's size {old_size}: it was BACKDATED")
    return None


def check_log(document, public, policy, saved, max_age=None, previous=()):
    """Yields what does not hold in the proof's transparency-log part. A saved checkpoint may
    be signed by one of the `previous` keys (the ledger's before a rotation)."""
    log = document.get("log")
    if log is None:
        if policy is not None or saved:
            yield "the proof has no transparency log part (its digest sealed no checkpoint)"
        return
    try:
        origin, size, root, note = read_checkpoint(log["checkpoint"], public, "log.checkpoint")
    except ValueError as problem:
        yield str(problem)
        return
    failure = pinned_log_key(policy, public, origin)
    if failure:
        yield failure
        return
    failure = unread("log.index", index_leaf_failure, log, document["digest"], size, root)
    if failure:
        yield failure
        return
    if policy is not None:
        times = {w: cosigned_by(note, name, key) for w, (name, key) in policy["witnesses"].items()}
        cosigned = {w for w, when in times.items() if when is not None}
        if not quorum_holds(policy, policy["quorum"], cosigned):
            yield f"the checkpoint is cosigned by [{', '.join(sorted(cosigned))}], short of the policy's quorum {policy['quorum']}"
            return
        if max_age is not None:
            failure = verify_answer.check_age(
                max((times[w] for w in cosigned), default=None), int(time.time()), max_age)
            if failure:
                yield failure
                return
    if len(log["heads"]) != len(document["streams"]):
        yield "log.heads: not one per stream"
        return
    for entry, head in zip(document["streams"], log["heads"]):
        leaf = leaf_hash(bytes.fromhex(entry["events"][-1]["hash"]))
        path = [bytes.fromhex(h) for h in head["path"]]
        if not verify_inclusion(leaf, head["index"], size, path, root):
            yield f"the head of stream {entry['stream']} is not in the log at index {head['index']}"
            return
    failure = unread("log.index or log.heads", index_failure, document, log, size)
    if failure:
        yield failure
        return
    proofs = {c["old_size"]: [bytes.fromhex(h) for h in c["proof"]] for c in log["consistency"]}
    for i, text in enumerate(saved, 1):
        try:
            old_origin, old_size, old_root, _ = read_saved(text, public, previous, i)
        except ValueError as problem:
            yield str(problem)
            return
        if old_origin != origin:
            yield f"saved checkpoint {i}: of log {old_origin!r}, not {origin!r}"
            return
        if old_size > size:
            yield f"your saved checkpoint (size {old_size}) is newer than the proof's (size {size}): ask for a newer proof"
            return
        hashes = [] if old_size in (0, size) else proofs.get(old_size)
        if hashes is None:
            yield f"the proof carries no consistency proof from your saved checkpoint's size {old_size}: ask again with consistent_with={old_size}"
            return
        if not consistency_holds(old_size, size, old_root, root, hashes):
            yield (
                f"NOT CONSISTENT with your saved checkpoint of size {old_size} "
                f"(root {base64.b64encode(old_root).decode()}): the log's history as of your "
                "checkpoint was rewritten, or you were shown a split view"
            )
            return
        failure = unread("log.consistency", backdating_failure, document, log, old_size, size, root)
        if failure:
            yield failure
            return


def read_saved(text, public, previous, i):
    """A saved checkpoint signed by the log's key or one it had before a rotation; refused,
    it is the current key's refusal that is said."""
    try:
        return read_checkpoint(text, public, f"saved checkpoint {i}")
    except ValueError as problem:
        for key in previous:
            try:
                return read_checkpoint(text, key, f"saved checkpoint {i}")
            except ValueError:
                pass
        raise problem


def unwrap(document):
    """A saved `registered-agent?...&proof=true` answer: its proof, once the fields beside it
    are found to be the proof's answer."""
    if "proof" in document and "digest" not in document:
        outer = {k: v for k, v in document.items() if k != "proof"} or None  # none: "no RA"
        if document["proof"].get("answer") != outer:
            raise ValueError("the answer's fields beside `proof` are not the proof's `answer`")
        return document["proof"]
    return document


def verify_file(path, public_pem, policy=None, saved=(), max_age=None, stated=None, previous=()):
    """One document's verdict: (True, what holds) or (False, the first failure)."""
    with open(path, encoding="utf-8") as file:
        document = json.load(file)
    try:
        document = unwrap(document)
    except ValueError as problem:
        return False, f"FAIL: {problem}"
    failure = verify_answer.check_question(stated, document.get("question"))
    if failure:
        return False, f"FAIL: {failure}"
    for failure in check(document, public_pem):
        return False, f"FAIL: {failure}"
    public = public_key_from_pem(public_pem or document["public_key_pem"])
    for failure in check_log(document, public, policy, list(saved), max_age, previous):
        return False, f"FAIL: {failure}"
    checked = ["signature"] + [part for part in ("leaves", "streams", "inclusion", "log") if part in document]
    if "log" in document:
        checked.append("the index")
    if policy is not None:
        checked.append("the witnesses' quorum")
    if saved:
        checked.append(f"consistency with {len(saved)} saved checkpoints")
        checked.append("no backdating past them")
    if max_age is not None:
        checked.append("the newest cosignature's age")
    if "question" in document:
        return True, (
            f"ok: {', '.join(checked)} hold, known_at is not after the digest, and the proven "
            f"events fold to the answer: {verify_answer.describe(document.get('answer'))}"
            + ("" if document["streams"] else
               f" (the index proves stream {verify_answer.registration_stream(document['question'])} absent)")
            + ("" if stated else " (the question was not stated: it is the proof's own)")
        )
    return True, f"ok: {', '.join(checked)} hold"


FLAGS = ("--public-key", "--policy", "--max-age", "--business", "--jurisdiction", "--at",
         "--known-at")


REPEATED = ("--saved-checkpoint", "--previous-key")


def parse_args(args):
    """(files, {flag: value}, {repeated flag: [values]}), or a ValueError naming the flag."""
    files, values, repeated = [], {}, {flag: [] for flag in REPEATED}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in FLAGS or arg in REPEATED:
            if i + 1 >= len(args):
                raise ValueError(f"{arg} needs a value")
            if arg in REPEATED:
                repeated[arg].append(args[i + 1])
            else:
                values[arg] = args[i + 1]
            i += 2
        elif arg.startswith("--"):
            raise ValueError(f"{arg}: not a flag of this verifier")
        else:
            files.append(arg)
            i += 1
    return files, values, repeated


def read_options(values):
    """The options from the flags' values; a ValueError names what does not read."""
    def text(path, encoding="utf-8"):
        with open(path, encoding=encoding) as file:
            return file.read()
    public_pem = text(values["--public-key"], "ascii") if "--public-key" in values else None
    policy = parse_policy(text(values["--policy"])) if "--policy" in values else None
    if policy is not None and public_pem is None:
        raise ValueError("--policy needs --public-key: without it the document's own key would be "
                         "trusted, and anyone can sign a document and a checkpoint with a key of their own")
    max_age = verify_answer.duration(values["--max-age"]) if "--max-age" in values else None
    if max_age is not None and policy is None:
        raise ValueError("--max-age needs --policy: the age is the newest cosignature's, verified "
                         "with the witnesses' keys")
    stated = {}
    if "--business" in values:
        stated["business"] = str(uuid.UUID(values["--business"]))
    if "--jurisdiction" in values:
        stated["jurisdiction"] = values["--jurisdiction"].strip().upper()
    for flag in ("--at", "--known-at"):
        if flag in values:
            stated[flag[2:]] = verify_answer.micros(values[flag], flag)
    return public_pem, policy, max_age, stated


def main(argv):
    args = argv[1:]
    if "--help" in args or "-h" in args:
        print(__doc__)
        return 0
    try:
        paths, values, repeated = parse_args(args)
        public_pem, policy, max_age, stated = read_options(values)
        saved = []
        for path in repeated["--saved-checkpoint"]:
            with open(path, encoding="utf-8") as file:
                saved.append(file.read())
        previous = []
        for path in repeated["--previous-key"]:
            with open(path, encoding="ascii") as file:
                previous.append(public_key_from_pem(file.read()))
    except (OSError, ValueError) as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    self_test()
    failed = 0
    for path in paths:
        ok, said = verify_file(path, public_pem, policy, saved, max_age, stated, previous)
        failed += not ok
        print(f"{path}: {said}" if len(paths) > 1 else said)
    if public_pem is None:
        print("note: checked with the document's own public key; pass --public-key FILE "
              "with the key published by the ledger to prove more than consistency")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
