"""Fault: writes a log line to stdout (instead of stderr) while decoding its fifth packet."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class StdoutLog(Driver):
    name = "stdout_log"

    def __init__(self) -> None:
        super().__init__()
        self.decodes = 0
        self.out = sys.stdout  # the protocol stream (main() points sys.stdout at stderr afterwards)

    def decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        self.decodes += 1
        if self.decodes == 5:
            self.out.write("decoding packet 5\n")
            self.out.flush()
        return super().decode(req)


if __name__ == "__main__":
    raise SystemExit(main(StdoutLog()))
