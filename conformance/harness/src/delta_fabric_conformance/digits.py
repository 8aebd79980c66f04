"""Label-skewed shards of the scikit-learn digits data set for the live training scenario.

Files: ``x`` little-endian f32 ``[n, 64]`` (pixels / 16), ``y`` u8 ``[n]`` (driver protocol 5.6).
Test set: a stratified ``test_fraction`` of the data. Training rows: each class has a home node
(``class % nodes``); a row goes to its class's home node with probability ``skew``, else to a uniformly
drawn other node. Deterministic in ``seed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["load_digits_arrays", "write_shards"]


def load_digits_arrays() -> tuple[NDArray[np.float32], NDArray[np.uint8]]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (np.asarray(d.data, dtype=np.float32) / np.float32(16.0)).astype(np.float32)
    y = np.asarray(d.target, dtype=np.uint8)
    return x, y


def _write(folder: Path, name: str, x: NDArray[np.float32], y: NDArray[np.uint8]) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    xp, yp = folder / f"{name}.x.f32", folder / f"{name}.y.u8"
    np.ascontiguousarray(x, dtype="<f4").tofile(xp)
    np.ascontiguousarray(y, dtype=np.uint8).tofile(yp)
    return {"x": str(xp.resolve()), "y": str(yp.resolve()), "count": int(y.size)}


def write_shards(
    folder: Path, nodes: Sequence[str], opts: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Write the test set and one training shard per node; returns ``{"test": files, node: files}``."""
    seed = int(opts.get("seed", 0))
    skew = float(opts.get("skew", 0.8))
    test_fraction = float(opts.get("test_fraction", 0.25))
    x, y = load_digits_arrays()
    rng = np.random.default_rng(seed)
    test = np.zeros(y.size, dtype=bool)
    for c in range(10):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test[idx[: round(test_fraction * idx.size)]] = True
    out = {"test": _write(folder, "test", x[test], y[test])}
    train = np.flatnonzero(~test)
    k = len(nodes)
    owner = np.empty(train.size, dtype=np.int64)
    for j, i in enumerate(train):
        home = int(y[i]) % k
        if k == 1 or rng.random() < skew:
            owner[j] = home
        else:
            others = [n for n in range(k) if n != home]
            owner[j] = others[int(rng.integers(0, len(others)))]
    for n, name in enumerate(nodes):
        rows = train[owner == n]
        out[name] = _write(folder, f"train_{name}", x[rows], y[rows])
    return out
