"""Fault: claims version 1.0 but writes the 1.1 ``version_minor = 1`` in the packets it relays
(DF-VER-1: a 1.0 sender writes 0); the relay vectors judge a 1.0 driver by 1.0's expectation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import main
from _levels import Filtered, Spec10


class V10Minor1(Spec10):
    name = "v10_minor_1"

    def receive(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return Filtered.receive(self, req)  # the reference's relay packets, version_minor 1


if __name__ == "__main__":
    raise SystemExit(main(V10Minor1()))
