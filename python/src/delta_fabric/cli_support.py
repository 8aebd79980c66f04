"""Shared pieces of the command-line tools (``delta-fabric``, ``delta-fabric-demo``,
``delta-fabric-conformance``): ``--version`` text, software versions, the help formatter, and a
quiet exit when stdout is a pipe closed early (``delta-fabric inspect ... | head``)."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from delta_fabric import __version__
from delta_fabric.wire import VERSION_MAJOR, VERSION_MINOR

__all__ = [
    "PROTOCOL_VERSION",
    "HelpFormatter",
    "add_version_argument",
    "exit_quietly_on_broken_pipe",
    "one_line_errors",
    "software_versions",
    "version_text",
]

#: The protocol version this package implements (spec/protocol.md, DF-VER-1).
PROTOCOL_VERSION = f"{VERSION_MAJOR}.{VERSION_MINOR}"

#: distribution name -> import name, for the optional dependencies reported by ``--version``
_OPTIONAL = {
    "torch": "torch",
    "eclipse-zenoh": "zenoh",
    "delta-fabric-native": "delta_fabric_native",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Appends ``(default: ...)`` to every option's help, except where the help already states its
    default or there is none to state (``None``, a flag's ``False``, an empty list). Descriptions and
    the ``--version`` line are printed as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        d = action.default
        if d is None or d is False or d is argparse.SUPPRESS or d == [] or "default" in text:
            return action.help
        return super()._get_help_string(action)


def one_line_errors(p: argparse.ArgumentParser) -> None:
    """A bad option prints one line (``<prog>: error: ...``, no usage block) and exits 2; also in
    every sub-command parser below ``p`` (nested ones too), including those added later by
    `one_line_errors` being called again."""

    def error(message: str) -> NoReturn:
        print(f"{p.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    setattr(p, "error", error)  # noqa: B010 (an instance override of ArgumentParser.error)
    for action in p._actions:  # argparse has no public accessor for its sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                one_line_errors(sub)


def _dist_version(dist: str, module: str) -> str | None:
    """The installed version of ``dist`` when ``module`` can be imported (not imported here: torch
    takes seconds)."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def software_versions() -> dict[str, str | None]:
    """``delta-fabric``, the protocol, Python, and torch / zenoh (``None`` when not installed)."""
    out: dict[str, str | None] = {
        "delta-fabric": __version__,
        "protocol": PROTOCOL_VERSION,
        "python": ".".join(map(str, sys.version_info[:3])),
    }
    for dist, module in _OPTIONAL.items():
        out[dist] = _dist_version(dist, module)
    return out


def version_text(prog: str, own_version: str | None = None) -> str:
    """One line: ``delta-fabric 0.1.0 (protocol 1.1; torch 2.x, eclipse-zenoh 1.10.x)``; a tool of
    its own distribution (``own_version``) lists the library's version too."""
    v = software_versions()
    lib = v.pop("delta-fabric")
    protocol = v.pop("protocol")
    v.pop("python", None)
    parts = [f"protocol {protocol}"]
    if own_version is not None:
        parts.insert(0, f"delta-fabric {lib}")
    found = [f"{k} {val}" for k, val in v.items() if val is not None]
    if v.get("delta-fabric-native") is not None:  # installed: say whether it runs here
        from delta_fabric.native import describe

        found = [
            f"{f} ({describe()})" if f.startswith("delta-fabric-native ") else f for f in found
        ]
    missing = [k for k, val in v.items() if val is None]
    if found:
        parts.append(", ".join(found))
    if missing:
        parts.append("not installed: " + ", ".join(missing))
    return f"{prog} {own_version or lib} ({'; '.join(parts)})"


def add_version_argument(
    parser: argparse.ArgumentParser, prog: str, own_version: str | None = None
) -> None:
    """``--version``: prints `version_text` and exits 0."""
    parser.add_argument(
        "--version",
        action="version",
        version=version_text(prog, own_version),
        help="print the package, protocol and dependency versions and exit",
    )


def exit_quietly_on_broken_pipe(body: Callable[[], int]) -> int:
    """Run ``body``; when stdout's reader went away (``... | head``), stop quietly with 141 (the
    shell's status for SIGPIPE) instead of a ``BrokenPipeError`` traceback."""
    try:
        rc = body()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    return rc
