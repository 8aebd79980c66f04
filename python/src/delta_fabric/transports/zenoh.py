"""The Zenoh binding of DeltaFabric v1 (spec section 9, DF-ZEN).

Key expressions under the cluster namespace ``NS`` (default ``deltafabric/default``), with node ids as 16
lowercase hex digits:

- ``NS/v1/delta/<hex16>``: the node's packets (own + relayed). Publisher: encoding
  ``application/octet-stream;deltafabric.v1.Packet``, congestion control BLOCK, reliable, priority DATA.
  The node subscribes to ``NS/v1/delta/*`` (all-to-all) or to the keys of its ``neighbours``.
- ``NS/v1/alive/<hex16>``: the node's liveliness token; a liveliness subscriber (with history) keeps the
  live peer set.
- ``NS/v1/snapshot/<hex16>``: queryable answering ``chunk=<i>&chunk_size=<n>`` with ``SnapshotChunk``
  buffers (:mod:`delta_fabric.snapshot`), declared by :meth:`ZenohTransport.serve_snapshot`.
- ``NS/v1/info/<hex16>``: queryable answering JSON ``{node, incarnation, fingerprint, framework, N}``.

Configuration: with ``ZenohOptions.config_file`` the file is loaded with ``zenoh.Config.from_file`` and
used as is (TLS, mTLS, routers, access control... the Zenoh way); only the namespace, node id, topology
and queue bounds come from the options. Otherwise the config is built from the options, with multicast
and gossip scouting **off** unless explicitly enabled; :meth:`ZenohOptions.lan_default` is the zero-config
LAN setting for real deployments (multicast scouting on).

Receive path: the subscriber callback (a Zenoh thread) copies the payload into the transport's bounded
:class:`~delta_fabric.transports.base.PacketQueue` (drop-oldest on overflow, counted) and returns; the
training loop takes packets with the non-blocking :meth:`ZenohTransport.drain`.

Allocator (``ZenohOptions.tune_malloc``, on by default): every received packet is a fresh ``bytes`` of
its size, allocated on the Zenoh callback thread and freed on the draining thread after a few packets
wait in the queue. With glibc's default (dynamic) thresholds the heap top is then trimmed back to the
kernel and page-faulted in again for the next packets, which halved the receive throughput of 1 MB
packets on loopback (bench/bench_transport.py). :func:`tune_malloc` fixes glibc's mmap threshold at
32 MiB (the largest value, above the 16 MiB default ``max_packet_size``) and its trim threshold at
256 MiB (the default receive-queue byte bound), once per process, unless the process already set them
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``); elsewhere than glibc it
does nothing. The process then keeps up to 256 MiB of freed heap instead of returning it at once.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric import lifecycle
from delta_fabric.errors import ErrorCode
from delta_fabric.extras import raise_missing_extra
from delta_fabric.log import init_zenoh_log, zenoh_log_lines
from delta_fabric.repair import is_repair_request
from delta_fabric.snapshot import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_PACKET_SIZE,
    ChunkRequest,
    SnapshotError,
    SnapshotErrorKind,
    SnapshotServer,
    fetch_snapshot_from,
    format_chunk_params,
    trim_blanks,
)
from delta_fabric.transports.base import (
    DEFAULT_QUEUE_BYTES,
    DEFAULT_QUEUE_CAPACITY,
    DuplicateNodeError,
    PacketQueue,
    PeerTimeoutError,
    SnapshotProvider,
    TransportClosedError,
    TransportError,
    TransportStats,
    ZenohConfigError,
    check_node_id,
    node_hex,
)
from delta_fabric.wire import screen

try:  # an optional dependency: a missing one names the extra to install
    import zenoh
except ModuleNotFoundError as _exc:
    raise_missing_extra(_exc, "the Zenoh transport (delta_fabric.transports.zenoh)")

__all__ = [
    "DEFAULT_NAMESPACE",
    "PACKET_SCHEMA",
    "SNAPSHOT_SCHEMA",
    "ZenohOptions",
    "ZenohTransport",
    "alive_key",
    "delta_key",
    "diagnose",
    "info_key",
    "snapshot_key",
    "tune_malloc",
]

DEFAULT_NAMESPACE = "deltafabric/default"
#: Encoding schema of delta packets (DF-ZEN-1).
PACKET_SCHEMA = "deltafabric.v1.Packet"
#: Encoding schema of snapshot chunk replies.
SNAPSHOT_SCHEMA = "deltafabric.v1.SnapshotChunk"

_FORBIDDEN_NS_CHARS = set("*$?#")

log = logging.getLogger("delta_fabric.transport")

#: glibc ``mallopt`` parameters (malloc.h) and the values :func:`tune_malloc` sets.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MALLOC_MMAP_THRESHOLD = 32 * 1024 * 1024
MALLOC_TRIM_THRESHOLD = 256 * 1024 * 1024
_malloc_lock = threading.Lock()
_malloc_tuned: bool | None = None


def tune_malloc() -> bool:
    """Fix glibc's malloc thresholds for large received packets (see the module docstring); once per
    process, thread-safe. True when the thresholds are set (now or before), False when left alone
    (not glibc, or the process configured them through the environment)."""
    global _malloc_tuned
    with _malloc_lock:
        if _malloc_tuned is not None:
            return _malloc_tuned
        _malloc_tuned = False
        if not sys.platform.startswith("linux"):
            return False
        tunables = os.environ.get("GLIBC_TUNABLES", "")
        if (
            "MALLOC_MMAP_THRESHOLD_" in os.environ
            or "MALLOC_TRIM_THRESHOLD_" in os.environ
            or "glibc.malloc.mmap_threshold" in tunables
            or "glibc.malloc.trim_threshold" in tunables
        ):
            return False  # the process chose its own setting
        try:
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018 (present in glibc only)
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            return False
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt.restype = ctypes.c_int
        ok = int(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)) == 1
        ok = int(mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD)) == 1 and ok
        _malloc_tuned = ok
        return ok


def _check_namespace(ns: str) -> str:
    if not ns or ns.startswith("/") or ns.endswith("/") or "//" in ns:
        raise ValueError(
            f"namespace must be a non-empty key expression without empty chunks, got {ns!r}"
        )
    if _FORBIDDEN_NS_CHARS & set(ns):
        raise ValueError(
            f"namespace must not contain wildcards or {sorted(_FORBIDDEN_NS_CHARS)}, got {ns!r}"
        )
    return ns


#: Bytes above ``max_packet_size`` that Zenoh may reassemble for one message (key expression,
#: attachment and framing of a packet or snapshot chunk of ``max_packet_size`` bytes); DF-SEC-50.
ZENOH_MESSAGE_MARGIN = 65_536


def delta_key(ns: str, node: int) -> str:
    """``NS/v1/delta/<hex16>``."""
    return f"{ns}/v1/delta/{node_hex(node)}"


def alive_key(ns: str, node: int) -> str:
    """``NS/v1/alive/<hex16>``."""
    return f"{ns}/v1/alive/{node_hex(node)}"


def snapshot_key(ns: str, node: int) -> str:
    """``NS/v1/snapshot/<hex16>``."""
    return f"{ns}/v1/snapshot/{node_hex(node)}"


def info_key(ns: str, node: int) -> str:
    """``NS/v1/info/<hex16>``."""
    return f"{ns}/v1/info/{node_hex(node)}"


def _parse_node(key: str) -> int | None:
    """The node id at the end of a key expression, or None when it is not 16 lowercase hex digits."""
    tail = key.rsplit("/", 1)[-1]
    if len(tail) != 16 or any(c not in "0123456789abcdef" for c in tail):
        return None
    n = int(tail, 16)
    return n if n != 0 else None


def query_from(params: str) -> int | None:
    """The ``from=<hex16>`` parameter of a snapshot query (DF-ZEN-155), or None when it is absent or
    not 16 lowercase hex digits naming a non-zero id. Read by the rules of DF-ZEN-42 (the first
    ``from`` counts; only spaces and tabs around the key and value are removed)."""
    for part in params.replace(";", "&").split("&"):
        key, _, value = part.partition("=")
        if trim_blanks(key) == "from":
            return _parse_node(trim_blanks(value))
    return None


def query_info(session: zenoh.Session, key: str, timeout: float) -> dict[int, dict[str, Any]]:
    """Ask every info queryable matching ``key`` (DF-ZEN-6) -> ``{node: info object}``; replies that
    are errors, on a key without a node id, or not a JSON object are skipped."""
    out: dict[int, dict[str, Any]] = {}
    replies = session.get(
        key,
        target=zenoh.QueryTarget.ALL,
        consolidation=zenoh.ConsolidationMode.NONE,
        timeout=timeout,
    )
    for reply in replies:
        ok = reply.ok
        if ok is None:
            continue
        node = _parse_node(str(ok.key_expr))
        if node is None:
            continue
        try:
            obj = json.loads(ok.payload.to_bytes())
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict):
            out[node] = obj
    return out


@dataclass(frozen=True)
class ZenohOptions:
    """How a :class:`ZenohTransport` joins the cluster.

    ``listen`` / ``connect``: Zenoh endpoints (``tcp/127.0.0.1:7447``...). ``mode``: ``"peer"`` or
    ``"client"`` (client needs a router in ``connect``). ``multicast_scouting`` / ``gossip_scouting`` are
    off by default (explicit endpoints only); ``multicast_interface`` selects the scouting interface
    (``"auto"``, ``"lo"``...). ``config_file``: a Zenoh JSON5 config used as is (all the networking fields
    above are then ignored). ``neighbours``: node ids whose packets this node receives (None: every node).
    ``queue_capacity`` / ``queue_bytes``: receive queue bounds (drop-oldest on overflow).
    ``max_packet_size``: the node's DF-PAR ``max_packet_size`` (bounds the snapshot chunks it serves).
    ``extra_config``: further ``(key, json5 value)`` pairs inserted into the config (built or loaded).
    ``tune_malloc``: call :func:`tune_malloc` when the transport opens (process-wide glibc setting).
    ``rate_limit`` / ``rate_burst``: packets per second and burst each sender (the node id of the
    delta key a sample came on) may queue (DF-ZEN-153; 0: no limit; burst 0: ``max(1, rate_limit)``).
    """

    node_id: int
    namespace: str = DEFAULT_NAMESPACE
    mode: str = "peer"
    listen: Sequence[str] = ()
    connect: Sequence[str] = ()
    config_file: str | Path | None = None
    multicast_scouting: bool = False
    gossip_scouting: bool = False
    multicast_interface: str | None = None
    neighbours: Sequence[int] | None = None
    queue_capacity: int = DEFAULT_QUEUE_CAPACITY
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE
    extra_config: Sequence[tuple[str, str]] = field(default_factory=tuple)
    tune_malloc: bool = True
    rate_limit: float = 0.0
    rate_burst: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", check_node_id(self.node_id))
        _check_namespace(self.namespace)
        if self.mode not in ("peer", "client"):
            raise ValueError(f"mode must be 'peer' or 'client', got {self.mode!r}")
        object.__setattr__(self, "listen", tuple(self.listen))
        object.__setattr__(self, "connect", tuple(self.connect))
        object.__setattr__(self, "extra_config", tuple(self.extra_config))
        if self.neighbours is not None:
            object.__setattr__(self, "neighbours", tuple(check_node_id(n) for n in self.neighbours))
        if self.queue_capacity < 1 or self.queue_bytes < 1:
            raise ValueError("queue bounds must be >= 1")
        if not (0.0 <= self.rate_limit < float("inf")) or not (0.0 <= self.rate_burst < 1e18):
            raise ValueError("rate_limit and rate_burst must be finite numbers >= 0")

    @classmethod
    def lan_default(
        cls, node_id: int, namespace: str = DEFAULT_NAMESPACE, **kw: Any
    ) -> ZenohOptions:
        """Zero-configuration LAN setting for real deployments: peer mode, Zenoh's default listener
        (every interface, ephemeral port), multicast scouting on (``224.0.0.224:7446``), gossip on.
        Nodes of one LAN then find each other with no endpoint configured."""
        kw.setdefault("multicast_scouting", True)
        kw.setdefault("gossip_scouting", True)
        return cls(node_id=node_id, namespace=namespace, **kw)

    @classmethod
    def from_env(
        cls, node_id: int | None = None, env: Mapping[str, str] | None = None, **defaults: Any
    ) -> ZenohOptions:
        """Options from ``DELTA_FABRIC_NODE_ID``, ``_NAMESPACE``, ``_LISTEN``, ``_CONNECT``, ``_MODE``,
        ``_ZENOH_CONFIG``, ``_RATE_LIMIT`` and ``_RATE_BURST`` (see `delta_fabric.env`); ``defaults`` are the program's own values for
        unset variables. ``node_id`` (when given) wins over the variable; without either, a random
        64-bit id. With a config file, the file is used as is, except that ``_LISTEN`` / ``_CONNECT``
        (when set) replace its endpoints. Bad values raise `delta_fabric.env.EnvError`."""
        from delta_fabric import env as _env

        kw: dict[str, Any] = dict(defaults)
        kw["node_id"] = node_id if node_id is not None else _env.node_id(env)
        ns = _env.namespace(env)
        if ns is not None:
            try:
                _check_namespace(ns)
            except ValueError as exc:
                raise _env.EnvError(_env.NAMESPACE, ns, str(exc)) from None
            kw["namespace"] = ns
        listen = _env.endpoints(env, _env.LISTEN)
        connect = _env.endpoints(env, _env.CONNECT)
        mode = _env.mode(env)
        config = _env.zenoh_config(env)
        if listen:
            kw["listen"] = listen
        if connect:
            kw["connect"] = connect
        if mode is not None:
            kw["mode"] = mode
        rate, burst = _env.rate_limit(env)
        if rate is not None:
            kw["rate_limit"] = rate
        if burst is not None:
            kw["rate_burst"] = burst
        if config is not None:
            kw["config_file"] = config
            extra = list(kw.get("extra_config", ()))
            if listen:
                extra.append(("listen/endpoints", json.dumps(listen)))
            if connect:
                extra.append(("connect/endpoints", json.dumps(connect)))
            if mode is not None:
                extra.append(("mode", json.dumps(mode)))
            kw["extra_config"] = extra
        return cls(**kw)

    def with_node(self, node_id: int) -> ZenohOptions:
        return replace(self, node_id=node_id)

    @property
    def max_message_size(self) -> int:
        """Zenoh's ``transport/link/rx/max_message_size`` for this node (DF-SEC-1, DF-SEC-50):
        ``max_packet_size`` plus `ZENOH_MESSAGE_MARGIN`, so that Zenoh drops a larger message before
        reassembling it (its default is 1 GiB)."""
        return self.max_packet_size + ZENOH_MESSAGE_MARGIN

    def build_config(self) -> zenoh.Config:
        """The Zenoh config these options describe (``config_file`` loaded as is, when given, but
        for the message size cap; ``extra_config`` can override that too)."""
        cap = ("transport/link/rx/max_message_size", str(self.max_message_size))
        if self.config_file is not None:
            loaded: zenoh.Config = zenoh.Config.from_file(str(self.config_file))
            loaded.insert_json5(*cap)
            for key, value in self.extra_config:
                loaded.insert_json5(key, value)
            return loaded
        c: zenoh.Config = zenoh.Config()
        c.insert_json5("mode", json.dumps(self.mode))
        if self.listen:
            c.insert_json5("listen/endpoints", json.dumps(list(self.listen)))
        elif not self.multicast_scouting and self.mode == "peer":
            # Never fall back to Zenoh's default listener on every interface unless asked to.
            c.insert_json5("listen/endpoints", json.dumps([]))
        c.insert_json5("connect/endpoints", json.dumps(list(self.connect)))
        c.insert_json5("scouting/multicast/enabled", json.dumps(self.multicast_scouting))
        c.insert_json5("scouting/gossip/enabled", json.dumps(self.gossip_scouting))
        if self.multicast_interface is not None:
            c.insert_json5("scouting/multicast/interface", json.dumps(self.multicast_interface))
        c.insert_json5(*cap)
        for key, value in self.extra_config:
            c.insert_json5(key, value)
        return c


def _leaves_loopback(options: ZenohOptions) -> bool:
    """Whether the node may talk beyond this machine (config file, client mode, other addresses)."""
    if options.config_file is not None or options.mode == "client":
        return True
    hosts = [e.split("/", 1)[-1].rsplit(":", 1)[0] for e in (*options.listen, *options.connect)]
    return any(h not in ("127.0.0.1", "localhost", "[::1]") for h in hosts)


#: (cause, what to check, words of a Zenoh log line that point at it)
_CAUSES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "certificate refused",
        "the TLS handshake failed: a certificate from another CA, no client certificate under "
        "mutual TLS, an expired certificate or a name/IP not in the certificate (check "
        "transport/link/tls in the Zenoh config on both sides)",
        ("certificate", "unknownca", "handshake", "x509", "webpki", "fatal alert", "badsignature"),
    ),
    (
        "access control denial",
        "a router's or peer's access_control drops this node's messages: its certificate's "
        "common name, interface or key expression is not allowed (`delta-fabric router "
        "--log-denials` prints them as 'ACL denial:' lines)",
        ("denied", "access control", "acl", "unauthorized", "not allowed"),
    ),
    (
        "endpoint unreachable",
        "nothing listens on the connect endpoints, a firewall blocks them, or the protocol "
        "differs (tcp/ vs tls/)",
        ("connection refused", "timed out", "unreachable", "no route", "unable to connect"),
    ),
)


def diagnose(options: ZenohOptions, error: str = "") -> str:
    """The likely causes of a node that sees no peer (or cannot open), most likely first, with the
    Zenoh log lines captured by :func:`delta_fabric.log.capture_zenoh_log` that point at them."""
    lines = zenoh_log_lines()
    text = "\n".join([*lines, error]).lower()

    def score(cause: tuple[str, str, tuple[str, ...]]) -> int:
        return sum(text.count(w) for w in cause[2])

    # "unable to connect" comes with every refusal: it points at the endpoint only when nothing
    # more specific was seen
    seen = {c[0] for c in _CAUSES if any(w in text for w in c[2] if w != "unable to connect")}
    if not seen and "unable to connect" in text:
        seen = {"endpoint unreachable"}
    scored = sorted(_CAUSES, key=lambda c: (c[0] not in seen, -score(c)))
    if options.config_file is not None:
        where = f"config file {options.config_file}" + "".join(
            f", {k} {v}" for k, v in options.extra_config
        )
    else:
        where = (
            f"mode {options.mode}, connect {list(options.connect) or '-'}, "
            f"listen {list(options.listen) or '-'}"
        )
    out = [f"likely causes ({where}):"]
    for name, what, _ in scored:
        mark = " [seen in the Zenoh log]" if name in seen else ""
        out.append(f"  - {name}{mark}: {what}")
    out.append(f"  - another namespace ({options.namespace}) or no other node started yet")
    relevant = [ln for ln in lines if any(w in ln.lower() for c in _CAUSES for w in c[2])]
    shown = (relevant or lines)[-8:]
    if shown:
        out.append("Zenoh log:")
        out.extend(f"  {ln}" for ln in shown)
    else:
        out.append(
            "no Zenoh log line captured (DELTA_FABRIC_LOG=debug shows Zenoh's log on stdout)"
        )
    return "\n".join(out)


class ZenohTransport:
    """A DeltaFabric node on Zenoh; implements :class:`~delta_fabric.transports.base.Transport`.

    Thread-safe: ``publish`` may be called from one thread while Zenoh threads fill the receive queue
    and the peer set. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, options: ZenohOptions, *, session: zenoh.Session | None = None) -> None:
        self.options = options
        self._node_id = options.node_id
        self._ns = options.namespace
        burst = options.rate_burst or max(1.0, options.rate_limit)
        self._queue = PacketQueue(
            options.queue_capacity, options.queue_bytes, rate=options.rate_limit, burst=burst
        )
        self._members: frozenset[int] | None = None  # DF-ZEN-151, set by the node
        self._live_members = False
        self._screened: dict[ErrorCode, int] = {}  # DF-ZEN-154, taken by the node
        self._rejected_not_member = 0
        self._snapshot_refused = 0
        self.neighbours: frozenset[int] | None = (
            None if options.neighbours is None else frozenset(options.neighbours)
        )
        self._lock = threading.Lock()
        self._peers_changed = threading.Condition(self._lock)
        self._peers: set[int] = set()
        self._published_packets = 0
        self._published_bytes = 0
        self._closed = False
        self._server: SnapshotServer | None = None
        self._queryables: list[Any] = []
        self._separators: dict[int, str] = {}
        self._info_provider: Callable[[], Mapping[str, Any]] | None = None
        self._owns_session = session is None
        #: whether glibc's malloc thresholds are tuned for large packets (:func:`tune_malloc`)
        self.malloc_tuned = tune_malloc() if options.tune_malloc else False
        init_zenoh_log(capture=_leaves_loopback(options))
        config: zenoh.Config | None = None
        if session is None:
            try:
                config = options.build_config()
            except Exception as exc:  # zenoh raises its own ZError for a file it cannot load
                where = (
                    f"Zenoh config {options.config_file}"
                    if options.config_file is not None
                    else "Zenoh config"
                )
                reason = " ".join(str(exc).split())
                raise ZenohConfigError(f"{where}: {reason}") from None
        try:
            if session is not None:
                self._session = session
            else:
                assert config is not None
                self._session = zenoh.open(config)
        except Exception as exc:
            raise TransportError(
                f"cannot open the Zenoh session: {exc}\n{diagnose(options, str(exc))}"
            ) from exc
        try:
            self._delta_key = delta_key(self._ns, self._node_id)
            self._publisher = self._session.declare_publisher(
                self._delta_key,
                encoding=zenoh.Encoding.APPLICATION_OCTET_STREAM.with_schema(PACKET_SCHEMA),
                congestion_control=zenoh.CongestionControl.BLOCK,
                priority=zenoh.Priority.DATA,
                reliability=zenoh.Reliability.RELIABLE,
            )
            keys = (
                [f"{self._ns}/v1/delta/*"]
                if self.neighbours is None
                else [delta_key(self._ns, n) for n in sorted(self.neighbours) if n != self._node_id]
            )
            self._subscribers = [
                self._session.declare_subscriber(
                    k, self._on_sample, allowed_origin=zenoh.Locality.REMOTE
                )
                for k in keys
            ]
            # Queryables before the liveliness token: a peer that sees the token can query them.
            self._queryables = [
                self._session.declare_queryable(
                    snapshot_key(self._ns, self._node_id), self._on_snapshot_query, complete=True
                ),
                self._session.declare_queryable(
                    info_key(self._ns, self._node_id), self._on_info_query, complete=True
                ),
            ]
            liveliness = self._session.liveliness()
            self._alive_sub = liveliness.declare_subscriber(
                f"{self._ns}/v1/alive/*", self._on_alive, history=True
            )
            # DF-ZEN-7: a live token with this id means another node already uses it; refuse to start.
            if self._token_taken(liveliness):
                raise DuplicateNodeError(self._node_id, self._ns)
            self._token = liveliness.declare_token(alive_key(self._ns, self._node_id))
        except Exception:
            self._teardown()
            raise
        # zenoh-python's callback threads keep the process alive until this transport is closed:
        # make sure it is, however the process ends (delta_fabric.lifecycle).
        lifecycle.register(self, "transport")
        log.info(
            "transport of node %s open: namespace %s, mode %s, listen %s, connect %s%s",
            node_hex(self._node_id),
            self._ns,
            options.mode,
            list(options.listen) or "-",
            list(options.connect) or "-",
            f", config file {options.config_file}" if options.config_file is not None else "",
        )

    def _token_taken(self, liveliness: Any) -> bool:
        """Whether a live node of the namespace already holds this node's liveliness token (asked
        before declaring ours; the sessions this one connected to at open answer at once)."""
        replies = liveliness.get(alive_key(self._ns, self._node_id), timeout=1.0)
        return any(reply.ok is not None for reply in replies)

    # callbacks (Zenoh threads) -------------------------------------------------------------------------
    def _on_sample(self, sample: zenoh.Sample) -> None:
        # Own publications never get here (subscribers are declared for remote origins only, DF-ZEN-9).
        # Before the queue (DF-ZEN-154, DF-ZEN-151, DF-ZEN-153): the two O(1) decode checks, the key
        # of a non-member, the sender's rate; then the packet is copied out of Zenoh's buffer and
        # queued in its sender's share (DF-ZEN-152).
        payload = sample.payload.to_bytes()
        # a RepairRequest (DFR1, DF-RCV-160) shares the delta key: it is not a packet, the node
        # decodes it with its own checks
        code = None if is_repair_request(payload) else screen(payload, self.options.max_packet_size)
        if code is not None:
            with self._lock:
                self._screened[code] = self._screened.get(code, 0) + 1
            return
        sender = _parse_node(str(sample.key_expr)) or 0
        members = self._members
        if members is not None and sender not in members:
            with self._lock:
                self._rejected_not_member += 1
            return
        self._queue.push(payload, sender)

    def take_screened(self) -> dict[ErrorCode, int]:
        """Payloads rejected before the receive queue since the last call, per code (DF-ZEN-154);
        the node adds them to its rejection counters (`Engine.count_rejected`)."""
        with self._lock:
            out, self._screened = self._screened, {}
        return out

    def set_members(self, members: Collection[int] | None, *, live: bool = False) -> None:
        """The node's configured membership (DF-RCV-51) as the transport applies it: samples on the
        delta key of a non-member are refused before the queue (DF-ZEN-151), and a snapshot query
        is answered only when its ``from`` names a member (DF-ZEN-155) that, with ``live``, also
        holds a live token (DF-ZEN-150). ``members`` None and ``live`` False: every sender, as 1.0."""
        self._members = None if members is None else frozenset(check_node_id(m) for m in members)
        self._live_members = live

    def _on_alive(self, sample: zenoh.Sample) -> None:
        node = _parse_node(str(sample.key_expr))
        if node is None or node == self._node_id:
            return
        with self._lock:
            if sample.kind == zenoh.SampleKind.PUT:
                changed = node not in self._peers
                self._peers.add(node)
            else:
                changed = node in self._peers
                self._peers.discard(node)
            self._peers_changed.notify_all()
        if changed:
            log.info(
                "peer %s %s",
                node_hex(node),
                "joined" if sample.kind == zenoh.SampleKind.PUT else "left",
            )

    def _on_snapshot_query(self, query: zenoh.Query) -> None:
        srv = self._server
        if srv is None:
            query.reply_err("no snapshot served")
            return
        params = str(query.parameters)
        members = self._members
        asker = query_from(params)
        if (members is not None and asker not in members) or (
            self._live_members and asker not in self.peers()
        ):
            with self._lock:  # DF-ZEN-155: a short error, never a chunk, for a non-member
                self._snapshot_refused += 1
            query.reply_err("not a member")
            return
        try:
            # the raw parameter string: `&` (DF-ZEN-5's form) and `;` (Zenoh's) are both accepted
            buf = srv.answer(params)
        except SnapshotError as exc:
            query.reply_err(str(exc))
            return
        except Exception as exc:  # a failing provider must not kill Zenoh's thread
            query.reply_err(f"snapshot provider failed: {exc}")
            return
        query.reply(
            snapshot_key(self._ns, self._node_id),
            buf,
            encoding=zenoh.Encoding.APPLICATION_OCTET_STREAM.with_schema(SNAPSHOT_SCHEMA),
        )

    def _on_info_query(self, query: zenoh.Query) -> None:
        provider = self._info_provider
        srv = self._server
        info: dict[str, object]
        try:
            if provider is not None:  # the node's own members, no snapshot capture
                info = {"node": node_hex(self._node_id), **provider()}
            elif srv is not None:
                info = srv.info()
            else:
                query.reply_err("no snapshot served")
                return
        except Exception as exc:  # a failing provider must not kill Zenoh's thread
            query.reply_err(f"info provider failed: {exc}")
            return
        query.reply(
            info_key(self._ns, self._node_id),
            json.dumps(info),
            encoding=zenoh.Encoding.APPLICATION_JSON,
        )

    # Transport API -------------------------------------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def namespace(self) -> str:
        return self._ns

    @property
    def session(self) -> zenoh.Session:
        """The underlying Zenoh session (for diagnostics)."""
        return self._session

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosedError(f"transport of node {node_hex(self._node_id)} is closed")

    def publish(self, packet: bytes) -> None:
        self._check_open()
        try:
            self._publisher.put(packet)
        except Exception as exc:  # zenoh.ZError and friends: surface them typed
            raise TransportError(f"publish failed: {exc}") from exc
        with self._lock:
            self._published_packets += 1
            self._published_bytes += len(packet)

    def drain(self, max_packets: int | None = None) -> list[bytes]:
        return self._queue.drain(max_packets)

    def wait_for_packets(self, timeout: float) -> bool:
        return self._queue.wait_nonempty(timeout)

    def peers(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._peers)

    def wait_for_peers(
        self, n: int, timeout: float, *, expected: Collection[int] | None = None
    ) -> frozenset[int]:
        self._check_open()
        want = frozenset(check_node_id(e) for e in expected) if expected is not None else None
        known = want if want is not None else self.neighbours
        deadline = time.monotonic() + timeout
        with self._peers_changed:
            while True:
                live = frozenset(self._peers)
                if len(live) >= n and (want is None or want <= live):
                    return live
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = frozenset() if known is None else known - live
                    raise PeerTimeoutError(
                        n, live, missing, timeout, diagnose(self.options) if not live else ""
                    )
                self._peers_changed.wait(left)

    def serve_snapshot(self, provider: SnapshotProvider) -> None:
        """Answer snapshot and info queries with what ``provider`` captures (DF-ZEN-5, DF-ZEN-6). The
        queryables exist from construction on (answering with an error until a provider is set), so a
        peer that sees this node's liveliness token can already query them."""
        self._check_open()
        self._server = SnapshotServer(
            self._node_id, provider, max_packet_size=self.options.max_packet_size
        )

    def serve_info(self, provider: Callable[[], Mapping[str, Any]] | None) -> None:
        """Answer info queries with ``{"node": <this id>, **provider()}`` instead of asking the
        snapshot provider (which captures a copy of the anchor). ``provider`` runs on a Zenoh thread
        and returns JSON-able members: at least DF-ZEN-6's ``incarnation`` (16 hex digits),
        ``fingerprint`` (64), ``framework`` and ``N``; `Fabric` adds ``stats`` (its counters, shown by
        ``delta-fabric status``). None goes back to the snapshot provider's info."""
        self._info_provider = provider

    def info(self, peer: int | None = None, timeout: float = 2.0) -> dict[int, dict[str, Any]]:
        """Query the info queryables of ``peer`` (None: every node serving one) -> ``{node: info}``."""
        self._check_open()
        key = info_key(self._ns, peer) if peer is not None else f"{self._ns}/v1/info/*"
        out = query_info(self._session, key, timeout)
        out.pop(self._node_id, None)
        return out

    def _get_chunk(
        self, server: int, params: str, timeout: float
    ) -> tuple[bytes | None, str | None]:
        """One chunk query: (payload, None) on a reply, (None, error message) on an error reply,
        (None, None) when nothing came back in time."""
        sep = ";" if ";" in params else "&"
        replies = self._session.get(
            f"{snapshot_key(self._ns, server)}?{params}{sep}from={node_hex(self._node_id)}",
            target=zenoh.QueryTarget.BEST_MATCHING,
            consolidation=zenoh.ConsolidationMode.NONE,
            timeout=max(timeout, 0.001),
        )
        error: str | None = None
        for reply in replies:
            ok = reply.ok
            if ok is not None:
                return ok.payload.to_bytes(), None
            err = reply.err
            if err is not None:
                error = err.payload.to_bytes().decode("utf-8", "replace")
        return None, error

    def _request_chunk(self, server: int, chunk: int, chunk_size: int, timeout: float) -> bytes:
        # DF-ZEN-5 writes the parameters `chunk=<i>&chunk_size=<c>`; Zenoh's own parameter syntax
        # separates pairs with `;`. Ask in the spec's form first; if the server answers with an error,
        # ask once more in Zenoh's form and remember what that server understands.
        deadline = time.monotonic() + timeout
        first_sep = self._separators.get(server, "&")
        error: str | None = None
        for sep in (first_sep, ";" if first_sep == "&" else "&"):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            payload, error = self._get_chunk(
                server, format_chunk_params(chunk, chunk_size, sep), left
            )
            if payload is not None:
                self._separators[server] = sep
                return payload
            if error is None:  # no reply at all: asking again in another form will not help
                break
        if error is not None:
            raise SnapshotError(SnapshotErrorKind.SERVER_ERROR, f"node {node_hex(server)}: {error}")
        raise SnapshotError(
            SnapshotErrorKind.NO_SERVER,
            f"no snapshot queryable of node {node_hex(server)} answered (or none within {timeout:.3g}s)",
        )

    def fetch_snapshot(
        self,
        peer: int | None,
        fingerprint: bytes,
        timeout: float = 30.0,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        num_params: int | None = None,
        attempts: int = 3,
    ) -> tuple[NDArray[np.float32], int]:
        """Fetch, verify (DF-ZEN-12: identifier, version, fingerprint, totals, offsets, finite values,
        SHA-256 digest) and reassemble a snapshot -> ``(anchor, incarnation of the server)``.

        ``peer`` None: the peers whose info reports the same fingerprint (and N) are tried first, then
        the other live peers. ``num_params``: the joiner's N. ``attempts``: rounds over the candidates,
        with back-off. Raises :class:`~delta_fabric.snapshot.SnapshotError` (typed).

        The delta subscribers exist from construction on, so packets that arrive during the transfer
        wait in the receive queue (DF-ZEN-13); a joiner installs the snapshot, then drains them."""
        self._check_open()
        deadline = time.monotonic() + timeout
        target = None if peer is None else check_node_id(peer)
        fp_hex = bytes(fingerprint).hex()

        def candidates() -> list[int]:
            if target is not None:
                return [target]
            left = deadline - time.monotonic()
            try:
                infos = self.info(None, timeout=min(1.0, max(0.05, left / 4)))
            except Exception:
                infos = {}
            good = sorted(
                n
                for n, i in infos.items()
                if i.get("fingerprint") == fp_hex
                and (num_params is None or i.get("N") == num_params)
            )
            return good + sorted(self.peers() - set(good))

        def request_for(server: int) -> ChunkRequest:
            return lambda chunk, size, left_s: self._request_chunk(server, chunk, size, left_s)

        anchor, first = fetch_snapshot_from(
            request_for,
            candidates,
            fingerprint,
            timeout,
            chunk_size=chunk_size,
            num_params=num_params,
            attempts=attempts,
        )
        return anchor, first.incarnation

    @property
    def stats(self) -> TransportStats:
        rp, rb, dp, db, qp, qb = self._queue.counters()
        with self._lock:
            pp, pb = self._published_packets, self._published_bytes
        return TransportStats(
            published_packets=pp,
            published_bytes=pb,
            received_packets=rp,
            received_bytes=rb,
            dropped_packets=dp,
            dropped_bytes=db,
            queued_packets=qp,
            queued_bytes=qb,
            rejected_not_member=self._rejected_not_member,
            rate_limited=self._queue.rate_limited,
            snapshot_refused=self._snapshot_refused,
        )

    def _teardown(self) -> None:
        for name in ("_token", "_alive_sub", "_publisher"):
            obj = getattr(self, name, None)
            if obj is not None:
                try:
                    obj.undeclare()
                except Exception:
                    pass
        for obj in [*getattr(self, "_subscribers", []), *self._queryables]:
            try:
                obj.undeclare()
            except Exception:
                pass
        self._queryables = []
        session = getattr(self, "_session", None)
        if session is not None and self._owns_session:
            try:
                session.close()
            except Exception:
                pass

    def close(self) -> None:
        """Undeclare everything and close the session (peers see the liveliness token go). Idempotent."""
        if self._closed:
            return
        self._closed = True
        lifecycle.unregister(self)
        self._server = None
        self._teardown()
        log.info("transport of node %s closed", node_hex(self._node_id))
        with self._lock:
            self._peers.clear()
            self._peers_changed.notify_all()

    def __enter__(self) -> ZenohTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
