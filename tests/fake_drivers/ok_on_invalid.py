"""Fault: answers ok (with a made-up packet) to a packet it must reject with DUPLICATE_INDEX."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, Rejected, main


class OkOnInvalid(Driver):
    name = "ok_on_invalid"

    def decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return super().decode(req)
        except Rejected as exc:
            if exc.code != "DUPLICATE_INDEX":
                raise
            fp = req["context"]["fingerprint"]
            return {
                "packet": {
                    "version_major": 1,
                    "version_minor": 0,
                    "sender": "0000000000000001",
                    "sender_incarnation": "0000000000000001",
                    "fingerprint": fp,
                    "encoding": "F32",
                    "entries": [],
                }
            }


if __name__ == "__main__":
    raise SystemExit(main(OkOnInvalid()))
