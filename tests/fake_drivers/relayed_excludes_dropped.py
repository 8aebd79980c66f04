"""Fault: the other reading of the counters: a relay entry dropped as oversize is not counted in
``entries_relayed`` (DF-RCV-30 counts it: it was produced under Section 8.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class RelayedExcludesDropped(Driver):
    name = "relayed_excludes_dropped"

    def receive(self, req: Mapping[str, Any]) -> dict[str, Any]:
        out = super().receive(req)
        c = out["counters"]
        c["entries_relayed"] -= c["relay_dropped_oversize"]
        return out


if __name__ == "__main__":
    raise SystemExit(main(RelayedExcludesDropped()))
