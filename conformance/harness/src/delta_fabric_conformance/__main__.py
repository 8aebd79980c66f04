"""``python -m delta_fabric_conformance run --output DIR`` (same as ``delta-fabric-conformance``)."""

from __future__ import annotations

import sys

from delta_fabric_conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())
