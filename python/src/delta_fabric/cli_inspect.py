"""`delta-fabric inspect`: decode a packet file and print it as JSON (spec Appendix B.2).

Exit status: 0 valid packet (JSON of the packet on stdout); 1 rejected packet (``{"error": CODE,
"detail":
...}`` on stdout, one line on stderr); 2 usage problem (unreadable file, bad context file; stderr
only).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delta_fabric.errors import DecodeError
from delta_fabric.wire import (
    DEFAULT_MAX_PACKET_SIZE,
    decode_packet,
    packet_to_json,
    validate_packet,
)

__all__ = ["InspectContext", "add_arguments", "load_context", "run"]

PROG = "delta-fabric inspect"


class InspectContext:
    """The receiver context of a conformance vector: fingerprint, N, hop limit, max packet size."""

    __slots__ = ("fingerprint", "hop_limit", "max_packet_size", "num_params")

    def __init__(
        self, fingerprint: bytes, num_params: int, hop_limit: int, max_packet_size: int
    ) -> None:
        self.fingerprint = fingerprint
        self.num_params = num_params
        self.hop_limit = hop_limit
        self.max_packet_size = max_packet_size

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> InspectContext:
        """From a context object, or from a vector object whose "context" member is one."""
        ctx = d.get("context", d)
        if not isinstance(ctx, Mapping):
            raise ValueError('"context" must be an object')
        try:
            fp = bytes.fromhex(ctx["fingerprint"])
        except KeyError:
            raise ValueError('context lacks "fingerprint"') from None
        except (TypeError, ValueError):
            raise ValueError('context "fingerprint" must be 64 hex digits') from None
        if len(fp) != 32:
            raise ValueError('context "fingerprint" must be 64 hex digits')

        def integer(key: str, default: int | None = None) -> int:
            v = ctx.get(key, default)
            if v is None:
                raise ValueError(f'context lacks "{key}"')
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f'context "{key}" must be a non-negative integer, got {v!r}')
            return v

        return cls(
            fp,
            integer("num_params"),
            integer("hop_limit"),
            integer("max_packet_size", DEFAULT_MAX_PACKET_SIZE),
        )


def load_context(path: Path) -> InspectContext:
    """Read a vector JSON file (or a plain context object). Raises ``ValueError`` or ``OSError``."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(d, Mapping):
        raise ValueError("a context file holds a JSON object")
    return InspectContext.from_json(d)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "packet_file", metavar="PACKET_FILE", help="packet bytes (.dfp); '-' reads stdin"
    )
    parser.add_argument(
        "--context",
        metavar="FILE.json",
        type=Path,
        help="vector JSON file (or plain context object) whose 'context' gives fingerprint, "
        "num_params, hop_limit and max_packet_size; also runs the context checks",
    )
    parser.add_argument(
        "--max-packet-size",
        metavar="N",
        type=int,
        default=None,
        help="largest accepted packet in bytes "
        f"(default: the context's, else {DEFAULT_MAX_PACKET_SIZE})",
    )


def _usage_error(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    ctx: InspectContext | None = None
    if args.context is not None:
        try:
            ctx = load_context(args.context)
        except (OSError, ValueError) as exc:
            return _usage_error(f"bad context file {args.context}: {exc}")
    if args.max_packet_size is not None:
        if args.max_packet_size < 0:
            return _usage_error("--max-packet-size must be >= 0")
        max_size = int(args.max_packet_size)
    else:
        max_size = ctx.max_packet_size if ctx is not None else DEFAULT_MAX_PACKET_SIZE
    name = str(args.packet_file)
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        return _usage_error(f"cannot read {name}: {exc.strerror or exc}")
    try:
        packet = decode_packet(data, max_size)
        if ctx is not None:
            validate_packet(
                packet,
                fingerprint=ctx.fingerprint,
                num_params=ctx.num_params,
                hop_limit=ctx.hop_limit,
            )
    except DecodeError as exc:
        print(json.dumps({"error": exc.code.value, "detail": exc.detail}))
        print(
            f"{PROG}: {name}: rejected: {exc.code.value}: {exc.detail}".replace("\n", " "),
            file=sys.stderr,
        )
        return 1
    print(json.dumps(packet_to_json(packet), indent=2, allow_nan=False))
    return 0
