"""Fault: Flax's BatchNorm momentum 0.9 given to PyTorch's BatchNorm2d, whose momentum is the weight
of the *new* statistics (0.1): the running statistics move 9 times too far per step."""

from __future__ import annotations

from typing import Any

from _base import Driver, main
from delta_fabric_conformance.drivers.torch import TorchKit


class FlaxMomentumKit(TorchKit):
    def new_model(self) -> Any:
        m = super().new_model()
        m.bn1.momentum = 0.9
        return m


class ForwardBnFlaxMomentum(Driver):
    name = "forward_bn_flax_momentum"

    def __init__(self) -> None:
        super().__init__()
        self.kit = FlaxMomentumKit()


if __name__ == "__main__":
    raise SystemExit(main(ForwardBnFlaxMomentum()))
