"""``delta-fabric router``: a Zenoh router in its own process, for clusters that span machines.

Nodes on a machine run in client mode and connect to that machine's router; the routers connect to each
other (``--connect``). This is a router-mode session of the Zenoh Python package, so no ``zenohd`` build
is needed (``zenohd`` 1.10 reads the same JSON5 files; not tested here). Scouting is off (multicast and
gossip) unless the config file turns it on. The router runs until SIGTERM or SIGINT (exit 0).

``--zenoh-config FILE`` is used as is (TLS, mutual TLS, access control...); ``--listen`` /
``--connect``, when given, replace its endpoints. Zenoh's log goes to stdout at ``--log`` (default
``info``: connections and TLS failures show up there).

``--log-denials``: report every access-control denial. Zenoh logs them only at trace level, as
``<zid> on Interface(..)+CertCommonName(host-b)+... is unauthorized to Put (ingress) on <key>``; the
router then prints ``ACL denial: ...`` with that line for messages coming in from a link (once per key
and link: Zenoh decides when it first sees a key on a link, for every kind of message, and caches the
decision) and leaves out the trace lines of allowed messages.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

__all__ = ["add_arguments", "build_config", "main", "run"]


def _endpoints(value: str) -> list[str]:
    out = [e.strip() for e in value.split(",") if e.strip()]
    for e in out:
        if "/" not in e:
            raise argparse.ArgumentTypeError(
                f"{e!r} is not a Zenoh endpoint (e.g. tcp/0.0.0.0:7447)"
            )
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--listen",
        type=_endpoints,
        default=None,
        help="comma list of endpoints to listen on (default: tcp/0.0.0.0:7447 without a config file)",
    )
    p.add_argument(
        "--connect",
        type=_endpoints,
        default=None,
        help="comma list of other routers' endpoints (default: none)",
    )
    p.add_argument(
        "--zenoh-config",
        type=Path,
        default=None,
        help="a Zenoh JSON5 config file, used as is (default: none)",
    )
    p.add_argument(
        "--log",
        default="info",
        choices=["error", "warn", "info", "debug", "trace"],
        help="Zenoh log level, on stdout (default: info; RUST_LOG wins)",
    )
    p.add_argument(
        "--log-denials",
        action="store_true",
        help="print each access-control denial with Zenoh's log line (default: off)",
    )


def build_config(
    listen: Sequence[str] | None, connect: Sequence[str] | None, config_file: Path | None
) -> object:
    """The router's `zenoh.Config`: the file as is (endpoints replaced when given), or a router that
    listens on ``listen`` (default ``tcp/0.0.0.0:7447``), connects to ``connect``, scouting off."""
    import zenoh

    if config_file is not None:
        c = zenoh.Config.from_file(str(config_file))
        c.insert_json5("mode", json.dumps("router"))
    else:
        c = zenoh.Config()
        c.insert_json5("mode", json.dumps("router"))
        c.insert_json5("scouting/multicast/enabled", "false")
        c.insert_json5("scouting/gossip/enabled", "false")
        if listen is None:
            listen = ["tcp/0.0.0.0:7447"]
    if listen is not None:
        c.insert_json5("listen/endpoints", json.dumps(list(listen)))
    if connect is not None:
        c.insert_json5("connect/endpoints", json.dumps(list(connect)))
    return c


_ACL_TARGET = "zenoh::net::routing::interceptor::access_control"
_LEVELS = ("ERROR", "WARN", "INFO", "DEBUG", "TRACE")


def _report_denials(level: str) -> None:
    """Zenoh's log at ``level`` plus the access-control trace; denials are printed as such."""
    from delta_fabric.log import add_zenoh_log_listener, capture_zenoh_log, original_stdout

    shown = _LEVELS[: _LEVELS.index(level.upper()) + 1]

    def on_line(line: str) -> None:
        if "is unauthorized to" in line:
            if "(ingress)" not in line or "unauthorized to Delete" in line:
                return  # what a client may not send is what matters; Zenoh lists every action
            out = f"ACL denial: {line.split(': ', 1)[-1]}\n  zenoh: {line}\n"
        elif any(f" {lvl} " in line[:40] for lvl in shown) and not (
            _ACL_TARGET in line and " TRACE " in line[:40]
        ):
            out = line + "\n"
        else:
            return
        saved = original_stdout()
        if saved is not None:
            os.write(saved, out.encode())

    add_zenoh_log_listener(on_line)
    capture_zenoh_log(filter=f"{level},{_ACL_TARGET}=trace", echo=False)


def run(args: argparse.Namespace) -> int:
    import zenoh

    if args.zenoh_config is not None and not args.zenoh_config.is_file():
        print(f"delta-fabric router: no such file: {args.zenoh_config}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if args.log_denials:
        _report_denials(args.log)
    else:
        zenoh.init_log_from_env_or(args.log)
    try:
        config = build_config(args.listen, args.connect, args.zenoh_config)
        session = zenoh.open(config)  # type: ignore[arg-type]
    except Exception as exc:
        print(f"delta-fabric router: cannot start the router: {exc}", file=sys.stderr)
        return 1
    try:
        print(
            f"router {session.zid()} ready: listen {json.dumps(args.listen) if args.listen else '-'}, "
            f"connect {json.dumps(args.connect) if args.connect else '-'}"
            + (f", config {args.zenoh_config}" if args.zenoh_config is not None else ""),
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    finally:
        session.close()  # type: ignore[no-untyped-call]
    print("router stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="delta-fabric router")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
