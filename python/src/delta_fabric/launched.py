"""How ``delta-fabric run`` starts a Python training script: ``python -m delta_fabric.launched
SCRIPT [ARGS...]`` runs ``SCRIPT`` as ``__main__`` (as ``python SCRIPT`` would), with two
differences a launcher of many nodes needs:

- a `delta_fabric.errors.ConfigurationError` that reaches the top (a bad ``DELTA_FABRIC_*``
  value, a node id already in use, a Zenoh configuration file that does not load) prints its one
  line, ``error: <message>``, and the node exits with 2, not with a traceback;
- Ctrl-C (``KeyboardInterrupt``) prints ``interrupted`` and exits with 130, not with a traceback.

Every other exception is the script's own and keeps its traceback.
"""

from __future__ import annotations

import runpy
import sys

from delta_fabric.errors import ConfigurationError

__all__ = ["main"]

#: Exit code of a node whose configuration is refused (as a bad command-line option).
EXIT_CONFIGURATION = 2
#: Exit code of a node stopped by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m delta_fabric.launched SCRIPT [ARGS...]", file=sys.stderr)
        return EXIT_CONFIGURATION
    script = args[0]
    sys.argv = list(args)
    sys.path.insert(0, _script_dir(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except ConfigurationError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return EXIT_CONFIGURATION
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return 0


def _script_dir(script: str) -> str:
    import os

    return os.path.dirname(os.path.abspath(script))


if __name__ == "__main__":
    sys.exit(main())
