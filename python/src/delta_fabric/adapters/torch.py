"""PyTorch adapter: keep an ``nn.Module`` in sync with a DeltaFabric cluster.

Usage::

    fabric = Fabric(model, transport, SyncConfig(), node_id=7)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step(); optimizer.zero_grad()
        fabric.step()

The manifest (DF-MAN) is built from ``state_dict`` keys: every floating parameter, plus floating
buffers (BatchNorm running statistics) when ``include_buffers``; integer buffers never. The anchor
is the engine's flat f32 NumPy buffer; the active weights are the module's own tensors, which are
updated in place (only the received elements, ``index_add_`` under ``torch.no_grad()``) on CPU or
CUDA alike. Nothing is copied on a step with no sync and no traffic.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from delta_fabric.adapters._base import DEFAULT_MAX_DRAIN, Bootstrap, FabricBase
from delta_fabric.config import SyncConfig
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.transports.base import Transport

__all__ = ["Fabric", "module_manifest", "module_tensors"]


def module_tensors(module: nn.Module, include_buffers: bool) -> dict[str, torch.Tensor]:
    """The tensors a node synchronises, by canonical name (``state_dict`` key), in canonical order.

    Every parameter, whatever its ``requires_grad``; floating persistent buffers only with
    ``include_buffers``; integer buffers (``num_batches_tracked``) never (DF-MAN-4). Refused
    (``ValueError``, DF-MAN-12): tied parameters (one tensor under two names, each would receive
    every delta twice) and parameters with a dtype that has no f32 view (complex).
    """
    params = {id(p) for p in module.parameters()}
    chosen: dict[str, torch.Tensor] = {}
    seen: dict[int, str] = {}
    for name, t in module.state_dict(keep_vars=True).items():
        is_param = isinstance(t, nn.Parameter) or id(t) in params
        if is_param and (t.is_complex() or not t.is_floating_point()):
            # DF-MAN-12: no canonical f32 view of this parameter; refuse rather than guess
            raise ValueError(
                f"parameter {name!r} has dtype {t.dtype}, which protocol v1 cannot carry"
            )
        if not t.is_floating_point():
            continue
        if not is_param and not include_buffers:
            continue
        key = id(t)
        if key in seen:
            raise ValueError(f"{name!r} and {seen[key]!r} are the same tensor (tied weights)")
        seen[key] = name
        chosen[name] = t
    return {name: chosen[name] for name in sorted(chosen, key=lambda s: s.encode("utf-8"))}


def module_manifest(module: nn.Module, include_buffers: bool = False) -> Manifest:
    """The manifest of ``module`` (DF-MAN-1..4)."""
    tensors = module_tensors(module, include_buffers)
    return Manifest(TensorSpec(n, tuple(t.shape)) for n, t in tensors.items())


class Fabric(FabricBase):
    """A DeltaFabric node around a PyTorch module (see the module docstring).

    ``include_buffers`` defaults to ``config.include_buffers``. ``incarnation`` defaults to
    microseconds since the epoch. ``bootstrap``: ``True`` fetches the anchor snapshot of a live peer
    (required; `SnapshotUnavailable` after ``bootstrap_timeout``), ``"auto"`` fetches one when a
    peer answers in time and else starts from the module's current weights, ``False`` never fetches.
    The fabric serves snapshots of its anchor through the transport. ``track_hops`` keeps a
    histogram of the hop counts of accepted entries in `stats` (one more decode per packet).
    """

    def __init__(
        self,
        module: nn.Module,
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        include_buffers: bool | None = None,
        bootstrap: Bootstrap = False,
        bootstrap_timeout: float = 10.0,
        fast_selection: bool = False,
        max_drain: int = DEFAULT_MAX_DRAIN,
        track_hops: bool = False,
    ) -> None:
        cfg = config if config is not None else SyncConfig()
        super().__init__(
            transport,
            cfg,
            node_id=node_id,
            incarnation=incarnation,
            fast_selection=fast_selection,
            max_drain=max_drain,
            track_hops=track_hops,
            framework="torch",
        )
        self.module = module
        self.include_buffers = (
            cfg.include_buffers if include_buffers is None else bool(include_buffers)
        )
        named = module_tensors(module, self.include_buffers)
        manifest = Manifest(TensorSpec(n, tuple(t.shape)) for n, t in named.items())
        self._tensors: list[torch.Tensor] = [named[n] for n in manifest.names]
        self._offsets = np.asarray(manifest.offsets, dtype=np.int64)
        self.gathers = 0
        self._init_engine(manifest, bootstrap, bootstrap_timeout)

    @classmethod
    def join(
        cls,
        module: nn.Module,
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        include_buffers: bool | None = None,
        timeout: float = 10.0,
        fast_selection: bool = False,
        track_hops: bool = False,
    ) -> Fabric:
        """Late join or restart: load a live peer's snapshot into ``module`` and start a fresh
        incarnation."""
        return cls(
            module,
            transport,
            config,
            node_id=node_id,
            incarnation=incarnation,
            include_buffers=include_buffers,
            bootstrap=True,
            bootstrap_timeout=timeout,
            fast_selection=fast_selection,
            track_hops=track_hops,
        )

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The synchronised tensors by canonical name (the live objects)."""
        return dict(zip(self.manifest.names, self._tensors, strict=True))

    # ----------------------------------------------------------------------------------------------
    def _gather(self) -> NDArray[np.float32]:
        """The active vector: one ``torch.cat`` of the flattened detached tensors, moved to CPU
        once."""
        self.gathers += 1
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in self._tensors])
            out: NDArray[np.float32] = flat.cpu().numpy()
        return out

    def _apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        """``active[i] += values`` for sorted unique flat indices, touching only those elements."""
        bounds = np.searchsorted(indices, self._offsets, side="left")
        with torch.no_grad():
            for ti in range(len(self._tensors)):
                a, b = int(bounds[ti]), int(bounds[ti + 1])
                if a == b:
                    continue
                t = self._tensors[ti]
                local = indices[a:b].astype(np.int64) - self._offsets[ti]
                vals = torch.from_numpy(np.ascontiguousarray(values[a:b])).to(device=t.device)
                if t.dtype == torch.float32 and t.is_contiguous():
                    idx = torch.from_numpy(local).to(t.device)
                    t.data.view(-1).index_add_(0, idx, vals)  # fl32(active + agg), DF-RCV-7
                    continue
                # other dtypes or strides: read as f32, add in f32, write back rounded (DF-MAN-4)
                coords = np.unravel_index(local, tuple(t.shape))
                idx_t = tuple(
                    torch.from_numpy(np.ascontiguousarray(c)).to(t.device) for c in coords
                )
                cur = t.data[idx_t].to(torch.float32)
                t.data[idx_t] = (cur + vals).to(t.dtype)

    def _load(self, flat: NDArray[np.float32]) -> None:
        """Overwrite every synchronised tensor from a flat canonical vector (bootstrap)."""
        src = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))
        with torch.no_grad():
            for ti, t in enumerate(self._tensors):
                a, b = int(self._offsets[ti]), int(self._offsets[ti + 1])
                t.data.copy_(src[a:b].view(t.shape).to(device=t.device, dtype=t.dtype))

    def active_vector(self) -> NDArray[np.float32]:
        """The current active weights as a flat canonical f32 vector (a copy)."""
        out: NDArray[np.float32] = np.array(self._gather(), dtype=np.float32)
        return out
