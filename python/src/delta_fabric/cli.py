"""The `delta-fabric` command: a thin dispatcher; each subcommand lives in its own module.

``demo`` and ``conformance`` live in their own packages (``delta-fabric-demo``,
``delta-fabric-conformance``); the command delegates to them when they are installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from delta_fabric.cli_support import (
    HelpFormatter,
    add_version_argument,
    exit_quietly_on_broken_pipe,
    one_line_errors,
)

# subcommand -> (module, help, distribution that provides the module).
# Each module exposes `add_arguments(parser)` and `run(args) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "inspect": ("delta_fabric.cli_inspect", "decode a packet file and print it as JSON", ""),
    "run": (
        "delta_fabric.launch",
        "start a cluster of your training script (torchrun-style launcher)",
        "",
    ),
    "status": ("delta_fabric.cli_status", "list the live nodes of a namespace", ""),
    "router": ("delta_fabric.router", "run a Zenoh router (for clusters across machines)", ""),
    "demo": (
        "delta_fabric_demo",
        "train a local cluster on the digits data set and report",
        "delta-fabric-demo (python/demo)",
    ),
    "conformance": (
        "delta_fabric_conformance.cli",
        "run the conformance suite",
        "delta-fabric-conformance (conformance/harness)",
    ),
}


DESCRIPTION = """\
DeltaFabric: decentralized sparse weight synchronization. Nodes training the same model exchange
only the largest weight changes over Zenoh, with no parameter server (protocol v1).

Run `delta-fabric COMMAND --help` for a command's options."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="delta-fabric",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_argument(parser, "delta-fabric")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    argv = list(sys.argv[1:] if argv is None else argv)
    wanted = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    modules = {}
    for name, (module_name, help_text, dist) in SUBCOMMANDS.items():
        p = sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        if name == wanted:  # import only the module that runs (torch and zenoh are slow to import)
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name is None or not module_name.startswith(exc.name):
                    print(f"delta-fabric {name}: {exc}", file=sys.stderr)  # e.g. a missing extra
                    return 2
                print(
                    f"delta-fabric {name}: the package {dist} is not installed "
                    f"(pip install -e {dist.split('(')[-1].rstrip(')')})",
                    file=sys.stderr,
                )
                return 2
            module.add_arguments(p)
            modules[name] = module
    if wanted is None:
        _no_command(argv)
    one_line_errors(parser)  # every sub-command's (nested) parser too: one line, exit 2
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the sub-command's parser (argparse would say it as `delta-fabric`)
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return exit_quietly_on_broken_pipe(lambda: int(modules[args.command].run(args)))


def _no_command(argv: list[str]) -> None:
    """No sub-command first: ``--help`` and ``--version`` are answered by argparse; anything else is
    one line naming what is wrong, and exit 2."""
    if argv and argv[0] in ("-h", "--help", "--version"):
        return
    commands = ", ".join(SUBCOMMANDS)
    if not argv:
        problem = "no command given"
    elif argv[0].startswith("-"):
        problem = (
            f"unknown option {argv[0]!r}: options go after the command "
            "(delta-fabric COMMAND --help lists them)"
        )
    else:
        problem = f"unknown command {argv[0]!r}"
    print(f"delta-fabric: error: {problem}; commands: {commands}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    sys.exit(main())
