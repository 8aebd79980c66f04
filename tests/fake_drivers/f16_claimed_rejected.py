"""Fault: declares ``encoding.f16`` (a claim of the feature) but rejects every F16 packet as
``UNSUPPORTED_ENCODING``, as an F32-only implementation does; a claimed feature's tests must fail."""

from __future__ import annotations

from _base import main
from _levels import F32Only


class F16ClaimedRejected(F32Only):
    name = "f16_claimed_rejected"
    drops = F32Only.drops - {"encoding.f16"}


if __name__ == "__main__":
    raise SystemExit(main(F16ClaimedRejected()))
