"""The `delta-fabric` command: a thin dispatcher; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# subcommand -> (module, help). Each module exposes `add_arguments(parser)` and `run(args) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("delta_fabric.cli_inspect", "decode a packet file and print it as JSON"),
    "demo": ("delta_fabric.demo", "train a local cluster on the digits data set and report"),
    "conformance": ("delta_fabric.conformance", "run the conformance suite"),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="delta-fabric", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    wanted = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name == wanted:  # import only the module that runs (torch and zenoh are slow to import)
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            modules[name] = module
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args))


if __name__ == "__main__":
    sys.exit(main())
