#!/usr/bin/env python3
"""A second, independent implementation of RA Ledger's digest checks, written from the byte
layouts documented in ledger/src/digest/mod.rs alone, with Python's standard library only
(Ed25519 is RFC 8032's reference algorithm, section 6).

    verify_digest.py FILE.json... [--public-key PUBLIC.pem]

PUBLIC.pem is the ledger's public key (`GET /v1/digests/public-key`); without it the
document's own key is used, which proves only that the document is self-consistent.

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
checks the events and that the question's known_at is not after the digest's time (a digest
proves what was recorded by its time, nothing later); it does NOT check that the events fold
to the answer, and says so: run `ledger proof verify` for that.

Exits 0 when everything given holds; otherwise 1, naming per file the first thing that
does not. With several files, each verdict line starts with the file's name.
"""

import base64
import hashlib
import json
import sys
import uuid

# --- Ed25519 (RFC 8032, section 6) -----------------------------------------------------

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _add(a, b):
    x = (a[1] - a[0]) * (b[1] - b[0]) % P
    y = (a[1] + a[0]) * (b[1] + b[0]) % P
    c = 2 * a[3] * b[3] * D % P
    d = 2 * a[2] * b[2] % P
    e, f, g, h = y - x, d - c, d + c, y + x
    return (e * f, g * h, f * g, e * h)


def _mul(s, point):
    result = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            result = _add(result, point)
        point = _add(point, point)
        s >>= 1
    return result


def _equal(a, b):
    return (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0


def _recover_x(y, sign):
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P)
    if x2 % P == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


_GY = 4 * pow(5, P - 2, P) % P
_GX = _recover_x(_GY, 0)
G = (_GX, _GY, 1, _GX * _GY % P)


def _decompress(data):
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % P)


def ed25519_verify(public, message, signature):
    if len(public) != 32 or len(signature) != 64:
        return False
    a = _decompress(public)
    r = _decompress(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % L
    return _equal(_mul(s, G), _add(r, _mul(h, a)))


def public_key_from_pem(pem):
    """The 32 key bytes of an Ed25519 SubjectPublicKeyInfo PEM."""
    body = "".join(line for line in pem.strip().splitlines() if not line.startswith("-----"))
    der = base64.b64decode(body)
    prefix = bytes.fromhex("302a300506032b6570032100")  # SEQUENCE { id-Ed25519 }, BIT STRING
    if len(der) != 44 or not der.startswith(prefix):
        raise ValueError("not an Ed25519 public key")
    return der[12:]


# --- Merkle tree (RFC 9162, section 2.1) -------------------------------------------------


def leaf_bytes(stream, version, head_hash):
    name = stream.encode("utf-8")
    return len(name).to_bytes(4, "big") + name + version.to_bytes(8, "big") + head_hash


def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_root(leaves):
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return node_hash(tree_root(leaves[:k]), tree_root(leaves[k:]))


def verify_inclusion(leaf, index, size, path, root):
    if index >= size:
        return False
    fnode, snode, h = index, size - 1, leaf
    for sibling in path:
        if snode == 0:
            return False
        if fnode & 1 or fnode == snode:
            h = node_hash(sibling, h)
            if not fnode & 1:
                while not fnode & 1 and fnode != 0:
                    fnode >>= 1
                    snode >>= 1
        else:
            h = node_hash(h, sibling)
        fnode >>= 1
        snode >>= 1
    return snode == 0 and h == root


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
        if not document["streams"]:
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
    for inc in inclusions:
        leaf = leaf_hash(leaf_bytes(inc["stream"], inc["version"], bytes.fromhex(inc["hash"])))
        path = [bytes.fromhex(h) for h in inc["path"]]
        if not verify_inclusion(leaf, inc["index"], digest["stream_count"], path, root):
            yield f"the inclusion path of stream {inc['stream']} does not lead to the root"
            return


def self_test():
    # RFC 8032, section 7.1, test 1 (empty message).
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert ed25519_verify(public, b"", signature), "RFC 8032 test 1"
    assert not ed25519_verify(public, b"x", signature), "RFC 8032 test 1, other message"


def verify_file(path, public_pem):
    """One document's verdict: (True, what holds) or (False, the first failure)."""
    with open(path, encoding="utf-8") as file:
        document = json.load(file)
    for failure in check(document, public_pem):
        return False, f"FAIL: {failure}"
    checked = ["signature"] + [part for part in ("leaves", "streams", "inclusion") if part in document]
    if "question" in document:
        return True, (
            f"ok: {', '.join(checked)} hold, and known_at is not after the digest; "
            "the answer itself is NOT checked here: `ledger proof verify` folds the events to it"
        )
    return True, f"ok: {', '.join(checked)} hold"


def main(argv):
    args = argv[1:]
    public_pem = None
    if "--public-key" in args:
        at = args.index("--public-key")
        if at + 1 >= len(args):
            print(__doc__, file=sys.stderr)
            return 2
        with open(args[at + 1], encoding="ascii") as file:
            public_pem = file.read()
        args = args[:at] + args[at + 2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    self_test()
    failed = 0
    for path in args:
        ok, said = verify_file(path, public_pem)
        failed += not ok
        print(f"{path}: {said}" if len(args) > 1 else said)
    if public_pem is None:
        print("note: checked with the document's own public key; pass --public-key FILE "
              "with the key published by the ledger to prove more than consistency")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
