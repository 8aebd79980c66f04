"""Fault: claims the node target without the capabilities to run its tests (no ``peer``); the runner
must refuse the claim (DF-CNF-30)."""

from __future__ import annotations

from _base import Driver, main

NO_PEER = [
    "decode",
    "encode",
    "generate",
    "generate.fast",
    "receive",
    "encoding.f16",
    "encoding.bf16",
]


class OverClaim(Driver):
    name = "over_claim"

    def capabilities(self) -> list[str]:
        return list(NO_PEER)

    def claims(self) -> list[str]:
        return ["codec", "engine", "node"]


if __name__ == "__main__":
    raise SystemExit(main(OverClaim()))
