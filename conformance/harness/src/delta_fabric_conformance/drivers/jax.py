"""The JAX driver (registry name ``jax``): the kit plus the JAX digits CNN and `JaxStore`.

Run as ``python -m delta_fabric_conformance.drivers.jax``. The model is the reference digits CNN
(driver protocol section 5.6) in plain JAX on Flax-Linen-style variables
(:mod:`delta_fabric_conformance.drivers.jax_digits`), kept in a
:class:`~delta_fabric.stores.jax.JaxStore` (the JAX/Flax rows of spec section 4.5) and driven through
``variables = fabric.update(variables)``. The ``generate`` / ``receive`` vectors read the active
weights and apply the aggregate through a ``JaxStore`` too (DF-RCV-7 bit for bit).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.layout import CanonicalLayout
from delta_fabric.manifest import Manifest
from delta_fabric.stores.jax import JaxStore
from numpy.typing import NDArray

from delta_fabric_conformance.drivers import jax_digits
from delta_fabric_conformance.kit import Driver, KitFabric, NodeArgs, main
from delta_fabric_conformance.kit.forward import ForwardResult


@dataclass
class JaxModel:
    """A live node's model: the store holds the current variables; ``velocity`` is SGD's state."""

    store: JaxStore
    velocity: Any


class JaxKit:
    """:class:`~delta_fabric_conformance.kit.ModelKit` for JAX (functional: the store owns the
    variables, every step hands them through ``fabric.update``)."""

    framework = "jax"

    def make_model(
        self, manifest: Manifest, weights: NDArray[np.float32], config: SyncConfig
    ) -> JaxModel:
        store = JaxStore(jax_digits.digits_variables(), include_buffers=config.include_buffers)
        if store.manifest != manifest:
            raise ValueError("the JAX digits CNN's manifest differs from the scenario model's")
        store.load(weights)
        jax_digits.warm_up(store.state(), 32)  # compile now, not during the first training steps
        return JaxModel(store, jax_digits.zeros_like_params(store.state()))

    def make_fabric(self, model: JaxModel, args: NodeArgs) -> KitFabric:
        return args.fabric(model.store)

    def train_step(
        self,
        model: JaxModel,
        fabric: KitFabric,
        x: NDArray[np.float32],
        y: NDArray[np.int64],
        lr: float,
    ) -> JaxModel:
        variables, model.velocity, _ = jax_digits.sgd_step(
            model.store.state(),
            model.velocity,
            jnp.asarray(x),
            jnp.asarray(y, dtype=jnp.int32),
            jnp.float32(lr),
            jnp.float32(0.0),  # plain SGD (driver protocol 5.6, train)
            jnp.float32(0.1),  # PyTorch's BatchNorm momentum
        )
        fabric.update(variables)  # type: ignore[attr-defined]
        return model

    def forward_check(
        self,
        manifest: Manifest,
        weights: NDArray[np.float32],
        include_buffers: bool,
        x: NDArray[np.float32],
        y: NDArray[np.int64],
        lr: float,
    ) -> ForwardResult:
        store = JaxStore(jax_digits.digits_variables(), include_buffers=include_buffers)
        if store.manifest != manifest:
            raise ValueError("the JAX digits CNN's manifest differs from the vector's")
        store.load(weights)  # as make_model, without its warm-up compile for batch 32
        variables = store.state()
        xj = jnp.asarray(x)
        logits_eval, _ = jax_digits.forward(variables, xj, False)
        logits_train, _ = jax_digits.forward(variables, xj, True)
        after, _, loss = jax_digits.sgd_step(  # the train instruction's step (train_step above)
            variables,
            jax_digits.zeros_like_params(variables),
            xj,
            jnp.asarray(y, dtype=jnp.int32),
            jnp.float32(lr),
            jnp.float32(0.0),
            jnp.float32(0.1),
        )
        store = JaxStore(after, include_buffers=include_buffers)  # the canonical mapping back
        return (
            np.asarray(logits_eval, dtype=np.float32),
            np.asarray(logits_train, dtype=np.float32),
            float(loss),
            store.gather(),
        )

    def predict(self, model: JaxModel, fabric: KitFabric, x: NDArray[np.float32]) -> Any:
        return jax_digits.predict(model.store.state(), x)

    def active(self, model: JaxModel, fabric: KitFabric) -> NDArray[np.float32]:
        return model.store.gather()


def _flat_store(active: NDArray[np.float32]) -> JaxStore:
    layout = CanonicalLayout([(("w",), "w", active.shape)])
    return JaxStore({"w": jnp.asarray(active)}, layout)


def jax_gather(active: NDArray[np.float32]) -> NDArray[np.float32]:
    """The active vector read back from a JAX array (a ``generate`` vector's input)."""
    return _flat_store(active).gather()


def jax_apply(active: Any, indices: Any, values: Any) -> NDArray[np.float32]:
    """DF-RCV-7 through `JaxStore.apply` (jitted gather and scatter, f32 add), as a node applies an
    aggregate."""
    store = _flat_store(np.asarray(active, dtype=np.float32))
    store.apply(np.asarray(indices, dtype=np.uint32), np.asarray(values, dtype=np.float32))
    return store.gather()


def make_driver() -> Driver:
    return Driver("jax", "jax", JaxKit(), gather=jax_gather, apply=jax_apply)


if __name__ == "__main__":
    sys.exit(main(make_driver()))
