"""Fault: the model flattens the pooled ``[n, 16, 4, 4]`` map in ``(h, w, c)`` order (an NHWC flatten)
instead of ``(c, h, w)``: same manifest, same fingerprint, a different function."""

from __future__ import annotations

from typing import Any

from _base import Driver, main
from delta_fabric_conformance.drivers.torch import TorchKit, digits_cnn_class


class HwcKit(TorchKit):
    def new_model(self) -> Any:
        from torch.nn import functional as F

        class HwcCNN(digits_cnn_class()):  # type: ignore[misc]
            def forward(self, x: Any) -> Any:
                x = F.max_pool2d(F.relu(self.bn1(self.conv1(x.reshape(-1, 1, 8, 8)))), 2)
                return self.fc2(F.relu(self.fc1(x.permute(0, 2, 3, 1).flatten(1))))

        return HwcCNN()


class ForwardFlattenHwc(Driver):
    name = "forward_flatten_hwc"

    def __init__(self) -> None:
        super().__init__()
        self.kit = HwcKit()


if __name__ == "__main__":
    raise SystemExit(main(ForwardFlattenHwc()))
