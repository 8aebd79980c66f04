"""Checkpoints of the shared model: save it with its manifest, resume from it.

::

    from delta_fabric import checkpoint

    shared = fabric.finish()                       # or at any point: fabric.snapshot().anchor
    checkpoint.save("run1.dfckpt", fabric.manifest, shared, step=fabric.steps)

    # later, on every node of the new run (same model), before the node starts:
    meta = checkpoint.load("run1.dfckpt", store)   # the store's weights are the checkpoint's
    fabric = Fabric(store, transport, node_id=...)

A checkpoint is one uncompressed ``.npz`` file (NumPy's format, readable without DeltaFabric):
``weights`` (the canonical flat f32 vector, spec section 4.3), ``manifest`` (the manifest's JSON, as
the conformance vectors write it), ``fingerprint`` (its 32 bytes, spec section 4.4) and ``meta`` (a
JSON object: ``step``, ``format``, and what the caller adds). `load` refuses a file whose weights do
not match its fingerprint's manifest, or whose manifest is not the store's (`CheckpointError`, a
typed error naming what differs), and then changes nothing.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import DeltaFabricError
from delta_fabric.manifest import Manifest
from delta_fabric.store import WeightStore

__all__ = ["FORMAT", "CheckpointError", "load", "read", "save"]

#: The ``meta.format`` of this layout.
FORMAT = "deltafabric-checkpoint-1"


class CheckpointError(DeltaFabricError, ValueError):
    """A checkpoint cannot be read, or is not of this model."""


def save(
    path: str | os.PathLike[str],
    manifest: Manifest,
    weights: NDArray[np.float32],
    *,
    step: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``weights`` (the canonical flat vector of ``manifest``) to ``path`` atomically (a
    temporary file renamed over it); returns the path."""
    w = np.asarray(weights)
    if w.dtype != np.float32 or w.shape != (manifest.num_params,):
        raise CheckpointError(
            f"weights must be f32 of shape ({manifest.num_params},), got {w.dtype} {w.shape}"
        )
    if not np.isfinite(w).all():
        raise CheckpointError("weights hold a non-finite value")
    info = {"format": FORMAT, "step": step, **dict(meta or {})}
    buf = io.BytesIO()
    np.savez(
        buf,
        weights=w,
        manifest=np.frombuffer(json.dumps(manifest.to_json()).encode(), dtype=np.uint8),
        fingerprint=np.frombuffer(manifest.fingerprint, dtype=np.uint8),
        meta=np.frombuffer(json.dumps(info).encode(), dtype=np.uint8),
    )
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, out)
    return out


def read(path: str | os.PathLike[str]) -> tuple[Manifest, NDArray[np.float32], dict[str, Any]]:
    """The checkpoint's manifest, weights and meta object, checked against each other."""
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            weights = np.array(z["weights"])
            manifest = Manifest.from_json(json.loads(bytes(z["manifest"]).decode()))
            fingerprint = bytes(z["fingerprint"])
            meta = json.loads(bytes(z["meta"]).decode())
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not a DeltaFabric checkpoint ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {meta!r}")
    if manifest.fingerprint != fingerprint:
        raise CheckpointError(f"{path}: the manifest does not match its fingerprint")
    if weights.dtype != np.float32 or weights.shape != (manifest.num_params,):
        raise CheckpointError(
            f"{path}: weights {weights.dtype} {weights.shape} do not fit the manifest "
            f"(N={manifest.num_params})"
        )
    if not np.isfinite(weights).all():
        raise CheckpointError(f"{path}: weights hold a non-finite value")
    return manifest, weights, meta


def load(path: str | os.PathLike[str], store: WeightStore) -> dict[str, Any]:
    """Load the checkpoint's weights into ``store`` (before its node starts, on every node of the
    run, so that every node resumes from the same shared model); returns the meta object.
    `CheckpointError` when the checkpoint's model is not the store's; the store is then unchanged."""
    manifest, weights, meta = read(path)
    mine = store.manifest
    if manifest.fingerprint != mine.fingerprint:
        raise CheckpointError(
            f"{path}: another model (fingerprint {manifest.fingerprint.hex()[:16]}..., "
            f"N={manifest.num_params}) than the store's ({mine.fingerprint.hex()[:16]}..., "
            f"N={mine.num_params})"
        )
    store.load(weights)
    return meta
