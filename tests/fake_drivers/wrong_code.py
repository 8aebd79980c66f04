"""Fault: rejects a packet whose hop count exceeds hop_limit with MALFORMED instead of HOP_LIMIT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, Rejected, main


class WrongCode(Driver):
    name = "wrong_code"

    def decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return super().decode(req)
        except Rejected as exc:
            if exc.code == "HOP_LIMIT":
                raise Rejected("MALFORMED", "hops out of range") from None
            raise


if __name__ == "__main__":
    raise SystemExit(main(WrongCode()))
