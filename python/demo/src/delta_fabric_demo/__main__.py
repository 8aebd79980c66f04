"""``python -m delta_fabric_demo`` (same as ``delta-fabric-demo``)."""

from __future__ import annotations

import sys

from delta_fabric_demo import main

if __name__ == "__main__":
    sys.exit(main())
