"""SyncConfig: the spec's defaults (DF-PAR) and validation."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from delta_fabric.config import MIN_MAX_PACKET_SIZE, SyncConfig
from delta_fabric.wire import ValueEncoding
from hypothesis import given
from hypothesis import strategies as st


def test_defaults_are_the_specs() -> None:
    c = SyncConfig.v1_0()
    assert (c.alpha, c.ratio, c.sync_interval, c.relay_threshold) == (
        1.0,
        0.05,
        10,
        1e-6,
    )
    assert (c.hop_limit, c.max_packet_size, c.replay_window, c.max_incarnations) == (
        16,
        16_777_216,
        1024,
        4,
    )
    assert c.encoding is ValueEncoding.F32 and c.include_buffers is False


@pytest.mark.parametrize(
    "kw",
    [
        {"alpha": 0.0},
        {"alpha": 1.5},
        {"alpha": math.nan},
        {"ratio": 0.0},
        {"ratio": 1.01},
        {"ratio": math.inf},
        {"relay_threshold": -1e-9},
        {"sync_interval": 0},
        {"hop_limit": 256},
        {"hop_limit": -1},
        {"max_packet_size": MIN_MAX_PACKET_SIZE - 1},
        {"replay_window": 0},
        {"max_incarnations": 0},
        {"encoding": 4},
        {"index_encoding": 2},
        {"index_encoding": "ZIP"},
        # every upper bound of the section 3 table, one past it (DF-PAR-11: refused at start)
        {"max_packet_size": 295},
        {"max_packet_size": 2**31},
        {"replay_window": 2**20 + 1},
        {"max_incarnations": 2**16 + 1},
        {"max_origins": 0},
        {"max_origins": 2**20 + 1},
        {"average_over": 0},
        {"average_over": 2**16 + 1},
        {"sync_interval": 2**32},  # DF-PAR-3 bound, erratum 1.1 (DF-PAR-260)
        {"sync_interval": 2**64 + 1},
        {"alpha": 10**400},  # an int beyond binary64: refused, not OverflowError (DF-PAR-260)
        {"max_seq_jump": -1},
        {"max_seq_jump": 2**32 + 1},
        {"max_incarnation_ahead": 2**40 + 1},
        {"incarnation_grace": 2**40 + 1},
        {"relay_policy": "SOME"},
    ],
)
def test_bad_values_raise_value_error(kw: dict[str, Any]) -> None:
    # REQ: DF-PAR-11
    with pytest.raises(ValueError):
        SyncConfig.v1_0(**kw)


@pytest.mark.parametrize(
    "text",
    [
        '{"encoding": 1}',
        '{"encoding": 1.0}',
        '{"encoding": "f16"}',
        '{"encoding": " F16"}',
        '{"relay_policy": "all"}',
        '{"index_encoding": "packed"}',
        '{"index_encoding": 1}',
        '{"alpha": 1e400}',
        '{"relay_threshold": 1e400}',
    ],
)
def test_json_enum_names_are_exact_and_huge_numbers_refused(text: str) -> None:
    # REQ: DF-PAR-261, DF-PAR-260
    # an enum's JSON form is its name exactly as the section 3 table spells it, never its wire value
    # or another case; a number past binary64 (read as inf by Python's json) is refused
    with pytest.raises(ValueError):
        SyncConfig.from_json(json.loads(text))
    assert SyncConfig.from_json(json.loads('{"encoding": "F16"}')).encoding.name == "F16"


@pytest.mark.parametrize(
    "kw",
    [
        {"sync_interval": 1.5},
        {"hop_limit": True},
        {"alpha": "1"},
        {"include_buffers": 1},
    ],
)
def test_bad_types_raise_type_error(kw: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        SyncConfig.v1_0(**kw)


def test_upper_bounds_are_accepted() -> None:
    # REQ: DF-PAR-11, DF-PAR-260 (sync_interval bounded at 2^32 - 1 in 1.1, both implementations)
    assert SyncConfig.v1_0(sync_interval=2**32 - 1).sync_interval == 2**32 - 1
    assert SyncConfig.from_json({"sync_interval": 4294967295}).sync_interval == 4294967295


def test_manifest_json_members_are_checked_by_type() -> None:
    # the Rust Manifest::from_json refuses the same forms (DF-MAN-7 / the vector format)
    from delta_fabric.manifest import Manifest

    ok = {"tensors": [{"name": "w", "shape": [4]}]}
    assert Manifest.from_json(ok).num_params == 4
    for bad in (
        {**ok, "num_params": "4"},
        {**ok, "num_params": 4.0},
        {**ok, "num_params": True},
        {**ok, "version": 2},
        {**ok, "version": True},
        {**ok, "fingerprint": 0},
        {"tensors": [{"shape": [4]}]},
        {"tensors": [{"name": "w"}]},
        {},
    ):
        with pytest.raises(ValueError):
            Manifest.from_json(bad)


def test_json_round_trip_and_normalisation() -> None:
    c = SyncConfig.v1_0(alpha=1, encoding=1, hop_limit=3)  # type: ignore[arg-type]
    assert isinstance(c.alpha, float) and c.encoding is ValueEncoding.F16
    d = c.to_json()
    assert d["encoding"] == "F16"
    assert SyncConfig.from_json(d) == c
    with pytest.raises(ValueError):
        SyncConfig.from_json({"bogus": 1})
    with pytest.raises(ValueError):
        SyncConfig.from_json({"encoding": "F64"})


@given(st.integers(1, 2**40), st.floats(1e-12, 1.0))
def test_num_selected(n: int, ratio: float) -> None:
    # REQ: DF-GEN-2
    k = SyncConfig.v1_0(ratio=ratio).num_selected(n)
    assert 1 <= k <= n
    assert k == min(max(math.ceil(n * ratio), 1), n)


def test_num_selected_uses_binary64_product() -> None:
    # REQ: DF-GEN-2
    assert 100 * 0.07 == 7.000000000000001
    assert SyncConfig.v1_0(ratio=0.07).num_selected(100) == 8  # not 7: the product rounds up


def test_max_origins_is_a_parameter_with_a_range() -> None:
    # REQ: DF-PAR-30
    # REQ: DF-SEC-30
    # the origin bound of DF-SEC-2 (erratum 1.1): default 4096, [1, 2**20], refused outside; the
    # engine's receiver uses it
    from delta_fabric.engine import Engine
    from delta_fabric.manifest import Manifest

    assert SyncConfig.v1_0().max_origins == 4096
    assert "max_origins" not in SyncConfig.v1_0().to_json()  # written only when set, as Rust does
    for n in (1, 1 << 20):
        assert SyncConfig.from_json({"max_origins": n}).max_origins == n
    for bad in (0, (1 << 20) + 1):
        with pytest.raises(ValueError, match="max_origins"):
            SyncConfig.v1_0(max_origins=bad)
    m = Manifest.from_named_shapes({"w": (4,)})
    assert Engine(m, SyncConfig.v1_0(max_origins=3), 1, 1).state.max_origins == 3
