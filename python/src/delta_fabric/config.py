"""Protocol parameters of one node (spec section 3, DF-PAR), validated at construction."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from delta_fabric.compact import IndexEncoding
from delta_fabric.encodings import ValueEncoding, codec
from delta_fabric.replay import DEFAULT_MAX_ORIGINS
from delta_fabric.wire import PACKET_OVERHEAD_BOUND, encoded_size_bound

__all__ = [
    "DEFAULT_MAX_ORIGINS",
    "MAX_MAX_ORIGINS",
    "MAX_SEQ_JUMP",
    "MAX_SYNC_INTERVAL",
    "MIN_MAX_PACKET_SIZE",
    "RelayPolicy",
    "SyncConfig",
]


class RelayPolicy(Enum):
    """Which accepted entries a node relays (DF-PAR-60, spec section 8.6; added in 1.1).

    ``ALL``: every relay candidate (the 1.0 behaviour, the default). ``NEEDED``: only candidates that
    some known peer may still lack (DF-RLY-60); the node advertises the senders it hears (DF-RLY-61).
    """

    ALL = "ALL"
    NEEDED = "NEEDED"

    @classmethod
    def parse(cls, value: object) -> RelayPolicy:
        """The policy given as the enum or its name (case-insensitive); ``ValueError`` otherwise."""
        if isinstance(value, RelayPolicy):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        raise ValueError(f"relay_policy must be one of ALL, NEEDED, got {value!r}")


#: Smallest accepted ``max_packet_size``: a packet with one entry of one value (by the wire's size bound).
MIN_MAX_PACKET_SIZE = PACKET_OVERHEAD_BOUND + encoded_size_bound(1)
#: ``Entry.hops`` is a ubyte on the wire.
_MAX_HOPS = 255
#: Largest replay window accepted (bits per (origin, incarnation)); keeps the receiver state bounded.
_MAX_REPLAY_WINDOW = 1 << 20
#: Largest ``max_origins`` (DF-PAR-30, DF-SEC-30); the default is the receiver's 4096.
MAX_MAX_ORIGINS = 1 << 20
#: Largest accepted ``sync_interval`` (DF-PAR-3, erratum 1.1): 2^32 - 1, a u32 step count (the Rust
#: ``SyncConfig.sync_interval``), exact in every JSON parser.
MAX_SYNC_INTERVAL = (1 << 32) - 1
#: Largest accepted ``max_seq_jump`` (DF-PAR-50): 2^32, exact in every JSON parser.
MAX_SEQ_JUMP = 1 << 32
#: Largest accepted ``max_incarnation_ahead`` (DF-PAR-175): 2^40 microseconds (about 12.7 days).
MAX_INCARNATION_AHEAD = 1 << 40
#: Largest accepted ``incarnation_grace`` (DF-PAR-178): 2^40 microseconds.
MAX_INCARNATION_GRACE = 1 << 40


def _check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        bound = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {value}")


def _check_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    try:
        f = float(value)
    except OverflowError:  # an int beyond binary64 (a JSON integer of 309 digits or more)
        raise ValueError(f"{name} must be finite, got an int beyond binary64") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {f}")
    return f


#: ``max_seq_jump`` of the recommended profile (DF-PAR-50): 2**20 entries. An origin that generates
#: 10 entries a second needs more than a day of partition to exceed it.
RECOMMENDED_MAX_SEQ_JUMP = 1 << 20
#: ``max_incarnation_ahead`` of the recommended profile (DF-PAR-175): one minute, in microseconds.
RECOMMENDED_MAX_INCARNATION_AHEAD = 60_000_000
#: ``average_over`` of the recommended profile: the node derives it from its cluster (`outer_average`).
AUTO = None


def outer_average(nodes: int, sync_interval: int, ratio: float) -> int:
    """The ``average_over`` a node of ``nodes`` averaging nodes uses when it is ``AUTO``
    (DF-GEN-70, DF-GEN-300): ``nodes`` up to `OUTER_INTERVAL` local steps between syncs (an outer
    learning rate of 1); beyond, ``ceil(nodes * sync_interval / OUTER_INTERVAL)`` when
    ``ratio * sync_interval`` exceeds `OUTER_SPAN`, else the milder
    ``ceil(nodes * (OUTER_INTERVAL + sync_interval) / (2 * OUTER_INTERVAL))``; at most 65536, and 1
    for a node alone. The measurements behind the rule are in docs/convergence-sweep.md."""
    if nodes <= 1:
        return 1
    if sync_interval <= OUTER_INTERVAL:
        return min(nodes, MAX_AVERAGE_OVER)
    if ratio * sync_interval > OUTER_SPAN:
        m = -(-nodes * sync_interval // OUTER_INTERVAL)
    else:
        m = -(-nodes * (OUTER_INTERVAL + sync_interval) // (2 * OUTER_INTERVAL))
    return min(m, MAX_AVERAGE_OVER)


#: Local steps between syncs up to which `outer_average` gives the cluster size (outer rate 1).
OUTER_INTERVAL = 40
#: ``ratio * sync_interval`` above which `outer_average` damps by ``sync_interval / OUTER_INTERVAL``.
OUTER_SPAN = 1.0
#: DF-PAR-70's upper bound.
MAX_AVERAGE_OVER = 1 << 16


@dataclass(frozen=True)
class SyncConfig:
    """Parameters of DF-PAR (spec section 3). ``SyncConfig()`` is the recommended profile; the spec's
    table of defaults (the 1.0 behaviour) is `SyncConfig.v1_0`.

    The recommended profile is what the project's measurements recommend for training
    (docs/convergence-sweep.md): 10 % of the weights every 20 local steps, as Q8 values with PACKED
    indices (section 6.8), relay policy NEEDED (section 8.6) and progress averaged over the cluster
    (``average_over`` `AUTO`: the node uses its number of nodes, `outer_average`), so that the local
    learning rate of a single node is the right one. It also bounds forged claims: ``max_seq_jump``
    2**20 (DF-RCV-52) and ``max_incarnation_ahead`` one minute (DF-RCV-175); ``incarnation_grace``
    stays off, because a member restarted within the grace would be refused until it ends. Every node of a cluster must receive Q8 and
    PACKED (DF-PAR-110, DF-VER-3): a cluster with 1.0 nodes uses ``SyncConfig.v1_0()``.

    ``alpha`` in (0, 1]; ``ratio`` in (0, 1]; ``relay_threshold`` >= 0; ``sync_interval`` in
    [1, 2**32 - 1] (erratum 1.1 of DF-PAR-3); ``hop_limit`` in [0, 255];
    ``max_packet_size`` >= `MIN_MAX_PACKET_SIZE`; ``replay_window`` in [1, 2**20]; ``max_incarnations`` >= 1;
    ``max_origins`` in [1, 2**20] (DF-PAR-30: the origin bound of DF-SEC-2).
    ``max_seq_jump`` in [0, 2**32] (0: no bound, DF-PAR-50, 1.1).
    ``max_incarnation_ahead`` in [0, 2**40] microseconds (0: no bound, DF-PAR-175, 1.1).
    ``incarnation_grace`` in [0, 2**40] microseconds (0: off, DF-PAR-178, 1.1).
    ``encoding`` is the send encoding (own and relayed entries; ``Q8`` added in 1.1) and
    ``index_encoding`` the send index encoding (``PACKED`` added in 1.1, DF-PAR-110); ``include_buffers`` selects floating
    buffers into the manifest (DF-MAN-4). ``average_over`` in [1, 2**16] (added in 1.1, DF-GEN-70):
    ``C > 1`` sends ``1/C`` of each selected delta and moves the node's own weights by the sent
    amount only, so that C nodes move by the mean of their progress (local SGD); 1 keeps 1.0's sums.
    """

    alpha: float = 1.0
    ratio: float = 0.10
    sync_interval: int = 20
    relay_threshold: float = 1e-6
    hop_limit: int = 16
    max_packet_size: int = 16_777_216
    replay_window: int = 1024
    max_incarnations: int = 4
    encoding: ValueEncoding = ValueEncoding.Q8
    include_buffers: bool = False
    max_origins: int = DEFAULT_MAX_ORIGINS
    relay_policy: RelayPolicy = RelayPolicy.NEEDED
    #: DF-PAR-70 (1.1): C in [1, 2**16], or `AUTO` (None): the node's cluster size (`outer_average`).
    average_over: int | None = AUTO
    #: DF-PAR-50 (1.1): largest accepted step of a tracked incarnation's highest seq (0: no bound).
    #: The recommended 2**20 is far above what an origin generates in a day-long partition and
    #: refuses a forged seq near 2**64 (`RECOMMENDED_MAX_SEQ_JUMP`).
    max_seq_jump: int = RECOMMENDED_MAX_SEQ_JUMP
    #: DF-PAR-110 (1.1): the send index encoding (PACKED: section 6.8, OPTIONAL, DF-VER-3).
    index_encoding: IndexEncoding = IndexEncoding.PACKED
    #: DF-PAR-175 (1.1): how far (microseconds) a new incarnation may lie ahead of the receiver's
    #: clock (0: no bound). The recommended one minute is the spec's figure for NTP-synchronized
    #: clocks (`RECOMMENDED_MAX_INCARNATION_AHEAD`).
    max_incarnation_ahead: int = RECOMMENDED_MAX_INCARNATION_AHEAD
    #: DF-PAR-178 (1.1): how long (microseconds) an incarnation that accepted an entry cannot be
    #: evicted by a new one (0: off).
    incarnation_grace: int = 0

    def __post_init__(self) -> None:
        alpha = _check_float("alpha", self.alpha)
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        ratio = _check_float("ratio", self.ratio)
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"ratio must be in (0, 1], got {ratio}")
        threshold = _check_float("relay_threshold", self.relay_threshold)
        if threshold < 0.0:
            raise ValueError(f"relay_threshold must be >= 0, got {threshold}")
        _check_int("sync_interval", self.sync_interval, 1, MAX_SYNC_INTERVAL)
        _check_int("hop_limit", self.hop_limit, 0, _MAX_HOPS)
        _check_int("max_packet_size", self.max_packet_size, MIN_MAX_PACKET_SIZE, 2**31 - 1)
        _check_int("replay_window", self.replay_window, 1, _MAX_REPLAY_WINDOW)
        _check_int("max_incarnations", self.max_incarnations, 1, 1 << 16)
        _check_int("max_origins", self.max_origins, 1, MAX_MAX_ORIGINS)
        if self.average_over is not AUTO:
            _check_int("average_over", self.average_over, 1, MAX_AVERAGE_OVER)
        _check_int("max_seq_jump", self.max_seq_jump, 0, MAX_SEQ_JUMP)
        _check_int("max_incarnation_ahead", self.max_incarnation_ahead, 0, MAX_INCARNATION_AHEAD)
        _check_int("incarnation_grace", self.incarnation_grace, 0, MAX_INCARNATION_GRACE)
        encoding = codec(self.encoding).encoding  # ValueError naming the table's encodings
        if not isinstance(self.include_buffers, bool):
            raise TypeError("include_buffers must be a bool")
        # normalise (frozen dataclass): ints given for floats, plain ints given for the encoding
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "ratio", ratio)
        object.__setattr__(self, "relay_threshold", threshold)
        object.__setattr__(self, "encoding", encoding)
        object.__setattr__(self, "relay_policy", RelayPolicy.parse(self.relay_policy))
        object.__setattr__(self, "index_encoding", IndexEncoding.parse(self.index_encoding))

    @property
    def alpha_f32(self) -> float:
        """``alpha`` rounded to binary32, the factor of DF-RCV-5."""
        import numpy as np

        return float(np.float32(self.alpha))

    @property
    def average_count(self) -> int:
        """``average_over``, with `AUTO` counted as 1 (a node alone) until the node resolves it
        (`resolve_average`)."""
        return 1 if self.average_over is AUTO else self.average_over

    @property
    def send_weight_f32(self) -> float:
        """``1 / average_over`` rounded to binary32, the factor of DF-GEN-70."""
        import numpy as np

        return float(np.float32(1.0 / self.average_count))

    def resolve_average(self, nodes: int) -> SyncConfig:
        """This config with an `AUTO` ``average_over`` set to `outer_average` of ``nodes`` (the
        node's cluster size, itself included); a set ``average_over`` is kept."""
        if self.average_over is not AUTO:
            return self
        return dataclasses.replace(
            self, average_over=outer_average(nodes, self.sync_interval, self.ratio)
        )

    @classmethod
    def v1_0(cls, **overrides: Any) -> SyncConfig:
        """The spec's table of defaults (section 3, DF-PAR-11), the behaviour of protocol 1.0:
        5 % every 10 steps, F32 values, PLAIN indices, relay policy ALL, deltas summed
        (``average_over`` 1). The preset for a cluster with 1.0 nodes; ``overrides`` set fields.
        A JSON configuration's absent keys take these values (`from_json`)."""
        return cls(**{**_V1_0, **overrides})

    def num_selected(self, num_params: int) -> int:
        """k of DF-GEN-2: ``ceil(N * ratio)`` in binary64, clamped to ``[1, N]``."""
        if num_params < 1:
            raise ValueError("num_params must be >= 1")
        return min(max(math.ceil(num_params * self.ratio), 1), num_params)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (DF-PAR-261): every 1.0 key, and each 1.1 key whose value differs from the
        spec's default (so that a 1.0 reader reads a 1.0 configuration); an `AUTO`
        ``average_over`` is ``"auto"``."""
        d = asdict(self)
        d["encoding"] = codec(self.encoding).name
        d["relay_policy"] = self.relay_policy.value
        d["index_encoding"] = self.index_encoding.name
        if self.average_over is AUTO:
            d["average_over"] = "auto"
        for key in _KEYS_1_1:  # absent at the spec's default, for 1.0 readers
            if d[key] == _V1_0_JSON[key]:
                del d[key]
        return d

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **defaults: Any) -> SyncConfig:
        """The config from ``DELTA_FABRIC_<FIELD>`` variables (``DELTA_FABRIC_RATIO``,
        ``DELTA_FABRIC_SYNC_INTERVAL``, ``DELTA_FABRIC_ALPHA``...; see `delta_fabric.env`).

        ``defaults``: the program's own values, used for the fields whose variable is unset (a set
        variable wins). ``env``: a mapping instead of ``os.environ``. A bad value raises
        `delta_fabric.env.EnvError` naming the variable."""
        from delta_fabric import env as _env

        from_env = _env.sync_config_kwargs(env)
        for name, value in from_env.items():
            try:
                cls(**{name: value})
            except (TypeError, ValueError) as exc:
                var = _env.PREFIX + name.upper()
                raw = (os.environ if env is None else env).get(var, "")
                raise _env.EnvError(var, raw.strip(), str(exc)) from None
        return cls(**{**defaults, **from_env})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SyncConfig:
        """A configuration given as JSON (DF-PAR-261): every absent key takes the spec's default
        (DF-PAR-11, `v1_0`), not the recommended profile's; ``average_over`` may be ``"auto"``."""
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        kwargs = dict(d)
        if "encoding" in kwargs:
            enc = kwargs["encoding"]
            try:
                # the JSON form is the name, exactly as DF-PAR-10 spells it (DF-PAR-261, as Rust's
                # from_json): neither the wire value nor another case (the API also takes the enum)
                if not isinstance(enc, str):
                    raise ValueError
                kwargs["encoding"] = codec(enc).encoding
            except ValueError:
                raise ValueError(f"unknown encoding {enc!r}") from None
        # the JSON form of an enum is its name exactly as the section 3 table spells it (DF-PAR-261,
        # as Rust's from_json); the API and the CLIs also take the enum or another case
        if "index_encoding" in kwargs and kwargs["index_encoding"] not in ("PLAIN", "PACKED"):
            raise ValueError(
                f"index_encoding must be one of PLAIN, PACKED, got {kwargs['index_encoding']!r}"
            )
        if "relay_policy" in kwargs and kwargs["relay_policy"] not in ("ALL", "NEEDED"):
            raise ValueError(
                f"relay_policy must be one of ALL, NEEDED, got {kwargs['relay_policy']!r}"
            )
        if kwargs.get("average_over") == "auto":
            kwargs["average_over"] = AUTO
        elif "average_over" in kwargs and kwargs["average_over"] is AUTO:
            raise TypeError('average_over must be an int or "auto", got null')
        return cls.v1_0(**kwargs)


#: The spec's table of defaults (section 3): `SyncConfig.v1_0`.
_V1_0: dict[str, Any] = {
    "alpha": 1.0,
    "ratio": 0.05,
    "sync_interval": 10,
    "relay_threshold": 1e-6,
    "hop_limit": 16,
    "max_packet_size": 16_777_216,
    "replay_window": 1024,
    "max_incarnations": 4,
    "encoding": ValueEncoding.F32,
    "include_buffers": False,
    "max_origins": DEFAULT_MAX_ORIGINS,
    "relay_policy": RelayPolicy.ALL,
    "average_over": 1,
    "max_seq_jump": 0,
    "index_encoding": IndexEncoding.PLAIN,
    "max_incarnation_ahead": 0,
    "incarnation_grace": 0,
}
#: The keys added in 1.1: `SyncConfig.to_json` writes them only when they differ from `_V1_0`.
_KEYS_1_1 = (
    "max_origins",
    "average_over",
    "max_seq_jump",
    "index_encoding",
    "max_incarnation_ahead",
    "incarnation_grace",
)
_V1_0_JSON: dict[str, Any] = {
    **_V1_0,
    "encoding": "F32",
    "relay_policy": "ALL",
    "index_encoding": "PLAIN",
}
