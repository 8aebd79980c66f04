"""Claims less, correctly: an implementation of 1.1 without any OPTIONAL encoding (F32 and PLAIN only,
the spec's DF-CNF-4 example); it must pass every test it claims, with exit status 0."""

from __future__ import annotations

from _base import main
from _levels import F32Only

if __name__ == "__main__":
    raise SystemExit(main(F32Only()))
