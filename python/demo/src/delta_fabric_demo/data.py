"""The demo's data: scikit-learn's bundled digits (no download), a 360-image test set on all ten
classes, per-node training partitions, and the file format handed to every node process.

Files in a partition directory (all little-endian): ``train_x.f32`` f32 ``[n_train, 1, 8, 8]``
holding ``pixel / 16``; ``train_y.u8``; ``test_x.f32``, ``test_y.u8`` likewise; ``meta.json``
``{"n_train", "n_test", "classes"}`` (``classes``: the labels present in the training part).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["Digits", "Split", "load_split", "partition", "read_partition", "write_partition"]

N_TEST = 360


@dataclass(frozen=True)
class Split:
    x: NDArray[np.float32]  # [n, 1, 8, 8], pixel / 16
    y: NDArray[np.uint8]


@dataclass(frozen=True)
class Digits:
    train: Split
    test: Split


def load_split(seed: int) -> Digits:
    """Digits with a stratified held-out test set of 360 images (all ten classes)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (np.asarray(d.data, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = np.asarray(d.target, dtype=np.uint8)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=N_TEST, stratify=y, random_state=seed)
    return Digits(Split(np.ascontiguousarray(xtr), ytr), Split(np.ascontiguousarray(xte), yte))


def class_groups(n_nodes: int, n_classes: int = 10) -> list[list[int]]:
    """Label-skewed class sets: 3 nodes -> 0-3 / 4-6 / 7-9. More nodes than classes: node i gets
    class ``i % 10`` (the samples of a class shared by several nodes are split between them)."""
    if n_nodes <= n_classes:
        return [list(map(int, g)) for g in np.array_split(np.arange(n_classes), n_nodes)]
    return [[i % n_classes] for i in range(n_nodes)]


def partition(train: Split, n_nodes: int, mode: str, seed: int) -> list[Split]:
    """``skewed``: by class groups (see `class_groups`); ``iid``: a random equal split."""
    rng = np.random.default_rng(seed)
    if mode == "iid":
        order = rng.permutation(train.y.size)
        return [Split(train.x[p], train.y[p]) for p in np.array_split(order, n_nodes)]
    if mode != "skewed":
        raise ValueError(f"unknown partition {mode!r}")
    groups = class_groups(n_nodes)
    holders: dict[int, list[int]] = {}
    for node, g in enumerate(groups):
        for c in g:
            holders.setdefault(c, []).append(node)
    parts: list[list[NDArray[np.int64]]] = [[] for _ in range(n_nodes)]
    for c, nodes in holders.items():
        idx = rng.permutation(np.flatnonzero(train.y == c))
        for node, chunk in zip(nodes, np.array_split(idx, len(nodes)), strict=True):
            parts[node].append(chunk)
    out = []
    for p in parts:
        sel = np.sort(np.concatenate(p))
        out.append(Split(train.x[sel], train.y[sel]))
    return out


def write_partition(directory: Path, train: Split, test: Split) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    train.x.astype("<f4").tofile(directory / "train_x.f32")
    train.y.astype(np.uint8).tofile(directory / "train_y.u8")
    test.x.astype("<f4").tofile(directory / "test_x.f32")
    test.y.astype(np.uint8).tofile(directory / "test_y.u8")
    meta = {
        "n_train": int(train.y.size),
        "n_test": int(test.y.size),
        "classes": sorted(int(c) for c in np.unique(train.y)),
        "shape": [1, 8, 8],
        "scale": "pixel/16",
    }
    (directory / "meta.json").write_text(json.dumps(meta) + "\n")


def read_partition(directory: Path) -> tuple[Split, Split, dict[str, object]]:
    meta = json.loads((directory / "meta.json").read_text())
    n_train, n_test = int(meta["n_train"]), int(meta["n_test"])

    def xs(name: str, n: int) -> NDArray[np.float32]:
        a = np.fromfile(directory / name, dtype="<f4").astype(np.float32)
        if a.size != n * 64:
            raise ValueError(f"{directory / name}: {a.size} values, expected {n * 64}")
        return a.reshape(n, 1, 8, 8)

    def ys(name: str, n: int) -> NDArray[np.uint8]:
        a = np.fromfile(directory / name, dtype=np.uint8)
        if a.size != n:
            raise ValueError(f"{directory / name}: {a.size} labels, expected {n}")
        return a

    train = Split(xs("train_x.f32", n_train), ys("train_y.u8", n_train))
    test = Split(xs("test_x.f32", n_test), ys("test_y.u8", n_test))
    return train, test, meta
