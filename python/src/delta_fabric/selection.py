"""Top-k selection of a delta by magnitude (spec sections 5.3 and 5.7: DF-GEN-3 exact, DF-GEN-7 fast).

Both modes share one idea: a threshold estimated from a deterministic strided sample of ``|d|``, one
compare pass and one ``np.flatnonzero`` give a candidate set ``C = {i : |d[i]| >= t}`` of size ``O(k)``;
the final choice inside ``C`` is ``O(|C|)``. The exact mode aims ``t`` a little *below* the k-th largest
value; whenever ``|C| >= k`` the set contains every index the reference rule can pick (every index whose
magnitude reaches the k-th largest, ties included), so trimming ``C`` by (magnitude desc, index asc) gives
the reference result bit for bit. When the estimate misses (``|C| < k``) it falls back to the reference
rule computed from a guaranteed lower bound (the k-th largest of 2k group maxima, see
`Selector._by_group_max`), or with ``np.partition`` over all N values when k > N/4. The fast mode aims
at ``0.65 k``; it accepts any count in ``[ceil(k/2), k]`` and trims or falls back otherwise, so its
result always lies in the top k.

A `Selector` owns the O(N) scratch (``|d|``, a boolean mask, and lazily the partition buffer), so a
sync step allocates only O(k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.native import ready

__all__ = ["Selector", "reference_select"]

_MIN_SAMPLE = 65_536
# the exact mode's floor: its result does not depend on the sample (a miss falls back to the exact
# path), so a smaller sample trades a few more candidates for fewer cache lines read
_MIN_EXACT_SAMPLE = 16_384
_MAX_SAMPLE = 1 << 18  # beyond this a strided sample costs more than the group-max path
_SMALL_N = 1 << 17  # below this the sample buys nothing: use the reference path directly
_MIN_SAMPLE_RANK = 64  # sample ranks below this are too noisy to aim with
_BLOCK = 3 << 14  # values per block of `Selector.select_delta`'s pass (its scratch stays in cache;
# not a divisor of 2**17, so that the N = 2**17 vectors end on a partial block)


def reference_select(d: NDArray[np.float32], k: int) -> NDArray[np.int64]:
    """DF-GEN-3 by definition: sort the candidates by (|d| desc, index asc), keep ``min(k, #cand)``.

    O(N log N); for tests and documentation. Returns ascending indices.
    """
    d = np.asarray(d, dtype=np.float32)
    cand = np.flatnonzero((d != 0) & ~np.isnan(d))
    mags = np.abs(d[cand])
    order = np.lexsort((cand, -mags.astype(np.float64)))
    return np.sort(cand[order[:k]]).astype(np.int64)


def _trim_mask(vals: NDArray[np.float32], k: int) -> NDArray[np.bool_]:
    """Which of ``vals`` (the magnitudes at ascending indices, more than k of them) the k largest
    are, ties by lower index."""
    c = vals.shape[0]
    t = np.float32(np.partition(vals, c - k)[c - k])  # the k-th largest value of the set
    keep: NDArray[np.bool_] = vals > t
    need = k - int(np.count_nonzero(keep))
    if need > 0:
        eq = np.flatnonzero(vals == t)[:need]  # sel is ascending: lowest indices first
        keep[eq] = True
    return keep


def _trim(sel: NDArray[np.intp], vals: NDArray[np.float32], k: int) -> NDArray[np.int64]:
    """Keep the k entries of ``sel`` (ascending indices) with the largest ``vals``, ties by lower index."""
    if sel.shape[0] <= k:
        return sel.astype(np.int64, copy=False)
    out: NDArray[np.int64] = sel[_trim_mask(vals, k)].astype(np.int64, copy=False)
    return out


class Selector:
    """Preallocated scratch for selecting among N values. Not thread-safe; one per engine."""

    def __init__(self, n: int, *, sample_min_n: int = _SMALL_N) -> None:
        """``sample_min_n``: below this N the sample and group-max paths are skipped (tests lower it)."""
        if n < 1:
            raise ValueError("n must be >= 1")
        self.n = n
        self.sample_min_n = sample_min_n
        self._abs = np.empty(n, dtype=np.float32)
        self._mask = np.empty(n, dtype=np.bool_)
        self._part: NDArray[np.float32] | None = None  # allocated on the first reference fallback
        self._d: NDArray[np.float32] | None = None  # `select_delta`'s d, allocated on its first use
        #: the OPTIONAL native kernels (`delta_fabric.native`; the engine sets them): the candidate
        #: pass of `select_delta` in one native loop, the same candidates
        self.native: Any = None
        self._cand_idx: NDArray[np.intp] | None = None  # the native pass's output (grown on need)
        self._cand_d: NDArray[np.float32] | None = None
        self._hist: NDArray[np.uint32] | None = None  # its histogram of |d| (native `trim`)
        #: how the last call was resolved: "sample", "trim", "group-max", "reference",
        #: "all" (for tests and the bench)
        self.last_path = ""

    # ------------------------------------------------------------------------------------------------
    def select(self, d: NDArray[np.float32], k: int, *, fast: bool = False) -> NDArray[np.int64]:
        """Ascending indices of the selected entries of ``d`` (never an index with ``d == 0``).

        ``fast=False``: exactly the DF-GEN-3 reference set. ``fast=True``: a DF-GEN-7 set
        (``min(ceil(k/2), #cand) <= |S| <= k``, S within the top k). A NaN in ``d`` is never selected
        (it is treated like a zero: not a candidate); an infinity is the largest magnitude and is selected
        (the engine refuses to send it).
        """
        if d.shape != (self.n,) or d.dtype != np.float32:
            raise ValueError(f"d must be a float32 array of shape ({self.n},)")
        if k < 1:
            raise ValueError("k must be >= 1")
        k = min(k, self.n)
        np.abs(d, out=self._abs)
        if k == self.n:
            return self._all_candidates()
        if self.n >= self.sample_min_n:
            got = self._by_sample(k, fast)
            if got is None and k <= self.n // 4:
                got = self._by_group_max(k)
            if got is not None:
                return got
        return self._reference(k)

    # ------------------------------------------------------------------------------------------------
    def _all_candidates(self) -> NDArray[np.int64]:
        np.greater(self._abs, 0.0, out=self._mask)
        self.last_path = "all"
        return np.flatnonzero(self._mask).astype(np.int64, copy=False)

    def _candidates_at_least(self, t: float) -> NDArray[np.intp]:
        np.greater_equal(self._abs, np.float32(t), out=self._mask)
        return np.flatnonzero(self._mask)

    def _sample_size(self, k: int, fast: bool = True) -> tuple[int, int]:
        """The strided sample of ``|d|`` for ``k``: its size ``ms`` and its stride (positions
        ``0, stride, 2 stride, ...``, the first ``ms`` of them)."""
        n = self.n
        q = k / n
        floor = _MIN_SAMPLE if fast else _MIN_EXACT_SAMPLE
        ms = min(max(n // 4, 1), _MAX_SAMPLE, max(floor, math.ceil(4 * _MIN_SAMPLE_RANK / q)))
        return ms, n // ms

    def _sample_threshold(self, sample: NDArray[np.float32], k: int, fast: bool) -> float | None:
        """The threshold ``t`` the sample aims at (``None``: the sample is too small to aim with);
        ``sample`` (a fresh array) is partitioned in place."""
        ms = sample.shape[0]
        expected = k / self.n * ms
        if fast:
            rank = round(0.65 * expected)
            if rank < _MIN_SAMPLE_RANK:
                return None
        else:
            if expected < _MIN_SAMPLE_RANK / 2:
                return None
            # aim below the k-th largest by 4.5 standard deviations of the sample count (a miss, rare
            # on any data and handled exactly by the group-max path, costs time, never correctness)
            rank = math.ceil(expected + 4.5 * math.sqrt(expected) + 2.0)
        rank = min(rank, ms)
        # the rank-th largest of the sample
        return float(np.partition(sample, ms - rank)[ms - rank])

    def _sample_verdict(self, c: int, t: float, k: int, fast: bool) -> str | None:
        """What the candidate set ``{|d| >= t}`` (``{|d| > 0}`` when ``t == 0``) of ``c`` indices
        gives: ``"all"`` / ``"sample"`` (the set itself), ``"trim"`` (its k largest), or ``None``
        (too few above the estimate: the group-max or reference path decides)."""
        lower = math.ceil(k / 2) if fast else k
        if t == 0.0 and c <= k:  # every candidate is in the set
            return "all"
        if lower <= c <= k:
            return "sample"
        if c > k:
            return "trim"
        return None

    def _by_sample(self, k: int, fast: bool) -> NDArray[np.int64] | None:
        a = self._abs
        ms, stride = self._sample_size(k, fast)
        sample = a[::stride][:ms].copy()  # deterministic strided sample
        t = self._sample_threshold(sample, k, fast)
        if t is None:
            return None
        if t == 0.0:
            # fewer nonzero samples than the rank: candidates are few; take them all if they fit
            sel = np.flatnonzero(np.greater(a, 0.0, out=self._mask))
        else:
            sel = self._candidates_at_least(t)
        verdict = self._sample_verdict(sel.shape[0], t, k, fast)
        if verdict is None:
            return None
        self.last_path = verdict
        if verdict == "trim":
            return _trim(sel, a[sel], k)
        return sel.astype(np.int64, copy=False)

    # ------------------------------------------------------------------------------------------------
    def select_delta(
        self,
        parts: Sequence[NDArray[np.float32]],
        anchor: NDArray[np.float32],
        k: int,
        *,
        fast: bool = False,
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """`select` of ``d = fl32(active - anchor)`` (DF-GEN-1), where ``active`` is the
        concatenation of ``parts`` (1-D f32 arrays of N values in all), without materialising ``d``
        or ``|d|`` over N: returns the selected indices (the same as ``select(d, k, fast=fast)``) and
        ``d`` at them.

        The sample path reads the strided sample from ``parts`` and ``anchor`` first, then makes one
        pass over N in blocks of `_BLOCK` values (subtract, magnitude, compare, nonzero, each block
        in cache). When that path does not decide (the group-max and reference paths, small N,
        ``k >= N``), ``d`` is computed in full (into an N-value f32 scratch, allocated then) and
        `select` decides. ``parts`` and ``anchor`` are only read."""
        n = self.n
        if anchor.shape != (n,) or anchor.dtype != np.float32:
            raise ValueError(f"anchor must be a float32 array of shape ({n},)")
        if sum(int(p.shape[0]) for p in parts) != n or any(
            p.ndim != 1 or p.dtype != np.float32 for p in parts
        ):
            raise ValueError(f"parts must be 1-D float32 arrays of {n} values in all")
        if k < 1:
            raise ValueError("k must be >= 1")
        k = min(k, n)
        with np.errstate(invalid="ignore"):  # inf - inf = NaN is a valid delta (DF-GEN-9)
            if k < n and n >= self.sample_min_n:
                got = self._delta_by_sample(parts, anchor, k, fast)
                if got is not None:
                    return got
            if self._d is None:
                self._d = np.empty(n, dtype=np.float32)
            d = self._d
            off = 0
            for piece in parts:  # DF-GEN-1: f32, round to nearest even
                m = piece.shape[0]
                np.subtract(piece, anchor[off : off + m], out=d[off : off + m])
                off += m
        idx = self.select(d, k, fast=fast)
        dsel: NDArray[np.float32] = d[idx]
        return idx, dsel

    def _delta_by_sample(
        self,
        parts: Sequence[NDArray[np.float32]],
        anchor: NDArray[np.float32],
        k: int,
        fast: bool,
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]] | None:
        """`_by_sample` on ``d = active - anchor`` read block by block (see `select_delta`)."""
        ms, stride = self._sample_size(k, fast)
        # the sample: |d| at positions 0, stride, ... (the first ms), read from parts and anchor
        nat = self.native
        if (
            nat is not None
            and ready(anchor, np.float32)
            and all(ready(p, np.float32) for p in parts)
        ):
            sample = np.empty(ms, dtype=np.float32)  # the same values in one native pass
            nat.sample_abs(list(parts), anchor, stride, sample)
        else:
            pieces: list[NDArray[np.float32]] = []
            off = 0
            for piece in parts:
                m = piece.shape[0]
                first = -(-off // stride) * stride  # the first sample position in [off, off + m)
                if first < off + m:
                    pieces.append(
                        np.subtract(piece[first - off :: stride], anchor[first : off + m : stride])
                    )
                off += m
            sample = np.abs(np.concatenate(pieces)[:ms])
        t = self._sample_threshold(sample, k, fast)
        if t is None:
            return None
        t32 = np.float32(t)
        zero = t == 0.0
        if self.native is not None and all(ready(p, np.float32) for p in parts):
            sel, dsel = self._candidates_native(parts, anchor, t32, zero, k)
        else:
            sel, dsel = self._candidates_numpy(parts, anchor, t32, zero)
        verdict = self._sample_verdict(sel.shape[0], t, k, fast)
        if verdict is None:
            return None
        self.last_path = verdict
        if verdict == "trim" and self.native is not None and ready(sel, np.intp):
            out_idx = np.empty(k, dtype=np.intp)  # the same k as `_trim_mask` keeps, one pass
            out_d = np.empty(k, dtype=np.float32)
            # the histogram of these candidates when they are the native pass's (else made there)
            hist = self._hist if sel.base is self._cand_idx else None
            m = int(self.native.trim(sel, dsel, k, out_idx, out_d, hist))
            return out_idx[:m].astype(np.int64, copy=False), out_d[:m]
        if verdict == "trim":
            keep = _trim_mask(np.abs(dsel), k)
            return sel[keep].astype(np.int64, copy=False), dsel[keep]
        if self.native is not None and sel.base is self._cand_idx:  # views of the native scratch
            return sel.astype(np.int64, copy=True), dsel.copy()
        return sel.astype(np.int64, copy=False), dsel

    def _candidates_native(
        self,
        parts: Sequence[NDArray[np.float32]],
        anchor: NDArray[np.float32],
        t32: np.float32,
        zero: bool,
        k: int,
    ) -> tuple[NDArray[np.intp], NDArray[np.float32]]:
        """`_candidates_numpy` in one native pass, into scratch that grows when it is short (the
        returned arrays are views of it, valid until the next call)."""
        plist = list(parts)
        if self._cand_idx is None:
            room = min(self.n, 4 * k + 4096)
            self._cand_idx = np.empty(room, dtype=np.intp)
            self._cand_d = np.empty(room, dtype=np.float32)
        assert self._cand_d is not None
        if self._hist is None:  # the candidates' magnitude histogram, which `trim` takes
            self._hist = np.empty(int(self.native.HIST), dtype=np.uint32)
        hist = self._hist
        c = int(
            self.native.collect_at_least(
                plist, anchor, t32, zero, self._cand_idx, self._cand_d, hist
            )
        )
        if c > self._cand_idx.shape[0]:  # more candidates than room: grow and read them again
            self._cand_idx = np.empty(c, dtype=np.intp)
            self._cand_d = np.empty(c, dtype=np.float32)
            c = int(
                self.native.collect_at_least(
                    plist, anchor, t32, zero, self._cand_idx, self._cand_d, hist
                )
            )
        return self._cand_idx[:c], self._cand_d[:c]

    def _candidates_numpy(
        self,
        parts: Sequence[NDArray[np.float32]],
        anchor: NDArray[np.float32],
        t32: np.float32,
        zero: bool,
    ) -> tuple[NDArray[np.intp], NDArray[np.float32]]:
        """The candidates of threshold ``t32`` (with ``zero``: every nonzero ``|d|``), ascending, and
        ``d = fl32(active - anchor)`` at them; NaN is never one. Block by block, in cache."""
        block = min(_BLOCK, self.n)
        diff = np.empty(block, dtype=np.float32)
        mag = np.empty(block, dtype=np.float32)
        mask = self._mask[:block]
        sels: list[NDArray[np.intp]] = []
        dvals: list[NDArray[np.float32]] = []
        off = 0
        for piece in parts:
            m = piece.shape[0]
            for s in range(0, m, block):
                e = min(s + block, m)
                w = e - s
                dd, aa, mm = diff[:w], mag[:w], mask[:w]
                np.subtract(piece[s:e], anchor[off + s : off + e], out=dd)
                np.abs(dd, out=aa)
                if zero:  # fewer nonzero samples than the rank: every candidate
                    np.greater(aa, 0.0, out=mm)
                else:
                    np.greater_equal(aa, t32, out=mm)
                nz = np.flatnonzero(mm)
                if nz.size:
                    dvals.append(dd[nz])
                    nz += off + s
                    sels.append(nz)
            off += m
        sel = np.concatenate(sels) if sels else np.empty(0, dtype=np.intp)
        dsel = np.concatenate(dvals) if dvals else np.empty(0, dtype=np.float32)
        return sel, dsel

    def _by_group_max(self, k: int) -> NDArray[np.int64]:
        """Exact selection from a guaranteed lower bound of the k-th largest magnitude.

        Split the indices into G >= k disjoint groups and take each group's maximum (NaN ignored): these
        are G distinct elements, so the k-th largest of them is <= the k-th largest of all, and
        ``{|d| >= t}`` holds at least k indices, every one the reference rule can pick among them.
        One read pass plus a partition of ~2k values; the groups are strided columns, so the
        reduction is a vectorised element-wise maximum.
        """
        n, a = self.n, self._abs
        groups = min(n, 2 * k)
        rows = n // groups
        m = rows * groups
        pool = np.fmax.reduce(a[:m].reshape(rows, groups), axis=0)
        if m < n:  # the tail: single elements are groups too
            pool = np.concatenate((pool, a[m:]))
        np.nan_to_num(pool, copy=False, nan=0.0, posinf=np.inf)
        t = float(np.partition(pool, pool.shape[0] - k)[pool.shape[0] - k])
        if t == 0.0:  # fewer than k nonzero groups; a group may still hold several candidates
            sel = np.flatnonzero(np.greater(a, 0.0, out=self._mask))
        else:
            sel = self._candidates_at_least(t)
        self.last_path = "group-max"
        return _trim(sel, a[sel], k)

    def _reference(self, k: int) -> NDArray[np.int64]:
        n, a = self.n, self._abs
        if self._part is None:
            self._part = np.empty(n, dtype=np.float32)
        part = self._part
        np.copyto(part, a)
        nan = np.isnan(part)
        if nan.any():  # NaN is not a candidate (np.partition would rank it above +inf)
            part[nan] = 0.0
        del nan
        part.partition(n - k)
        t = float(part[n - k])  # the k-th largest |d|
        if t == 0.0:
            return self._all_candidates()
        sel = self._candidates_at_least(t)
        self.last_path = "reference"
        return _trim(sel, a[sel], k)
