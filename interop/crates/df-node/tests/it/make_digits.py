"""Test fixture: scikit-learn's digits as df-node data directories (see df-node src/data.rs).

Usage: python make_digits.py OUT_DIR
Writes OUT_DIR/all (the whole training split) and OUT_DIR/skewed0..2 (classes 0-3 / 4-6 / 7-9), each with
the same stratified 360-image test set (random_state 0), in the format of
delta_fabric.demo.data.write_partition. Independent of the demo package on purpose.
"""

import json
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def write(d: Path, xtr, ytr, xte, yte) -> None:
    d.mkdir(parents=True, exist_ok=True)
    xtr.astype("<f4").tofile(d / "train_x.f32")
    ytr.astype(np.uint8).tofile(d / "train_y.u8")
    xte.astype("<f4").tofile(d / "test_x.f32")
    yte.astype(np.uint8).tofile(d / "test_y.u8")
    meta = {
        "n_train": int(ytr.size),
        "n_test": int(yte.size),
        "classes": sorted(int(c) for c in np.unique(ytr)),
    }
    (d / "meta.json").write_text(json.dumps(meta) + "\n")


def main() -> None:
    out = Path(sys.argv[1])
    dg = load_digits()
    x = (np.asarray(dg.data, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = np.asarray(dg.target, dtype=np.uint8)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=360, stratify=y, random_state=0)
    write(out / "all", xtr, ytr, xte, yte)
    for i, classes in enumerate([[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]):
        sel = np.isin(ytr, classes)
        write(out / f"skewed{i}", xtr[sel], ytr[sel], xte, yte)


if __name__ == "__main__":
    main()
