"""Fault: claims the engine target (and declares ``receive``) but answers ``skipped`` to every
``receive`` request; a REQUIRED test of a claimed target that is unsupported is a failure (DF-CNF-30)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main
from delta_fabric_conformance.kit import Skipped


class ClaimedUnsupported(Driver):
    name = "claimed_unsupported"

    def receive(self, req: Mapping[str, Any]) -> dict[str, Any]:
        raise Skipped("receive is not supported by this build")


if __name__ == "__main__":
    raise SystemExit(main(ClaimedUnsupported()))
