"""``delta-fabric run``: start a cluster of your own training script, in the mould of ``torchrun``.

One machine::

    delta-fabric run --nodes 3 train.py --epochs 2

starts ``train.py`` three times on loopback: each process gets its own port, the endpoints of the
others and the other ``DELTA_FABRIC_*`` variables (`delta_fabric.env`), which ``Fabric.from_env`` reads.
Each line a node prints is prefixed with ``[<local rank>]:``. When a node fails, the launcher stops the
others (SIGTERM, then SIGKILL after ``--grace`` seconds) and exits with the failing node's code; Ctrl-C
(or SIGTERM) is passed on to every node (then SIGKILL after ``--grace``) and the launcher exits with
130 (143); ``--timeout`` bounds the whole run (exit 124). Each node runs in its own process group, so
whatever a node started is stopped with it.

Several machines: the first machine listens on an address the others can reach, e.g.
``delta-fabric run --listen tcp/0.0.0.0:7447 --nodes 2 train.py``; on start it prints the one line that
another machine runs to join (``to join this run: delta-fabric run --connect tcp/<host>:7447,... train.py``).

Local node ``r`` listens on the ``--listen`` endpoints with their port increased by ``r`` (or on a free
loopback port when no ``--listen`` is given), connects to the ``--connect`` endpoints and to the local
nodes before it (a full mesh), and gets a random 64-bit node id (``--node-id`` sets the first one; the
others follow it). With ``--zenoh-config`` the file is used as is: without ``--listen`` the nodes listen where the file
says (nowhere in client mode) and no loopback mesh is added; ``--listen`` / ``--connect`` replace the
file's endpoints.

A run is signed unless ``--unsigned`` is given (spec section 13.1): the first launcher draws a random
run key (``DELTA_FABRIC_RUN_KEY``, 32 bytes), and every launcher derives from it, for every rank of the
run, the rank's node id and its Ed25519 key. Each node gets its secret key, the public keys of every
rank (``DELTA_FABRIC_KEYS``, ``DELTA_FABRIC_SECRET_KEY``: files in a private folder the launcher deletes
at the end) and the ranks' ids as its members (``DELTA_FABRIC_MEMBERS``), so a process that does not
hold the run key can neither publish an entry the nodes accept nor be taken for a member. The join line
hands the run key to the next machine as ``DELTA_FABRIC_RUN_KEY=...``: it is the run's credential, so
pass it only to machines of the run. With ``--node-id`` the ids are that id plus the global rank. A
user who exports ``DELTA_FABRIC_KEYS`` and ``DELTA_FABRIC_SECRET_KEY`` manages the keys alone: the
launcher then passes them on and derives nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO

from delta_fabric import env as dfenv
from delta_fabric.cli_support import one_line_errors
from delta_fabric.native import kernels
from delta_fabric.ports import free_port

__all__ = ["NodePlan", "add_arguments", "one_line_errors", "plan_nodes", "run"]

#: Exit code of a run stopped by ``--timeout`` (as coreutils' ``timeout``).
EXIT_TIMEOUT = 124
_U64_MAX = (1 << 64) - 1
#: Domain tags of what a signed run derives from its run key.
_ID_TAG = b"deltafabric-run/1 node id\0"
_SECRET_TAG = b"deltafabric-run/1 secret\0"


def parse_run_key(text: str) -> bytes:
    """A run key: 64 hex digits (``UsageError`` naming ``DELTA_FABRIC_RUN_KEY`` otherwise)."""
    raw = text.strip()
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        key = b""
    if len(key) != 32 or len(raw) != 64:
        raise UsageError(f"{dfenv.RUN_KEY}: expected 64 hex digits (a 32-byte run key)")
    return key


def rank_node_id(key: bytes, rank: int) -> int:
    """The node id of global rank ``rank`` in the signed run of ``key``: the first 8 bytes
    (little endian) of SHA-256(tag, key, rank as 8 bytes little endian), 1 where that is 0."""
    digest = hashlib.sha256(_ID_TAG + key + rank.to_bytes(8, "little")).digest()
    return int.from_bytes(digest[:8], "little") or 1


def node_secret(key: bytes, node_id: int) -> bytes:
    """The Ed25519 secret seed of node ``node_id`` in the signed run of ``key``: SHA-256(tag, key,
    node id as 8 bytes little endian)."""
    return hashlib.sha256(_SECRET_TAG + key + node_id.to_bytes(8, "little")).digest()


def _run_ids(args: argparse.Namespace, key: bytes, world: int) -> list[int]:
    """Every rank's node id in a signed run: derived from the key, or ``--node-id`` + rank."""
    base = args.node_id
    if base is None and dfenv.NODE_ID in os.environ:
        base = dfenv.node_id()
    if base is None:
        return [rank_node_id(key, r) for r in range(world)]
    if base + world - 1 > _U64_MAX:
        raise UsageError(f"node id {base}: ids of {world} ranks exceed 2**64 - 1")
    return [base + r for r in range(world)]


def write_run_keys(
    folder: str, key: bytes, ids: Sequence[int], local: Sequence[int]
) -> dict[int, dict[str, str]]:
    """Writes the keys file of a signed run (every rank's public key) and the secret key file of
    each ``local`` node id into ``folder``; returns, per local id, its ``DELTA_FABRIC_KEYS`` and
    ``DELTA_FABRIC_SECRET_KEY``."""
    from delta_fabric.signing import public_key_of

    keys = {f"{i:016x}": public_key_of(node_secret(key, i)).hex() for i in ids}
    keys_path = os.path.join(folder, "keys.json")
    with open(keys_path, "w", encoding="utf-8") as fh:
        json.dump({"version": 1, "keys": keys}, fh)
    out = {}
    for i in local:
        path = os.path.join(folder, f"{i:016x}.key")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(node_secret(key, i).hex() + "\n")
        out[i] = {dfenv.KEYS: keys_path, dfenv.SECRET_KEY: path}
    return out


class UsageError(ValueError):
    """A bad ``run`` option (one line, exit 2)."""


@dataclass
class NodePlan:
    """What one local node gets: its rank, id, endpoints and environment variables."""

    rank: int
    node_id: int
    listen: list[str]
    connect: list[str]
    env: dict[str, str] = field(default_factory=dict)


def _int_at_least(lo: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer >= ``lo``, else one line naming ``what`` was expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = lo - 1
        if value < lo:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_count = _int_at_least(0, "an integer >= 0")
_rank = _int_at_least(0, "a rank >= 0")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _node_id(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a node id in [1, 2**64), got {text!r}"
        ) from None
    if not 1 <= value <= _U64_MAX:
        raise argparse.ArgumentTypeError(f"expected a node id in [1, 2**64), got {text!r}")
    return value


def _endpoint_list(text: str) -> list[str]:
    out = [e.strip() for e in text.split(",") if e.strip()]
    for e in out:
        _split_endpoint(e)
    return out


def _split_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``tcp/HOST:PORT`` -> (proto, host, port); ArgumentTypeError when it has another shape."""
    proto, sep, addr = endpoint.partition("/")
    host, colon, port_text = addr.rpartition(":")
    if not sep or not proto or not colon or not host or not port_text.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected Zenoh endpoints such as tcp/127.0.0.1:7447, got {endpoint!r}"
        )
    port = int(port_text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"port out of range in {endpoint!r}")
    return proto, host, port


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` for every option that has a default other than None / False."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def add_arguments(p: argparse.ArgumentParser) -> None:
    one_line_errors(p)
    p.formatter_class = HelpFormatter
    p.description = (
        "Start N local nodes of your training script (a cluster on loopback), or join a cluster "
        "of several machines. The script reads its settings with Fabric.from_env(store)."
    )
    p.add_argument("--nodes", type=_positive_int, default=1, help="nodes to start on this machine")
    p.add_argument(
        "--world-size",
        type=_positive_int,
        default=None,
        help="nodes of the whole run, on every machine (DELTA_FABRIC_NODES; default: --nodes)",
    )
    p.add_argument(
        "--first-rank",
        type=_rank,
        default=0,
        help="global rank of local node 0 (node r: first rank + r; DELTA_FABRIC_RANK, RANK); "
        "the join line gives the next machine its first rank",
    )
    p.add_argument(
        "--listen",
        type=_endpoint_list,
        default=None,
        help="comma list of endpoints for local node 0 (node r: port + r); "
        "default: a free port on 127.0.0.1 per node",
    )
    p.add_argument(
        "--connect",
        type=_endpoint_list,
        default=None,
        help="comma list of endpoints of nodes (or routers) already running, on other machines; "
        "default: DELTA_FABRIC_CONNECT",
    )
    p.add_argument(
        "--zenoh-config",
        default=None,
        help="Zenoh JSON5 config file (default: the exported DELTA_FABRIC_ZENOH_CONFIG), used as "
        "is; --listen and "
        "--connect, when given, replace its endpoints (without --listen: no loopback mesh)",
    )
    p.add_argument(
        "--namespace",
        default=None,
        help="cluster namespace (DELTA_FABRIC_NAMESPACE); default: the exported "
        "DELTA_FABRIC_NAMESPACE, else deltafabric/default",
    )
    p.add_argument(
        "--node-id",
        type=_node_id,
        default=None,
        help="id of local node 0 (node r: id + r); default: DELTA_FABRIC_NODE_ID, "
        "else random 64-bit ids",
    )
    p.add_argument(
        "--advertise",
        default=None,
        help="host name or address other machines use in the join line "
        "(default: this host's address when listening on 0.0.0.0)",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=None,
        help="stop every node after this many seconds (exit 124); default: no limit",
    )
    p.add_argument(
        "--max-restarts",
        type=_count,
        default=0,
        help="restart a node that fails, up to this many times in all; a restarted node keeps its "
        "id and rank and rejoins from a live peer's snapshot (DELTA_FABRIC_BOOTSTRAP=1)",
    )
    p.add_argument(
        "--grace",
        type=_positive_float,
        default=5.0,
        help="seconds between SIGTERM and SIGKILL when stopping nodes",
    )
    p.add_argument(
        "--metrics",
        default=None,
        help="file each node appends its counters to as JSON lines (DELTA_FABRIC_METRICS)",
    )
    p.add_argument(
        "--metrics-interval",
        type=_positive_float,
        default=10.0,
        help="seconds between two metrics lines (DELTA_FABRIC_METRICS_INTERVAL)",
    )
    p.add_argument(
        "--members",
        default=None,
        help="comma list of the cluster's node ids, decimal or 0x hex: only they are origins "
        "(DELTA_FABRIC_MEMBERS; DF-RCV-51, DF-ZEN-151)",
    )
    p.add_argument(
        "--live-members",
        action="store_true",
        help="members follow the liveliness tokens (DELTA_FABRIC_LIVE_MEMBERS; DF-ZEN-150)",
    )
    p.add_argument(
        "--unsigned",
        action="store_true",
        help="run without keys: any process that reaches the nodes' network can publish entries "
        "under a member's id (default: a signed run, keys derived from DELTA_FABRIC_RUN_KEY)",
    )
    p.add_argument(
        "--no-python",
        action="store_true",
        help="run the script as an executable instead of with this Python",
    )
    p.add_argument("script", nargs="?", help="the training script (or executable with --no-python)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")


def _with_port(endpoint: str, offset: int, free: bool) -> str:
    proto, host, port = _split_endpoint(endpoint)
    if port == 0 or free:
        bind = host.strip("[]")
        port = free_port("" if bind in ("0.0.0.0", "::") else bind)  # below the ephemeral range
    else:
        port += offset
        if port > 65535:
            raise UsageError(f"--listen {endpoint}: port {port} of node {offset} is out of range")
    return f"{proto}/{host}:{port}"


def _local_view(endpoint: str) -> str:
    """The endpoint a node on this machine connects to (a wildcard address becomes loopback)."""
    proto, host, port = _split_endpoint(endpoint)
    if host in ("0.0.0.0", "[::]", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
    return f"{proto}/{host}:{port}"


def _advertised(endpoint: str, advertise: str | None) -> str:
    proto, host, port = _split_endpoint(endpoint)
    if advertise is not None:
        host = advertise
    elif host in ("0.0.0.0", "[::]", "::"):
        host = _this_host()
    return f"{proto}/{host}:{port}"


def _this_host() -> str:
    """An address of this machine other machines may reach: the first non-loopback IPv4 address
    of the host name, else of a network interface (the host name often resolves to 127.0.1.1 or
    127.0.0.1 on the other machine too), else the host name itself."""
    name = socket.gethostname()
    try:
        for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM):
            addr = str(info[4][0])
            if not addr.startswith("127."):
                return addr
    except OSError:
        pass
    for addr in interface_addresses():
        return addr
    return name


def interface_addresses() -> list[str]:
    """The IPv4 addresses of this machine's network interfaces, loopback left out (Linux: the
    SIOCGIFADDR ioctl per interface; elsewhere none). Sends nothing."""
    try:
        import fcntl
        import struct

        names = [n for _, n in socket.if_nameindex()]
    except (ImportError, OSError, AttributeError):
        return []
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for n in names:
            try:
                req = struct.pack("256s", n.encode()[:15])
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])
            except OSError:
                continue  # no IPv4 address on it
            if not addr.startswith("127."):
                out.append(addr)
    return out


def plan_nodes(args: argparse.Namespace) -> list[NodePlan]:
    """The local nodes' ids, endpoints and environment (pure but for picking free ports)."""
    n = int(args.nodes)
    key: bytes | None = getattr(args, "run_key", None)
    first = int(getattr(args, "first_rank", 0))
    world = args.world_size if args.world_size is not None else first + n
    base_id = args.node_id
    if base_id is None and dfenv.NODE_ID in os.environ:  # an id the user exported
        base_id = dfenv.node_id()
    run_ids: list[int] = []
    if key is not None:  # a signed run: every rank's id follows from the key (or --node-id)
        if getattr(args, "members", None) is not None:
            raise UsageError(
                "--members: a signed run's members are its ranks; give --unsigned to set them"
            )
        run_ids = _run_ids(args, key, max(world, first + n))
        ids = run_ids[first : first + n]
    elif base_id is not None:
        if base_id + n - 1 > _U64_MAX:
            raise UsageError(f"node id {base_id}: ids of {n} nodes exceed 2**64 - 1")
        ids = [base_id + r for r in range(n)]
    else:
        ids = []
        while len(ids) < n:
            i = dfenv.random_node_id()
            if i not in ids:
                ids.append(i)
    listens: list[list[str]] = []
    with_file = args.zenoh_config is not None
    for r in range(n):
        if args.listen:
            listens.append([_with_port(e, r, free=False) for e in args.listen])
        elif with_file:  # the file's own endpoints (e.g. client mode through a router)
            listens.append([])
        else:
            listens.append([f"tcp/127.0.0.1:{free_port()}"])
    external = list(args.connect) if args.connect else dfenv.endpoints(None, dfenv.CONNECT)
    if world < first + n:
        raise UsageError(
            f"--world-size {world} is smaller than --first-rank {first} + --nodes {n}"
            if first
            else f"--world-size {world} is smaller than --nodes {n}"
        )
    plans = []
    for r in range(n):
        before = [_local_view(e) for q in range(r) for e in listens[q]]
        connect = external + before
        env = {
            dfenv.NODE_ID: str(ids[r]),
            dfenv.LISTEN: ",".join(listens[r]),
            dfenv.CONNECT: ",".join(connect),
            dfenv.LOCAL_RANK: str(r),
            dfenv.LOCAL_NODES: str(n),
            dfenv.NODES: str(world),
            dfenv.RANK: str(first + r),
            # torchrun's names, for scripts that shard their data by rank
            "RANK": str(first + r),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(r),
            "LOCAL_WORLD_SIZE": str(n),
            "PYTHONUNBUFFERED": "1",
        }
        if args.namespace is not None:
            env[dfenv.NAMESPACE] = args.namespace
        if args.zenoh_config is not None:
            env[dfenv.ZENOH_CONFIG] = os.path.abspath(args.zenoh_config)
        if args.metrics is not None:
            env[dfenv.METRICS] = os.path.abspath(args.metrics)
            env[dfenv.METRICS_INTERVAL] = repr(float(args.metrics_interval))
        members = getattr(args, "members", None)
        if members is not None:
            try:
                dfenv.membership({dfenv.MEMBERS: members})
            except dfenv.EnvError as exc:
                raise UsageError(f"--members: {exc}") from None
            env[dfenv.MEMBERS] = members
        if run_ids:  # DF-RCV-51: the ranks of the signed run, and no one else
            env[dfenv.MEMBERS] = ",".join(f"0x{i:x}" for i in run_ids)
        if getattr(args, "live_members", False):
            env[dfenv.LIVE_MEMBERS] = "1"
        plans.append(NodePlan(r, ids[r], listens[r], connect, env))
    return plans


def join_line(args: argparse.Namespace, plans: Sequence[NodePlan]) -> str | None:
    """The command another machine runs to join, or None when every node listens on loopback only
    (then no other machine can reach them)."""
    reachable = [
        _advertised(e, args.advertise)
        for p in plans
        for e in p.listen
        if args.advertise is not None or not _is_loopback(e)
    ]
    if not reachable:
        return None
    endpoints = list(dict.fromkeys([*plans[0].connect, *reachable]))
    parts = ["delta-fabric", "run", "--connect", ",".join(endpoints)]
    if args.namespace is not None:
        parts += ["--namespace", args.namespace]
    first = int(getattr(args, "first_rank", 0))
    world = args.world_size if args.world_size is not None else first + len(plans)
    nxt = first + len(plans)  # the next machine's ranks start after this one's
    if args.world_size is not None and world > nxt:
        parts += ["--world-size", str(world), "--nodes", str(world - nxt)]
    parts += ["--first-rank", str(nxt)]
    key: bytes | None = getattr(args, "run_key", None)
    if key is not None and args.node_id is not None:
        parts += ["--node-id", str(args.node_id)]
    if getattr(args, "unsigned", False):
        parts.append("--unsigned")
    if args.zenoh_config is not None:
        parts += ["--zenoh-config", args.zenoh_config]
    if args.no_python:
        parts.append("--no-python")
    parts += [args.script, *args.script_args]
    if key is not None:  # the run's credential, for the next machine of the run only
        return f"{dfenv.RUN_KEY}={key.hex()} {shlex.join(parts)}"
    return shlex.join(parts)


def _is_loopback(endpoint: str) -> bool:
    _, host, _ = _split_endpoint(endpoint)
    return host.startswith("127.") or host in ("localhost", "[::1]", "::1")


class _Node:
    def __init__(self, plan: NodePlan, proc: subprocess.Popen[bytes]) -> None:
        self.plan = plan
        self.proc = proc
        self.partial: dict[int, bytes] = {}


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _emit(out: IO[str], prefix: str, data: bytes) -> None:
    """Writes a node's lines; colour codes (a Rust node's log) are dropped unless ``out`` is a
    terminal."""
    try:
        text = data.decode("utf-8", "replace")
        if "\x1b" in text and not out.isatty():
            text = _ANSI.sub("", text)
        out.write(prefix + text)
        out.flush()
    except (BrokenPipeError, OSError):
        pass


def _stop(nodes: Sequence[_Node], grace: float, sig: int = signal.SIGTERM) -> None:
    """SIGTERM (or ``sig``) to every live node's process group, SIGKILL after ``grace`` seconds."""
    for n in nodes:
        if n.proc.poll() is None:
            try:
                os.killpg(n.proc.pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for n in nodes:
        left = deadline - time.monotonic()
        try:
            n.proc.wait(max(0.0, left))
        except subprocess.TimeoutExpired:
            pass
    for n in nodes:
        if n.proc.poll() is None:
            try:
                os.killpg(n.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            n.proc.wait()


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def run(args: argparse.Namespace) -> int:
    # options not given fall back to the variables the user exported
    if args.zenoh_config is None:
        args.zenoh_config = os.environ.get(dfenv.ZENOH_CONFIG, "").strip() or None
    if args.namespace is None:
        args.namespace = os.environ.get(dfenv.NAMESPACE, "").strip() or None
    keys_dir: str | None = None
    try:
        args.run_key = _run_key(args)
        plans = plan_nodes(args)
        kernels()  # DELTA_FABRIC_NATIVE (the nodes inherit it), checked before any node starts
        if args.run_key is not None:
            keys_dir = tempfile.mkdtemp(prefix="delta-fabric-run-")  # mode 0700
            files = write_run_keys(
                keys_dir,
                args.run_key,
                [int(i, 16) for i in plans[0].env[dfenv.MEMBERS].split(",")],
                [p.node_id for p in plans],
            )
            for p in plans:
                p.env.update(files[p.node_id])
    except (ValueError, argparse.ArgumentTypeError, OSError, ImportError) as exc:  # + NativeError
        print(f"delta-fabric run: error: {exc}", file=sys.stderr)
        _remove_keys(keys_dir)
        return 2
    try:
        return _run_plans(args, plans)
    finally:
        _remove_keys(keys_dir)


def _run_key(args: argparse.Namespace) -> bytes | None:
    """The run key of a signed run; None for ``--unsigned`` or when the user exported keys."""
    if getattr(args, "unsigned", False):
        return None
    if dfenv.KEYS in os.environ or dfenv.SECRET_KEY in os.environ:
        return None  # the user's own keys, passed on to every node as exported
    try:
        import cryptography  # noqa: F401  (Ed25519 for the nodes' signatures)
    except ImportError:
        raise UsageError(
            "a run is signed by default and needs the signing extra "
            "(pip install 'delta-fabric[signing]'); give --unsigned to run without keys"
        ) from None
    raw = os.environ.get(dfenv.RUN_KEY, "").strip()
    return parse_run_key(raw) if raw else os.urandom(32)


def _remove_keys(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _run_plans(args: argparse.Namespace, plans: list[NodePlan]) -> int:
    if args.namespace is not None and (
        not args.namespace
        or args.namespace.startswith("/")
        or args.namespace.endswith("/")
        or "//" in args.namespace
        or set("*$?#") & set(args.namespace)
    ):
        print(
            f"delta-fabric run: error: --namespace {args.namespace!r}: a key expression of "
            "non-empty chunks without * $ ? # (e.g. team/run1)",
            file=sys.stderr,
        )
        return 2
    if args.zenoh_config is not None and not os.path.isfile(args.zenoh_config):
        print(
            f"delta-fabric run: error: --zenoh-config {args.zenoh_config}: no such file",
            file=sys.stderr,
        )
        return 2
    if args.script is None:
        print(
            "delta-fabric run: error: no training script given: delta-fabric run [OPTIONS] "
            "SCRIPT.py [SCRIPT ARGS...] (or --no-python EXECUTABLE [ARGS...]); see "
            "delta-fabric run --help",
            file=sys.stderr,
        )
        return 2
    if not args.no_python and not os.path.isfile(args.script):
        print(f"delta-fabric run: error: {args.script}: no such file", file=sys.stderr)
        return 2
    # a Python script runs under delta_fabric.launched: a configuration error is one line, exit 2
    command = (
        [args.script]
        if args.no_python
        else [sys.executable, "-m", "delta_fabric.launched", args.script]
    )
    command += list(args.script_args)

    say = sys.stderr
    width = len(str(len(plans) - 1))
    for p in plans:
        print(
            f"delta-fabric run: node [{p.rank}] id {p.node_id:016x} listens on "
            f"{','.join(p.listen) or '-'}, connects to {','.join(p.connect) or '-'}",
            file=say,
        )
    if getattr(args, "run_key", None) is not None:
        print(
            f"delta-fabric run: a signed run of {plans[0].env[dfenv.NODES]} rank(s): each node "
            "signs its entries and accepts only the ranks' (--unsigned: no keys)",
            file=say,
        )
    line = join_line(args, plans)
    if line is not None:
        print(f"to join this run: {line}", file=say, flush=True)

    def on_signal(signum: int, frame: object) -> None:
        raise _Interrupted(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    nodes: list[_Node] = []
    sel = selectors.DefaultSelector()
    code = 0
    restarts_left = int(getattr(args, "max_restarts", 0))

    def start(p: NodePlan, extra: dict[str, str]) -> _Node:
        proc = subprocess.Popen(
            command,
            env={**os.environ, **p.env, **extra},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: stopped with everything it started
        )
        node = _Node(p, proc)
        for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ, (node, out))
        return node

    try:
        for p in plans:
            nodes.append(start(p, {}))
        deadline = None if args.timeout is None else time.monotonic() + args.timeout
        open_streams = 2 * len(nodes)
        failed: _Node | None = None
        while open_streams or any(n.proc.poll() is None for n in nodes):
            wait = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
            for key, _ in sel.select(wait) if open_streams else []:
                node, out = key.data
                fd = key.fileobj.fileno()  # type: ignore[union-attr]
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                prefix = f"[{node.plan.rank:>{width}}]: "
                if not data:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    rest = node.partial.pop(fd, b"")
                    if rest:
                        _emit(out, prefix, rest + b"\n")
                    continue
                buf = node.partial.get(fd, b"") + data
                *lines, tail = buf.split(b"\n")
                node.partial[fd] = tail
                if lines:
                    _emit(out, "", b"".join(prefix.encode() + ln + b"\n" for ln in lines))
            if not open_streams:
                time.sleep(0.05)
            for i, n in enumerate(nodes):
                rc = n.proc.poll()
                if rc is not None and rc != 0 and failed is None:
                    if restarts_left > 0 and rc != 2:  # 2: a configuration error, not restarted
                        restarts_left -= 1
                        print(
                            f"delta-fabric run: node [{n.plan.rank}] exited with code {rc}: "
                            f"restarting it from a live peer ({restarts_left} restart(s) left)",
                            file=say,
                            flush=True,
                        )
                        nodes[i] = start(n.plan, {dfenv.BOOTSTRAP: "1"})
                        open_streams += 2
                        continue
                    failed = n
            if failed is not None:
                rc = failed.proc.returncode
                print(
                    f"delta-fabric run: node [{failed.plan.rank}] exited with code {rc}: "
                    "stopping the others",
                    file=say,
                    flush=True,
                )
                _stop(nodes, args.grace)
                code = _exit_code(rc)
                break
            if deadline is not None and time.monotonic() >= deadline:
                print(
                    f"delta-fabric run: --timeout {args.timeout:g}s reached: stopping every node",
                    file=say,
                    flush=True,
                )
                _stop(nodes, args.grace)
                code = EXIT_TIMEOUT
                break
        _drain(sel, nodes, width)
    except _Interrupted as exc:
        name = signal.Signals(exc.signum).name
        print(f"delta-fabric run: {name}: stopping every node", file=say, flush=True)
        for s, h in previous.items():  # a second Ctrl-C is not caught while stopping
            signal.signal(s, h)
        _stop(nodes, args.grace, exc.signum)  # the same signal (KeyboardInterrupt on Ctrl-C)
        _drain(sel, nodes, width)
        code = 128 + exc.signum
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sel.close()
    if code == 0:
        print(f"delta-fabric run: {len(nodes)} node(s) finished", file=say, flush=True)
    return code


def _drain(sel: selectors.BaseSelector, nodes: Sequence[_Node], width: int) -> None:
    """Print what the stopped nodes still had in their pipes."""
    for key in list(sel.get_map().values()):
        node, out = key.data
        fd = key.fileobj.fileno()  # type: ignore[union-attr]
        chunks = [node.partial.pop(fd, b"")]
        while True:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            chunks.append(data)
        text = b"".join(chunks)
        if text:
            prefix = f"[{node.plan.rank:>{width}}]: ".encode()
            lines = text.rstrip(b"\n").split(b"\n")
            _emit(out, "", b"".join(prefix + ln + b"\n" for ln in lines))
        sel.unregister(key.fileobj)
