"""Signed entries (spec 1.1, section 13.1, DF-SEC-140 to DF-SEC-146; OPTIONAL): Ed25519 signatures of
an entry by its origin, over a byte string that binds the entry to its origin, incarnation, seq,
manifest fingerprint, value encoding, indices and values; public keys pinned per node id.

The signed message (DF-SEC-141), all integers little-endian::

    b"DeltaFabric/v1 entry signature\\x00"   31 bytes, domain separation
    fingerprint                             32 bytes (the packet's, equal to the receiver's)
    origin, incarnation, seq                u64 each
    encoding                                u8 (the packet's ValueEncoding)
    n                                       u32, the number of indices
    indices                                 n x u32
    values                                  n x 4 bytes (F32) or n x 2 bytes (F16, BF16), as on the wire

``hops`` is not signed: relays change it (DF-SEC-144 says why that is harmless).

The keys file (DF-SEC-145) is JSON: ``{"version": 1, "keys": {"<node id, 16 hex digits>": "<public key,
64 hex digits>", ...}}``; a node's secret key is its 32-byte Ed25519 seed (RFC 8032), 64 hex digits.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from delta_fabric.encodings import ValueEncoding, codec
from delta_fabric.wire import SIGNATURE_SIZE, Entry

__all__ = [
    "KEY_SIZE",
    "SIGNATURE_DOMAIN",
    "Signing",
    "load_keys",
    "load_secret",
    "public_key_of",
    "signed_message",
]

#: Domain-separation prefix of the signed message (DF-SEC-141): 31 bytes, ending with a 0 byte.
SIGNATURE_DOMAIN = b"DeltaFabric/v1 entry signature\x00"
#: Length of an Ed25519 public key and of a secret seed.
KEY_SIZE = 32
_HEAD = struct.Struct("<QQQBI")


def signed_message(fingerprint: bytes, encoding: ValueEncoding, entry: Entry) -> bytes:
    """The byte string an origin signs for ``entry`` in a packet of ``encoding`` (DF-SEC-141)."""
    if len(fingerprint) != 32:
        raise ValueError("fingerprint must be 32 bytes")
    vc = codec(encoding)
    values = np.ascontiguousarray(vc.encode(entry.values), dtype=vc.wire_dtype)
    # Q8 (section 6.8): the entry's scale (binary32) before the n signed bytes, so that neither can be
    # changed alone
    scale = b"" if vc.scale_of is None else np.float32(vc.scale_of(entry.values)).tobytes()
    return b"".join(
        (
            SIGNATURE_DOMAIN,
            bytes(fingerprint),
            _HEAD.pack(
                entry.origin, entry.incarnation, entry.seq, int(encoding), int(entry.indices.size)
            ),
            np.ascontiguousarray(entry.indices, dtype="<u4").tobytes(),
            scale,
            values.tobytes(),
        )
    )


def public_key_of(secret: bytes) -> bytes:
    """The 32-byte Ed25519 public key of a 32-byte secret seed."""
    return (
        Ed25519PrivateKey.from_private_bytes(_key_bytes(secret, "secret key"))
        .public_key()
        .public_bytes(Encoding.Raw, PublicFormat.Raw)
    )


def _key_bytes(x: bytes, what: str) -> bytes:
    if not isinstance(x, (bytes, bytearray)) or len(x) != KEY_SIZE:
        raise ValueError(f"{what} must be {KEY_SIZE} bytes")
    return bytes(x)


class Signing:
    """A node's part in a signed cluster: the pinned public key of every node id (DF-SEC-145; the
    node's own included, derived from ``secret`` when absent) and, to generate, its own 32-byte
    secret seed. Raises ``ValueError`` for a key of the wrong length, an invalid public key, a node id
    out of range, or a pinned own key that is not the secret's."""

    __slots__ = ("_keys", "_raw", "_secret")

    def __init__(
        self, keys: Mapping[int, bytes], secret: bytes | None = None, *, node_id: int | None = None
    ) -> None:
        raw: dict[int, bytes] = {}
        for node, key in keys.items():
            if isinstance(node, bool) or not isinstance(node, int) or not 1 <= node < 1 << 64:
                raise ValueError(f"node id {node!r} must be an integer in [1, 2**64)")
            raw[node] = _key_bytes(key, f"public key of {node:016x}")
        self._secret: Ed25519PrivateKey | None = None
        if secret is not None:
            self._secret = Ed25519PrivateKey.from_private_bytes(_key_bytes(secret, "secret key"))
            if node_id is not None:
                own = public_key_of(secret)
                if raw.setdefault(node_id, own) != own:
                    raise ValueError(f"the pinned key of {node_id:016x} is not the secret's")
        try:
            self._keys = {n: Ed25519PublicKey.from_public_bytes(k) for n, k in raw.items()}
        except ValueError as exc:
            raise ValueError(f"invalid public key: {exc}") from None
        self._raw = raw

    @property
    def keys(self) -> dict[int, bytes]:
        """The pinned public keys, by node id (a copy)."""
        return dict(self._raw)

    @property
    def can_sign(self) -> bool:
        return self._secret is not None

    def sign(self, fingerprint: bytes, encoding: ValueEncoding, entry: Entry) -> bytes:
        """The 64-byte signature of ``entry`` (DF-SEC-140); Ed25519 is deterministic."""
        if self._secret is None:
            raise ValueError("this node has no secret key: it cannot sign")
        return self._secret.sign(signed_message(fingerprint, encoding, entry))

    def verify(self, fingerprint: bytes, encoding: ValueEncoding, entry: Entry) -> str | None:
        """``None`` when ``entry`` carries a valid signature by its origin's pinned key, else why not
        (DF-SEC-142)."""
        if entry.signature is None:
            return "unsigned entry"
        if len(entry.signature) != SIGNATURE_SIZE:
            return "signature is not 64 bytes"
        key = self._keys.get(entry.origin)
        if key is None:
            return f"no pinned key for origin {entry.origin:016x}"
        try:
            key.verify(entry.signature, signed_message(fingerprint, encoding, entry))
        except InvalidSignature:
            return "signature does not verify"
        return None

    @classmethod
    def from_json(
        cls, keys: Mapping[str, Any], secret: str | None = None, *, node_id: int | None = None
    ) -> Signing:
        """From the ``keys`` object of a keys file (hex16 node id -> 64 hex digits) and an optional
        hex secret (``ValueError`` for anything else)."""
        parsed: dict[int, bytes] = {}
        for node, key in keys.items():
            try:
                parsed[int(node, 16)] = bytes.fromhex(key)
            except (TypeError, ValueError):
                raise ValueError(f"keys: bad entry {node!r}: {key!r}") from None
        try:
            sec = None if secret is None else bytes.fromhex(secret)
        except (TypeError, ValueError):
            raise ValueError("secret key: not hex") from None
        return cls(parsed, sec, node_id=node_id)


def load_keys(path: str | Path) -> dict[str, Any]:
    """The ``keys`` object of a keys file ``{"version": 1, "keys": {...}}`` (``ValueError`` when the
    file is not one)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"keys file {path}: {exc}") from None
    if (
        not isinstance(doc, dict)
        or doc.get("version") != 1
        or not isinstance(doc.get("keys"), dict)
    ):
        raise ValueError(f'keys file {path}: expected {{"version": 1, "keys": {{...}}}}')
    keys: dict[str, Any] = doc["keys"]
    return keys


def load_secret(path: str | Path) -> str:
    """The hex secret seed in ``path`` (whitespace stripped)."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"secret key file {path}: {exc}") from None
