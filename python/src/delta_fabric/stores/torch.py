"""`TorchStore`: a PyTorch ``nn.Module``'s tensors as the active weights (CPU or CUDA, in place).

The manifest (DF-MAN) is built from ``state_dict`` keys: every floating parameter, plus floating
buffers (BatchNorm running statistics) when ``include_buffers``; integer buffers never. PyTorch's
layouts are the canonical ones (spec section 4.5), so no permutation is needed. Received elements are
updated in place under ``torch.no_grad()``: ``index_add_`` on contiguous f32 tensors, an f32
read-add-round-trip otherwise (DF-MAN-4). ``gather()`` is one ``torch.cat`` moved to the CPU once;
``gather(indices)`` reads contiguous f32 CPU tensors through NumPy views (``np.take``), others with
``index_select``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.extras import raise_missing_extra
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.native import aligned, kernels, ready
from delta_fabric.store import check_flat, check_sparse

try:  # an optional dependency: a missing one names the extra to install
    import torch
    from torch import nn
except ModuleNotFoundError as _exc:
    raise_missing_extra(_exc, "TorchStore (delta_fabric.stores.torch)")

__all__ = ["TorchStore", "module_manifest", "module_tensors"]


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


def _host_f32(t: torch.Tensor) -> NDArray[np.float32] | None:
    """A flat NumPy view of ``t``'s elements when it is a contiguous f32 CPU tensor (``None``
    otherwise): a sparse read through NumPy costs about half of ``index_select``'s on the CPU. Taken
    at every call, since ``t.data`` may have been replaced since the last."""
    if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
        return None
    if t.is_neg() or t.is_conj():  # a lazy negation: the stored bits are not the values
        return None
    view: NDArray[np.float32] = t.detach().numpy().reshape(-1)
    return view


class TorchStore:
    """A `delta_fabric.store.WeightStore` over a module's parameters (and buffers, optionally).

    ``clamp_running_var`` (default on): after `apply`, a synchronised BatchNorm running variance
    (a buffer named ``*.running_var``) is clamped at >= 0, a framework step after DF-RCV-7's sum: at
    low ratios a node's unsent deviation and its peers' averaged deltas can add up to a negative
    variance, which makes every output NaN (spec section 5.10, rationale). `load` writes values as
    they are (active = anchor after a bootstrap)."""

    framework = "torch"

    def __init__(
        self, module: nn.Module, include_buffers: bool = False, *, clamp_running_var: bool = True
    ) -> None:
        self.module = module
        self.include_buffers = bool(include_buffers)
        named = module_tensors(module, self.include_buffers)
        self._manifest = Manifest(TensorSpec(n, tuple(t.shape)) for n, t in named.items())
        self._tensors: list[torch.Tensor] = [named[n] for n in self._manifest.names]
        self._offsets = np.asarray(self._manifest.offsets, dtype=np.int64)
        self.gathers = 0
        self._host: tuple[tuple[Any, ...], tuple[NDArray[np.float32], ...]] | None = None
        params = {id(p) for p in module.parameters()}
        self._stats = tuple(n for n, t in named.items() if id(t) not in params)
        #: canonical positions of the BatchNorm running variances, clamped at >= 0 after `apply`
        self._var_pos = (
            frozenset(
                i for i, n in enumerate(self._manifest.names)
                if n in self._stats and n.rsplit(".", 1)[-1] == "running_var"
            )
            if clamp_running_var
            else frozenset()
        )  # fmt: skip

    def running_stats(self) -> tuple[str, ...]:
        """The synchronised buffers (BatchNorm running statistics): updated by the forward pass, not
        by the optimizer (the optional seam call, DF-GEN-244)."""
        return self._stats

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The synchronised tensors by canonical name (the live objects)."""
        return dict(zip(self._manifest.names, self._tensors, strict=True))

    def gather(self, indices: NDArray[np.uint32] | None = None) -> NDArray[np.float32]:
        with torch.no_grad():
            if indices is None:
                self.gathers += 1
                flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in self._tensors])
                out: NDArray[np.float32] = flat.cpu().numpy()  # torch.cat made a fresh tensor
                return out
            check_sparse(self._manifest, indices)
            res = np.empty(indices.size, dtype=np.float32)
            for s in self._manifest.locate(indices, checked=True):
                t = self._tensors[s.tensor]
                host = _host_f32(t)
                if host is not None:  # a copy of the f32 elements, as index_select gives
                    # (checked indices: "clip" never clips, and spares "raise"'s buffered copy)
                    np.take(host, s.local, out=res[s.start : s.stop], mode="clip")
                    continue
                idx = torch.from_numpy(s.local).to(t.device)
                part = t.detach().reshape(-1).index_select(0, idx).to(torch.float32)
                res[s.start : s.stop] = part.cpu().numpy()
            return res

    def gather_parts(self) -> list[NDArray[np.float32]]:
        """The canonical vector as one flat f32 array per tensor, in canonical order (the OPTIONAL
        fast path of `delta_fabric.store`): a view of each contiguous f32 CPU tensor, a fresh f32
        copy of any other. Views are read at once and never written (`Engine.generate`)."""
        self.gathers += 1
        with torch.no_grad():
            out: list[NDArray[np.float32]] = []
            for t in self._tensors:
                host = _host_f32(t)
                if host is None:
                    host = t.detach().reshape(-1).to(torch.float32).cpu().numpy()
                out.append(host)
            return out

    def host_parts(self) -> list[NDArray[np.float32]] | None:
        """The canonical vector as flat views of the live tensors, one per tensor in canonical
        order, when every tensor is a contiguous f32 CPU tensor; None otherwise (no copy is ever
        made). Read in place by `Engine.receive` for its DF-RCV-50 checks, never written.

        The views are kept while every tensor keeps its storage, dtype, device, shape and layout
        (``t.data`` may be replaced between calls: then they are taken again)."""
        key = tuple(
            (t.data_ptr(), t.dtype, t.device, t.shape, t.is_contiguous(), t.is_neg(), t.is_conj())
            for t in self._tensors
        )
        if self._host is not None and self._host[0] == key:
            return list(self._host[1])
        with torch.no_grad():
            out: list[NDArray[np.float32]] = []
            for t in self._tensors:
                host = _host_f32(t)
                if host is None:
                    self._host = None
                    return None
                out.append(host)
            self._host = (key, tuple(out))
            return out

    def apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        nat = kernels()
        host = self.host_parts() if nat is not None and ready(indices, np.uint32) else None
        fast = (
            nat is not None
            and host is not None
            and isinstance(values, np.ndarray)
            and values.dtype == np.float32
            and values.shape == np.shape(indices)
        )
        if not fast:
            check_sparse(self._manifest, indices, values)
        elif nat is not None and host is not None:
            # the same fl32(active + agg) in one native pass over the views; the kernel checks
            # the indices (strictly increasing, below N) before it writes anything, and such a
            # refusal is reported as check_sparse's StoreError
            try:
                nat.parts_scatter_add(host, indices, aligned(values, np.float32))
            except (TypeError, ValueError):
                check_sparse(self._manifest, indices, values)
                raise
            for i in self._var_pos:  # a variance is never negative (section 5.10)
                lo, hi = np.searchsorted(indices, self._offsets[i : i + 2])
                if hi > lo:  # clamped only when this apply touched it, as below
                    self._tensors[i].data.clamp_(min=0.0)
            return
        with torch.no_grad():
            for s in self._manifest.locate(indices, checked=True):
                t = self._tensors[s.tensor]
                vals = torch.from_numpy(np.ascontiguousarray(values[s.start : s.stop]))
                vals = vals.to(device=t.device)
                if t.dtype == torch.float32 and t.is_contiguous():
                    idx = torch.from_numpy(s.local).to(t.device)
                    t.data.view(-1).index_add_(0, idx, vals)  # fl32(active + agg), DF-RCV-7
                    if s.tensor in self._var_pos:  # a variance is never negative (section 5.10)
                        t.data.clamp_(min=0.0)
                    continue
                # other dtypes or strides: read as f32, add in f32, write back rounded (DF-MAN-4)
                coords = np.unravel_index(s.local, tuple(t.shape))
                idx_t = tuple(
                    torch.from_numpy(np.ascontiguousarray(c)).to(t.device) for c in coords
                )
                cur = t.data[idx_t].to(torch.float32)
                t.data[idx_t] = (cur + vals).to(t.dtype)
                if s.tensor in self._var_pos:
                    t.data.clamp_(min=0.0)

    def load(self, flat: NDArray[np.float32]) -> None:
        arr = np.ascontiguousarray(check_flat(self._manifest, flat))
        # torch wants a writable array (it warns otherwise): a read-only one, such as
        # `Engine.anchor`, is copied first; it is only read here
        src = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
        with torch.no_grad():
            for ti, t in enumerate(self._tensors):
                a, b = int(self._offsets[ti]), int(self._offsets[ti + 1])
                t.data.copy_(src[a:b].view(t.shape).to(device=t.device, dtype=t.dtype))
