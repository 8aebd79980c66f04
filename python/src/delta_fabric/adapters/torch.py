"""Compatibility shim: ``Fabric(module, transport, ...)`` is
``delta_fabric.fabric.Fabric(TorchStore(module, include_buffers), transport, ...)``
(`delta_fabric.stores.torch`). ``track_hops`` is accepted and ignored (always on, at no cost)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from delta_fabric.config import SyncConfig
from delta_fabric.fabric import DEFAULT_MAX_DRAIN, AcceptedCallback, Bootstrap
from delta_fabric.fabric import Fabric as _Fabric
from delta_fabric.stores.torch import TorchStore, module_manifest, module_tensors
from delta_fabric.transports.base import Transport

__all__ = ["Fabric", "module_manifest", "module_tensors"]


class Fabric(_Fabric):
    """A `delta_fabric.fabric.Fabric` over a `TorchStore`. ``include_buffers`` defaults to
    ``config.include_buffers``."""

    store: TorchStore

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
        on_accepted: AcceptedCallback | None = None,
    ) -> None:
        del track_hops  # always on now
        cfg = config if config is not None else SyncConfig()
        buffers = cfg.include_buffers if include_buffers is None else bool(include_buffers)
        self.module = module
        self.include_buffers = buffers
        super().__init__(
            TorchStore(module, buffers),
            transport,
            cfg,
            node_id=node_id,
            incarnation=incarnation,
            bootstrap=bootstrap,
            bootstrap_timeout=bootstrap_timeout,
            fast_selection=fast_selection,
            max_drain=max_drain,
            on_accepted=on_accepted,
        )

    @classmethod
    def join(  # type: ignore[override]
        cls,
        module: nn.Module,
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        include_buffers: bool | None = None,
        timeout: float = 10.0,
        track_hops: bool = False,
        **kw: Any,
    ) -> Fabric:
        """Late join or restart: load a live peer's snapshot into ``module``, fresh incarnation."""
        return cls(
            module,
            transport,
            config,
            node_id=node_id,
            incarnation=incarnation,
            include_buffers=include_buffers,
            bootstrap=True,
            bootstrap_timeout=timeout,
            **kw,
        )

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The synchronised tensors by canonical name (the live objects)."""
        return self.store.tensors

    @property
    def gathers(self) -> int:
        return self.store.gathers

    def active_vector(self) -> NDArray[np.float32]:
        """The current active weights as a flat canonical f32 vector (a copy)."""
        return self.store.gather()
