"""Ed25519 signature checks (RFC 8032, section 6), RFC 9162 Merkle trees and the digest's
index of streams, with Python's standard library alone: the primitives of
tests/verify_digest.py (kept beside it), written from the RFCs and the documented byte
layouts, not from the Rust code."""

import base64
import hashlib

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


def consistency_holds(old, new, old_root, new_root, proof):
    """RFC 9162 section 2.1.4.2."""
    if old > new:
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0:
        return not proof
    if not proof:
        return False
    path = ([old_root] if old & (old - 1) == 0 else []) + list(proof)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


def inclusion_path(leaves, m):
    """RFC 9162 section 2.1.3.1, PATH(m, D[n]): for the self-test's proofs."""
    n = len(leaves)
    if n <= 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return inclusion_path(leaves[:k], m) + [tree_root(leaves[k:])]
    return inclusion_path(leaves[k:], m - k) + [tree_root(leaves[:k])]


# --- The digest's index of streams (issue 56, item 2) --------------------------------------
#
# Entry (one per stream), an RFC 9162 leaf: 4-byte length L of the stream name, the name
# (L bytes of UTF-8), 8-byte head version, 32-byte head event hash, 8-byte head event's log
# position, 32-byte positions chain (P_0 = 32 zero bytes, P_v = SHA-256(P_(v-1) || the
# 8-byte position of version v)). Entries sorted by name bytes; the root is RFC 9162's.
# Index leaf (a checkpoint's last log leaf, 80 bytes): 24-byte prefix, 8-byte digest seq
# (signed), 8-byte digest time in microseconds (signed), 8-byte number of entries, root.

INDEX_LEAF_PREFIX = b"ra-ledger index v1" + b"\x00" * 6
EMPTY_ROOT = hashlib.sha256(b"").digest()


def hash32(text, what):
    """The 32 bytes of a hex hash, or a ValueError naming `what`."""
    raw = bytes.fromhex(text)
    if len(raw) != 32:
        raise ValueError(f"{what} is {len(raw)} bytes, not 32")
    return raw


def entry_bytes(entry):
    """An index entry's bytes, from its JSON ({"stream", "version", "head_hash",
    "head_position", "positions"})."""
    name = entry["stream"].encode("utf-8")
    return (
        len(name).to_bytes(4, "big")
        + name
        + entry["version"].to_bytes(8, "big")
        + hash32(entry["head_hash"], f"the index entry of {entry['stream']}: head_hash")
        + entry["head_position"].to_bytes(8, "big")
        + hash32(entry["positions"], f"the index entry of {entry['stream']}: positions")
    )


def positions_chain(positions):
    """P_n over the log positions of versions 1 to n."""
    chain = bytes(32)
    for position in positions:
        chain = hashlib.sha256(chain + position.to_bytes(8, "big")).digest()
    return chain


def index_leaf(seq, time_micros, entries, root):
    """The 80 bytes of an index leaf."""
    return (INDEX_LEAF_PREFIX + seq.to_bytes(8, "big", signed=True)
            + time_micros.to_bytes(8, "big", signed=True) + entries.to_bytes(8, "big") + root)


def parse_index_leaf(data):
    """(seq, time_micros, entries, root) of an index leaf's bytes, or None when they are not
    one."""
    if len(data) != 80 or data[:24] != INDEX_LEAF_PREFIX:
        return None
    return (int.from_bytes(data[24:32], "big", signed=True),
            int.from_bytes(data[32:40], "big", signed=True),
            int.from_bytes(data[40:48], "big"), data[48:])


def _sorts(a, b):
    """Whether stream name a sorts strictly before b (by their UTF-8 bytes)."""
    return a.encode("utf-8") < b.encode("utf-8")


def _path_failure(at, size, root):
    """What is wrong with an index path ({"entry", "index", "path"}), or None."""
    leaf = leaf_hash(entry_bytes(at["entry"]))
    path = [hash32(h, "an index path's hash") for h in at["path"]]
    if isinstance(at["index"], int) and verify_inclusion(leaf, at["index"], size, path, root):
        return None
    return (f"the index path of stream {at['entry']['stream']} (entry {at['index']} of {size}) "
            f"does not lead to the index root {root.hex()}: the index does not hold that entry")


def _after_failure(after, index, name, size, root):
    """What is wrong with the entry just after an absent name, which must be at `index`."""
    failure = _path_failure(after, size, root)
    if failure:
        return failure
    if after["index"] != index:
        return f"the entry after is at {after['index']}, not at {index}: entries between them are not shown"
    if not _sorts(name, after["entry"]["stream"]):
        return f"the entry after, {after['entry']['stream']}, does not sort after it"
    return None


def index_proof_failure(proof, root):
    """What does not hold of an IndexProof ({"stream", "size", and "entry", or "before" and
    "after"}) against the index root of `proof["size"]` entries, or None: its entry's path,
    or the neighbours at consecutive indices that show the stream has none."""
    name, size = proof["stream"], proof["size"]
    if proof.get("entry") is not None:
        if proof["entry"]["entry"]["stream"] != name:
            return f"the index proof of stream {name} shows the entry of stream {proof['entry']['entry']['stream']}"
        return _path_failure(proof["entry"], size, root)
    before, after = proof.get("before"), proof.get("after")
    why = None
    if before is None and after is None:
        if size != 0:
            why = f"no neighbour of it among the index's {size} entries"
        elif root != EMPTY_ROOT:
            why = "an empty index has another root"
    elif before is None:
        why = _after_failure(after, 0, name, size, root)
    else:
        why = _path_failure(before, size, root)
        if why is None and not _sorts(before["entry"]["stream"], name):
            why = f"the entry before, {before['entry']['stream']}, does not sort before it"
        if why is None and after is not None:
            why = _after_failure(after, before["index"] + 1, name, size, root)
        if why is None and after is None and before["index"] + 1 != size:
            why = f"the entry before is {before['index']} of {size}, not the last, and no entry after is shown"
    return why and f"the index does not show that stream {name} is absent: {why}"


def index_self_test():
    """The index code against an index built here: presence, absence between two entries,
    before the first and after the last, an empty index; and forged neighbours that fail."""
    entries = [
        {"stream": name, "version": v, "head_hash": hashlib.sha256(name.encode()).hexdigest(),
         "head_position": 10 * v, "positions": positions_chain(range(v)).hex()}
        for v, name in enumerate(["alpha", "charlie", "echo"], 1)
    ]
    hashes = [leaf_hash(entry_bytes(e)) for e in entries]
    root = tree_root(hashes)

    def at(i):
        return {"entry": entries[i], "index": i,
                "path": [h.hex() for h in inclusion_path(hashes, i)]}

    def proof(name, **parts):
        return dict(parts, stream=name, size=len(entries))

    assert parse_index_leaf(index_leaf(-1, 5, 3, root)) == (-1, 5, 3, root), "index leaf"
    assert index_proof_failure(proof("charlie", entry=at(1)), root) is None, "presence"
    assert index_proof_failure(proof("bravo", before=at(0), after=at(1)), root) is None, "between"
    assert index_proof_failure(proof("aaa", after=at(0)), root) is None, "before the first"
    assert index_proof_failure(proof("zulu", before=at(2)), root) is None, "after the last"
    assert index_proof_failure({"stream": "x", "size": 0}, EMPTY_ROOT) is None, "empty"
    forged = [
        proof("delta", before=at(0), after=at(2)),   # not neighbours: charlie is between
        proof("charlie", before=at(0), after=at(2)),  # present, said absent
        proof("bravo", after=at(1)),                  # alpha before it is not shown
        proof("delta", before=at(1)),                 # not the last, nothing after
        proof("alpha", entry=at(1)),                  # another stream's entry
        proof("charlie", entry=dict(at(1), entry=dict(entries[1], version=1))),
        {"stream": "x", "size": 3},                   # no neighbours of 3 entries
    ]
    for i, bad in enumerate(forged):
        assert index_proof_failure(bad, root) is not None, f"forged index proof {i}"


def self_test():
    # RFC 8032, section 7.1, test 1 (empty message).
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert ed25519_verify(public, b"", signature), "RFC 8032 test 1"
    assert not ed25519_verify(public, b"x", signature), "RFC 8032 test 1, other message"
    index_self_test()
