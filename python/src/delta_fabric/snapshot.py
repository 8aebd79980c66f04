"""Anchor snapshots for late joiners (DF-ZEN-5), sans-IO: chunk encoding, hostile-input decoding,
verification and reassembly.

A server freezes its anchor into a :class:`SnapshotSource` and answers ``chunk=<i>&chunk_size=<n>``
with chunk ``i``: the values ``[i*n, min((i+1)*n, N))`` as a ``SnapshotChunk`` FlatBuffer
(``schema/snapshot.fbs``, identifier ``DFS1``). Every chunk carries the manifest fingerprint, the
snapshot id, the total N and the SHA-256 digest of the *whole* snapshot's little-endian f32 bytes.

The joiner decodes each chunk with :func:`decode_chunk` (a bounds-checked reader: whatever the bytes, it
raises nothing but :class:`SnapshotError`) and feeds it to a :class:`SnapshotAssembler`, which checks
that every chunk belongs to the same snapshot (server, incarnation, id, fingerprint, total, digest), that
its offset and length are the expected ones, and finally that the reassembled values hash to the digest.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NoReturn, Protocol, runtime_checkable

import flatbuffers
import numpy as np
from numpy.typing import NDArray

from delta_fabric import wire as _wire
from delta_fabric._generated.deltafabric.v1 import SnapshotChunk as _gen_chunk
from delta_fabric.encodings import supports
from delta_fabric.errors import DecodeError, DeltaFabricError

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_PACKET_SIZE",
    "FILE_IDENTIFIER",
    "MAX_CHUNK_SIZE",
    "ChunkRequest",
    "SnapshotAssembler",
    "SnapshotChunk",
    "SnapshotError",
    "SnapshotErrorKind",
    "SnapshotServer",
    "SnapshotSource",
    "chunk_count",
    "decode_chunk",
    "encode_chunk",
    "fetch_snapshot_chunks",
    "fetch_snapshot_from",
    "format_chunk_params",
    "max_chunk_size",
    "parse_chunk_params",
    "snapshot_digest",
    "trim_blanks",
]

FILE_IDENTIFIER = b"DFS1"
VERSION_MAJOR = 1
VERSION_MINOR = 1
FINGERPRINT_SIZE = 32
DIGEST_SIZE = 32
#: Default values per chunk a joiner asks for (1 MiB of f32).
DEFAULT_CHUNK_SIZE = 262_144
#: Default ``max_packet_size`` (DF-PAR), which bounds the chunk size a server answers.
DEFAULT_MAX_PACKET_SIZE = 16_777_216
#: Largest chunk a server with the default ``max_packet_size`` answers (DF-ZEN-5: ``4*c + 1024 <= M``).
MAX_CHUNK_SIZE = (DEFAULT_MAX_PACKET_SIZE - 1024) // 4
_U64_MAX = (1 << 64) - 1


class SnapshotErrorKind(str, Enum):
    """Why a snapshot (chunk) was rejected or could not be fetched."""

    BAD_IDENTIFIER = "BAD_IDENTIFIER"  #: fewer than 8 bytes or bytes 4..8 != DFS1
    MALFORMED = "MALFORMED"  #: offsets/lengths out of bounds, required field missing, bad sizes
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"  #: version_major != 1
    FINGERPRINT_MISMATCH = "FINGERPRINT_MISMATCH"  #: not the joiner's manifest
    INCONSISTENT = (
        "INCONSISTENT"  #: chunk disagrees with earlier chunks (id, total, digest, server...)
    )
    BAD_OFFSET = "BAD_OFFSET"  #: offset / length not the ones the request implies
    NON_FINITE = "NON_FINITE"  #: a value is NaN or infinite
    DIGEST_MISMATCH = "DIGEST_MISMATCH"  #: the reassembled values do not hash to the digest
    BAD_REQUEST = "BAD_REQUEST"  #: server side: unparsable or out-of-range chunk parameters
    NO_SERVER = "NO_SERVER"  #: no live peer answered / serves a snapshot
    SERVER_ERROR = "SERVER_ERROR"  #: the server replied with an error
    TIMEOUT = "TIMEOUT"  #: the fetch did not complete in time
    INCOMPLETE = "INCOMPLETE"  #: finish() before every chunk was accepted (DF-ZEN-41, added in 1.1)


class SnapshotError(DeltaFabricError):
    """A snapshot chunk was rejected, or a snapshot fetch failed. ``kind`` says why."""

    def __init__(self, kind: SnapshotErrorKind, detail: str = "") -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)


def snapshot_digest(anchor: NDArray[np.float32]) -> bytes:
    """SHA-256 of the values as little-endian f32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(anchor, dtype="<f4").tobytes()).digest()


def _check_u64_nonzero(name: str, x: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 1 <= int(x) <= _U64_MAX:
        raise ValueError(f"{name} must be an integer in [1, 2**64), got {x!r}")
    return int(x)


@dataclass(frozen=True, eq=False)
class SnapshotSource:
    """A frozen anchor a node serves: its incarnation, manifest fingerprint and flat f32 anchor.

    The anchor is copied into a read-only little-endian array at construction, so later training steps
    cannot change a snapshot being served. ``framework`` is reported by the info queryable.
    """

    incarnation: int
    fingerprint: bytes
    anchor: NDArray[np.float32]
    framework: str = "numpy"
    _digest: bytes = field(default=b"", init=False, repr=False)
    _non_finite_at: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        _check_u64_nonzero("incarnation", self.incarnation)
        fp = bytes(self.fingerprint)
        if len(fp) != FINGERPRINT_SIZE:
            raise ValueError(f"fingerprint must be {FINGERPRINT_SIZE} bytes, got {len(fp)}")
        a = np.array(self.anchor, dtype="<f4", copy=True).reshape(-1)
        if a.size < 1:
            raise ValueError("a snapshot holds at least one value")
        a.flags.writeable = False
        object.__setattr__(self, "fingerprint", fp)
        object.__setattr__(self, "anchor", a)
        object.__setattr__(self, "_digest", snapshot_digest(a))
        bad = np.flatnonzero(~np.isfinite(a))
        object.__setattr__(self, "_non_finite_at", int(bad[0]) if bad.size else None)

    @property
    def total(self) -> int:
        return int(self.anchor.size)

    @property
    def digest(self) -> bytes:
        """SHA-256 of the whole snapshot's little-endian f32 bytes."""
        return self._digest

    @property
    def non_finite_at(self) -> int | None:
        """The flat index of the first NaN or infinity, None when every value is finite: such a
        snapshot is never served (DF-ZEN-43)."""
        return self._non_finite_at


@dataclass(frozen=True, eq=False)
class SnapshotChunk:
    """One decoded chunk. ``values`` is a read-only view (little-endian f32) over the chunk buffer."""

    node: int
    incarnation: int
    fingerprint: bytes
    snapshot_id: int
    total: int
    offset: int
    digest: bytes
    values: NDArray[np.float32]
    version_major: int = VERSION_MAJOR
    version_minor: int = VERSION_MINOR


def chunk_count(total: int, chunk_size: int) -> int:
    """Number of chunks of a ``total``-value snapshot at ``chunk_size`` values per chunk."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    return max(1, math.ceil(total / chunk_size))


# ------------------------------------------------------------------------------------------------------
# Query parameters
# ------------------------------------------------------------------------------------------------------


def max_chunk_size(max_packet_size: int = DEFAULT_MAX_PACKET_SIZE) -> int:
    """Largest ``chunk_size`` a server answers (DF-ZEN-5: ``4 * c + 1024 <= max_packet_size``)."""
    return max(0, (max_packet_size - 1024) // 4)


def format_chunk_params(chunk: int, chunk_size: int, separator: str = "&") -> str:
    """The selector parameters of a chunk request: ``chunk=<i>&chunk_size=<n>`` (DF-ZEN-5's form).

    Zenoh's own parameter syntax separates pairs with ``;``; pass ``separator=";"`` for servers that
    parse the parameters with Zenoh's ``Parameters`` (see :func:`parse_chunk_params`)."""
    if separator not in ("&", ";"):
        raise ValueError("separator must be '&' or ';'")
    return f"chunk={int(chunk)}{separator}chunk_size={int(chunk_size)}"


def trim_blanks(text: str) -> str:
    """``text`` without the spaces (U+0020) and horizontal tabs (U+0009) at its start and end
    (DF-ZEN-42, rule 3: no other character is removed)."""
    return text.strip(" \t")


def parse_chunk_params(
    params: str | Mapping[str, str],
    *,
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
) -> tuple[int, int]:
    """Parse the chunk request parameters (server side) -> ``(chunk, chunk_size)``, by the rules of
    DF-ZEN-42.

    Accepts the spec's ``chunk=<i>&chunk_size=<c>`` and Zenoh's native ``chunk=<i>;chunk_size=<c>``
    (pieces split on ``&`` and ``;`` in any mix, empty pieces skipped, key and value split at the
    first ``=``, spaces and tabs around them removed, unknown keys ignored, the first occurrence of a
    key wins). Both parameters are required decimal integers (1 to 20 ASCII digits) with ``1 <= c``
    and ``4 * c + 1024 <= max_packet_size``; anything else raises ``SnapshotError(BAD_REQUEST)``.
    The chunk index range is checked by :func:`encode_chunk`."""
    if isinstance(params, str):
        pairs: dict[str, str] = {}
        for part in params.replace(";", "&").split("&"):
            if not part:
                continue
            key, _, value = part.partition("=")
            pairs.setdefault(trim_blanks(key), value)
    else:
        pairs = dict(params)

    def num(name: str) -> int:
        raw = pairs.get(name)
        if raw is None:
            raise SnapshotError(SnapshotErrorKind.BAD_REQUEST, f"parameter {name} missing")
        raw = trim_blanks(raw)
        if not raw.isascii() or not raw.isdigit() or len(raw) > 20:
            raise SnapshotError(
                SnapshotErrorKind.BAD_REQUEST,
                f"{name}={raw[:40]!r} is not a non-negative decimal integer",
            )
        return int(raw)

    chunk = num("chunk")
    chunk_size = num("chunk_size")
    limit = max_chunk_size(max_packet_size)
    if not 1 <= chunk_size <= limit:
        raise SnapshotError(
            SnapshotErrorKind.BAD_REQUEST, f"chunk_size {chunk_size} not in [1, {limit}]"
        )
    return chunk, chunk_size


# ------------------------------------------------------------------------------------------------------
# Encoding
# ------------------------------------------------------------------------------------------------------


def encode_chunk(
    source: SnapshotSource,
    node: int,
    snapshot_id: int,
    chunk: int,
    chunk_size: int,
    *,
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
) -> bytes:
    """Chunk ``chunk`` of ``source`` at ``chunk_size`` values per chunk, as a ``SnapshotChunk`` buffer.

    ``SnapshotError(BAD_REQUEST)`` when the chunk index or size is out of range (DF-ZEN-5),
    ``SnapshotError(NON_FINITE)`` when the source holds a NaN or an infinity (DF-ZEN-43).
    """
    limit = max_chunk_size(max_packet_size)
    if not 1 <= chunk_size <= limit:
        raise SnapshotError(
            SnapshotErrorKind.BAD_REQUEST, f"chunk_size {chunk_size} not in [1, {limit}]"
        )
    n_chunks = chunk_count(source.total, chunk_size)
    if not 0 <= chunk < n_chunks:
        raise SnapshotError(
            SnapshotErrorKind.BAD_REQUEST,
            f"chunk {chunk} not in [0, {n_chunks}) for {source.total} values",
        )
    if source.non_finite_at is not None:
        # DF-ZEN-43: a capture holding a NaN or an infinity is never served, whichever chunk
        raise SnapshotError(
            SnapshotErrorKind.NON_FINITE,
            f"the snapshot is not served: value {source.non_finite_at} is not finite",
        )
    offset = chunk * chunk_size
    values = source.anchor[offset : offset + chunk_size]
    b = flatbuffers.Builder(4 * values.size + 256)
    vals_off = b.CreateNumpyVector(np.ascontiguousarray(values, dtype="<f4"))
    digest_off = b.CreateByteVector(source.digest)
    fp_off = b.CreateByteVector(source.fingerprint)
    _gen_chunk.SnapshotChunkStart(b)
    _gen_chunk.SnapshotChunkAddVersionMajor(b, VERSION_MAJOR)
    _gen_chunk.SnapshotChunkAddVersionMinor(b, VERSION_MINOR)
    _gen_chunk.SnapshotChunkAddNode(b, _check_u64_nonzero("node", node))
    _gen_chunk.SnapshotChunkAddIncarnation(b, source.incarnation)
    _gen_chunk.SnapshotChunkAddFingerprint(b, fp_off)
    _gen_chunk.SnapshotChunkAddSnapshotId(b, _check_u64_nonzero("snapshot_id", snapshot_id))
    _gen_chunk.SnapshotChunkAddTotal(b, source.total)
    _gen_chunk.SnapshotChunkAddOffset(b, offset)
    _gen_chunk.SnapshotChunkAddDigest(b, digest_off)
    _gen_chunk.SnapshotChunkAddValues(b, vals_off)
    root = _gen_chunk.SnapshotChunkEnd(b)
    b.Finish(root, file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


# ------------------------------------------------------------------------------------------------------
# Decoding: the verifier rules packets follow (spec section 6.7 and DF-SEC-20, DF-ZEN-105)
# ------------------------------------------------------------------------------------------------------

_S_VMAJ, _S_VMIN, _S_NODE, _S_INC, _S_FP, _S_ID, _S_TOTAL, _S_OFFSET, _S_DIGEST, _S_VALUES = range(
    10
)


def _malformed(detail: str) -> NoReturn:
    raise SnapshotError(SnapshotErrorKind.MALFORMED, detail)


def _required(vec: tuple[int, int] | None, what: str) -> tuple[int, int]:
    if vec is None:
        _malformed(f"{what} (required) missing")
    return vec


def decode_chunk(buf: bytes | bytearray | memoryview) -> SnapshotChunk:
    """Decode and check one chunk on its own (context-free): identifier; structure by the verifier
    rules of spec section 6.7 (DF-PKT-20, DF-PKT-21) and the sharing rule (DF-SEC-20) applied to
    ``SnapshotChunk`` (DF-ZEN-105), with the packet decoder's reader; version; required fields and
    their sizes; non-zero node / incarnation / snapshot id / total; ``offset + len(values) <= total``.
    Raises nothing but :class:`SnapshotError`."""
    try:
        mv = memoryview(buf).cast("B")
    except (TypeError, ValueError) as exc:
        raise SnapshotError(SnapshotErrorKind.MALFORMED, f"not a byte buffer: {exc}") from exc
    if len(mv) < 8 or bytes(mv[4:8]) != FILE_IDENTIFIER:
        raise SnapshotError(SnapshotErrorKind.BAD_IDENTIFIER, "missing file identifier DFS1")
    try:
        r = _wire._Reader(mv)
        root_off = int.from_bytes(mv[0:4], "little")
        if root_off == 0:
            _malformed("root uoffset 0 (points to itself)")
        t = r.table(root_off, "SnapshotChunk")
        vmaj = r.u16(t, _S_VMAJ, "version_major")
        if vmaj != VERSION_MAJOR:
            raise SnapshotError(SnapshotErrorKind.UNSUPPORTED_VERSION, f"version_major {vmaj}")
        vmin = r.u16(t, _S_VMIN, "version_minor")
        node = r.u64(t, _S_NODE, "node")
        incarnation = r.u64(t, _S_INC, "incarnation")
        fp = r.vector(t, _S_FP, 1, "fingerprint")
        snapshot_id = r.u64(t, _S_ID, "snapshot_id")
        total = r.u64(t, _S_TOTAL, "total")
        offset = r.u64(t, _S_OFFSET, "offset")
        dg = r.vector(t, _S_DIGEST, 1, "digest")
        vals = r.vector(t, _S_VALUES, 4, "values")
        fp_start, fp_len = _required(fp, "fingerprint")
        dg_start, dg_len = _required(dg, "digest")
        v_start, v_len = _required(vals, "values")
        _wire._check_disjoint(
            np.array([a for a, _ in r.spans], dtype=np.int64),
            np.array([b for _, b in r.spans], dtype=np.int64),
        )
    except DecodeError as exc:
        raise SnapshotError(SnapshotErrorKind.MALFORMED, exc.detail) from exc
    if fp_len != FINGERPRINT_SIZE:
        _malformed(f"fingerprint has {fp_len} bytes, expected {FINGERPRINT_SIZE}")
    if dg_len != DIGEST_SIZE:
        _malformed(f"digest has {dg_len} bytes, expected {DIGEST_SIZE}")
    if node == 0:
        _malformed("node is 0")
    if incarnation == 0:
        _malformed("incarnation is 0")
    if snapshot_id == 0:
        _malformed("snapshot_id is 0")
    if total == 0:
        _malformed("total is 0")
    if v_len == 0:
        _malformed("chunk holds no value")
    if offset >= total or v_len > total - offset:
        _malformed(f"values [{offset}, {offset + v_len}) outside the snapshot of {total} values")
    values = np.frombuffer(mv, dtype="<f4", count=v_len, offset=v_start)
    values.flags.writeable = False
    return SnapshotChunk(
        node=node,
        incarnation=incarnation,
        fingerprint=bytes(mv[fp_start : fp_start + fp_len]),
        snapshot_id=snapshot_id,
        total=total,
        offset=offset,
        digest=bytes(mv[dg_start : dg_start + dg_len]),
        values=values,
        version_major=vmaj,
        version_minor=vmin,
    )


# ------------------------------------------------------------------------------------------------------
# Reassembly
# ------------------------------------------------------------------------------------------------------


class SnapshotAssembler:
    """Reassemble the chunks of one snapshot requested at ``chunk_size`` values per chunk.

    ``add(i, chunk)`` checks chunk ``i`` against the joiner's fingerprint and the first chunk (node,
    incarnation, snapshot id, total, digest), its offset (``i * chunk_size``) and its length (``chunk_size``
    except the last). ``max_values`` bounds the total a hostile server can make the joiner allocate.
    ``finish()`` checks completeness and the digest and returns the anchor (a fresh, writable f32 array).
    """

    def __init__(
        self,
        fingerprint: bytes,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        *,
        expected_total: int | None = None,
        expected_node: int | None = None,
        max_values: int = 1 << 31,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.fingerprint = bytes(fingerprint)
        self.chunk_size = chunk_size
        self.expected_total = expected_total
        self.expected_node = expected_node
        self.max_values = max_values
        self.first: SnapshotChunk | None = None
        self._buf: NDArray[np.float32] | None = None
        self._have: set[int] = set()
        self.started = time.monotonic()

    @property
    def num_chunks(self) -> int | None:
        """Number of chunks, known after the first accepted chunk."""
        return None if self.first is None else chunk_count(self.first.total, self.chunk_size)

    @property
    def missing(self) -> list[int]:
        n = self.num_chunks
        return [0] if n is None else [i for i in range(n) if i not in self._have]

    @property
    def complete(self) -> bool:
        return self.first is not None and not self.missing

    def add(self, index: int, chunk: SnapshotChunk) -> None:
        bad = SnapshotErrorKind
        if chunk.fingerprint != self.fingerprint:
            raise SnapshotError(
                bad.FINGERPRINT_MISMATCH,
                f"chunk fingerprint {chunk.fingerprint.hex()} != local {self.fingerprint.hex()}",
            )
        if self.first is None:
            if self.expected_node is not None and chunk.node != self.expected_node:
                raise SnapshotError(
                    bad.INCONSISTENT,
                    f"chunk from node {chunk.node:016x}, asked {self.expected_node:016x}",
                )
            if self.expected_total is not None and chunk.total != self.expected_total:
                raise SnapshotError(
                    bad.INCONSISTENT, f"total {chunk.total} != expected {self.expected_total}"
                )
            if chunk.total > self.max_values:
                raise SnapshotError(bad.MALFORMED, f"total {chunk.total} > limit {self.max_values}")
        else:
            f = self.first
            for name, mine, theirs in (
                ("node", f.node, chunk.node),
                ("incarnation", f.incarnation, chunk.incarnation),
                ("snapshot_id", f.snapshot_id, chunk.snapshot_id),
                ("total", f.total, chunk.total),
                ("digest", f.digest, chunk.digest),
            ):
                if mine != theirs:
                    raise SnapshotError(bad.INCONSISTENT, f"{name} changed between chunks")
        n_chunks = chunk_count(chunk.total, self.chunk_size)
        if not 0 <= index < n_chunks:
            raise SnapshotError(bad.BAD_OFFSET, f"chunk index {index} not in [0, {n_chunks})")
        want_off = index * self.chunk_size
        want_len = min(self.chunk_size, chunk.total - want_off)
        if chunk.offset != want_off or chunk.values.size != want_len:
            raise SnapshotError(
                bad.BAD_OFFSET,
                f"chunk {index}: values [{chunk.offset}, {chunk.offset + chunk.values.size}), "
                f"expected [{want_off}, {want_off + want_len})",
            )
        if not bool(np.isfinite(chunk.values).all()):
            bad_at = int(np.flatnonzero(~np.isfinite(chunk.values))[0])
            raise SnapshotError(
                bad.NON_FINITE, f"chunk {index}: value {want_off + bad_at} is not finite"
            )
        if self.first is None:
            self.first = chunk
            self._buf = np.empty(chunk.total, dtype=np.float32)
        assert self._buf is not None
        self._buf[want_off : want_off + want_len] = chunk.values
        self._have.add(index)

    def finish(self) -> tuple[NDArray[np.float32], SnapshotChunk]:
        """The verified anchor and the first chunk's header (node, incarnation...)."""
        if self.first is None or self._buf is None:
            raise SnapshotError(SnapshotErrorKind.INCOMPLETE, "no chunk received")
        if self.missing:
            raise SnapshotError(SnapshotErrorKind.INCOMPLETE, f"chunks {self.missing[:8]} missing")
        got = snapshot_digest(self._buf)
        if got != self.first.digest:
            raise SnapshotError(
                SnapshotErrorKind.DIGEST_MISMATCH,
                f"values hash to {got.hex()}, chunks announce {self.first.digest.hex()}",
            )
        return self._buf, self.first


# ------------------------------------------------------------------------------------------------------
# Server-side state (sans-IO): which frozen snapshot answers which request
# ------------------------------------------------------------------------------------------------------


@runtime_checkable
class VersionedProvider(Protocol):
    """A snapshot provider that also tells when its state changed: ``version()`` returns a number
    that changes whenever the state a capture would hold changes. A `SnapshotServer` then reuses a
    young capture only while the version is the one it was captured at (a joiner never gets a
    capture older than the state, also within ``reuse_s``)."""

    def __call__(self) -> SnapshotSource: ...

    def version(self) -> int: ...


class SnapshotServer:
    """Answers the chunk and info requests of one node from captured snapshots (DF-ZEN-5, -6, -11).

    ``provider`` captures the node's state (a copy, taken between two steps) as a
    :class:`SnapshotSource`. A request for chunk 0 is answered from the latest capture when it is younger
    than ``reuse_s`` (10 s: concurrent joiners share one snapshot), otherwise from a new capture with a new
    ``snapshot_id``; requests for later chunks are answered from the latest capture, which is kept while
    it is queried (released after ``keep_s`` = 60 s without a query). A joiner whose chunks disagree
    (snapshot id changed by another joiner's chunk 0 after 10 s) restarts from chunk 0. With a
    `VersionedProvider`, a chunk-0 request reuses the capture only while the state has not changed
    since it was taken. Thread-safe.
    """

    def __init__(
        self,
        node: int,
        provider: Callable[[], SnapshotSource],
        *,
        reuse_s: float = 10.0,
        keep_s: float = 60.0,
        max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
    ) -> None:
        self.node = _check_u64_nonzero("node", node)
        self.provider = provider
        self.reuse_s = reuse_s
        self.keep_s = keep_s
        self.max_packet_size = max_packet_size
        self._lock = threading.Lock()
        # (snapshot id, capture time, last query time, source)
        self._latest: tuple[int, float, float, SnapshotSource] | None = None
        self._next_id = 1
        self._version: Callable[[], int] | None = (
            provider.version if isinstance(provider, VersionedProvider) else None
        )
        self._captured_version: int | None = None

    def current(self, *, fresh: bool) -> tuple[int, SnapshotSource]:
        """The snapshot that answers a request; ``fresh``: a chunk-0 (or info) request."""
        with self._lock:
            now = time.monotonic()
            latest = self._latest
            version = self._version() if (fresh and self._version is not None) else None
            stale = (
                latest is None
                or now - latest[2] > self.keep_s
                or (fresh and now - latest[1] >= self.reuse_s)
                or (version is not None and version != self._captured_version)
            )
            if stale:
                # read before the capture: a change in between makes the next request capture anew
                self._captured_version = self._version() if self._version is not None else None
                src = self.provider()
                if not isinstance(src, SnapshotSource):
                    raise TypeError(
                        f"snapshot provider returned {type(src).__name__}, not SnapshotSource"
                    )
                latest = (self._next_id, now, now, src)
                self._next_id += 1
            assert latest is not None
            sid, captured, _, src = latest
            self._latest = (sid, captured, now, src)
            return sid, src

    def answer(self, params: str | Mapping[str, str]) -> bytes:
        """The chunk buffer answering selector parameters ``chunk=<i>&chunk_size=<c>``;
        ``SnapshotError(BAD_REQUEST)`` for bad parameters or a chunk index out of range."""
        chunk, chunk_size = parse_chunk_params(params, max_packet_size=self.max_packet_size)
        sid, src = self.current(fresh=chunk == 0)
        return encode_chunk(
            src, self.node, sid, chunk, chunk_size, max_packet_size=self.max_packet_size
        )

    def info(self) -> dict[str, object]:
        """The info queryable's JSON object (DF-ZEN-6): ``node`` and ``incarnation`` as 16 lowercase hex
        digits, ``fingerprint`` as 64, ``framework``, ``N``, ``supports`` (DF-ZEN-231)."""
        _, src = self.current(fresh=True)
        return {
            "node": f"{self.node:016x}",
            "incarnation": f"{src.incarnation:016x}",
            "fingerprint": src.fingerprint.hex(),
            "framework": src.framework,
            "N": src.total,
            "supports": supports(),
        }


# ------------------------------------------------------------------------------------------------------
# Client-side fetch loop (IO injected as a callable)
# ------------------------------------------------------------------------------------------------------

#: ``request(chunk, chunk_size, timeout_s) -> chunk bytes``; raises SnapshotError (TIMEOUT, SERVER_ERROR,
#: NO_SERVER) when no reply comes.
ChunkRequest = Callable[[int, int, float], bytes]


def fetch_snapshot_chunks(
    request: ChunkRequest,
    fingerprint: bytes,
    timeout: float,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    expected_node: int | None = None,
    expected_total: int | None = None,
    max_restarts: int = 4,
) -> tuple[NDArray[np.float32], SnapshotChunk]:
    """Fetch, verify (DF-ZEN-12) and reassemble one snapshot, chunk by chunk, within ``timeout`` seconds.

    Restarts from chunk 0 (at most ``max_restarts`` times) when the server switches snapshots mid-way
    (snapshot id / incarnation change); every other fault is raised as a typed :class:`SnapshotError`.
    Returns the anchor and the first chunk (its ``node``, ``incarnation``, ``snapshot_id``...).
    """
    deadline = time.monotonic() + timeout
    restarts = 0
    while True:
        asm = SnapshotAssembler(
            fingerprint, chunk_size, expected_node=expected_node, expected_total=expected_total
        )
        try:
            while not asm.complete:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SnapshotError(
                        SnapshotErrorKind.TIMEOUT, f"snapshot not complete after {timeout:.3g}s"
                    )
                i = asm.missing[0]
                asm.add(i, decode_chunk(request(i, chunk_size, left)))
            return asm.finish()
        except SnapshotError as exc:
            if (
                exc.kind is SnapshotErrorKind.INCONSISTENT
                and asm.first is not None
                and restarts < max_restarts
            ):
                restarts += 1
                continue
            raise


def fetch_snapshot_from(
    request_for: Callable[[int], ChunkRequest],
    candidates: Callable[[], Sequence[int]],
    fingerprint: bytes,
    timeout: float,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    num_params: int | None = None,
    attempts: int = 3,
    backoff_s: float = 0.2,
) -> tuple[NDArray[np.float32], SnapshotChunk]:
    """Try the servers ``candidates()`` in order, ``attempts`` rounds with exponential back-off between
    rounds (DF-ZEN-12: a failed snapshot is discarded and retried, from the same or another node), all
    within ``timeout`` seconds. Raises the last :class:`SnapshotError` (``NO_SERVER`` when there never
    was a candidate, ``TIMEOUT`` when time ran out before any answer)."""
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    deadline = time.monotonic() + timeout
    last: SnapshotError | None = None
    for attempt in range(attempts):
        servers = list(candidates())
        if not servers and last is None:
            last = SnapshotError(SnapshotErrorKind.NO_SERVER, "no live peer serves a snapshot")
        for server in servers:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                return fetch_snapshot_chunks(
                    request_for(server),
                    fingerprint,
                    left,
                    chunk_size=chunk_size,
                    expected_node=server,
                    expected_total=num_params,
                )
            except SnapshotError as exc:
                last = exc
        left = deadline - time.monotonic()
        if attempt + 1 < attempts and left > 0:
            time.sleep(min(backoff_s * (2**attempt), left))
    if last is None:
        raise SnapshotError(SnapshotErrorKind.TIMEOUT, f"no snapshot within {timeout:.3g}s")
    raise last
