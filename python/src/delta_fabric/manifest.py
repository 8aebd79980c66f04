"""Manifest, canonical flat layout and fingerprint (spec section 4, DF-MAN)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["MANIFEST_HEADER", "Manifest", "TensorSlice", "TensorSpec", "validate_name"]

MANIFEST_HEADER = "deltafabric-manifest/1\n"
#: Flat indices are u32 on the wire, so N may not exceed 2**32.
MAX_PARAMS = 1 << 32


def validate_name(name: object) -> str:
    """DF-MAN-1: non-empty UTF-8 text without control characters (U+0000-U+001F, U+007F)."""
    if not isinstance(name, str):
        raise TypeError(f"tensor name must be str, got {type(name).__name__}")
    if not name:
        raise ValueError("tensor name must not be empty")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"tensor name is not valid UTF-8: {name!r}") from None
    for ch in name:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise ValueError(f"tensor name contains a control character: {name!r}")
    return name


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the manifest: its ``state_dict`` name and shape (dtype is always f32 in v1)."""

    name: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        validate_name(self.name)
        shape = tuple(self.shape)
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or int(d) < 0:
                raise ValueError(f"{self.name}: bad dimension {d!r} in shape {shape!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def line(self) -> str:
        """The tensor's line of the canonical text (DF-MAN-5)."""
        return f"{self.name}\tf32\t{','.join(str(d) for d in self.shape)}\n"


@dataclass(frozen=True)
class TensorSlice:
    """The part of a sorted flat index array that falls in one tensor (see `Manifest.locate`).

    ``start:stop`` is the range in the located array; ``local`` the row-major element indices inside the
    tensor (``flat - offset``).
    """

    tensor: int
    name: str
    start: int
    stop: int
    local: NDArray[np.int64]


class Manifest:
    """Tensors in canonical order (ascending UTF-8 bytes of the name, DF-MAN-2) and their flat layout."""

    __slots__ = ("_fingerprint", "_index", "_offsets", "_text", "tensors")

    def __init__(self, tensors: Iterable[TensorSpec]) -> None:
        specs = list(tensors)
        names = [t.name for t in specs]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"duplicate tensor names: {dup}")
        specs.sort(key=lambda t: t.name.encode("utf-8"))  # DF-MAN-2
        self.tensors: tuple[TensorSpec, ...] = tuple(specs)
        offsets = [0]
        for t in self.tensors:
            offsets.append(offsets[-1] + t.numel)
        if offsets[-1] > MAX_PARAMS:
            raise ValueError(f"manifest has {offsets[-1]} values, more than 2**32")
        self._offsets: tuple[int, ...] = tuple(offsets)
        self._index: dict[str, int] = {t.name: i for i, t in enumerate(self.tensors)}
        self._text = MANIFEST_HEADER + "".join(t.line() for t in self.tensors)
        self._fingerprint = hashlib.sha256(self._text.encode("utf-8")).digest()

    # construction helpers -------------------------------------------------------------------------
    @classmethod
    def from_named_shapes(
        cls, items: Iterable[tuple[str, Sequence[int]]] | Mapping[str, Sequence[int]]
    ) -> Manifest:
        pairs = items.items() if isinstance(items, Mapping) else items
        return cls(TensorSpec(name, tuple(shape)) for name, shape in pairs)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "tensors": [
                {"name": t.name, "dtype": "f32", "shape": list(t.shape)} for t in self.tensors
            ],
            "num_params": self.num_params,
            "fingerprint": self.fingerprint.hex(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Manifest:
        """The manifest of its JSON form (``to_json``; only ``tensors`` is required). ``version``
        must be the integer 1, ``fingerprint`` and ``num_params`` must match the tensors when
        present (a member of another type does not match). A malformed form is a ``ValueError`` or a
        ``TypeError`` (as the Rust ``Manifest::from_json``)."""
        if not isinstance(d, Mapping):
            raise TypeError(f"manifest must be an object, got {type(d).__name__}")
        version = d.get("version", 1)
        if type(version) is not int or version != 1:
            raise ValueError(f"unsupported manifest version {version!r}")
        tensors = d.get("tensors")
        if not isinstance(tensors, list):
            raise ValueError("manifest: tensors missing")
        specs = []
        for t in tensors:
            if not isinstance(t, Mapping) or "name" not in t:
                raise ValueError("manifest: tensor name missing")
            if t.get("dtype", "f32") != "f32":
                raise ValueError(
                    f"{t.get('name')!r}: dtype must be f32 in v1, got {t.get('dtype')!r}"
                )
            shape = t.get("shape")
            if not isinstance(shape, list):
                raise ValueError(f"{t['name']!r}: shape missing")
            specs.append(TensorSpec(t["name"], tuple(shape)))
        m = cls(specs)
        if "fingerprint" in d and d["fingerprint"] != m.fingerprint.hex():
            raise ValueError("manifest fingerprint does not match its tensors")
        n = d.get("num_params", m.num_params)
        if type(n) is not int or n != m.num_params:
            raise ValueError("manifest num_params does not match its tensors")
        return m

    # layout ---------------------------------------------------------------------------------------
    @property
    def num_params(self) -> int:
        """N, the total element count (DF-MAN-3)."""
        return self._offsets[-1]

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start offset of each tensor in canonical order, followed by N."""
        return self._offsets

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)

    def offset(self, name: str) -> int:
        return self._offsets[self._index[name]]

    def spec(self, name: str) -> TensorSpec:
        return self.tensors[self._index[name]]

    def __len__(self) -> int:
        return len(self.tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Manifest) and self.tensors == other.tensors

    def __hash__(self) -> int:
        return hash(self._fingerprint)

    def __repr__(self) -> str:
        return f"Manifest({len(self.tensors)} tensors, N={self.num_params}, fp={self._fingerprint.hex()[:16]})"

    def canonical_text(self) -> str:
        """The text hashed into the fingerprint (DF-MAN-5)."""
        return self._text

    @property
    def fingerprint(self) -> bytes:
        """SHA-256 of `canonical_text` (32 bytes, DF-MAN-5)."""
        return self._fingerprint

    def locate(self, flat_indices: NDArray[Any], *, checked: bool = False) -> list[TensorSlice]:
        """Split ascending flat indices by tensor; tensors without an index are omitted. O(k + T log k).

        ``checked``: the caller has already checked that the indices are a 1-D ascending integer
        array within ``[0, N)`` (`delta_fabric.store.check_sparse`), and this pass over them is
        skipped."""
        flat = np.asarray(flat_indices)
        if not checked:
            if flat.ndim != 1:
                raise ValueError("flat_indices must be one-dimensional")
            if flat.size == 0:
                return []
            if flat.size > 1 and bool(np.any(flat[1:] < flat[:-1])):
                raise ValueError("flat_indices must be ascending")
            if int(flat[0]) < 0 or int(flat[-1]) >= self.num_params:
                raise ValueError("flat index out of range")
        elif flat.size == 0:
            return []
        bounds = np.searchsorted(flat, np.asarray(self._offsets, dtype=np.int64), side="left")
        out = []
        one_pass = flat.dtype.kind in "ui"  # flat - offset in int64 without a converted copy
        for i, t in enumerate(self.tensors):
            a, b = int(bounds[i]), int(bounds[i + 1])
            if a < b:
                local: NDArray[np.int64] = (
                    np.subtract(flat[a:b], np.int64(self._offsets[i]), dtype=np.int64)
                    if one_pass
                    else flat[a:b].astype(np.int64) - self._offsets[i]
                )
                out.append(TensorSlice(i, t.name, a, b, local))
        return out

    def split(self, flat: NDArray[np.float32]) -> dict[str, NDArray[np.float32]]:
        """Views of a flat buffer of N values, one per tensor, shaped (no copy)."""
        if flat.shape != (self.num_params,):
            raise ValueError(f"flat buffer must have shape ({self.num_params},), got {flat.shape}")
        return {
            t.name: flat[self._offsets[i] : self._offsets[i + 1]].reshape(t.shape)
            for i, t in enumerate(self.tensors)
        }

    def flatten(
        self, tensors: Mapping[str, NDArray[Any]], out: NDArray[np.float32] | None = None
    ) -> NDArray[np.float32]:
        """Concatenate named arrays into the canonical flat f32 layout (C order)."""
        if out is None:
            out = np.empty(self.num_params, dtype=np.float32)
        elif out.shape != (self.num_params,) or out.dtype != np.float32:
            raise ValueError("out must be a flat f32 buffer of N values")
        missing = [t.name for t in self.tensors if t.name not in tensors]
        if missing:
            raise KeyError(f"missing tensors: {missing}")
        for i, t in enumerate(self.tensors):
            a = np.asarray(tensors[t.name])
            if a.shape != t.shape:
                raise ValueError(f"{t.name}: shape {a.shape} != manifest shape {t.shape}")
            out[self._offsets[i] : self._offsets[i + 1]] = a.reshape(-1)
        return out
