"""The sans-IO protocol core: generation (DF-GEN), receive processing (DF-RCV) and relay (DF-RLY).

An `Engine` owns the node's anchor (one flat f32 buffer in the manifest's canonical layout), its seq
counter and its `ReceiverState`. It does no I/O and never touches the caller's active weights except
through `Engine.step` / `ReceiveResult.apply_to` on a NumPy array; framework layers (PyTorch, ...)
apply `ReceiveResult.indices` / `values` to their own tensors themselves.

Cost: `Engine.receive` is O(total entry size) (decode, checks, aggregation by ``np.unique``); nothing in
it is O(N). `Engine.generate` is O(N) (one subtraction and the selection, see `delta_fabric.selection`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.encodings import ValueEncoding, codec
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.influence import InfluenceBound
from delta_fabric.manifest import Manifest
from delta_fabric.native import aligned, kernels, ready
from delta_fabric.replay import (
    Admission,
    Counters,
    ReceiverState,
    ReplayWindow,
)
from delta_fabric.selection import Selector
from delta_fabric.wire import (
    PACKET_OVERHEAD_BOUND,
    Entry,
    Packet,
    decode_packet,
    encode_packet,
    encoded_size_bound,
    heard_size_bound,
    validate_packet,
)

if TYPE_CHECKING:  # delta_fabric.signing needs the `signing` extra (cryptography)
    from delta_fabric.signing import Signing

__all__ = [
    "AcceptedEntry",
    "ActiveView",
    "Engine",
    "NonFiniteDelta",
    "ReceiveResult",
    "Snapshot",
    "max_values_per_entry",
]

_U64_MAX = (1 << 64) - 1
_NO_INDICES: NDArray[np.uint32] = np.empty(0, dtype=np.uint32)
_NO_VALUES: NDArray[np.float32] = np.empty(0, dtype=np.float32)
_F32_ZERO = np.float32(0.0)  # +0: the aggregate before a step's first sum (DF-RCV-6)
# Q8 re-encodes its decoded values to the same scale and codes while no code is clamped below 127
# (scale <= FLT_MAX / 127): above it, the codes of `generate` are not kept for `pack`
_Q8_SAME_CODES = 2.0**121
_PROOF_LIMIT = float(2**127)  # |x|, |y| below it: fl32(x + y) is finite (at most FLT_MAX)

#: The node's active weights as `Engine.receive` reads them for DF-RCV-50: a flat f32 array, a
#: function returning the values at the given flat indices (``WeightStore.gather``), or a list of
#: 1-D f32 arrays whose concatenation is the canonical vector (``TorchStore.host_parts``), only read.
ActiveView = (
    NDArray[np.float32]
    | Callable[[NDArray[np.uint32]], NDArray[np.float32]]
    | list[NDArray[np.float32]]
)


def _check_id(name: str, value: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or not 1 <= int(value) <= _U64_MAX
    ):
        raise ValueError(f"{name} must be an integer in [1, 2**64), got {value!r}")
    return int(value)


def max_values_per_entry(max_packet_size: int, *, signed: bool = False) -> int:
    """Largest value count of an entry that fits alone in a packet of ``max_packet_size`` bytes
    (by the wire's size bound: ``PACKET_OVERHEAD_BOUND + encoded_size_bound(n) <= max_packet_size``;
    with ``signed``, the bound of a signed entry, DF-RLY-143)."""
    lo, hi = 0, max(0, max_packet_size)
    if PACKET_OVERHEAD_BOUND + encoded_size_bound(1, signed=signed) > max_packet_size:
        raise ValueError(f"max_packet_size {max_packet_size} cannot hold one value")
    while lo < hi:  # largest n with bound(n) <= budget; bound is increasing in n
        mid = (lo + hi + 1) // 2
        if PACKET_OVERHEAD_BOUND + encoded_size_bound(mid, signed=signed) <= max_packet_size:
            lo = mid
        else:
            hi = mid - 1
    return lo


class NonFiniteDelta(ValueError):
    """DF-GEN-9: a generation failed as a whole because a delta is infinite (nothing changed; a
    conformance driver answers it as ``"error": "NON_FINITE"``). ``index`` is the first such index."""

    def __init__(self, index: int) -> None:
        super().__init__(f"cannot generate: the delta holds an infinite value at index {index}")
        self.index = index


@dataclass(frozen=True, slots=True)
class AcceptedEntry:
    """The header of one entry the engine accepted (DF-RCV-2..4), taken from the packet it already
    decoded: ``origin``, ``incarnation``, ``seq`` and ``hops`` as received (before the relay's
    increment), ``packet`` the index of its packet in the `Engine.receive` call and ``entry`` its
    index within that packet."""

    origin: int
    incarnation: int
    seq: int
    hops: int
    packet: int
    entry: int


@dataclass
class ReceiveResult:
    """Outcome of one `Engine.receive` call.

    ``indices`` (sorted, unique, u32) and ``values`` (f32) are the step's aggregate (DF-RCV-6), already
    applied to the anchor; the caller applies them to its active weights (`apply_to`). ``outcomes`` has
    one item per packet: ``None`` when accepted, else its error code; ``entry_outcomes`` lists the
    `Admission` of every entry of each packet (empty for a rejected packet). ``accepted`` holds the
    header of every accepted entry in acceptance order (no layer needs to decode a packet again).
    """

    indices: NDArray[np.uint32]
    values: NDArray[np.float32]
    relay: list[Entry] = field(default_factory=list)
    rejected: list[tuple[int, ErrorCode]] = field(default_factory=list)
    accepted: list[AcceptedEntry] = field(default_factory=list)
    outcomes: list[ErrorCode | None] = field(default_factory=list)
    entry_outcomes: list[list[Admission]] = field(default_factory=list)

    def apply_to(self, active: NDArray[np.float32]) -> None:
        """DF-RCV-7 on a flat f32 array: ``active[i] = fl32(active[i] + agg[i])``. O(k)."""
        if active.dtype != np.float32 or active.ndim != 1:
            raise ValueError("active must be a flat float32 array")
        if self.indices.size:
            idx = self.indices
            active[idx] = active[idx] + self.values

    @property
    def empty(self) -> bool:
        return self.indices.size == 0

    @property
    def accepted_entries(self) -> int:
        """How many entries were accepted (``len(accepted)``)."""
        return len(self.accepted)


@dataclass(frozen=True)
class Snapshot:
    """An anchor snapshot: the manifest fingerprint and the flat f32 anchor (little-endian on the wire)."""

    fingerprint: bytes
    anchor: NDArray[np.float32]

    def to_bytes(self) -> bytes:
        return self.anchor.astype("<f4", copy=False).tobytes()

    @property
    def digest(self) -> bytes:
        """SHA-256 of the little-endian anchor bytes (what every snapshot chunk carries, DF-ZEN-5)."""
        return hashlib.sha256(self.to_bytes()).digest()

    @classmethod
    def from_bytes(cls, fingerprint: bytes, data: bytes) -> Snapshot:
        if len(data) % 4:
            raise ValueError("snapshot data is not a whole number of f32 values")
        return cls(bytes(fingerprint), np.frombuffer(data, dtype="<f4").astype(np.float32))


class Engine:
    """Protocol state of one node (one incarnation). Not thread-safe."""

    def __init__(
        self,
        manifest: Manifest,
        config: SyncConfig,
        node_id: int,
        incarnation: int,
        anchor: NDArray[np.float32] | None = None,
        *,
        max_origins: int | None = None,
        members: Iterable[int] | None = None,
        signing: Signing | None = None,
    ) -> None:
        """``anchor`` (copied) is normally the initial weights, identical on every node; zeros if None.
        ``max_origins`` overrides ``config.max_origins`` (DF-PAR-30). ``members``: the node ids
        accepted as origins (DF-RCV-51); ``None`` accepts every origin. ``signing``: the node is in a
        signed cluster (spec section 13.1): it signs its own entries (when ``signing`` holds its
        secret key), rejects packets with an entry that is not signed by its origin's pinned key
        (``BAD_SIGNATURE``, DF-SEC-142) and relays the origin's values and signature (DF-RLY-140)."""
        if manifest.num_params < 1:
            raise ValueError("the manifest holds no value")
        self.manifest = manifest
        self.config = config
        self.node_id = _check_id("node_id", node_id)
        self.incarnation = _check_id("incarnation", incarnation)
        n = manifest.num_params
        self._anchor = np.zeros(n, dtype=np.float32)
        self._anchor_view: NDArray[np.float32] = self._anchor.view()  # `anchor`: read-only
        self._anchor_view.flags.writeable = False
        # an upper bound of max |anchor| (inf with a NaN or an infinity) kept across steps for the
        # DF-RCV-50 proof, or None (unknown: `_step_bound` reads the anchor). Every write to the
        # anchor grows it or clears it; the anchor is private, so nothing else writes it.
        self._anchor_bound: float | None = None
        if anchor is not None:
            self._set_anchor(anchor)
        self.next_seq = 1
        #: OPTIONAL bounded influence (`delta_fabric.influence`, a proposal): None = off, as the spec
        self.influence: InfluenceBound | None = None
        self.state = ReceiverState(
            self.node_id,
            window=config.replay_window,
            max_incarnations=config.max_incarnations,
            max_origins=config.max_origins if max_origins is None else max_origins,
            members=members,
            max_seq_jump=config.max_seq_jump,
            max_incarnation_ahead=config.max_incarnation_ahead,
            incarnation_grace=config.incarnation_grace,
        )
        self.counters = Counters()
        self.entries_generated = 0
        self.relay_dropped_oversize = 0
        self._fingerprint = manifest.fingerprint
        self.signing = signing
        self._max_entry_values = max_values_per_entry(
            config.max_packet_size, signed=signing is not None
        )
        self._selector: Selector | None = None  # O(N) scratch, allocated at the first generation
        # Relay policy NEEDED (spec section 8.6): who this node heard directly in this and the last
        # sync round, and the advertisements of those senders (with their age in rounds).
        self._heard_now: set[int] = set()
        self._heard_prev: set[int] = set()
        self._adverts: dict[int, tuple[frozenset[int], int]] = {}
        #: DF-GEN-70: what the last `generate` asks the caller to add to its active weights
        #: (``fl32(sent - d)`` at the sent indices); empty unless ``config.average_over > 1``.
        self.last_correction: tuple[NDArray[np.uint32], NDArray[np.float32]] = (
            _NO_INDICES,
            _NO_VALUES,
        )
        self._agg: NDArray[np.float32] | None = (
            None  # O(N) receive scratch (DF-RCV-6), +0 between steps
        )
        self._mark: NDArray[np.bool_] | None = None  # O(N) scratch of `_union`, False between uses
        #: the OPTIONAL native kernels (`delta_fabric.native`), None: NumPy only. Either gives the
        #: same bits; set it to None to run this engine on NumPy alone.
        self.native = kernels()
        self._bound: float | None = None  # `_step_bound` of the current receive step
        #: the last generation's Q8 codes (`encode_packet`'s ``q8_codes``), by the sent values' id
        self._q8_made: dict[int, tuple[NDArray[np.float32], np.float32, NDArray[np.int8]]] = {}

    # ------------------------------------------------------------------------------------------------
    @property
    def num_params(self) -> int:
        return self.manifest.num_params

    @property
    def anchor(self) -> NDArray[np.float32]:
        """A read-only view of the anchor buffer (not a copy): it changes as the engine steps.
        `restore` (or ``Engine(anchor=...)``) sets it."""
        return self._anchor_view

    @property
    def fingerprint(self) -> bytes:
        return self._fingerprint

    def set_members(self, members: Iterable[int] | None) -> None:
        """Replace the membership (DF-RCV-51; ``None``: every origin). Windows of origins that left
        are kept: a member that returns continues where it was, its old entries still duplicates."""
        self.state.members = None if members is None else frozenset(members)

    def set_now_us(self, now_us: int) -> None:
        """The node's clock for the next receive steps (DF-RCV-175): microseconds since the Unix
        epoch, read by the node layer (the engine does no I/O). Only ``max_incarnation_ahead``
        (DF-PAR-175) uses it; until a reading is given, that bound is not applied."""
        if isinstance(now_us, bool) or not isinstance(now_us, (int, np.integer)):
            raise TypeError(f"now_us must be an int, got {type(now_us).__name__}")
        if not 0 <= int(now_us) <= _U64_MAX:
            raise ValueError(f"now_us must be in [0, 2**64), got {now_us}")
        self.state.now_us = int(now_us)

    @property
    def now_us(self) -> int | None:
        """The clock reading given by `set_now_us` (``None`` before the first)."""
        return self.state.now_us

    def set_signing(self, signing: Signing | None) -> None:
        """Put the node in a signed cluster (spec section 13.1), or take it out (``None``); own entries
        are split by the signed size estimate from the next generation on (DF-RLY-141)."""
        # refused (ValueError) before anything changes when max_packet_size cannot hold a signed entry
        # of one value (below 392 bytes, DF-RLY-141)
        max_values = max_values_per_entry(self.config.max_packet_size, signed=signing is not None)
        self.signing = signing
        self._max_entry_values = max_values

    @property
    def max_entry_values(self) -> int:
        """Values per own entry before splitting (DF-GEN-6)."""
        return self._max_entry_values

    def _check_active(self, active: NDArray[np.float32]) -> None:
        if (
            not isinstance(active, np.ndarray)
            or active.dtype != np.float32
            or active.shape != (self.num_params,)
        ):
            raise ValueError(f"active must be a float32 array of shape ({self.num_params},)")

    def _check_parts(self, parts: Sequence[NDArray[np.float32]]) -> list[NDArray[np.float32]]:
        """``parts`` as one 1-D f32 array per manifest tensor, each of its tensor's size
        (``ValueError`` otherwise)."""
        specs = self.manifest.tensors
        out = list(parts)
        if len(out) != len(specs):
            raise ValueError(f"active has {len(out)} parts, the manifest {len(specs)} tensors")
        for t, (part, spec) in enumerate(zip(out, specs, strict=True)):
            if (
                not isinstance(part, np.ndarray)
                or part.dtype != np.float32
                or part.shape != (spec.numel,)
            ):
                raise ValueError(
                    f"active part {t} ({spec.name!r}) must be a float32 array of shape "
                    f"({spec.numel},)"
                )
        return out

    def _set_anchor(self, values: NDArray[np.float32]) -> None:
        a = np.asarray(values)
        if a.shape != (self.num_params,) or a.dtype != np.float32:
            raise ValueError(f"anchor must be a float32 array of shape ({self.num_params},)")
        np.copyto(self._anchor, a)
        self._anchor_bound = None

    # generation (DF-GEN) ------------------------------------------------------------------------------
    def generate(
        self, active: NDArray[np.float32] | Sequence[NDArray[np.float32]], *, fast: bool = False
    ) -> list[Entry]:
        """Select, encode and record this node's progress since the last generation.

        ``active`` is the node's active weights: the canonical flat f32 vector, or its parts, one
        1-D f32 array per manifest tensor in canonical order (``TorchStore.gather_parts``: views of
        the live tensors, so that no copy of the whole model is made; only read here).

        Returns own entries (hops 0, consecutive fresh seqs, disjoint ascending index ranges, each small
        enough for one packet); updates the anchor with the decoded sent values (error feedback). Returns
        ``[]`` (no seq consumed) when ``active == anchor`` everywhere. Raises `NonFiniteDelta` (a
        ``ValueError``) without any change when a selected delta is infinite. NaN deltas are never
        selected.
        """
        flat: NDArray[np.float32] | None = None
        parts: list[NDArray[np.float32]] = []
        if isinstance(active, np.ndarray):
            self._check_active(active)
            flat = active
        else:
            parts = self._check_parts(active)
        if self.signing is not None and not self.signing.can_sign:
            # DF-SEC-140: a node of a signed cluster cannot publish unsigned entries
            raise ValueError("signed cluster: this node has no secret key to sign with")
        self._end_round()
        n = self.num_params
        if self._selector is None:
            self._selector = Selector(n)
        self._selector.native = self.native
        k = self.config.num_selected(n)  # DF-GEN-2
        # DF-GEN-1 (d = fl32(active - anchor), element by element, tensor by tensor) and DF-GEN-3
        # (exact) / DF-GEN-7 (fast): the selected indices and d there (the selected deltas; idx:
        # intp, no index conversion per use). The selector reads d block by block; it keeps d whole
        # (in its O(N) scratch) only when its sample path does not decide.
        idx, dsel = self._selector.select_delta(
            [flat] if flat is not None else parts, self._anchor, k, fast=fast
        )
        self.last_correction = (_NO_INDICES, _NO_VALUES)
        if idx.size == 0:
            return []  # DF-GEN-8
        # DF-GEN-9: checked on d itself, before encoding: F16/BF16 would clamp an infinity to a
        # finite value. An infinity is the largest magnitude, so it is always among the selected.
        if (
            self.native is None
            or not ready(dsel, np.float32)
            or self.native.max_abs([dsel]) == np.inf
        ):
            finite = np.isfinite(dsel)  # (max_abs is inf exactly when a value is not finite)
            if not bool(finite.all()):
                raise NonFiniteDelta(int(idx[int(np.argmin(finite))]))
        # DF-GEN-6: split into entries that fit a packet alone; then, per entry, the values are the
        # decoded values of what is sent (DF-GEN-4, by the encodings table) and the anchor moves by
        # them (DF-GEN-5, error feedback).
        vc = codec(self.config.encoding)
        indices = idx.astype(np.uint32)
        entries = []
        step = self._max_entry_values
        averaging = self.config.average_count > 1
        w = np.float32(self.config.send_weight_f32)
        corr: list[NDArray[np.float32]] = []
        made: dict[int, tuple[NDArray[np.float32], np.float32, NDArray[np.int8]]] = {}
        self._q8_made = made  # this generation's Q8 codes, by the identity of the sent values
        q8_native = (
            self.native is not None and vc.encoding is ValueEncoding.Q8 and ready(dsel, np.float32)
        )
        for start in range(0, indices.size, step):
            part = indices[start : start + step]
            ipart = idx[start : start + step]
            dpart = dsel[start : start + step]
            if averaging and q8_native:  # the same codes, sent values and correction in one call
                assert self.native is not None
                sent = np.empty(dpart.size, dtype=np.float32)
                fix = np.empty(dpart.size, dtype=np.float32)
                codes = np.empty(dpart.size, dtype=np.int8)
                scale = self.native.q8_send(dpart, w, codes, sent, fix)
                if scale != scale:  # as Q8 refuses a value that is not finite
                    raise ValueError("Q8 encodes finite values only")
                corr.append(fix)
                if scale <= _Q8_SAME_CODES:  # re-encoding `sent` gives these codes: pack sends them
                    made[id(sent)] = (sent, np.float32(scale), codes)
            elif averaging:  # DF-GEN-70: send fl32(w * d); the own weights keep only what is sent
                sent = vc.quantize(np.multiply(dpart, w, dtype=np.float32))
                corr.append(np.subtract(sent, dpart, dtype=np.float32))
            else:
                sent = vc.quantize(dpart)
            if self.native is not None:  # the same fl32(anchor + sent), distinct indices
                sent = aligned(sent, np.float32)
                self.native.scatter_add(self._anchor, part, sent)
                self._anchor_grew(float(self.native.max_abs([sent])))
            else:
                self._anchor[ipart] = self._anchor[ipart] + sent
                self._anchor_bound = None
            entry = Entry(
                origin=self.node_id,
                incarnation=self.incarnation,
                seq=self.next_seq,
                hops=0,
                indices=part,
                values=sent,
            )
            if self.signing is not None:  # DF-SEC-140
                entry = replace(
                    entry, signature=self.signing.sign(self._fingerprint, vc.encoding, entry)
                )
            entries.append(entry)
            self.next_seq += 1
        self.entries_generated += len(entries)
        if self.influence is not None:  # OPTIONAL bounded influence: own entries set the scale
            for e in entries:
                self.influence.note_own(e.values)
        if averaging:
            self.last_correction = (indices, corr[0] if len(corr) == 1 else np.concatenate(corr))
        return entries

    # receive (DF-RCV) and relay (DF-RLY) --------------------------------------------------------------
    def receive(
        self,
        packets: Sequence[bytes | bytearray | memoryview],
        *,
        active: ActiveView | None = None,
    ) -> ReceiveResult:
        """Process one step's packets in arrival order; apply the aggregate to the anchor.

        A packet that fails decoding or validation is rejected whole and changes nothing but its error
        counter (DF-RCV-1). Entries of accepted packets pass the origin / incarnation / window checks in
        order (DF-RCV-2..4); accepted ones are damped (DF-RCV-5), summed (DF-RCV-6) and yield relay entries
        (DF-RLY-1, 2). A packet whose accepted entries would make the step's aggregate, or the anchor or
        the active weights after the apply, non-finite at an index is refused whole with
        ``NON_FINITE_RESULT`` (DF-RCV-50): its admissions are undone. ``active`` is the node's active
        weights (a flat f32 array, or a function returning them at given indices, e.g.
        ``WeightStore.gather``); without it only the anchor is checked. The returned aggregate is applied
        to the anchor here and to the active weights by the caller (DF-RCV-7).
        """
        cfg = self.config
        if isinstance(active, list) and (
            any(
                not isinstance(p, np.ndarray) or p.dtype.str[1:] != "f4" or p.ndim != 1
                for p in active
            )
            or sum(int(p.shape[0]) for p in active) != self.num_params
        ):
            raise ValueError(
                f"active parts must be 1-D float32 arrays of {self.num_params} values in all"
            )
        alpha = np.float32(cfg.alpha)
        threshold = cfg.relay_threshold
        hop_limit = cfg.hop_limit
        res = ReceiveResult(np.empty(0, dtype=np.uint32), np.empty(0, dtype=np.float32))
        needed = cfg.relay_policy is RelayPolicy.NEEDED
        copies: dict[tuple[int, int, int], set[int]] = {}  # senders of every copy of an entry
        parts_idx: list[NDArray[np.uint32]] = []
        # the same indices as intp (no conversion per use; u32 on the sparse path, for the kernels)
        parts_ix: list[NDArray[np.intp] | NDArray[np.uint32]] = []
        parts_new: list[NDArray[np.float32]] = []  # agg at an entry's indices after its sum
        thr32 = _f32_at_least(threshold)  # |u| >= threshold as real numbers, |u| being f32
        c = self.counters
        if self._agg is None:  # O(N) scratch, +0 everywhere between steps
            self._agg = np.zeros(self.num_params, dtype=np.float32)
        agg = self._agg
        anchor = self._anchor
        signing = self.signing
        # The first accepted part's sums stay out of `agg` (+0 everywhere until then) until another
        # part needs them there (`deferred`); with one part in the step, agg is never touched.
        deferred = False
        first_anchor: NDArray[np.float32] | None = (
            None  # fl32(anchor + agg) there (DF-RCV-50 check)
        )
        # per accepted packet: the indices it touched and fl32(anchor + agg) there just after it
        # (its DF-RCV-50 check); with `anchor_writes`, their element count
        parts_anchor: list[
            tuple[NDArray[np.intp] | NDArray[np.uint32], NDArray[np.float32] | None]
        ] = []
        anchor_writes = 0
        # With the native kernels, the step's aggregate is kept sparse while every accepted packet
        # has one accepted entry: the sorted union of the indices (sp_idx) and the sums there
        # (sp_val), merged entry by entry (the same sums as the dense scratch; agg is not touched).
        # A packet with several accepted entries writes it into agg and the step goes on dense.
        nat = self.native
        sparse = nat is not None
        self._bound = None  # max(|anchor|, |active|) for the DF-RCV-50 proof, once per step
        sp_idx: NDArray[np.uint32] | None = None
        sp_val: NDArray[np.float32] | None = None
        for i, buf in enumerate(packets):
            c.packets_received += 1
            try:
                pkt = decode_packet(buf, cfg.max_packet_size)
                validate_packet(
                    pkt,
                    fingerprint=self._fingerprint,
                    num_params=self.num_params,
                    hop_limit=hop_limit,
                )
                if signing is not None:
                    self._check_signatures(pkt)  # DF-SEC-142: step 16 of DF-RCV-20
            except DecodeError as exc:  # DF-RCV-1: the whole packet, no state change
                self._reject(res, i, exc.code)
                continue
            saved: dict[int, dict[int, ReplayWindow] | None] = {}
            p_copies: list[tuple[int, int, int]] = []  # NEEDED: copies, counted once accepted
            verdicts: list[Admission] = []
            accepted: list[AcceptedEntry] = []
            relay: list[Entry] = []
            p_idx: list[NDArray[np.uint32]] = []
            p_ix: list[NDArray[np.intp] | NDArray[np.uint32]] = []
            p_new: list[NDArray[np.float32]] = []
            undo: list[tuple[NDArray[np.intp], NDArray[np.float32]]] = []
            owned = isinstance(buf, bytes)  # immutable: relays may keep views over it
            pend: tuple[NDArray[np.uint32], NDArray[np.float32]] | None = (
                None  # sparse, if accepted
            )
            acc_e: list[Entry] = []  # the accepted entries, in packet order
            for j, e in enumerate(pkt.entries):
                # only an entry that will be accepted changes the state: save its origin's table
                # once per packet, before the first change
                if (
                    e.origin not in saved
                    and self.state.check(e.origin, e.incarnation, e.seq) is Admission.ACCEPTED
                ):
                    saved[e.origin] = self.state.save(e.origin)
                verdict = self.state.admit(e.origin, e.incarnation, e.seq)  # DF-RCV-2..4
                verdicts.append(verdict)
                if needed:
                    p_copies.append((e.origin, e.incarnation, e.seq))
                if verdict is not Admission.ACCEPTED:
                    continue
                accepted.append(AcceptedEntry(e.origin, e.incarnation, e.seq, e.hops, i, j))
                acc_e.append(e)
            if len(acc_e) == 1 and sparse:
                assert nat is not None
                e = acc_e[0]
                u = aligned(self._damped(e, alpha), np.float32)  # DF-RCV-5: fl32(alpha_f32 * v)
                eidx = aligned(e.indices, np.uint32)  # a copy only of unaligned wire indices
                # DF-RCV-6, index by index from +0 (an entry's indices are distinct)
                if sp_idx is None or sp_val is None:
                    new = np.add(u, _F32_ZERO, dtype=np.float32)
                    pend = (eidx, new)
                else:
                    room = sp_idx.size + eidx.size
                    o_idx = np.empty(room, dtype=np.uint32)
                    o_val = np.empty(room, dtype=np.float32)
                    new = np.empty(eidx.size, dtype=np.float32)
                    m = nat.merge_add(sp_idx, sp_val, eidx, u, o_idx, o_val, new)
                    pend = (o_idx[:m], o_val[:m])
                p_idx.append(eidx)
                p_ix.append(eidx)  # the kernels take u32 indices as they are
                p_new.append(new)
                self._relay_entries(relay, acc_e, u, thr32, owned)
            elif len(acc_e) == 1:
                e = acc_e[0]
                u = self._damped(e, alpha)  # DF-RCV-5: fl32(alpha_f32 * v)
                # DF-RCV-6, index by index from +0 (an entry's indices are distinct)
                ix = e.indices.astype(np.intp)
                if not parts_idx:  # agg is +0 everywhere: the sums are fl32(+0 + u), kept aside
                    new = np.add(u, _F32_ZERO, dtype=np.float32)
                else:
                    if deferred:
                        agg[parts_ix[0]] = parts_new[0]
                        deferred = False
                    old = agg[ix]
                    undo.append((ix, old))
                    with np.errstate(over="ignore", invalid="ignore"):  # checked below (DF-RCV-50)
                        new = old + u
                    agg[ix] = new
                p_idx.append(e.indices)
                p_ix.append(ix)
                p_new.append(new)
                self._relay_entries(relay, acc_e, u, thr32, owned)
            elif acc_e:  # several entries: one pass over all of them
                if sparse:  # the sparse aggregate goes into agg; the step goes on dense
                    assert nat is not None
                    if sp_idx is not None and sp_val is not None:
                        nat.scatter(agg, sp_idx, sp_val)
                    sparse = False
                    for j, (p_ix_, p_sum) in enumerate(parts_anchor):  # proven parts: their sums
                        if p_sum is None:
                            got = np.empty(p_ix_.size, dtype=np.float32)
                            nat.gather_add(anchor, p_ix_, parts_new[j], got)
                            parts_anchor[j] = (p_ix_, got)
                    parts_ix = [p.astype(np.intp) for p in parts_idx]
                    parts_anchor = [(p.astype(np.intp), v) for p, v in parts_anchor]
                    anchor_writes = sum(int(p.size) for p, _ in parts_anchor)
                    if len(parts_anchor) == 1:  # as if the dense path had taken the first part
                        first_anchor = parts_anchor[0][1]
                if deferred:
                    agg[parts_ix[0]] = parts_new[0]
                    deferred = False
                ix = np.concatenate([e.indices for e in acc_e]).astype(np.intp)
                if self.influence is None and signing is None:
                    vals = np.concatenate([e.values for e in acc_e])
                    u = np.multiply(vals, alpha, dtype=np.float32)  # DF-RCV-5
                else:  # damped (and clipped) entry by entry
                    u = np.concatenate([self._damped(e, alpha) for e in acc_e])
                undo.append((ix, agg[ix]))  # duplicates hold the same old value
                # DF-RCV-6: ufunc.at adds element by element in order, so an index shared by
                # several entries is summed in entry order from +0, in f32
                with np.errstate(over="ignore", invalid="ignore"):  # checked below (DF-RCV-50)
                    np.add.at(agg, ix, u)
                p_idx.extend(e.indices for e in acc_e)
                self._relay_entries(relay, acc_e, u, thr32, owned)
            ok, p_anchor = (
                self._finite_result(p_idx, p_ix, p_new, active, prove=sparse)
                if p_idx
                else (True, None)
            )
            if not ok:
                for idx, old in reversed(undo):  # DF-RCV-50: the packet changes nothing
                    agg[idx] = old
                for origin, table in saved.items():
                    self.state.restore(origin, table)
                self._reject(res, i, ErrorCode.NON_FINITE_RESULT)
                continue
            if pend is not None:
                sp_idx, sp_val = pend
            if p_idx and not parts_idx and len(p_idx) == 1 and not sparse:
                deferred = not undo  # the first part, its sums not written to agg
                first_anchor = p_anchor[1] if p_anchor is not None else None
            if p_anchor is not None:
                parts_anchor.append(p_anchor)
                anchor_writes += int(p_anchor[0].size)
            c.packets_accepted += 1
            res.outcomes.append(None)
            if needed:
                self._note_packet(pkt.sender, pkt.heard)
                for key in p_copies:
                    copies.setdefault(key, set()).add(pkt.sender)
            for v in verdicts:
                if v is not Admission.ACCEPTED:
                    c.count_drop(v)
            res.accepted.extend(accepted)
            res.relay.extend(relay)
            parts_idx.extend(p_idx)
            parts_ix.extend(p_ix)
            parts_new.extend(p_new)
            res.entry_outcomes.append(verdicts)
        if needed and res.relay:  # DF-RLY-60, after every advertisement of the step is known
            kept = [e for e in res.relay if self._relay_needed(e, copies)]
            c.relay_suppressed += len(res.relay) - len(kept)
            res.relay = kept
        c.entries_accepted += res.accepted_entries
        c.entries_relayed += len(res.relay)
        if parts_idx and sparse:  # agg untouched: the sparse aggregate is the result
            assert nat is not None and sp_idx is not None and sp_val is not None
            res.indices = np.array(sp_idx, dtype=np.uint32) if len(parts_idx) == 1 else sp_idx
            res.values = sp_val
            # DF-RCV-7 (anchor side): fl32(anchor + agg) once over the union (one pass over the
            # anchor, not one per packet; the sums the DF-RCV-50 checks made, where they made them)
            nat.scatter_add(anchor, sp_idx, sp_val)
            self._anchor_grew(float(nat.max_abs([sp_val])))
            c.values_applied += int(res.indices.size)
        elif parts_idx:
            self._anchor_bound = None  # written below: read again when next needed
            if len(parts_idx) == 1:  # one accepted entry: agg at its indices is its sum
                res.indices = np.array(parts_idx[0], dtype=np.uint32)
                ix = np.asarray(parts_ix[0], dtype=np.intp)  # intp on the dense path: no copy
                res.values = parts_new[0]
                if not deferred:
                    agg[ix] = 0.0  # back to +0 for the next step
                # DF-RCV-7 (anchor side): fl32(anchor + agg), computed by the DF-RCV-50 check
                assert first_anchor is not None
                anchor[ix] = first_anchor
            else:
                ix = self._union(parts_idx)
                res.indices = ix.astype(np.uint32)
                res.values = agg[ix]  # a copy (fancy indexing)
                if 8 * ix.size >= agg.size:  # back to +0 for the next step: a memset is
                    agg.fill(0.0)  # cheaper than a scatter over an eighth of N or more
                elif self.native is not None:
                    self.native.scatter_value(agg, ix, 0.0)
                else:
                    agg[ix] = 0.0
                if anchor_writes <= 2 * ix.size:
                    # DF-RCV-7 (anchor side) from the DF-RCV-50 checks: at every index, the last
                    # packet that touched it saw agg at its final value, and anchor does not move
                    # before this point, so its fl32(anchor + agg) is the result; written in
                    # acceptance order, it is the last write there
                    for p_ix_, p_sum in parts_anchor:
                        anchor[p_ix_] = p_sum
                else:  # heavily overlapping packets: one read and one write of the union
                    anchor[ix] = anchor[ix] + res.values  # DF-RCV-7 (anchor side)
            c.values_applied += int(res.indices.size)
        return res

    def _union(self, parts_idx: list[NDArray[np.uint32]]) -> NDArray[np.intp]:
        """The sorted distinct indices of the step's accepted parts (each strictly increasing), as
        intp. With an eighth of N or more in all, one mark per index in an N-value boolean scratch
        and one nonzero pass over it (O(N), but cheaper than the sort of that many indices); else
        `_sorted_unique` (O(k log k)). The same array either way."""
        n = self.num_params
        total = sum(int(p.size) for p in parts_idx)
        nat = self.native
        if nat is not None and all(ready(p, np.uint32) for p in parts_idx):
            got = np.empty(total, dtype=np.intp)  # the same array in one native pass
            return got[: nat.union(parts_idx, n, got)]
        if 8 * total < n:
            out: NDArray[np.intp] = _sorted_unique(parts_idx).astype(np.intp)
            return out
        if self._mark is None:
            self._mark = np.zeros(n, dtype=np.bool_)
        mark = self._mark
        for p in parts_idx:
            mark[p] = True
        ix = np.flatnonzero(mark)
        mark.fill(False)  # a memset of N bytes, cheaper than a scatter at this size
        return ix

    def _damped(self, e: Entry, alpha: np.float32) -> NDArray[np.float32]:
        """DF-RCV-5 for one entry: ``fl32(alpha * v)``; in a signed cluster the origin's values are
        damped once more per hop (DF-RCV-140); the OPTIONAL bounded influence (not in 1.1) clips."""
        if alpha == 1 and self.signing is None and self.influence is None:
            # fl32(1 * v) is v, bit for bit (the values are finite: DF-RCV-20), so no product
            return np.asarray(e.values, dtype=np.float32)
        u = np.multiply(e.values, alpha, dtype=np.float32)
        if self.signing is not None:
            for _ in range(e.hops):
                u = np.multiply(u, alpha, dtype=np.float32)
        if self.influence is not None:
            u = self.influence.clip(e.origin, u)
        return u

    def _relay_entries(
        self,
        relay: list[Entry],
        entries: list[Entry],
        damped: NDArray[np.float32],
        thr32: np.float32,
        owned: bool,
    ) -> None:
        """DF-RLY-1, 2: the relay entries of accepted ``entries`` (``damped``: their values after
        DF-RCV-5, concatenated): hops below the limit, the values of magnitude >= relay_threshold,
        if any. One pass over all the values, then slices per entry."""
        hop_limit = self.config.hop_limit
        sizes = [e.indices.size for e in entries]
        nat = self.native
        if len(entries) == 1 and nat is not None and ready(damped, np.float32):
            # the count in one native pass; the mask only when some values stay behind
            kept = [int(nat.count_at_least(damped, thr32))]
            keep = (np.abs(damped) >= thr32) if 0 < kept[0] < sizes[0] else None
        elif len(entries) == 1:
            keep = np.abs(damped) >= thr32  # |u| >= relay_threshold, compared as real numbers
            kept = [int(np.count_nonzero(keep))]
        else:
            keep = np.abs(damped) >= thr32
            starts = np.cumsum([0, *sizes[:-1]])
            kept = np.add.reduceat(keep, starts, dtype=np.int64).tolist()
        a = 0
        for e, n, k in zip(entries, sizes, kept, strict=True):
            b = a + n
            if e.hops + 1 > hop_limit or k == 0:  # DF-RLY-1, DF-RLY-2
                a = b
                continue
            if self.signing is not None:  # DF-RLY-140: the origin's values and signature, whole
                relay.append(
                    Entry(
                        e.origin,
                        e.incarnation,
                        e.seq,
                        e.hops + 1,
                        np.array(e.indices, dtype=np.uint32),
                        np.array(e.values, dtype=np.float32),
                        signature=e.signature,
                    )
                )
                a = b
                continue
            u = damped[a:b]
            if k == n:
                r_idx = e.indices if owned else e.indices.copy()
                r_val = u if owned else u.copy()  # at alpha 1, u may be a view of the packet
            else:
                assert keep is not None
                m = keep[a:b]
                r_idx, r_val = e.indices[m], u[m]
            relay.append(Entry(e.origin, e.incarnation, e.seq, e.hops + 1, r_idx, r_val))
            a = b

    # relay policy NEEDED (spec section 8.6) --------------------------------------------------------
    def _note_packet(self, sender: int, heard: tuple[int, ...] | None) -> None:
        """An accepted packet of ``sender``: it is heard directly (DF-RLY-61) and, when it carries
        one, its advertisement replaces the stored one (DF-RLY-62)."""
        if sender == self.node_id:
            return
        self._heard_now.add(sender)
        if heard is not None:
            self._adverts[sender] = (frozenset(heard), 0)

    def _relay_needed(self, e: Entry, copies: dict[tuple[int, int, int], set[int]]) -> bool:
        """DF-RLY-60: whether some neighbour (a node heard in this or the last round, which hears
        this node too on symmetric links) other than the origin may lack the entry: its current
        advertisement does not list the origin, and no copy of the entry came from it this step."""
        got = copies.get((e.origin, e.incarnation, e.seq), set())
        for peer in self._heard_now | self._heard_prev:
            if peer == e.origin or peer in got:
                continue
            advert = self._adverts.get(peer)
            if advert is None or e.origin not in advert[0]:
                return True
        return False

    def _end_round(self) -> None:
        """A generation ends the node's sync round: heard sets and advertisements age by one
        round; an advertisement received two rounds ago or earlier is forgotten (DF-RLY-62)."""
        self._heard_prev, self._heard_now = self._heard_now, set()
        self._adverts = {p: (ids, age + 1) for p, (ids, age) in self._adverts.items() if age < 1}

    @property
    def heard(self) -> tuple[int, ...]:
        """The node ids this node advertises (DF-RLY-61): the senders of packets it accepted in its
        current and its previous sync round, ascending."""
        return tuple(sorted(self._heard_now | self._heard_prev))

    def advertisement(self) -> bytes | None:
        """With relay policy NEEDED, a packet with no entry that carries this node's advertisement
        (DF-RLY-63: published in a sync round that has nothing else to send); ``None`` otherwise."""
        if self.config.relay_policy is not RelayPolicy.NEEDED:
            return None
        return self._encode([], PACKET_OVERHEAD_BOUND)

    def forget_peer(self, peer: int) -> None:
        """A peer left the cluster (its liveliness token is gone): it is no longer a neighbour."""
        self._heard_now.discard(peer)
        self._heard_prev.discard(peer)
        self._adverts.pop(peer, None)

    def count_rejected(self, code: ErrorCode, n: int = 1) -> None:
        """Count ``n`` packets that the transport rejected before its queue with ``code``
        (DF-ZEN-154: ``OVERSIZE`` or ``BAD_IDENTIFIER``) as the engine counts its own (DF-RCV-10)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        c = self.counters
        c.packets_received += n
        c.packets_rejected += n
        c.errors[code] = c.errors.get(code, 0) + n

    def _check_signatures(self, pkt: Packet) -> None:
        """DF-SEC-142: in a signed cluster every entry carries a valid signature by the pinned key of
        its origin over the packet's fingerprint and encoding, and the encoding is the node's own
        (DF-SEC-143); ``DecodeError(BAD_SIGNATURE)`` otherwise."""
        assert self.signing is not None
        if pkt.entries and pkt.encoding != self.config.encoding:
            raise DecodeError(
                ErrorCode.BAD_SIGNATURE,
                f"encoding {pkt.encoding.name} is not the signed cluster's {self.config.encoding.name}",
            )
        for j, e in enumerate(pkt.entries):
            why = self.signing.verify(pkt.fingerprint, pkt.encoding, e)
            if why is not None:
                raise DecodeError(ErrorCode.BAD_SIGNATURE, f"entries[{j}]: {why}")

    def _reject(self, res: ReceiveResult, i: int, code: ErrorCode) -> None:
        c = self.counters
        c.packets_rejected += 1
        c.count_error(code)
        res.rejected.append((i, code))
        res.outcomes.append(code)
        res.entry_outcomes.append([])

    def _finite_result(
        self,
        p_idx: list[NDArray[np.uint32]],
        p_ix: list[NDArray[np.intp] | NDArray[np.uint32]],
        p_new: list[NDArray[np.float32]],
        active: ActiveView | None,
        *,
        prove: bool = False,
    ) -> tuple[
        bool, tuple[NDArray[np.intp] | NDArray[np.uint32], NDArray[np.float32] | None] | None
    ]:
        """DF-RCV-50 at the indices a packet touched (its accepted entries' ``p_idx``, as intp
        ``p_ix``; ``p_new``: the aggregate at them after each entry's sum): the running aggregate
        ``agg[i]``, ``fl32(anchor[i] + agg[i])`` and ``fl32(active[i] + agg[i])`` are all finite.
        ``active`` as a function is given the indices sorted and unique (``WeightStore.gather``).
        Returns the verdict and, when it passes, the packet's indices (sorted, distinct, intp) with
        ``fl32(anchor + agg)`` there."""
        assert self._agg is not None
        if len(p_idx) == 1:  # one entry (distinct indices): agg there is what its sum left
            idx, ix, a = p_idx[0], p_ix[0], p_new[0]
        else:
            idx = _sorted_unique(p_idx)
            ix = idx.astype(np.intp)
            a = self._agg[ix]
        nat = self.native
        if nat is not None:
            idx, a = aligned(idx, np.uint32), aligned(a, np.float32)
        views = isinstance(active, list) and all(ready(p, np.float32) for p in active)
        if nat is not None and prove and 16 * a.size >= self.num_params:
            # DF-RCV-50 proven without a sum: two f32 below 2**127 in magnitude have a finite sum,
            # so when agg here, the anchor and the active weights all are, every sum is finite.
            # Then the anchor's sums are not made here (None): the caller adds agg over the union.
            # Only for a packet of N / 16 values or more: the bound reads the anchor and the active
            # weights whole (once per step), which a sparse pass at that density costs anyway;
            # below it, receive stays O(entries), not O(N).
            bound = self._step_bound(active, views)
            if bound is not None and bound < _PROOF_LIMIT and nat.max_abs([a]) < _PROOF_LIMIT:
                return True, (ix, None)
        with np.errstate(over="ignore", invalid="ignore"):
            if nat is not None and isinstance(active, list) and views:  # one native walk
                anchor_sum = np.empty(a.size, dtype=np.float32)
                ok = bool(nat.check_sums(self._anchor, active, idx, a, anchor_sum))
                return ok, ((ix, anchor_sum) if ok else None)
            if nat is not None:  # the same sums and verdict in one pass
                anchor_sum = np.empty(a.size, dtype=np.float32)
                if not nat.gather_add(self._anchor, idx, a, anchor_sum):
                    return False, None
            else:
                anchor_sum = self._anchor[ix] + a
                # an infinite or NaN agg[i] makes anchor[i] + agg[i] infinite or NaN (IEEE 754),
                # so this one test also finds a non-finite aggregate
                if not bool(np.isfinite(anchor_sum).all()):
                    return False, None
            kept = (ix, anchor_sum)
            if active is None:
                return True, kept
            if isinstance(active, list):
                ok = _parts_add_finite(nat if views else None, active, idx, a)
            else:
                act = active[ix] if isinstance(active, np.ndarray) else active(idx)
                ok = bool(np.isfinite(np.asarray(act, dtype=np.float32) + a).all())
            return ok, (kept if ok else None)

    def _step_bound(self, active: ActiveView | None, views: bool) -> float | None:
        """``max(|anchor|, |active|)`` (inf with a NaN or an infinity), once per receive step; None
        when the active weights cannot be read whole (a gather function, or arrays the kernels do
        not take): the exact check runs then."""
        if self._bound is None:
            nat = self.native
            assert nat is not None
            if active is None:
                act = 0.0
            elif isinstance(active, list) and views:
                act = float(nat.max_abs(active))
            elif isinstance(active, np.ndarray) and ready(active, np.float32):
                act = float(nat.max_abs([active]))
            else:
                return None
            if self._anchor_bound is None or not self._anchor_bound < _PROOF_LIMIT:
                self._anchor_bound = float(nat.max_abs([self._anchor]))  # exact again
            self._bound = max(act, self._anchor_bound)
        return self._bound

    def _anchor_grew(self, top: float) -> None:
        """The anchor moved by values of magnitude at most ``top`` (inf: not finite) at distinct
        indices: |fl32(a + v)| <= fl32(|a| + |v|) <= (|a| + |v|)(1 + 2**-24), so the bound grows by
        ``top`` and that factor (rounded up once more); an unknown bound stays unknown."""
        if self._anchor_bound is not None:
            self._anchor_bound = (self._anchor_bound + top) * (1.0 + 2.0**-22)

    def pack(self, own: Sequence[Entry], relay: Sequence[Entry]) -> list[bytes]:
        """DF-RLY-3/4: own entries first, then relay entries in acceptance order, greedily packed into
        packets of at most ``max_packet_size`` bytes (sender = this node, the node's send encoding).

        Packing uses the wire's size bound. An own entry too large for a packet raises ``ValueError``
        (`generate` never makes one); a relay entry that does not fit even alone (possible when relaying
        16-bit values as f32) is dropped and counted in ``relay_dropped_oversize`` (an entry cannot be
        split: the parts would share one seq).
        """
        limit = self.config.max_packet_size
        out: list[bytes] = []
        batch: list[Entry] = []
        size = PACKET_OVERHEAD_BOUND

        def flush() -> None:
            nonlocal batch, size
            if batch:
                out.append(self._encode(batch, size))
            batch, size = [], PACKET_OVERHEAD_BOUND

        for is_own, e in [(True, x) for x in own] + [(False, x) for x in relay]:
            bound = encoded_size_bound(int(e.indices.size), signed=e.signature is not None)
            if PACKET_OVERHEAD_BOUND + bound > limit:
                alone = self._encode([e], PACKET_OVERHEAD_BOUND + bound)
                if len(alone) > limit:
                    if is_own:
                        raise ValueError("own entry too large for max_packet_size")
                    self.relay_dropped_oversize += 1
                    continue
                flush()
                out.append(alone)
                continue
            if size + bound > limit:
                flush()
            batch.append(e)
            size += bound
        flush()
        return out

    def _encode(self, entries: Sequence[Entry], estimate: int) -> bytes:
        """One packet of ``entries`` whose size estimate (DF-RLY-3) is ``estimate``."""
        pkt = Packet(
            sender=self.node_id,
            sender_incarnation=self.incarnation,
            fingerprint=self._fingerprint,
            entries=tuple(entries),
            encoding=self.config.encoding,
            index_encoding=self.config.index_encoding,
        )
        if self.config.relay_policy is RelayPolicy.NEEDED:
            # DF-RLY-61: the advertisement rides on every packet whose estimate leaves room for it.
            heard = self.heard
            if estimate + heard_size_bound(len(heard)) <= self.config.max_packet_size:
                pkt = replace(pkt, heard=heard)
        return encode_packet(pkt, q8_codes=self._q8_made)

    def step(
        self,
        active: NDArray[np.float32],
        packets: Sequence[bytes | bytearray | memoryview],
        *,
        sync: bool,
        fast: bool = False,
    ) -> tuple[ReceiveResult, list[bytes]]:
        """Receive ``packets``, apply the aggregate to ``active`` (in place), generate when ``sync``, pack
        own and relay entries. Returns the receive result and the packets to publish."""
        self._check_active(active)
        res = self.receive(packets, active=active)
        res.apply_to(active)
        own = self.generate(active, fast=fast) if sync else []
        if sync:
            ci, cv = self.last_correction
            if ci.size:  # DF-GEN-70
                active[ci] = active[ci] + cv
        out = self.pack(own, res.relay)
        if sync and not out:
            advert = self.advertisement()  # DF-RLY-63
            out = [] if advert is None else [advert]
        return res, out

    # snapshots ----------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A copy of the anchor with the manifest fingerprint (the network layer chunks it)."""
        return Snapshot(self._fingerprint, self._anchor.copy())

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the anchor by a snapshot of the same manifest (``ValueError`` otherwise)."""
        if bytes(snapshot.fingerprint) != self._fingerprint:
            raise ValueError("snapshot fingerprint does not match the manifest")
        self._set_anchor(np.asarray(snapshot.anchor, dtype=np.float32))

    @classmethod
    def from_snapshot(
        cls,
        manifest: Manifest,
        config: SyncConfig,
        node_id: int,
        incarnation: int,
        snapshot: Snapshot,
        *,
        max_origins: int | None = None,
        signing: Signing | None = None,
    ) -> Engine:
        """A joining node (DF-ZEN-5): anchor = snapshot; use a fresh incarnation and active = anchor."""
        eng = cls(manifest, config, node_id, incarnation, max_origins=max_origins, signing=signing)
        eng.restore(snapshot)
        return eng


def _f32_at_least(x: float) -> np.float32:
    """The smallest f32 >= ``x`` (inf above the f32 range): for an f32 ``a``, ``a >= x`` compared as
    real numbers is ``a >= _f32_at_least(x)``."""
    with np.errstate(over="ignore"):
        f: np.float32 = np.float32(x)
    if float(f) < x:
        up: np.float32 = np.nextafter(f, np.float32(np.inf), dtype=np.float32)
        return up
    return f


def _parts_add_finite(
    nat: object | None,
    parts: list[NDArray[np.float32]],
    idx: NDArray[np.uint32],
    a: NDArray[np.float32],
) -> bool:
    """Whether ``fl32(active[idx] + a)`` is finite everywhere, ``active`` being the concatenation of
    ``parts`` and ``idx`` strictly increasing (DF-RCV-50 on the active side)."""
    if nat is not None:
        return bool(nat.parts_add_finite(parts, idx, a))  # type: ignore[attr-defined]
    bounds = np.cumsum([0, *(int(p.shape[0]) for p in parts)])
    cuts = np.searchsorted(idx, bounds)
    for p, lo, hi, start in zip(parts, cuts[:-1], cuts[1:], bounds[:-1], strict=True):
        if hi > lo:
            local = idx[lo:hi].astype(np.intp) - int(start)
            if not bool(np.isfinite(p[local] + a[lo:hi]).all()):
                return False
    return True


def _sorted_unique(parts: list[NDArray[np.uint32]]) -> NDArray[np.uint32]:
    """The sorted distinct values of ``parts`` (each already strictly increasing). O(k log k): a sort
    and a mask (``np.unique`` takes a slower hash path for integers in NumPy 2). Equal integers
    cannot be told apart, so the default sort gives what a stable one gives (faster than timsort's
    merge of the sorted runs here)."""
    s = np.sort(np.concatenate(parts))
    keep = np.empty(s.size, dtype=bool)
    keep[:1] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
