"""The reference digits CNN in plain JAX, on Flax-Linen-style variables (driver protocol section 5.6).

Variables: ``params/conv1/{kernel [3,3,1,16] (HWIO), bias}``, ``params/bn1/{scale, bias}``,
``params/fc1/{kernel [256,64], bias}``, ``params/fc2/{kernel [64,10], bias}`` and
``batch_stats/bn1/{mean, var}``; `delta_fabric.stores.jax.flax_layout` maps them to the canonical
PyTorch names and layouts (spec section 4.5). The computation follows PyTorch's ``DigitsCNN``: NHWC
activations, transposed to NCHW before the ``(c, h, w)`` flatten; BatchNorm with ``eps = 1e-5``, the
biased batch variance in training and PyTorch's momentum convention with the unbiased variance for the
running statistics; cross-entropy; SGD with PyTorch's momentum convention (``v = mu * v + g``,
``w -= lr * v``; ``mu = 0`` is plain SGD).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EPS",
    "digits_variables",
    "forward",
    "predict",
    "sgd_step",
    "warm_up",
    "zeros_like_params",
]

#: BatchNorm epsilon (PyTorch's default).
EPS = 1e-5

Variables = dict[str, Any]


def digits_variables(seed: int = 0) -> Variables:
    """Freshly initialised variables (PyTorch's default init ranges; BatchNorm 1/0, stats 0/1).

    Scenarios and the demo overwrite them with shared canonical weights, so only the shapes matter
    for synchronisation; the values make a model that trains on its own.
    """
    rng = np.random.default_rng(seed)

    def uniform(shape: tuple[int, ...], fan_in: int) -> jax.Array:
        bound = 1.0 / np.sqrt(fan_in)
        return jnp.asarray(rng.uniform(-bound, bound, size=shape).astype(np.float32))

    return {
        "params": {
            "conv1": {"kernel": uniform((3, 3, 1, 16), 9), "bias": uniform((16,), 9)},
            "bn1": {"scale": jnp.ones(16, jnp.float32), "bias": jnp.zeros(16, jnp.float32)},
            "fc1": {"kernel": uniform((256, 64), 256), "bias": uniform((64,), 256)},
            "fc2": {"kernel": uniform((64, 10), 64), "bias": uniform((10,), 64)},
        },
        "batch_stats": {
            "bn1": {"mean": jnp.zeros(16, jnp.float32), "var": jnp.ones(16, jnp.float32)}
        },
    }


def zeros_like_params(variables: Variables) -> Any:
    """The SGD momentum buffers (zeros shaped like ``params``)."""
    return jax.tree_util.tree_map(jnp.zeros_like, variables["params"])


def forward(
    variables: Variables, x: jax.Array, train: bool, bn_momentum: float = 0.1
) -> tuple[jax.Array, Any]:
    """Logits ``[n, 10]`` of ``x`` (``[n, 64]`` or ``[n, 1, 8, 8]``, pixels / 16) and the new
    ``batch_stats`` (updated only when ``train``)."""
    p, stats = variables["params"], variables["batch_stats"]["bn1"]
    h = jnp.reshape(x, (-1, 8, 8, 1))  # NCHW with C = 1 is NHWC with C = 1
    h = jax.lax.conv_general_dilated(
        h,
        p["conv1"]["kernel"],
        window_strides=(1, 1),
        padding=((1, 1), (1, 1)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        precision=jax.lax.Precision.HIGHEST,
    )
    h = h + p["conv1"]["bias"]
    if train:
        mean = jnp.mean(h, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(h - mean), axis=(0, 1, 2))  # biased, in the normalisation
        m = h.shape[0] * h.shape[1] * h.shape[2]
        unbiased = var * (m / max(m - 1, 1))
        new_stats = {
            "bn1": {
                "mean": (1.0 - bn_momentum) * stats["mean"]
                + bn_momentum * jax.lax.stop_gradient(mean),
                "var": (1.0 - bn_momentum) * stats["var"]
                + bn_momentum * jax.lax.stop_gradient(unbiased),
            }
        }
    else:
        mean, var = stats["mean"], stats["var"]
        new_stats = variables["batch_stats"]
    h = (h - mean) / jnp.sqrt(var + EPS) * p["bn1"]["scale"] + p["bn1"]["bias"]
    h = jax.nn.relu(h)
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jnp.transpose(h, (0, 3, 1, 2)).reshape(h.shape[0], 256)  # (c, h, w) flatten
    hp = jax.lax.Precision.HIGHEST
    h = jax.nn.relu(jnp.dot(h, p["fc1"]["kernel"], precision=hp) + p["fc1"]["bias"])
    logits = jnp.dot(h, p["fc2"]["kernel"], precision=hp) + p["fc2"]["bias"]
    return logits, new_stats


def _loss(params: Any, batch_stats: Any, x: jax.Array, y: jax.Array, bn_momentum: float) -> Any:
    logits, new_stats = forward(
        {"params": params, "batch_stats": batch_stats}, x, True, bn_momentum
    )
    logp = jax.nn.log_softmax(logits)
    loss = -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
    return loss, new_stats


@jax.jit
def sgd_step(
    variables: Variables,
    velocity: Any,
    x: jax.Array,
    y: jax.Array,
    lr: jax.Array,
    momentum: jax.Array,
    bn_momentum: jax.Array,
) -> tuple[Variables, Any, jax.Array]:
    """One training step: cross-entropy, gradient, SGD (PyTorch's momentum convention)."""
    (loss, new_stats), grads = jax.value_and_grad(_loss, has_aux=True)(
        variables["params"], variables["batch_stats"], x, y, bn_momentum
    )
    velocity = jax.tree_util.tree_map(lambda v, g: momentum * v + g, velocity, grads)
    params = jax.tree_util.tree_map(lambda w, v: w - lr * v, variables["params"], velocity)
    return {"params": params, "batch_stats": new_stats}, velocity, loss


@jax.jit
def _predict(variables: Variables, x: jax.Array) -> jax.Array:
    logits, _ = forward(variables, x, False)
    return jnp.argmax(logits, axis=1)


def predict(variables: Variables, x: NDArray[np.float32]) -> NDArray[np.int64]:
    """Predicted classes in inference mode (BatchNorm running statistics)."""
    return np.asarray(_predict(variables, jnp.asarray(x)), dtype=np.int64)


def warm_up(variables: Variables, batch_size: int) -> None:
    """Compile `sgd_step` for ``batch_size`` rows ahead of training (a node that compiles during
    its first steps falls seconds behind its peers). Changes nothing."""
    x = jnp.zeros((batch_size, 64), jnp.float32)
    y = jnp.zeros((batch_size,), jnp.int32)
    f = jnp.float32(0.0)
    _out, _, loss = sgd_step(variables, zeros_like_params(variables), x, y, f, f, f)
    loss.block_until_ready()
