"""Settings from environment variables, the way ``torchrun`` users expect (``delta-fabric run`` sets them).

Every variable is optional; an empty value counts as unset. A bad value raises `EnvError`, which names
the variable and the value. The readers are pure functions of an environment mapping (``os.environ`` by
default), used by ``SyncConfig.from_env``, ``ZenohOptions.from_env`` and ``Fabric.from_env``.

========================================  =========================================================
variable                                  meaning
========================================  =========================================================
``DELTA_FABRIC_NODE_ID``                  this node's id: decimal or ``0x`` hex, in [1, 2**64)
                                          (default: 64 random bits)
``DELTA_FABRIC_NAMESPACE``                the cluster namespace (default ``deltafabric/default``)
``DELTA_FABRIC_LISTEN``                   comma list of Zenoh endpoints to listen on
``DELTA_FABRIC_CONNECT``                  comma list of Zenoh endpoints to connect to
``DELTA_FABRIC_MODE``                     ``peer`` (default) or ``client``
``DELTA_FABRIC_ZENOH_CONFIG``             a Zenoh JSON5 config file, used as is (``LISTEN`` /
                                          ``CONNECT``, when set, replace its endpoints)
``DELTA_FABRIC_<FIELD>``                  a `SyncConfig` field: ``RATIO``, ``ALPHA``,
                                          ``SYNC_INTERVAL``, ``RELAY_THRESHOLD``, ``HOP_LIMIT``,
                                          ``MAX_PACKET_SIZE``, ``REPLAY_WINDOW``,
                                          ``MAX_INCARNATIONS``, ``ENCODING``, ``INCLUDE_BUFFERS``,
                                          ``MAX_ORIGINS``, ``RELAY_POLICY`` (``ALL`` or ``NEEDED``),
                                          ``AVERAGE_OVER`` (an integer or ``auto``),
                                          ``MAX_SEQ_JUMP`` (DF-PAR-50),
                                          ``MAX_INCARNATION_AHEAD`` (microseconds, DF-PAR-175),
                                          ``INCARNATION_GRACE`` (microseconds, DF-PAR-178)
``DELTA_FABRIC_BOOTSTRAP``                ``auto``, ``1`` (required) or ``0``; default: ``1`` for a
                                          ``RANK`` above 0, else ``0``
``DELTA_FABRIC_RANK``                     this node's global rank in [0, ``NODES``) (also ``RANK``)
``DELTA_FABRIC_LOCAL_RANK``               this process's index among the launcher's local nodes
``DELTA_FABRIC_LOCAL_NODES``              how many nodes the launcher started on this machine
``DELTA_FABRIC_NODES``                    how many nodes the run expects in all (world size)
``DELTA_FABRIC_METRICS``                  a file the node appends its counters to, as JSON lines
``DELTA_FABRIC_METRICS_INTERVAL``         seconds between two metrics lines (default 10)
``DELTA_FABRIC_REPAIR``                   ``1`` (default): anti-entropy by gap repair (spec 7.9); ``0``
                                          off
``DELTA_FABRIC_MEMBERS``                  comma list of the cluster's node ids (decimal or ``0x``
                                          hex): only they are origins (DF-RCV-51); samples on
                                          other nodes' keys are refused (DF-ZEN-151)
``DELTA_FABRIC_LIVE_MEMBERS``             ``1``: members are the nodes with a live liveliness token
                                          (and in ``MEMBERS`` when set; DF-ZEN-150)
``DELTA_FABRIC_MEMBER_GRACE``             seconds a member that left stays one (default 10)
``DELTA_FABRIC_RATE_LIMIT``               packets per second each sender may queue (0: no limit,
                                          default; DF-ZEN-153)
``DELTA_FABRIC_RATE_BURST``               packets a sender may queue at once (default: the rate)
``DELTA_FABRIC_KEYS``                     the keys file of a signed cluster (spec section 13.1):
                                          ``{"version": 1, "keys": {"<hex16>": "<64 hex>"}}``;
                                          needs ``SECRET_KEY``
``DELTA_FABRIC_SECRET_KEY``               a file holding this node's Ed25519 secret seed (64 hex
                                          digits); needs ``KEYS``
``DELTA_FABRIC_RUN_KEY``                  the secret of a signed ``delta-fabric run`` (64 hex
                                          digits, in the join line): the launcher derives every
                                          rank's node id and key from it (`delta_fabric.launch`)
``DELTA_FABRIC_NATIVE``                   ``auto`` (default), ``on`` or ``off``: the OPTIONAL native
                                          kernels (`delta_fabric.native`); same results either way
========================================  =========================================================
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from delta_fabric.errors import ConfigurationError

if TYPE_CHECKING:  # the `signing` extra (cryptography)
    from delta_fabric.signing import Signing

__all__ = [
    "BOOTSTRAP",
    "CONNECT",
    "KEYS",
    "LISTEN",
    "LIVE_MEMBERS",
    "LOCAL_NODES",
    "LOCAL_RANK",
    "MEMBERS",
    "MEMBER_GRACE",
    "METRICS",
    "METRICS_INTERVAL",
    "MODE",
    "NAMESPACE",
    "NODES",
    "NODE_ID",
    "PREFIX",
    "RANK",
    "RATE_BURST",
    "RATE_LIMIT",
    "REPAIR",
    "SECRET_KEY",
    "ZENOH_CONFIG",
    "EnvError",
    "bootstrap",
    "endpoints",
    "local_nodes",
    "local_rank",
    "membership",
    "metrics",
    "node_id",
    "nodes",
    "random_node_id",
    "rate_limit",
    "repair",
    "signing",
    "sync_config_kwargs",
]

PREFIX = "DELTA_FABRIC_"
NODE_ID = PREFIX + "NODE_ID"
NAMESPACE = PREFIX + "NAMESPACE"
LISTEN = PREFIX + "LISTEN"
CONNECT = PREFIX + "CONNECT"
MODE = PREFIX + "MODE"
ZENOH_CONFIG = PREFIX + "ZENOH_CONFIG"
BOOTSTRAP = PREFIX + "BOOTSTRAP"
LOCAL_RANK = PREFIX + "LOCAL_RANK"
RANK = PREFIX + "RANK"
LOCAL_NODES = PREFIX + "LOCAL_NODES"
NODES = PREFIX + "NODES"
METRICS = PREFIX + "METRICS"
METRICS_INTERVAL = PREFIX + "METRICS_INTERVAL"
REPAIR = PREFIX + "REPAIR"
MEMBERS = PREFIX + "MEMBERS"
LIVE_MEMBERS = PREFIX + "LIVE_MEMBERS"
MEMBER_GRACE = PREFIX + "MEMBER_GRACE"
RATE_LIMIT = PREFIX + "RATE_LIMIT"
RATE_BURST = PREFIX + "RATE_BURST"
KEYS = PREFIX + "KEYS"
SECRET_KEY = PREFIX + "SECRET_KEY"
RUN_KEY = PREFIX + "RUN_KEY"

_U64_MAX = (1 << 64) - 1
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

Env = Mapping[str, str]


class EnvError(ConfigurationError, ValueError):
    """An environment variable holds a value DeltaFabric cannot use. ``variable`` and ``value`` say
    which; the message says what is expected."""

    def __init__(self, variable: str, value: str, expected: str) -> None:
        self.variable = variable
        self.value = value
        super().__init__(f"{variable}={value!r}: {expected}")


def _get(env: Env | None, name: str) -> str | None:
    value = (os.environ if env is None else env).get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _int(env: Env | None, name: str, lo: int, hi: int | None = None) -> int | None:
    raw = _get(env, name)
    if raw is None:
        return None
    bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
    try:
        value = int(raw, 0)
    except ValueError:
        raise EnvError(name, raw, f"must be an integer {bound}") from None
    if value < lo or (hi is not None and value > hi):
        raise EnvError(name, raw, f"must be an integer {bound}")
    return value


def _float(env: Env | None, name: str) -> float | None:
    raw = _get(env, name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise EnvError(name, raw, "must be a number") from None
    if not math.isfinite(value):
        raise EnvError(name, raw, "must be a finite number")
    return value


def _bool(env: Env | None, name: str) -> bool | None:
    raw = _get(env, name)
    if raw is None:
        return None
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise EnvError(name, raw, "must be 1/0, true/false, yes/no or on/off")


def random_node_id() -> int:
    """64 random bits from the OS's secure generator, never 0 (DF-ZEN-7's recommendation)."""
    while True:
        n = secrets.randbits(64)
        if n:
            return n


def node_id(env: Env | None = None) -> int:
    """``DELTA_FABRIC_NODE_ID`` (decimal or ``0x`` hex), else a fresh random id."""
    value = _int(env, NODE_ID, 1, _U64_MAX)
    return random_node_id() if value is None else value


def namespace(env: Env | None = None) -> str | None:
    return _get(env, NAMESPACE)


def endpoints(env: Env | None, name: str) -> list[str]:
    """A comma list of Zenoh endpoints (``proto/address``); empty when unset."""
    raw = _get(env, name)
    if raw is None:
        return []
    out = [e.strip() for e in raw.split(",") if e.strip()]
    for e in out:
        proto, sep, addr = e.partition("/")
        if not sep or not proto or not addr or any(c.isspace() for c in e):
            raise EnvError(name, raw, f"{e!r} is not a Zenoh endpoint such as tcp/127.0.0.1:7447")
    return out


def mode(env: Env | None = None) -> str | None:
    raw = _get(env, MODE)
    if raw is not None and raw not in ("peer", "client"):
        raise EnvError(MODE, raw, "must be 'peer' or 'client'")
    return raw


def zenoh_config(env: Env | None = None) -> Path | None:
    raw = _get(env, ZENOH_CONFIG)
    if raw is None:
        return None
    path = Path(raw)
    if not path.is_file():
        raise EnvError(ZENOH_CONFIG, raw, "no such file (a Zenoh JSON5 configuration file)")
    return path


def bootstrap(env: Env | None = None) -> bool | str:
    """``DELTA_FABRIC_BOOTSTRAP``: ``"auto"``, True (required) or False. Unset: True for a node
    whose ``DELTA_FABRIC_RANK`` is above 0, so that every node of a launched run starts from rank
    0's weights (see `delta_fabric.fabric.Fabric.step`'s first sync), else False."""
    raw = _get(env, BOOTSTRAP)
    if raw is None:
        r = rank(env)
        return r is not None and r > 0
    if raw.lower() == "auto":
        return "auto"
    value = _bool(env, BOOTSTRAP)
    if value is None:  # pragma: no cover (raw is set)
        return False
    return value


def repair(env: Env | None = None) -> bool:
    """``DELTA_FABRIC_REPAIR``: anti-entropy by gap repair (spec section 7.9), on by default."""
    value = _bool(env, REPAIR)
    return True if value is None else value


def local_rank(env: Env | None = None) -> int | None:
    return _int(env, LOCAL_RANK, 0)


def rank(env: Env | None = None) -> int | None:
    """``DELTA_FABRIC_RANK``: this node's global rank (>= 0), or None when unset."""
    return _int(env, RANK, 0)


def local_nodes(env: Env | None = None) -> int | None:
    return _int(env, LOCAL_NODES, 1)


def nodes(env: Env | None = None) -> int | None:
    """``DELTA_FABRIC_NODES``: how many nodes the run expects in all (None when unset)."""
    return _int(env, NODES, 1)


def metrics(env: Env | None = None) -> tuple[Path | None, float]:
    """``(DELTA_FABRIC_METRICS path or None, DELTA_FABRIC_METRICS_INTERVAL seconds, default 10)``."""
    raw = _get(env, METRICS)
    interval = _float(env, METRICS_INTERVAL)
    if interval is not None and interval <= 0:
        raise EnvError(METRICS_INTERVAL, _get(env, METRICS_INTERVAL) or "", "must be > 0 seconds")
    return (None if raw is None else Path(raw)), (10.0 if interval is None else interval)


def membership(env: Env | None = None) -> tuple[frozenset[int] | None, bool, float]:
    """``(members, live_members, member_grace)`` from ``DELTA_FABRIC_MEMBERS`` (comma list of node
    ids, decimal or ``0x`` hex; unset: None), ``_LIVE_MEMBERS`` (default off) and ``_MEMBER_GRACE``
    (seconds >= 0, default 10)."""
    raw = _get(env, MEMBERS)
    members: frozenset[int] | None = None
    if raw is not None:
        ids = []
        for part in raw.split(","):
            part = part.strip()
            try:
                n = int(part, 0)
            except ValueError:
                n = 0
            if not 1 <= n <= _U64_MAX:
                raise EnvError(
                    MEMBERS, raw, f"{part!r} is not a node id in [1, 2**64) (decimal or 0x hex)"
                )
            ids.append(n)
        members = frozenset(ids)
    live = _bool(env, LIVE_MEMBERS)
    grace = _float(env, MEMBER_GRACE)
    if grace is not None and grace < 0:
        raise EnvError(MEMBER_GRACE, _get(env, MEMBER_GRACE) or "", "must be >= 0 seconds")
    return members, bool(live), 10.0 if grace is None else grace


def rate_limit(env: Env | None = None) -> tuple[float | None, float | None]:
    """``(rate, burst)`` from ``DELTA_FABRIC_RATE_LIMIT`` / ``_RATE_BURST`` (numbers >= 0; unset:
    None)."""
    out: list[float | None] = []
    for name in (RATE_LIMIT, RATE_BURST):
        value = _float(env, name)
        if value is not None and value < 0:
            raise EnvError(name, _get(env, name) or "", "must be a number >= 0")
        out.append(value)
    return out[0], out[1]


def signing(env: Env | None, node_id: int) -> Signing | None:
    """The signed-cluster keys (spec section 13.1) from ``DELTA_FABRIC_KEYS`` (the keys file) and
    ``DELTA_FABRIC_SECRET_KEY`` (the file of this node's 32-byte secret seed, hex); ``None`` when
    neither is set. `EnvError` names the variable for: one without the other, a missing or
    unreadable file, a file that is not a keys file, a bad key, or a pinned own key that is not
    the secret's. Needs the ``signing`` extra (``cryptography``)."""
    keys_path, secret_path = _get(env, KEYS), _get(env, SECRET_KEY)
    if keys_path is None and secret_path is None:
        return None
    if secret_path is None:
        raise EnvError(
            KEYS, keys_path or "", f"needs {SECRET_KEY}: a node of a signed cluster signs"
        )
    if keys_path is None:
        raise EnvError(SECRET_KEY, secret_path, f"needs {KEYS}")
    try:
        from delta_fabric.signing import Signing, load_keys, load_secret
    except ImportError:  # pragma: no cover (the extra is installed in CI)
        raise EnvError(KEYS, keys_path, "needs the signing extra (cryptography)") from None
    try:
        keys = load_keys(keys_path)
    except ValueError as exc:
        raise EnvError(KEYS, keys_path, str(exc)) from None
    try:
        secret = load_secret(secret_path)
        return Signing.from_json(keys, secret, node_id=node_id)
    except ValueError as exc:
        var = SECRET_KEY if "secret" in str(exc) else KEYS
        raise EnvError(var, secret_path if var == SECRET_KEY else keys_path, str(exc)) from None


def sync_config_kwargs(env: Env | None = None) -> dict[str, Any]:
    """The `SyncConfig` fields set through ``DELTA_FABRIC_<FIELD>``, parsed to their types (the
    ranges are checked by `SyncConfig`; `SyncConfig.from_env` turns its errors into `EnvError`)."""
    from delta_fabric.compact import IndexEncoding
    from delta_fabric.config import RelayPolicy, SyncConfig
    from delta_fabric.wire import ValueEncoding

    out: dict[str, Any] = {}
    for f in dataclasses.fields(SyncConfig):
        name = PREFIX + f.name.upper()
        raw = _get(env, name)
        if raw is None:
            continue
        default = f.default
        value: Any
        if f.name == "average_over":  # an integer, or "auto" (the recommended profile's AUTO)
            if raw.strip().lower() == "auto":
                value = None
            else:
                try:
                    value = int(raw, 0)
                except ValueError:
                    raise EnvError(name, raw, 'must be an integer or "auto"') from None
        elif isinstance(default, bool):
            value = _bool(env, name)
        elif isinstance(default, ValueEncoding):
            try:
                value = ValueEncoding[raw.upper()]
            except KeyError:
                names = ", ".join(e.name for e in ValueEncoding)
                raise EnvError(name, raw, f"must be one of {names}") from None
        elif isinstance(default, IndexEncoding):
            try:
                value = IndexEncoding.parse(raw.strip())
            except ValueError as exc:
                raise EnvError(name, raw, str(exc)) from None
        elif isinstance(default, RelayPolicy):
            try:
                value = RelayPolicy.parse(raw.strip())
            except ValueError as exc:
                raise EnvError(name, raw, str(exc)) from None
        elif isinstance(default, int):
            try:
                value = int(raw, 0)
            except ValueError:
                raise EnvError(name, raw, "must be an integer") from None
        else:
            value = _float(env, name)
        out[f.name] = value
    return out
