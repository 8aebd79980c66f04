"""Fault: the process dies (exit status 3, no answer) on its 20th request."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class Crash(Driver):
    name = "crash"

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def respond(self, req: Mapping[str, Any]) -> dict[str, Any]:
        self.requests += 1
        if self.requests == 20:
            os._exit(3)
        return super().respond(req)


if __name__ == "__main__":
    raise SystemExit(main(Crash()))
