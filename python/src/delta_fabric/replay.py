"""Replay protection, the receiver state: replay windows (DF-RCV-3), incarnation tables (DF-RCV-4) and
counters (module `delta_fabric.replay`; `df_core::replay` in Rust)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from delta_fabric.errors import ErrorCode

__all__ = [
    "DEFAULT_MAX_ORIGINS",
    "Admission",
    "Counters",
    "ReceiverState",
    "ReplayWindow",
]

#: Origins tracked by default; a new origin beyond this is dropped (``origin_limit``), never evicted:
#: evicting an origin would forget its windows and let its old entries be applied a second time.
DEFAULT_MAX_ORIGINS = 4096


class Admission(str, Enum):
    """What the receiver does with one entry of an accepted packet."""

    ACCEPTED = "accepted"
    OWN_ORIGIN = "own_origin"  # DF-RCV-2
    DUPLICATE = "duplicate"  # DF-RCV-3
    TOO_OLD = "too_old"  # DF-RCV-3
    STALE_INCARNATION = "stale_incarnation"  # DF-RCV-4
    ORIGIN_LIMIT = "origin_limit"  # receiver bound on tracked origins (not fixed by the spec's table; spec DF-SEC-2)
    NOT_MEMBER = "not_member"  # DF-RCV-51 (1.1): origin outside the receiver's membership
    SEQ_JUMP = "seq_jump"  # DF-RCV-52 (1.1): seq too far above a tracked incarnation's highest
    #: DF-RCV-175 (1.1): an incarnation not tracked yet lies more than ``max_incarnation_ahead`` ahead
    #: of the receiver's clock ``now_us``
    FUTURE_INCARNATION = "future_incarnation"
    #: DF-RCV-178 (1.1): a new incarnation would evict one that accepted an entry less than
    #: ``incarnation_grace`` ago
    LIVE_INCARNATION = "live_incarnation"

    def __str__(self) -> str:
        return self.value


class ReplayWindow:
    """Sliding window over the seqs of one (origin, incarnation) (DF-RCV-3).

    ``highest`` is H (0 before the first seq), bit ``i`` of the bitmap is seq ``H - i`` (bit 0 = H).
    A seq is accepted when it is above H (the window slides) or inside ``(H - W, H]`` with its bit clear.
    """

    __slots__ = ("_bits", "highest", "last_us", "width")

    def __init__(self, width: int) -> None:
        if width < 1:
            raise ValueError("window width must be >= 1")
        self.width = width
        self.highest = 0
        self._bits = 0
        #: DF-RCV-178: the receiver's ``now_us`` at the last acceptance (``None``: unknown)
        self.last_us: int | None = None

    def check(self, seq: int) -> Admission:
        """The verdict for ``seq`` without changing the window."""
        if seq < 1:
            raise ValueError("seq must be >= 1")
        h = self.highest
        if seq > h:
            return Admission.ACCEPTED
        if seq <= h - self.width:
            return Admission.TOO_OLD
        return Admission.DUPLICATE if (self._bits >> (h - seq)) & 1 else Admission.ACCEPTED

    def admit(self, seq: int) -> Admission:
        """Check ``seq`` and record it when accepted."""
        verdict = self.check(seq)
        if verdict is Admission.ACCEPTED:
            h = self.highest
            if seq > h:
                shift = seq - h
                bits = (self._bits << shift) | 1 if shift < self.width else 1
                self._bits = bits & ((1 << self.width) - 1)
                self.highest = seq
            else:
                self._bits |= 1 << (h - seq)
        return verdict

    def copy(self) -> ReplayWindow:
        """An independent copy (O(W) bits)."""
        w = ReplayWindow(self.width)
        w.highest, w._bits, w.last_us = self.highest, self._bits, self.last_us
        return w

    def seen(self) -> list[int]:
        """Accepted seqs still inside the window, ascending (replaying them rebuilds this window)."""
        h, bits = self.highest, self._bits
        return sorted(h - i for i in range(min(self.width, h)) if (bits >> i) & 1)

    def __repr__(self) -> str:
        return f"ReplayWindow(W={self.width}, H={self.highest}, seen={len(self.seen())})"


@dataclass
class Counters:
    """Receiver counters: rejected packets per error code, dropped entries per reason, acceptances."""

    packets_received: int = 0
    packets_accepted: int = 0
    packets_rejected: int = 0
    entries_accepted: int = 0
    entries_relayed: int = 0
    values_applied: int = 0
    errors: dict[ErrorCode, int] = field(default_factory=dict)
    drops: dict[Admission, int] = field(default_factory=dict)
    #: relay candidates not relayed because every known peer already has them (DF-RLY-60, 1.1)
    relay_suppressed: int = 0

    def count_error(self, code: ErrorCode) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1

    def count_drop(self, reason: Admission) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1

    def to_json(self) -> dict[str, Any]:
        """Flat, stable JSON: every error code and drop reason present (0 when never seen)."""
        return {
            "packets_received": self.packets_received,
            "packets_accepted": self.packets_accepted,
            "packets_rejected": self.packets_rejected,
            "entries_accepted": self.entries_accepted,
            "entries_relayed": self.entries_relayed,
            "values_applied": self.values_applied,
            "relay_suppressed": self.relay_suppressed,
            "errors": {c.value: self.errors.get(c, 0) for c in ErrorCode},
            "drops": {
                r.value: self.drops.get(r, 0) for r in Admission if r is not Admission.ACCEPTED
            },
        }

    def copy(self) -> Counters:
        return Counters(
            self.packets_received,
            self.packets_accepted,
            self.packets_rejected,
            self.entries_accepted,
            self.entries_relayed,
            self.values_applied,
            dict(self.errors),
            dict(self.drops),
            self.relay_suppressed,
        )


class ReceiverState:
    """Per-origin incarnation tables, each incarnation with its replay window.

    DF-RCV-4: at most ``max_incarnations`` incarnations per origin. A new incarnation is tracked when the
    table has room; when full, one higher than the lowest tracked evicts the lowest; one lower than every
    tracked one is dropped (``stale_incarnation``). An evicted incarnation is lower than every incarnation
    tracked afterwards, so its later entries are stale too. The number of origins is bounded by
    ``max_origins`` (new origins beyond it are dropped as ``origin_limit``).
    """

    def __init__(
        self,
        own_id: int,
        *,
        window: int = 1024,
        max_incarnations: int = 4,
        max_origins: int = DEFAULT_MAX_ORIGINS,
        members: Iterable[int] | None = None,
        max_seq_jump: int = 0,
        max_incarnation_ahead: int = 0,
        incarnation_grace: int = 0,
    ) -> None:
        if window < 1 or max_incarnations < 1 or max_origins < 1:
            raise ValueError("window, max_incarnations and max_origins must be >= 1")
        if max_seq_jump < 0:
            raise ValueError("max_seq_jump must be >= 0")
        if max_incarnation_ahead < 0 or incarnation_grace < 0:
            raise ValueError("max_incarnation_ahead and incarnation_grace must be >= 0")
        #: DF-RCV-178: how long (microseconds) an incarnation that accepted an entry is not evicted.
        self.incarnation_grace = incarnation_grace
        #: DF-RCV-175: how far (microseconds) a new incarnation may lie ahead of ``now_us`` (0: any).
        self.max_incarnation_ahead = max_incarnation_ahead
        #: DF-RCV-175: the receiver's clock (microseconds since the Unix epoch) for this step, given
        #: by the node layer (`delta_fabric.engine.Engine.set_now_us`); ``None``: no reading yet, and
        #: the bound is not applied.
        self.now_us: int | None = None
        #: DF-RCV-52: largest accepted ``seq - H`` of a tracked incarnation with H >= 1 (0: none).
        self.max_seq_jump = max_seq_jump
        #: DF-RCV-51: the node ids accepted as origins (``None``: every origin, as in 1.0).
        self.members: frozenset[int] | None = None if members is None else frozenset(members)
        self.own_id = own_id
        self.window = window
        self.max_incarnations = max_incarnations
        self.max_origins = max_origins
        self._origins: dict[int, dict[int, ReplayWindow]] = {}

    def _verdict(self, origin: int, incarnation: int, seq: int) -> tuple[Admission, int | None]:
        """Verdict and, for a new incarnation on a full table, the incarnation it evicts."""
        if origin == self.own_id:
            return Admission.OWN_ORIGIN, None  # DF-RCV-2
        if self.members is not None and origin not in self.members:
            return Admission.NOT_MEMBER, None  # DF-RCV-51: never tracked
        table = self._origins.get(origin)
        ahead = self.max_incarnation_ahead
        if (
            ahead
            and self.now_us is not None
            and (table is None or incarnation not in table)
            and incarnation - self.now_us > ahead
        ):
            return Admission.FUTURE_INCARNATION, None  # DF-RCV-175: creates no state
        if table is None:
            if len(self._origins) >= self.max_origins:
                return Admission.ORIGIN_LIMIT, None
            return Admission.ACCEPTED, None
        win = table.get(incarnation)
        if win is not None:
            jump = self.max_seq_jump
            if jump and win.highest and seq - win.highest > jump:
                return Admission.SEQ_JUMP, None  # DF-RCV-52
            return win.check(seq), None
        if len(table) < self.max_incarnations:
            return Admission.ACCEPTED, None
        lowest = min(table)
        if incarnation > lowest:
            last = table[lowest].last_us
            now = self.now_us
            if self.incarnation_grace and now is not None and last is not None:
                if now < last or now - last < self.incarnation_grace:
                    return Admission.LIVE_INCARNATION, None  # DF-RCV-178: no state change
            return Admission.ACCEPTED, lowest
        return Admission.STALE_INCARNATION, None

    def check(self, origin: int, incarnation: int, seq: int) -> Admission:
        """The verdict for an entry without changing any state."""
        return self._verdict(origin, incarnation, seq)[0]

    def admit(self, origin: int, incarnation: int, seq: int) -> Admission:
        """Check an entry and record it when accepted."""
        verdict, evict = self._verdict(origin, incarnation, seq)
        if verdict is Admission.ACCEPTED:
            table = self._origins.setdefault(origin, {})
            if evict is not None:
                del table[evict]
            win = table.get(incarnation)
            if win is None:
                win = table[incarnation] = ReplayWindow(self.window)
            win.admit(seq)
            if self.now_us is not None:
                win.last_us = self.now_us  # DF-RCV-178
        return verdict

    def set_accepted_at(self, origin: int, incarnation: int, now_us: int) -> bool:
        """DF-RCV-178: record ``now_us`` as the clock reading at which ``origin``'s tracked
        ``incarnation`` last accepted an entry, as `admit` does under a clock reading: what restoring
        a history with acceptance times needs (driver protocol 5.5, 1.1). Judges nothing. ``False``
        (and no change) when that incarnation is not tracked."""
        if isinstance(now_us, bool) or not 0 <= now_us < 1 << 64:
            raise ValueError(f"now_us must be in [0, 2**64), got {now_us!r}")
        win = self._origins.get(origin, {}).get(incarnation)
        if win is None:
            return False
        win.last_us = int(now_us)
        return True

    def save(self, origin: int) -> dict[int, ReplayWindow] | None:
        """A copy of ``origin``'s incarnation table (``None`` when untracked), for `restore`: what a
        receiver needs to undo the admissions of a packet it refuses after admitting its entries
        (DF-RCV-50). O(max_incarnations * W) bits."""
        table = self._origins.get(origin)
        return None if table is None else {inc: w.copy() for inc, w in table.items()}

    def restore(self, origin: int, saved: dict[int, ReplayWindow] | None) -> None:
        """Put back a table taken by `save` (``None``: ``origin`` becomes untracked)."""
        if saved is None:
            self._origins.pop(origin, None)
        else:
            self._origins[origin] = saved

    # inspection and (re)construction ------------------------------------------------------------------
    def incarnations(self, origin: int) -> list[int]:
        """Tracked incarnations of ``origin``, ascending."""
        return sorted(self._origins.get(origin, {}))

    def window_of(self, origin: int, incarnation: int) -> ReplayWindow | None:
        return self._origins.get(origin, {}).get(incarnation)

    @property
    def num_origins(self) -> int:
        return len(self._origins)

    def history(self) -> list[tuple[int, int, int]]:
        """``(origin, incarnation, seq)`` of every accepted seq still in a window, sorted.

        Replaying it with `from_history` (same parameters) rebuilds an equivalent state.
        """
        out: list[tuple[int, int, int]] = []
        for origin in sorted(self._origins):
            for inc in sorted(self._origins[origin]):
                out.extend((origin, inc, s) for s in self._origins[origin][inc].seen())
        return out

    def __iter__(self) -> Iterator[tuple[int, int, ReplayWindow]]:
        for origin, table in self._origins.items():
            for inc, win in table.items():
                yield origin, inc, win

    @classmethod
    def from_history(
        cls,
        own_id: int,
        history: Iterable[tuple[int, int, int]],
        *,
        window: int = 1024,
        max_incarnations: int = 4,
        max_origins: int = DEFAULT_MAX_ORIGINS,
        accepted_at: Sequence[int | None] | None = None,
    ) -> ReceiverState:
        """A state that has accepted ``history`` in order. Entries it would drop raise ``ValueError``.

        ``accepted_at`` (DF-RCV-178), one per history entry when given: the clock reading at which
        that entry was accepted, recorded for its incarnation right after it is admitted
        (`set_accepted_at`); ``None`` for an entry accepted without one, which leaves the recorded
        reading as it was. The history is not judged by any clock: no bound is set while it is
        admitted."""
        entries = list(history)
        times: Sequence[int | None] = [None] * len(entries) if accepted_at is None else accepted_at
        if len(times) != len(entries):
            raise ValueError(f"accepted_at has {len(times)} readings for {len(entries)} entries")
        st = cls(own_id, window=window, max_incarnations=max_incarnations, max_origins=max_origins)
        for (origin, inc, seq), at in zip(entries, times, strict=True):
            verdict = st.admit(int(origin), int(inc), int(seq))
            if verdict is not Admission.ACCEPTED:
                raise ValueError(f"history entry {(origin, inc, seq)} would be dropped: {verdict}")
            if at is not None:
                st.set_accepted_at(int(origin), int(inc), at)
        return st
