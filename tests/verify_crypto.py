"""Ed25519 signature checks (RFC 8032, section 6) and RFC 9162 Merkle trees, with Python's
standard library alone: the primitives of tests/verify_digest.py (kept beside it), written
from the RFCs, not from the Rust code."""

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


def self_test():
    # RFC 8032, section 7.1, test 1 (empty message).
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert ed25519_verify(public, b"", signature), "RFC 8032 test 1"
    assert not ed25519_verify(public, b"x", signature), "RFC 8032 test 1, other message"
