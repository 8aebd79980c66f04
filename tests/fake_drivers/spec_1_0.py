"""Claims less, correctly: an implementation of version 1.0 (``hello.spec_version`` "1.0"); it must pass
every test of the 1.0 level, with exit status 0."""

from __future__ import annotations

from _base import main
from _levels import Spec10

if __name__ == "__main__":
    raise SystemExit(main(Spec10()))
