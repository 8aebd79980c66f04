"""Fault: echoes the wrong seq (seq + 1) in its answers to `encode`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from _base import Driver, main


class WrongSeq(Driver):
    name = "wrong_seq"

    def write(self, out: IO[str], seq: Any, body: Mapping[str, Any]) -> None:
        if "ok" in body and isinstance(body["ok"].get("packet"), str) and isinstance(seq, int):
            seq += 1  # only encode results carry the packet as a base64 string
        super().write(out, seq, body)


if __name__ == "__main__":
    raise SystemExit(main(WrongSeq()))
