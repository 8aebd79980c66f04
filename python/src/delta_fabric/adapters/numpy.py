"""Compatibility shim: ``NumpyFabric(arrays, transport, ...)`` is
``Fabric(NumpyStore(arrays), transport, ...)`` (`delta_fabric.fabric`, `delta_fabric.stores.numpy`).
``track_hops`` is accepted and ignored (hop counts are always kept, at no cost)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.config import SyncConfig
from delta_fabric.fabric import DEFAULT_MAX_DRAIN, AcceptedCallback, Bootstrap, Fabric
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.base import Transport

__all__ = ["NumpyFabric"]


class NumpyFabric(Fabric):
    """A `Fabric` over a `NumpyStore` (the arrays are updated in place)."""

    store: NumpyStore

    def __init__(
        self,
        arrays: Mapping[str, NDArray[Any]],
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        bootstrap: Bootstrap = False,
        bootstrap_timeout: float = 10.0,
        fast_selection: bool = False,
        max_drain: int = DEFAULT_MAX_DRAIN,
        track_hops: bool = False,
        on_accepted: AcceptedCallback | None = None,
    ) -> None:
        del track_hops  # always on now
        super().__init__(
            NumpyStore(dict(arrays)),
            transport,
            config,
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
        arrays: Mapping[str, NDArray[Any]],
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        timeout: float = 10.0,
        track_hops: bool = False,
        **kw: Any,
    ) -> NumpyFabric:
        """Late join / restart: load a live peer's snapshot into the arrays, fresh incarnation."""
        return cls(
            arrays,
            transport,
            config,
            node_id=node_id,
            incarnation=incarnation,
            bootstrap=True,
            bootstrap_timeout=timeout,
            **kw,
        )

    @property
    def arrays(self) -> dict[str, NDArray[Any]]:
        return {str(k): a for k, a in self.store.arrays.items()}

    @property
    def gathers(self) -> int:
        return self.store.gathers

    def active_vector(self) -> NDArray[np.float32]:
        return self.store.gather()
