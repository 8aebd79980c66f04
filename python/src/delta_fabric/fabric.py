"""The node: one `Fabric` drives any `delta_fabric.store.WeightStore` over any transport.

Usage (PyTorch; any store works the same)::

    from delta_fabric import Fabric, SyncConfig
    from delta_fabric.stores.torch import TorchStore

    with Fabric(TorchStore(model), transport, SyncConfig(), node_id=7) as fabric:
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step(); optimizer.zero_grad()
            fabric.step()

Functional frameworks (a `delta_fabric.store.FunctionalStore`, e.g. JAX) write
``variables = fabric.update(variables)`` instead of ``fabric.step()``.

`Fabric.step` drains the transport without waiting, hands what arrived to the sans-IO `Engine` (which
applies the aggregate to the anchor), applies the same aggregate to the store, generates on every
``sync_interval``-th step and publishes own and relay packets. A step with no sync and no traffic does
O(1) work: one ``drain`` call that returns nothing, one modulo. The engine reports the header of every
accepted entry (`AcceptedEntry`), which feeds the hop histogram, `origin_progress` and the optional
``on_accepted`` callback; no packet is decoded twice.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from delta_fabric.config import AUTO, RelayPolicy, SyncConfig
from delta_fabric.encodings import supports
from delta_fabric.engine import AcceptedEntry, ActiveView, Engine, ReceiveResult, Snapshot
from delta_fabric.errors import ConfigurationError, DeltaFabricError, ErrorCode
from delta_fabric.influence import InfluenceBound
from delta_fabric.log import warn_loudly
from delta_fabric.manifest import Manifest
from delta_fabric.metrics import MetricsWriter
from delta_fabric.repair import (
    MAX_REQUEST_SEQS,
    GapTracker,
    RepairCounters,
    RepairError,
    RepairRequest,
    ResendBuffer,
    confirm_snapshot,
    decode_request,
    encode_request,
    is_repair_request,
)
from delta_fabric.snapshot import SnapshotError, SnapshotErrorKind, SnapshotSource
from delta_fabric.store import FunctionalStore, WeightStore, running_stats
from delta_fabric.transports.base import Transport, check_node_id, node_hex
from delta_fabric.wire import VERSION_MAJOR, Entry, Packet, encode_packet, peek_header

if TYPE_CHECKING:  # the `signing` extra (cryptography)
    from delta_fabric.signing import Signing

__all__ = [
    "DEFAULT_MAX_DRAIN",
    "DEFAULT_MEMBER_GRACE",
    "DEFAULT_PEER_DEADLINE",
    "AcceptedCallback",
    "Bootstrap",
    "Fabric",
    "FabricClosedError",
    "FinishTimeout",
    "ModelMismatch",
    "SnapshotUnavailable",
    "default_incarnation",
]

log = logging.getLogger("delta_fabric.fabric")

#: ``True``: a peer's snapshot is required; ``"auto"``: used when one answers in time; ``False``: never.
Bootstrap = bool | Literal["auto"]
#: Called after each receive that accepted entries, with their headers in acceptance order.
AcceptedCallback = Callable[[Sequence[AcceptedEntry]], None]

#: Upper bound on packets taken from the transport in one step (the rest wait for the next step).
DEFAULT_MAX_DRAIN = 4096
#: Seconds a member whose liveliness token went stays a member (DF-ZEN-150).
DEFAULT_MEMBER_GRACE = 10.0
#: Seconds without progress after which a live peer no longer holds pacing back (DF-ZEN-156).
DEFAULT_PEER_DEADLINE = 5.0


class _AnchorProvider:
    """The node's snapshot provider: its anchor, and a version that changes with it
    (`delta_fabric.snapshot.VersionedProvider`), so that a joiner never installs a capture older
    than the anchor (a node restarted within seconds of its first join got the first capture)."""

    def __init__(self, fabric: Fabric) -> None:
        self._fabric = fabric

    def __call__(self) -> SnapshotSource:
        return self._fabric._snapshot_source()

    def version(self) -> int:
        return self._fabric._anchor_version


class SnapshotUnavailable(DeltaFabricError, RuntimeError):
    """A bootstrap was required but no live peer delivered a valid snapshot in time."""


class ModelMismatch(SnapshotUnavailable, ConfigurationError):
    """A required bootstrap found only peers of another model (their snapshots' fingerprint is not
    this node's): a configuration error, raised at once rather than after the timeout."""


class FabricClosedError(DeltaFabricError, RuntimeError):
    """The fabric was used after `Fabric.close`."""


class FinishTimeout(DeltaFabricError, TimeoutError):
    """`Fabric.finish` ran out of time. ``missing``: each live peer it still waited for (node id)
    and why, e.g. ``"still training"`` or ``"entries up to seq 40 of incarnation ... not applied"``;
    ``absent``: how many nodes of the run's ``world_size`` it never saw finish."""

    def __init__(self, timeout: float, missing: Mapping[int, str], absent: int = 0) -> None:
        self.missing = dict(missing)
        self.absent = absent
        parts = [f"{node_hex(p)}: {why}" for p, why in sorted(self.missing.items())]
        if absent:
            parts.append(f"{absent} more node(s) of the run's world size, not live")
        super().__init__(f"finish: not done within {timeout:.1f}s, waiting for {'; '.join(parts)}")


#: Rejection codes that mean a peer is configured differently (another model, version, encoding or
#: key), reported once per peer at WARNING rather than counted silently.
MISCONFIGURATION = frozenset(
    {
        ErrorCode.FINGERPRINT_MISMATCH,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_ENCODING,
        ErrorCode.BAD_SIGNATURE,
    }
)


def default_incarnation() -> int:
    """Microseconds since the Unix epoch (DF-RCV-4's recommendation; increasing across restarts)."""
    return max(1, time.time_ns() // 1000)


_unsigned_said = False


def _say_unsigned(node_id: int, transport: Transport) -> None:
    """Say once per process, at the default log level, that a node on a network transport runs
    unsigned: then any process that reaches its network can publish entries under a member's id
    (spec section 13). A node on the in-memory transport is reachable only from its process."""
    global _unsigned_said
    from delta_fabric.transports.memory import MemoryTransport

    if _unsigned_said or isinstance(transport, MemoryTransport):
        return
    _unsigned_said = True
    warn_loudly(
        log,
        "node %s runs unsigned: any process that reaches its Zenoh network can publish entries "
        "under a member's id; a signed cluster pins every member's key (DELTA_FABRIC_KEYS and "
        "DELTA_FABRIC_SECRET_KEY, or Fabric(signing=...); spec section 13.1)",
        node_hex(node_id),
    )


class Fabric:
    """A DeltaFabric node around a weight store (see the module docstring).

    ``config`` defaults to ``SyncConfig()``. ``incarnation`` defaults to microseconds since the epoch.
    ``bootstrap``: ``True`` fetches the anchor snapshot of a live peer into the store (required;
    `SnapshotUnavailable` after ``bootstrap_timeout``), ``"auto"`` fetches one when a peer answers in
    time and else starts from the store's current weights, ``False`` never fetches. The fabric serves
    snapshots of its anchor through the transport. ``fast_selection``: DF-GEN-7's approximate
    selection. ``max_drain``: packets taken per step. ``on_accepted``: see `AcceptedCallback`.
    ``own_transport``: `close` (and leaving a ``with`` block) also closes the transport.
    ``metrics``: a file the node appends its `stats` to as JSON lines, every ``metrics_interval``
    seconds from `step` and once at `close` (`delta_fabric.metrics`; no thread). ``members``: the node
    ids accepted as origins (DF-RCV-51, 1.1): entries of any other origin are dropped and counted
    (``drops.not_member``) and never take a place in the origin bound; ``None`` (default) accepts every
    origin, as 1.0 does. ``live_members``: the membership follows the liveliness tokens
    (DF-ZEN-150): an origin is a member while its token is live and for ``member_grace`` seconds
    after it went (entries still in flight), intersected with ``members`` when both are given.
    ``repair``: anti-entropy by gap repair (spec section 7.9, 1.1, OPTIONAL):
    the node asks origins again for the entries it missed and publishes its own entries again when
    asked (`delta_fabric.repair`; counters under ``stats()["repair"]``). ``snapshot_quorum``
    (proposal, spec/proposals/trusted-snapshots.md): when >= 1, a bootstrap queries every live
    member (every live peer when ``members`` is None) and installs the anchor of the lowest member
    id that ``snapshot_quorum`` sources' anchors confirm (`delta_fabric.repair.confirm_snapshot`);
    counters under ``stats()["snapshot_trust"]``. ``influence_factor`` (proposal,
    spec/proposals/bounded-influence.md): bound each received entry's L2 norm to this factor times
    the running median (`delta_fabric.influence.InfluenceBound`); counters under
    ``stats()["influence"]``. ``signing`` (1.1, spec section 13.1; `delta_fabric.signing.Signing`, the
    ``signing`` extra): the node is in a signed cluster; it signs its entries with its secret key and
    rejects packets with entries not signed by their origin's pinned key (``errors.BAD_SIGNATURE``).
    ``hold_residual`` (1.1, spec section 5.11, DF-GEN-240..243, node-local; on by default): the
    unsent residual is held aside in a buffer of the node's own (`residual`) and the working weights
    restart from the anchor after every generation; the residual is folded back into them just
    before the next one. ``repair`` is on by default too. ``world_size``: how many nodes the run
    has in all (``DELTA_FABRIC_NODES`` under ``delta-fabric run``); with ``average_over`` `AUTO`
    (the default) every generation averages over `cluster_size`, at least this many.
    ``max_lead`` (default 0): bounded staleness, `pace` after every sync step: the node waits
    (receiving and relaying) while it is more than ``max_lead`` sync rounds ahead of a live member
    peer; 0 is a barrier per sync among the live peers, as a blocking all-reduce, except that a peer
    whose progress has not moved for ``peer_deadline`` seconds no longer holds the others back.
    On the label-skewed digits of python/examples/torch_digits.py (3 processes over Zenoh) the
    shared model ended at 0.978-0.983 with 0 (4 runs), 0.975 with 1 (2 runs) and 0.564-0.864
    without pacing (2 runs). None: never wait.
    `Fabric.v1_0` is a node that behaves as 1.0's: no residual held aside, no repair, no pacing.

    The defaults are the recommended ones: ``Fabric(store, transport, node_id=...)`` with
    ``SyncConfig()`` needs no learning-rate change and no cluster size, and `finish` ends a run
    with the nodes in agreement.
    """

    def __init__(
        self,
        store: WeightStore,
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        bootstrap: Bootstrap = False,
        bootstrap_timeout: float = 10.0,
        fast_selection: bool = False,
        max_drain: int = DEFAULT_MAX_DRAIN,
        on_accepted: AcceptedCallback | None = None,
        own_transport: bool = False,
        metrics: str | Path | None = None,
        metrics_interval: float = 10.0,
        members: Iterable[int] | None = None,
        repair: bool = True,
        snapshot_quorum: int = 0,
        influence_factor: float | None = None,
        live_members: bool = False,
        member_grace: float = DEFAULT_MEMBER_GRACE,
        signing: Signing | None = None,
        hold_residual: bool = True,
        world_size: int | None = None,
        max_lead: int | None = 0,
        peer_deadline: float = DEFAULT_PEER_DEADLINE,
    ) -> None:
        if not isinstance(store, WeightStore):
            raise TypeError(
                f"store must implement delta_fabric.store.WeightStore, got {type(store).__name__}"
            )
        node_id = check_node_id(node_id)
        if max_drain < 1:
            raise ValueError("max_drain must be >= 1")
        if not 0.0 <= member_grace < float("inf"):
            raise ValueError(f"member_grace must be a finite number >= 0, got {member_grace}")
        if bootstrap not in (True, False, "auto"):
            raise ValueError(f"bootstrap must be True, False or 'auto', got {bootstrap!r}")
        if world_size is not None and (
            isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1
        ):
            raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
        self.world_size = world_size
        if max_lead is not None and (
            isinstance(max_lead, bool) or not isinstance(max_lead, int) or max_lead < 0
        ):
            raise ValueError(f"max_lead must be None or an integer >= 0, got {max_lead!r}")
        if not 0.0 <= peer_deadline < float("inf"):
            raise ValueError(f"peer_deadline must be a finite number >= 0, got {peer_deadline}")
        self.max_lead = max_lead
        self.peer_deadline = peer_deadline
        if isinstance(snapshot_quorum, bool) or snapshot_quorum < 0:
            raise ValueError(f"snapshot_quorum must be an integer >= 0, got {snapshot_quorum!r}")
        self.snapshot_quorum = int(snapshot_quorum)
        self._members = None if members is None else frozenset(check_node_id(m) for m in members)
        self.snapshot_trust = {
            "sources_queried": 0,
            "sources_failed": 0,
            "sources_refused": 0,
            "outliers": 0,
            "quorum_failed": 0,
        }
        self.store = store
        self.transport = transport
        self.config = config if config is not None else SyncConfig()
        self.node_id = node_id
        self.framework = str(store.framework)
        self.fast_selection = fast_selection
        self.max_drain = max_drain
        self.on_accepted = on_accepted
        self.own_transport = own_transport
        self.manifest: Manifest = store.manifest
        self.steps = 0
        self.syncs = 0
        self.bytes_sent = 0
        self.packets_sent = 0
        self.own_entries_sent = 0
        self.own_values_sent = 0
        self.relay_entries_sent = 0
        self.relay_values_sent = 0
        self.values_received_applied = 0
        self.accepted_by_hops: dict[int, int] = {}
        self._origin_progress: dict[int, tuple[int, int]] = {}
        self._accepted_by_origin: dict[int, int] = {}
        self.bootstrapped = False
        self.snapshots_served = 0
        self.hold_residual = bool(hold_residual)
        #: DF-GEN-240: the unsent residual held aside (zeros unless ``hold_residual``)
        self._residual: NDArray[np.float32] | None = None
        self._held_mask: NDArray[np.bool_] | None = None
        self._lock = threading.Lock()  # guards the anchor against a concurrent snapshot request
        #: the `finish` member of this node's info object once it finishes (spec/proposals/finish.md)
        self._finish: dict[str, Any] | None = None
        #: peers reported as configured differently: node id -> the rejection code (once each)
        self._misconfigured: dict[int, ErrorCode] = {}
        self._finish_waiting: set[int] = set()  # finishing peers not done yet (for FinishTimeout)
        self._finished_peers: set[int] = set()  # peers seen done while this node finished
        self._anchor_version = (
            0  # changes with the anchor (snapshot captures are reused until then)
        )
        #: origin -> (incarnation, seq) its entries up to which the installed snapshot holds
        self._snapshot_floor: dict[int, tuple[int, int]] = {}
        self._closed = False
        # membership (DF-RCV-51, DF-ZEN-150) and pacing (DF-ZEN-156) state
        self._configured: frozenset[int] | None = (
            None if members is None else frozenset(check_node_id(m) for m in members)
        )
        self.live_members = live_members
        self.member_grace = member_grace
        self._live: frozenset[int] = frozenset()
        self._left_at: dict[int, float] = {}
        self._effective: frozenset[int] | None = None
        self._pace_base: dict[int, tuple[int, int]] = {}  # origin -> (incarnation, lead offset)
        self._moved_at: dict[int, tuple[tuple[int, int], float]] = {}  # origin -> (progress, t)

        try:
            self._metrics = (
                MetricsWriter(metrics, metrics_interval) if metrics is not None else None
            )
            self.engine = self._start(bootstrap, bootstrap_timeout, incarnation)
            if self.bootstrapped:
                self._note_snapshot_floor()
            if members is not None or live_members:  # DF-ZEN-151, DF-ZEN-155
                self.transport.set_members(self._configured, live=live_members)
            self._refresh_members()  # DF-RCV-51: only members are tracked as origins
            if signing is not None:  # DF-SEC-140, DF-SEC-142
                if not signing.can_sign:
                    raise ValueError("signing: a node of a signed cluster needs its secret key")
                self.engine.set_signing(signing)
            else:
                _say_unsigned(self.node_id, self.transport)
            if influence_factor is not None:
                self.engine.influence = InfluenceBound(influence_factor)
            if self.hold_residual:
                self._held()  # DF-GEN-244: a store naming an unknown tensor is refused here
            self.gaps: GapTracker | None = None
            self.resend: ResendBuffer | None = None
            self.repair_refused = 0
            if repair:
                self.gaps = GapTracker(self.config.replay_window)
                self.resend = ResendBuffer(
                    self.node_id, self.engine.incarnation, self.manifest.fingerprint
                )
            self.transport.serve_snapshot(_AnchorProvider(self))
            self.transport.serve_info(self._info)  # info replies, with the counters
        except BaseException:
            if own_transport:
                self.transport.close()
            raise
        log.info(
            "node %s started: framework %s, N=%d, fingerprint %s, incarnation %d%s",
            node_hex(self.node_id),
            self.framework,
            self.manifest.num_params,
            self.manifest.fingerprint.hex()[:16],
            self.engine.incarnation,
            ", bootstrapped from a peer's snapshot" if self.bootstrapped else "",
        )

    @classmethod
    def from_env(
        cls,
        store: WeightStore,
        config: SyncConfig | None = None,
        *,
        env: Mapping[str, str] | None = None,
        node_id: int | None = None,
        **kw: Any,
    ) -> Fabric:
        """A node on a Zenoh transport configured from ``DELTA_FABRIC_*`` environment variables (what
        ``delta-fabric run`` sets; the table is in `delta_fabric.env` and python/README.md)::

            with Fabric.from_env(TorchStore(model)) as fabric:
                ...

        Node id, endpoints, Zenoh config file and namespace come from `ZenohOptions.from_env`; the
        sync parameters from `SyncConfig.from_env`, with ``config`` (when given) as the program's
        defaults for the variables that are unset; ``DELTA_FABRIC_MEMBERS`` / ``_LIVE_MEMBERS`` /
        ``_MEMBER_GRACE`` (DF-ZEN-150), ``DELTA_FABRIC_KEYS`` / ``_SECRET_KEY`` (a signed
        cluster, spec section 13.1), ``DELTA_FABRIC_BOOTSTRAP``, ``DELTA_FABRIC_REPAIR`` and
        ``DELTA_FABRIC_METRICS`` / ``_METRICS_INTERVAL`` unless given in ``kw``;
        ``DELTA_FABRIC_NODES`` as ``world_size``. Under ``delta-fabric run`` every rank above 0
        bootstraps from a live peer's snapshot (``DELTA_FABRIC_BOOTSTRAP`` unset), so every node
        starts from rank 0's weights, in any framework. The fabric owns the
        transport (closed with it). A bad variable raises `delta_fabric.env.EnvError`; an id already
        live in the namespace `delta_fabric.transports.DuplicateNodeError`. Does not wait for peers
        (DF-ZEN-16): call ``fabric.transport.wait_for_peers(...)`` when the program wants to.
        """
        from delta_fabric import env as _env
        from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

        options = ZenohOptions.from_env(node_id, env)
        defaults = (
            {}
            if config is None
            else {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        )
        cfg = SyncConfig.from_env(env, **defaults)
        if "bootstrap" not in kw:
            kw["bootstrap"] = _env.bootstrap(env)
            if _env.rank(env):  # rank 0 may still be starting (imports): wait for it longer
                kw.setdefault("bootstrap_timeout", 120.0)
        if "world_size" not in kw:
            kw["world_size"] = _env.nodes(env)
        if "repair" not in kw:
            kw["repair"] = _env.repair(env)
        members, live, grace = _env.membership(env)
        if members is not None:
            kw.setdefault("members", members)
        if live:
            kw.setdefault("live_members", live)
        kw.setdefault("member_grace", grace)
        if "signing" not in kw:  # DELTA_FABRIC_KEYS / _SECRET_KEY (spec section 13.1)
            signing = _env.signing(env, options.node_id)
            if signing is not None:
                kw["signing"] = signing
        if "metrics" not in kw:
            path, interval = _env.metrics(env)
            kw["metrics"] = path
            kw.setdefault("metrics_interval", interval)
        transport = ZenohTransport(options)
        try:
            return cls(store, transport, cfg, node_id=options.node_id, own_transport=True, **kw)
        except BaseException:
            transport.close()  # also when an argument was refused before the fabric owned it
            raise

    @classmethod
    def v1_0(
        cls,
        store: WeightStore,
        transport: Transport,
        config: SyncConfig | None = None,
        **kw: Any,
    ) -> Fabric:
        """A node that behaves as a protocol 1.0 node: ``SyncConfig.v1_0()`` unless ``config`` is
        given, no residual held aside, no repair, no pacing (each unless given in ``kw``). For a
        cluster with 1.0 nodes, and for programs that drive several nodes in one thread."""
        kw.setdefault("hold_residual", False)
        kw.setdefault("repair", False)
        kw.setdefault("max_lead", None)
        return cls(store, transport, config if config is not None else SyncConfig.v1_0(), **kw)

    @classmethod
    def join(
        cls,
        store: WeightStore,
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        timeout: float = 10.0,
        **kw: Any,
    ) -> Fabric:
        """Late join or restart: load a live peer's snapshot into the store, fresh incarnation
        (``bootstrap=True``; `SnapshotUnavailable` after ``timeout``)."""
        return cls(
            store,
            transport,
            config,
            node_id=node_id,
            incarnation=incarnation,
            bootstrap=True,
            bootstrap_timeout=timeout,
            **kw,
        )

    # bootstrap ------------------------------------------------------------------------------------
    def _start(self, bootstrap: Bootstrap, timeout: float, incarnation: int | None) -> Engine:
        """The engine with anchor = the store's weights, or = a live peer's snapshot (loaded into
        the store too: active = anchor, DF-ZEN-5). The store changes only once all checks passed."""
        snapshot: Snapshot | None = None
        if incarnation is None:
            incarnation = default_incarnation()
        if self.config.relay_policy is RelayPolicy.NEEDED:
            # DF-RLY-63: make this node a neighbour of its peers before a snapshot is captured, so
            # that they relay for it from then on.
            self.transport.publish(
                encode_packet(
                    Packet(self.node_id, incarnation, self.manifest.fingerprint, (), heard=())
                )
            )
        if (bootstrap is True or bootstrap == "auto") and self.snapshot_quorum:
            snapshot = self._fetch_snapshot_quorum(required=bootstrap is True, timeout=timeout)
        elif bootstrap is True or bootstrap == "auto":
            snapshot = self._fetch_snapshot(required=bootstrap is True, timeout=timeout)
        if snapshot is None:
            return Engine(
                self.manifest, self.config, self.node_id, incarnation, self.store.gather()
            )
        engine = Engine.from_snapshot(
            self.manifest, self.config, self.node_id, incarnation, snapshot
        )
        self.store.load(snapshot.anchor)
        self.bootstrapped = True
        return engine

    def _note_snapshot_floor(self) -> None:
        """After a bootstrap: each live peer's highest own seq (its info's ``seq``), taken as held
        by the snapshot just installed, so that `finish` does not wait for entries that reached
        this node inside the snapshot rather than as packets (spec section 9.5: an entry in
        flight meanwhile can be applied twice or missed, as for any joiner)."""
        try:
            infos = self.transport.info(None, timeout=1.0)
        except (OSError, DeltaFabricError) as exc:
            log.debug("no node information after the bootstrap: %s", exc)
            return
        for p, info in infos.items():
            try:
                inc, seq = int(info["incarnation"], 16), int(info["seq"])
            except (KeyError, TypeError, ValueError):
                continue
            self._snapshot_floor[p] = (inc, seq)

    def _fetch_snapshot(self, *, required: bool, timeout: float) -> Snapshot | None:
        """A verified snapshot from any live peer (the transport checks chunks and the digest)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        other_model = 0  # fetches in a row answered with another model's snapshot
        while True:
            remaining = deadline - time.monotonic()
            try:
                anchor, server_incarnation = self.transport.fetch_snapshot(
                    None, self.manifest.fingerprint, timeout=max(0.05, remaining)
                )
            except (SnapshotError, TimeoutError, OSError) as exc:
                last = exc
                log.debug("snapshot fetch failed: %s", exc)
                mismatch = (
                    isinstance(exc, SnapshotError)
                    and exc.kind is SnapshotErrorKind.FINGERPRINT_MISMATCH
                )
                other_model = other_model + 1 if mismatch else 0
                if required and other_model >= 3:
                    raise ModelMismatch(
                        "the live peers serve another model's snapshot (this node's fingerprint "
                        f"{self.manifest.fingerprint.hex()[:16]}..., N={self.manifest.num_params}): "
                        "the nodes of one run must have the same model (check the model, "
                        "include_buffers and the framework mapping)"
                    ) from None
            else:
                snap = Snapshot(
                    self.manifest.fingerprint, np.asarray(anchor, dtype=np.float32).copy()
                )
                if self._snapshot_ok(snap):
                    log.info(
                        "snapshot fetched: %d values from a peer at incarnation %d",
                        snap.anchor.size,
                        server_incarnation,
                    )
                    return snap
                last = ValueError("snapshot of the wrong size or with a non-finite value")
                log.debug("snapshot refused: %s", last)
            if not required or time.monotonic() >= deadline:
                break
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        if required:
            raise SnapshotUnavailable(
                f"no valid snapshot from a live peer within {timeout:.1f}s: {last}"
            )
        log.info("no snapshot from a peer within %.1fs: starting from own weights", timeout)
        return None

    def _fetch_snapshot_quorum(self, *, required: bool, timeout: float) -> Snapshot | None:
        """Trusted snapshots: every live member is queried (not the first to answer); strangers
        are refused and counted; the anchor installed is the one `confirm_snapshot` chooses."""
        deadline = time.monotonic() + timeout
        trust = self.snapshot_trust
        refused: set[int] = set()
        last = "no live member"
        while True:
            peers = sorted(self.transport.peers())
            sources = [p for p in peers if self._members is None or p in self._members]
            for p in set(peers) - set(sources) - refused:
                refused.add(p)
                trust["sources_refused"] += 1
                log.warning("snapshot source %s refused: not a member", node_hex(p))
            anchors: dict[int, NDArray[np.float32]] = {}
            if len(sources) >= self.snapshot_quorum:
                for i, p in enumerate(sources):
                    left = max(0.05, (deadline - time.monotonic()) / (len(sources) - i))
                    trust["sources_queried"] += 1
                    try:
                        anchor, _inc = self.transport.fetch_snapshot(
                            p, self.manifest.fingerprint, timeout=left
                        )
                    except (SnapshotError, TimeoutError, OSError) as exc:
                        trust["sources_failed"] += 1
                        log.info("snapshot from %s failed: %s", node_hex(p), exc)
                        continue
                    snap = Snapshot(self.manifest.fingerprint, np.asarray(anchor, np.float32))
                    if self._snapshot_ok(snap):
                        anchors[p] = snap.anchor.copy()
                    else:
                        trust["sources_failed"] += 1
                verdict = confirm_snapshot(anchors, self.snapshot_quorum)
                trust["outliers"] += len(verdict.outliers)
                for o in verdict.outliers:
                    log.warning("snapshot of %s refused: not confirmed by a quorum", node_hex(o))
                if verdict.chosen is not None:
                    log.info(
                        "snapshot of %s installed, confirmed by %d of %d sources",
                        node_hex(verdict.chosen),
                        verdict.confirmations[verdict.chosen],
                        len(anchors),
                    )
                    return Snapshot(self.manifest.fingerprint, anchors[verdict.chosen])
                trust["quorum_failed"] += 1
                last = (
                    f"{len(anchors)} verified snapshots, none confirmed by {self.snapshot_quorum}"
                )
            else:
                last = f"{len(sources)} live members, quorum {self.snapshot_quorum}"
            if time.monotonic() >= deadline:
                break
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        if required:
            raise SnapshotUnavailable(f"no snapshot confirmed within {timeout:.1f}s: {last}")
        log.info(
            "no confirmed snapshot within %.1fs (%s): starting from own weights", timeout, last
        )
        return None

    def _snapshot_ok(self, snap: Snapshot) -> bool:
        a = np.asarray(snap.anchor)
        return (
            bytes(snap.fingerprint) == self.manifest.fingerprint
            and a.dtype == np.float32
            and a.shape == (self.manifest.num_params,)
            and bool(np.isfinite(a).all())
        )

    def _snapshot_source(self) -> SnapshotSource:
        """The provider given to ``transport.serve_snapshot`` (runs on the network thread)."""
        with self._lock:  # SnapshotSource copies the anchor: a consistent state between two steps
            src = SnapshotSource(
                self.engine.incarnation,
                self.manifest.fingerprint,
                self.engine.anchor,
                self.framework,
            )
        self.snapshots_served += 1
        log.info("snapshot served (%d so far)", self.snapshots_served)
        return src

    # properties -----------------------------------------------------------------------------------
    @property
    def incarnation(self) -> int:
        return self.engine.incarnation

    @property
    def num_params(self) -> int:
        return self.manifest.num_params

    @property
    def fingerprint(self) -> bytes:
        return self.manifest.fingerprint

    @property
    def closed(self) -> bool:
        return self._closed

    def snapshot(self) -> Snapshot:
        """A consistent copy of the anchor (safe to call from a transport thread)."""
        with self._lock:
            return self.engine.snapshot()

    def active_vector(self) -> NDArray[np.float32]:
        """The store's active weights as a canonical flat f32 vector (a fresh array)."""
        return self.store.gather()

    # the loop -------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise FabricClosedError(f"fabric of node {node_hex(self.node_id)} is closed")

    def step(self) -> int:
        """Call once after every local optimizer step. Returns the number of packets published.

        Never waits for packets (the transport's queue is drained as it is); only ``publish`` can
        block, under the transport's congestion control. O(1) when this is not a sync step and
        nothing arrived. `FabricClosedError` after `close`.
        """
        self._check_open()
        self.steps += 1
        metrics = self._metrics
        if metrics is not None and metrics.due():
            metrics.write(self.stats())
        packets: Sequence[bytes] = self.transport.drain(self.max_drain)
        sync = self.steps % self.config.sync_interval == 0
        if not packets and not sync:
            return 0
        if sync and self.syncs == 0 and self.world_size is not None and self.world_size > 1:
            self._rendezvous()
        out = self._process(packets, sync)
        if sync and self.max_lead is not None:
            self.pace(self.max_lead, peer_deadline=self.peer_deadline)
        return out

    def update(self, state: Any) -> Any:
        """`step` for a `delta_fabric.store.FunctionalStore`: hand the loop's current native state to
        the store, step, and return the state with the received updates applied
        (``variables = fabric.update(variables)``)."""
        self._check_open()
        store = self.store
        if not isinstance(store, FunctionalStore):
            raise TypeError(
                f"update() needs a FunctionalStore; {type(store).__name__} is updated in place, "
                "call step() instead"
            )
        store.set_state(state)
        self.step()
        return store.state()

    def poll(self) -> int:
        """Receive, apply and relay what is pending without generating (e.g. while idle or winding
        down); does not count as a step. Returns the number of packets published."""
        self._check_open()
        packets = self.transport.drain(self.max_drain)
        return self._process(packets, False) if packets else 0

    def sync_now(self) -> int:
        """Receive what is pending and generate now, regardless of the step count."""
        self._check_open()
        return self._process(self.transport.drain(self.max_drain), True)

    def finish(self, timeout: float = 60.0) -> NDArray[np.float32]:
        """End the run with every node in agreement, and return the shared model.

        Stops local progress: one last generation sends what this node learned since its last sync,
        then the node receives, relays and repairs without generating until every live peer (member)
        has finished too and this node has applied each one's entries up to the last one it
        announced, and until each of them reports the same of its own peers. A node learns a peer's
        last entry from the peer's node information (member ``finish``, spec/proposals/finish.md).
        The shared model (the anchor, DF-NUM-1: the same on every node up to rounding) is then
        loaded into the store and returned as a fresh flat f32 vector; a residual held aside is
        dropped. A peer that leaves is no longer waited for; with ``world_size``, the node also waits
        until it has seen ``world_size - 1`` peers finish (a node that restarts is not left
        behind). `FinishTimeout` after ``timeout``
        seconds names the peers still missing; the node stays usable (call `finish` again or
        `close`)."""
        self._check_open()
        if not 0.0 <= timeout < float("inf"):
            raise ValueError(f"timeout must be a finite number >= 0, got {timeout!r}")
        deadline = time.monotonic() + timeout
        self.sync_now()  # DF-GEN: the last local progress goes out
        with self._lock:
            self._finish = {
                "incarnation": f"{self.engine.incarnation:016x}",
                "seq": self.engine.next_seq - 1,
                "done": False,
                "have": [],
            }
        last_repair = time.monotonic()
        while True:
            self.poll()
            now = time.monotonic()
            left = deadline - now
            missing, peers_done, tails, have = self._finish_state(min(1.0, max(0.05, left)))
            with self._lock:  # what this node's info says now (read by its peers)
                if not missing and not self._finish["done"]:
                    log.info("finish: every live peer's last entry is applied")
                self._finish["done"] = not missing
                self._finish["have"] = [node_hex(p) for p in sorted(have)]
            absent = self._finish_absent()
            if not missing and peers_done and not absent:
                break
            if time.monotonic() >= deadline:
                if not missing:
                    missing = {
                        p: "has not applied every peer's last entry yet"
                        for p in self._finish_waiting
                    }
                raise FinishTimeout(timeout, missing, absent)
            if now - last_repair >= 0.5:  # repair rounds while winding down (section 7.9)
                last_repair = now
                self._finish_repair(tails)
            self.transport.wait_for_packets(0.05)
        with self._lock:
            anchor: NDArray[np.float32] = np.array(self.engine.anchor, dtype=np.float32)
            if self._residual is not None:
                self._residual.fill(0.0)
        self.store.load(anchor)
        log.info("finish: done after %d steps, %d syncs", self.steps, self.syncs)
        return anchor

    def _finish_absent(self) -> int:
        """How many nodes of ``world_size`` this finishing node has not seen finish yet (0 without
        a world size): a node of the run that restarts is waited for, not left behind."""
        if self.world_size is None:
            return 0
        return max(0, self.world_size - 1 - len(self._finished_peers))

    def _finish_state(
        self, timeout: float
    ) -> tuple[dict[int, str], bool, dict[int, tuple[int, int, int]], set[int]]:
        """For `finish`: the live peers still waited for (and why); whether every live peer reports
        ``done`` with this node among those it ``have``s (it applied this node's last entry); per
        peer whose last entries are not all here ``(incarnation, from, to)``: the seqs above the
        highest accepted one, up to its announced last seq; and the finishing peers whose last
        entry this node has applied."""
        live = self._cluster_peers()
        self._finish_waiting = set()
        have: set[int] = set()
        if not live:
            return {}, True, {}, have
        me = node_hex(self.node_id)
        infos = self.transport.info(None, timeout=timeout)
        progress = self._origin_progress
        missing: dict[int, str] = {}
        tails: dict[int, tuple[int, int, int]] = {}
        all_done = True
        for p in sorted(live):
            info = infos.get(p)
            fin = info.get("finish") if isinstance(info, dict) else None
            if not isinstance(fin, dict):
                missing[p] = (
                    "no node information" if info is None else "still training (not finishing)"
                )
                all_done = False
                continue
            try:
                inc = int(fin["incarnation"], 16)
                seq = int(fin["seq"])
                done = fin["done"] is True and me in fin.get("have", ())
            except (KeyError, TypeError, ValueError):
                missing[p] = f"unreadable finish member {fin!r}"
                all_done = False
                continue
            if not done:
                all_done = False
                self._finish_waiting.add(p)
            if seq < 1:
                self._finished_peers.add(p)
                have.add(p)
                continue
            got = max(progress.get(p, (0, 0)), self._snapshot_floor.get(p, (0, 0)))
            gaps = [] if self.gaps is None else self.gaps.missing(p)
            if got < (inc, seq):
                missing[p] = (
                    f"entries up to seq {seq} of incarnation {inc:016x} not applied "
                    f"(highest applied: seq {got[1]} of {got[0]:016x})"
                )
                if got[0] == inc:
                    tails[p] = (inc, got[1] + 1, seq)
            elif got[0] == inc and gaps:
                missing[p] = (
                    f"{len(gaps)} entries of incarnation {inc:016x} missing (seq {gaps[0]}...)"
                )
            if p not in missing:
                self._finished_peers.add(p)  # finished training, every entry of it applied here
                have.add(p)
        return missing, all_done, tails, have

    def _finish_repair(self, tails: Mapping[int, tuple[int, int, int]]) -> None:
        """Gap repair while finishing: the tracker's round, requests for the last entries of a
        finishing peer that never arrived (no later entry shows their gap to the tracker), and this
        node's answers to the requests it got."""
        if self.gaps is None:
            return
        out = self._repair_round()
        if self.resend is not None:  # DF-RCV-164: answer requests between syncs too
            with self._lock:
                resent = self.resend.take()
                if resent:
                    out.extend(self.engine.pack(resent, []))
        for p, (inc, lo, hi) in sorted(tails.items()):
            seqs = tuple(range(lo, min(hi, lo + MAX_REQUEST_SEQS - 1) + 1))
            self.gaps.counters.requests_sent += 1
            self.gaps.counters.seqs_requested += len(seqs)
            out.append(
                encode_request(
                    RepairRequest(
                        self.node_id,
                        self.engine.incarnation,
                        self.manifest.fingerprint,
                        p,
                        inc,
                        seqs,
                    )
                )
            )
        for pkt in out:
            self.transport.publish(pkt)
            self.bytes_sent += len(pkt)
            self.packets_sent += 1

    def _refresh_members(self) -> None:
        """The engine's membership: the configured list, or with ``live_members`` the live peers and
        those gone less than ``member_grace`` s ago (intersected with the list when there is one)."""
        if not self.live_members:
            if self._effective != self._configured:
                self._effective = self._configured
                self.engine.set_members(self._configured)
            return
        live = self.transport.peers()
        now = time.monotonic()
        if live != self._live:
            for p in self._live - live:
                self._left_at[p] = now
            for p in live:
                self._left_at.pop(p, None)
            self._live = live
            while len(self._left_at) > self.config.max_origins:  # bounded: oldest departures go
                del self._left_at[min(self._left_at, key=self._left_at.__getitem__)]
        for p in [p for p, t in self._left_at.items() if now - t > self.member_grace]:
            del self._left_at[p]
        eff = live | self._left_at.keys()
        if self._configured is not None:
            eff = eff & self._configured
        eff = frozenset(eff)
        if eff != self._effective:
            log.info("membership now %d node(s)", len(eff))
            self._effective = eff
            self.engine.set_members(eff)

    def members(self) -> frozenset[int] | None:
        """The membership the engine applies now (None: every origin, DF-RCV-51)."""
        return self._effective

    def _process(self, packets: Sequence[bytes], sync: bool) -> int:
        relay = []
        own = []
        res: ReceiveResult | None = None
        requests: list[bytes] = []
        if any(is_repair_request(p) for p in packets):  # DF-RCV-160: not a packet
            requests = [p for p in packets if is_repair_request(p)]
            packets = [p for p in packets if not is_repair_request(p)]
            self._repair_requests(requests)
        screened = self.transport.take_screened()
        with self._lock:
            self._refresh_members()
            for code, n in screened.items():  # DF-ZEN-154: rejected before the queue
                self.engine.count_rejected(code, n)
            if packets:
                # DF-RCV-175: the node's clock, once per step, for the engine's incarnation bound
                self.engine.set_now_us(time.time_ns() // 1000)
                res = self.engine.receive(packets, active=self._active_for_receive())
                if res.indices.size:
                    self._anchor_version += 1
                    self.store.apply(res.indices, res.values)
                    self.values_received_applied += int(res.indices.size)
                relay = res.relay
                if res.rejected:
                    for i, code in res.rejected:
                        if code in MISCONFIGURATION:
                            self._report_misconfigured(packets[i], code)
                        log.debug("packet %d of %d rejected: %s", i, len(packets), code.value)
            if sync:
                self.syncs += 1
                if self.config.average_over is AUTO:
                    self._resolve_average()
                if self.hold_residual:
                    self._fold_residual()  # DF-GEN-241
                own = self.engine.generate(self._active_for_generate(), fast=self.fast_selection)
                if own:
                    self._anchor_version += 1
                ci, cv = self.engine.last_correction
                if ci.size:  # DF-GEN-70: the own weights move by what was sent only
                    self.store.apply(ci, cv)
                if self.hold_residual:
                    self._set_residual_aside()  # DF-GEN-242
            resent: list[Entry] = []
            if sync and self.resend is not None:
                self.resend.add(own)
                resent = self.resend.take()
            out = self.engine.pack(own + resent, relay) if (own or relay or resent) else []
            if sync and not out:
                advert = self.engine.advertisement()  # DF-RLY-63 (relay policy NEEDED)
                out = [] if advert is None else [advert]
        if res is not None and res.accepted:
            self._note_accepted(res.accepted)
            if self.gaps is not None:
                self.gaps.observe_all(res.accepted)
        if sync and self.gaps is not None:
            out.extend(self._repair_round())
        for e in own:
            self.own_entries_sent += 1
            self.own_values_sent += int(e.indices.size)
        for e in relay:
            self.relay_entries_sent += 1
            self.relay_values_sent += int(e.indices.size)
        for pkt in out:
            self.transport.publish(pkt)
            self.bytes_sent += len(pkt)
            self.packets_sent += 1
        return len(out)

    def _rendezvous(self, timeout: float = 120.0) -> None:
        """Before the first generation of a run of ``world_size`` nodes: wait (receiving) until
        ``world_size - 1`` peers serve their node information, which a node does once it has
        started (after its bootstrap). No anchor moves before every node of the run has started,
        so a node that bootstraps installs the initial weights, with no entry in flight that it
        could apply twice or miss (spec section 9.5). ``timeout`` seconds at most, then a warning."""
        deadline = time.monotonic() + timeout
        need = self.world_size - 1 if self.world_size is not None else 0
        while True:
            live = self.transport.peers()  # a peer of another model has started too
            if self._effective is not None:
                live = live & self._effective
            started = len(set(self.transport.info(None, timeout=1.0)) & live)
            if started >= need:
                return
            if time.monotonic() >= deadline:
                log.warning(
                    "first sync: %d of the run's %d other node(s) started within %.0fs; going on",
                    started,
                    need,
                    timeout,
                )
                return
            self.transport.wait_for_packets(0.1)
            self.poll()

    def cluster_size(self) -> int:
        """The number of nodes this node averages over when ``average_over`` is `AUTO`: itself and
        its live peers (members only, when there is a membership), at least ``world_size``."""
        return max(self.world_size or 1, 1 + len(self._cluster_peers()))

    def _cluster_peers(self) -> frozenset[int]:
        """The live peers this node syncs with: members (when there is a membership), and not
        reported as configured differently (`misconfigured_peers`)."""
        live = self.transport.peers()
        if self._effective is not None:
            live = live & self._effective
        if self._misconfigured:
            live = live - self._misconfigured.keys()
        return live

    def _resolve_average(self) -> None:
        """DF-GEN-70 with `AUTO`: the engine's ``average_over`` for this generation
        (`delta_fabric.config.outer_average` of `cluster_size`)."""
        cfg = self.config.resolve_average(self.cluster_size())
        if cfg.average_over != self.engine.config.average_over:
            log.info("averaging over %d node(s)", cfg.average_over)
            self.engine.config = cfg

    def _report_misconfigured(self, buf: bytes, code: ErrorCode) -> None:
        """A peer whose packets are rejected for a configuration mismatch: one WARNING per peer
        (and per code), naming it and what differs; listed in ``stats()["misconfigured_peers"]``."""
        head = peek_header(buf)
        if head is None or head.sender == 0 or head.sender == self.node_id:
            return
        if self._misconfigured.get(head.sender) == code or len(self._misconfigured) >= 1024:
            return
        self._misconfigured[head.sender] = code
        peer = node_hex(head.sender)
        if code is ErrorCode.FINGERPRINT_MISMATCH and head.fingerprint is not None:
            what = (
                f"has another model: fingerprint {head.fingerprint.hex()[:16]}... against this "
                f"node's {self.manifest.fingerprint.hex()[:16]}... (N={self.manifest.num_params}; "
                "check the model, include_buffers and the framework mapping)"
            )
        elif code is ErrorCode.UNSUPPORTED_VERSION:
            what = (
                f"speaks protocol {head.version_major}.{head.version_minor}, this node "
                f"{VERSION_MAJOR}.x"
            )
        elif code is ErrorCode.UNSUPPORTED_ENCODING:
            what = (
                f"sends value encoding {head.encoding} / index encoding {head.index_encoding}, "
                "which this node does not receive (a cluster with 1.0 nodes uses SyncConfig.v1_0())"
            )
        else:
            what = "sends entries whose signatures this node's keys do not verify"
        warn_loudly(log, "node %s %s: its packets are rejected (%s)", peer, what, code.value)

    def misconfigured_peers(self) -> dict[int, ErrorCode]:
        """The peers whose packets were rejected for a configuration mismatch, and the code."""
        return dict(self._misconfigured)

    def _active_for_receive(self) -> ActiveView:
        """The active weights for the DF-RCV-50 checks of a receive: with the native kernels, the
        store's OPTIONAL ``host_parts`` when it has them (views of the live f32 host tensors, read
        in place), else ``gather`` (the values at the checked indices)."""
        if self.engine.native is not None:
            host = getattr(self.store, "host_parts", None)
            if callable(host):
                got: list[NDArray[np.float32]] | None = host()
                if got is not None:
                    return got
        return self.store.gather

    def _active_for_generate(self) -> NDArray[np.float32] | list[NDArray[np.float32]]:
        """The active weights for a generation: the store's per-tensor parts when it has the
        OPTIONAL ``gather_parts`` (no copy of the whole model), else ``gather()``."""
        parts = getattr(self.store, "gather_parts", None)
        if callable(parts):
            got: list[NDArray[np.float32]] = parts()
            return got
        return self.store.gather()

    @property
    def residual(self) -> NDArray[np.float32]:
        """A copy of the unsent residual held aside (DF-GEN-240; zeros unless ``hold_residual``)."""
        if self._residual is None:
            return np.zeros(self.manifest.num_params, dtype=np.float32)
        out: NDArray[np.float32] = self._residual.copy()
        return out

    def _held(self) -> NDArray[np.bool_]:
        """DF-GEN-244: the elements whose residual is held aside: every element except those of the
        tensors the store names as running statistics (`delta_fabric.store.running_stats`)."""
        if self._held_mask is None:
            m = self.manifest
            mask = np.ones(m.num_params, dtype=np.bool_)
            stats = set(running_stats(self.store))
            for k, name in enumerate(m.names):
                if name in stats:
                    mask[m.offsets[k] : m.offsets[k + 1]] = False
            self._held_mask = mask
        return self._held_mask

    def _fold_residual(self) -> None:
        """DF-GEN-241: ``active[i] = fl32(active[i] + r[i])`` at every ``i`` with ``r[i] != 0``, then
        ``r = 0``, immediately before a generation."""
        r = self._residual
        if r is None:
            return
        nz = np.flatnonzero(r != 0).astype(np.uint32)  # NaN != 0: folded back too
        if nz.size:
            self.store.apply(nz, r[nz])
        r.fill(0.0)

    def _set_residual_aside(self) -> None:
        """DF-GEN-242: after a generation, at every held element ``r = fl32(active - anchor)`` and
        ``active = anchor``; the other elements (running statistics) keep their residual in ``active``."""
        anchor = self.engine.anchor
        held = self._held()
        if self._residual is None:
            self._residual = np.zeros(anchor.size, dtype=np.float32)
        active = self.store.gather()
        with np.errstate(invalid="ignore"):  # inf - inf = NaN, kept as DF-GEN-9 keeps such deltas
            np.subtract(active, anchor, out=self._residual, where=held)
        np.copyto(active, anchor, where=held)  # a gather-load round trip is exact elsewhere
        self.store.load(active)

    def _repair_requests(self, bufs: Sequence[bytes]) -> None:
        """DF-RCV-164: queue the requests addressed to this node; a request that does not decode, or
        any request when repair is off, is counted and changes nothing."""
        for buf in bufs:
            if self.resend is None:
                self.repair_refused += 1
                continue
            try:
                req = decode_request(buf)
            except RepairError as exc:
                self.repair_refused += 1
                log.debug("repair request refused: %s", exc)
                continue
            if req.origin == self.node_id:
                self.resend.request(req)

    def _repair_round(self) -> list[bytes]:
        """DF-RCV-162: the requests of this sync round, encoded."""
        assert self.gaps is not None
        return [
            encode_request(
                RepairRequest(
                    self.node_id, self.engine.incarnation, self.manifest.fingerprint, o, inc, seqs
                )
            )
            # DF-RCV-230: no request to an origin the transport does not see live (lost for sure)
            for o, inc, seqs in self.gaps.round(self.transport.peers())
        ]

    def repair_counters(self) -> RepairCounters:
        """Both sides' repair counters together (all 0 when repair is off)."""
        c = RepairCounters(requests_refused=self.repair_refused)
        for part in (self.gaps, self.resend):
            if part is not None:
                for k, v in part.counters.__dict__.items():
                    setattr(c, k, getattr(c, k) + v)
        return c

    def _note_accepted(self, accepted: Sequence[AcceptedEntry]) -> None:
        """Hop histogram, origin progress and ``on_accepted`` from the engine's accepted headers
        (no decode)."""
        hist = self.accepted_by_hops
        progress = self._origin_progress
        by_origin = self._accepted_by_origin
        for e in accepted:
            hist[e.hops] = hist.get(e.hops, 0) + 1
            by_origin[e.origin] = by_origin.get(e.origin, 0) + 1
            cur = progress.get(e.origin)
            if cur is None or (e.incarnation, e.seq) > cur:
                progress[e.origin] = (e.incarnation, e.seq)
        if self.on_accepted is not None:
            self.on_accepted(accepted)

    def origin_progress(self) -> dict[int, tuple[int, int]]:
        """Latest ``(incarnation, seq)`` accepted from each origin."""
        return dict(self._origin_progress)

    def accepted_by_origin(self) -> dict[int, int]:
        """Entries accepted from each origin so far (the engine accepts each entry once, so a
        cluster where every packet reached this node shows every origin's last seq here)."""
        return dict(self._accepted_by_origin)

    def pace(
        self,
        max_lead: int,
        *,
        peer_deadline: float = DEFAULT_PEER_DEADLINE,
        timeout: float = 60.0,
    ) -> float:
        """Bounded staleness (DF-ZEN-156): receive and relay while this node is more than
        ``max_lead`` sync rounds ahead of a peer that holds it back. Only live peers (the transport's
        liveliness) that are members hold it back, so a fake origin id never does; a peer whose
        progress has not moved for ``peer_deadline`` seconds no longer does (once, not per call);
        a peer's lead is counted from the round this node was at when it first heard that peer's
        incarnation, so a restarted peer does not hold the others back while it catches up.
        ``timeout`` bounds one call. Returns the seconds spent."""
        self._check_open()
        if max_lead < 0 or not 0.0 <= peer_deadline < float("inf") or not timeout >= 0.0:
            raise ValueError("max_lead, peer_deadline and timeout must be >= 0")
        t0 = time.monotonic()
        while True:
            if not self.pace_blockers(max_lead, peer_deadline=peer_deadline):
                break
            if time.monotonic() - t0 >= timeout:
                break
            self.transport.wait_for_packets(0.02)
            self.poll()
        return time.monotonic() - t0

    def pace_blockers(
        self, max_lead: int, *, peer_deadline: float = DEFAULT_PEER_DEADLINE
    ) -> frozenset[int]:
        """The live member peers that hold pacing back now (see `pace`, which waits while this set is
        not empty): for logging who a node waits for, and for tests."""
        self._check_open()
        now = time.monotonic()
        mine = self.engine.next_seq - 1
        live = self.transport.peers()
        members = self._effective
        progress = self._origin_progress
        blockers: set[int] = set()
        for p in live:
            if (members is not None and p not in members) or p in self._misconfigured:
                continue  # a peer of another model or version is not in this node's cluster
            inc, seq = progress.get(p, (0, 0))
            base = self._pace_base.get(p)
            if base is None or base[0] != inc:  # a new incarnation (or first sight): lead from here
                base = (inc, max(0, mine - seq) if inc else 0)
                self._pace_base[p] = base
            moved = self._moved_at.get(p)
            if moved is None or moved[0] != (inc, seq):
                self._moved_at[p] = ((inc, seq), now)
                moved_t = now
            else:
                moved_t = moved[1]
            if now - moved_t > peer_deadline:
                continue  # no progress for peer_deadline: it no longer holds this node back
            if mine - seq - base[1] > max_lead:
                blockers.add(p)
        for p in [p for p in self._moved_at if p not in live]:
            del self._moved_at[p]
        # the base of a peer that is gone for now is kept while its origin is tracked: a peer back
        # from a partition (the same incarnation) is behind by its lag since its incarnation was
        # first heard, not by its stale progress at its return (a base taken then let this node
        # run hundreds of rounds ahead after a heal); a new incarnation replaces the base above
        for p in [p for p in self._pace_base if p not in live and p not in progress]:
            del self._pace_base[p]
        return frozenset(blockers)

    def stats(self) -> dict[str, Any]:
        """Counters: steps, syncs, bytes and packets sent, own/relayed entries, receive counters."""
        transport_stats = dataclasses.asdict(self.transport.stats)
        return {
            "node_id": f"{self.node_id:016x}",
            "framework": self.framework,
            "incarnation": self.engine.incarnation,
            "num_params": self.num_params,
            "fingerprint": self.fingerprint.hex(),
            "bootstrapped": self.bootstrapped,
            "steps": self.steps,
            "syncs": self.syncs,
            "bytes_sent": self.bytes_sent,
            "packets_sent": self.packets_sent,
            "own_entries_sent": self.own_entries_sent,
            "own_values_sent": self.own_values_sent,
            "relay_entries_sent": self.relay_entries_sent,
            "relay_values_sent": self.relay_values_sent,
            "values_received_applied": self.values_received_applied,
            "accepted_by_hops": {str(h): n for h, n in sorted(self.accepted_by_hops.items())},
            "snapshots_served": self.snapshots_served,
            "receive": self.engine.counters.to_json(),
            "repair": self.repair_counters().to_json(),
            "snapshot_trust": dict(self.snapshot_trust),
            "influence": None if self.engine.influence is None else self.engine.influence.to_json(),
            "average_over": self.engine.config.average_count,
            "misconfigured_peers": {
                node_hex(p): code.value for p, code in sorted(self._misconfigured.items())
            },
            "transport": transport_stats,
        }

    def _info(self) -> dict[str, Any]:
        """The info queryable's members (DF-ZEN-6) and this node's counters as ``stats``; called on
        a Zenoh thread, captures no snapshot."""
        with self._lock:
            stats = self.stats()
        info = {
            "incarnation": f"{self.engine.incarnation:016x}",
            "fingerprint": self.manifest.fingerprint.hex(),
            "framework": self.framework,
            "N": self.manifest.num_params,
            "supports": supports(),  # DF-ZEN-231
            "seq": self.engine.next_seq - 1,  # the highest own seq sent (spec/proposals/finish.md)
        }
        if self._finish is not None:  # spec/proposals/finish.md
            info["finish"] = dict(self._finish)
        for key in ("node_id", "framework", "incarnation", "num_params", "fingerprint"):
            stats.pop(key, None)  # already members of the info object
        return {**info, "stats": stats}

    # lifecycle ------------------------------------------------------------------------------------
    def close(self, *, close_transport: bool | None = None) -> None:
        """Stop the node (later `step` calls raise `FabricClosedError`); idempotent. Closes the
        transport too when ``close_transport`` (default: the ``own_transport`` argument)."""
        if close_transport is None:
            close_transport = self.own_transport
        if not self._closed:
            self._closed = True
            if self._metrics is not None:
                self._metrics.write(self.stats(), event="close")
            log.info(
                "node %s closed after %d steps, %d syncs",
                node_hex(self.node_id),
                self.steps,
                self.syncs,
            )
        if close_transport:
            self.transport.close()

    def __enter__(self) -> Fabric:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
