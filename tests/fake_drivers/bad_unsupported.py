"""Fault: answers `errored` instead of `unsupported` to a command it does not know."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class BadUnsupported(Driver):
    name = "bad_unsupported"

    def respond(self, req: Mapping[str, Any]) -> dict[str, Any]:
        if req.get("cmd") not in self.handlers:
            return {"errored": {"message": f"unknown command {req.get('cmd')!r}"}}
        return super().respond(req)


if __name__ == "__main__":
    raise SystemExit(main(BadUnsupported()))
