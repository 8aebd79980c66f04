"""The JSON form of f32 values (spec DF-CNF-20, driver protocol section 4): floats shown as floats,
``-0`` read as -0.0, non-finite values written as strings, and drivers that report non-finite weights
instead of failing, for every registered implementation."""

from __future__ import annotations

import base64
import json
import math
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from delta_fabric.wire import json_dumps, json_loads
from delta_fabric_conformance.client import DriverClient
from delta_fabric_conformance.registry import load_registry

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "conformance" / "driver-protocol.schema.json"
CASE = ROOT / "conformance" / "vectors" / "receive" / "aggregate_two_origins_one_index"


def _bits(x: float) -> str:
    return struct.pack(">f", x).hex()


def test_negative_zero_reads_as_a_float() -> None:
    # REQ: DF-CNF-20
    v = json_loads('{"values": [-0, -0.0, 0, 1, 1e16, -2.5], "seq": 3}')
    assert [math.copysign(1.0, x) for x in v["values"][:3]] == [-1.0, -1.0, 1.0]
    assert _bits(v["values"][0]) == "80000000" and isinstance(v["values"][0], float)
    assert v["seq"] == 3 and isinstance(v["seq"], int)
    assert json.loads("-0") == 0 and math.copysign(1.0, json.loads("-0")) == 1.0  # why the hook
    with pytest.raises(ValueError):
        json_loads("[NaN]")
    with pytest.raises(ValueError):
        json_loads("[Infinity]")


def test_floats_are_written_as_floats_and_non_finite_as_strings() -> None:
    # REQ: DF-CNF-20
    text = json_dumps({"v": [-0.0, 1.0, 1e16, math.inf, -math.inf, math.nan], "n": [1, 2]})
    assert text == '{"v": [-0.0, 1.0, 1e+16, "inf", "-inf", "nan"], "n": [1, 2]}'
    assert json_dumps([0.5]) == "[0.5]"  # the common path is plain json.dumps


def _receive_request(active_bits: list[str]) -> dict[str, Any]:
    case = json.loads((CASE / "case.json").read_text(encoding="utf-8"))
    vector = {k: v for k, v in case.items() if k not in ("expected", "description", "requirements")}
    node = dict(vector["node"])
    node["active_bits"] = active_bits
    node.pop("active", None)
    vector["node"] = node
    packets = [base64.b64encode((CASE / p).read_bytes()).decode() for p in case["packets"]]
    return {"cmd": "receive", "vector": vector, "packets": packets}


def test_every_driver_reports_non_finite_weights() -> None:
    # REQ: DF-CNF-20
    # A node whose active weights are +inf, NaN and -inf (weights that overflowed) answers `receive`
    # with them in the JSON form, in every registered implementation that can start here.
    case = json.loads((CASE / "case.json").read_text(encoding="utf-8"))
    bits = list(case["node"]["active_bits"])
    bits[0], bits[1], bits[2] = "7f800000", "7fc00000", "ff800000"
    impls = [i for i in load_registry(ROOT / "interop" / "implementations.json")]
    runnable = [i for i in impls if i.missing_requirements() is None or not i.optional]
    assert {"python", "rust"} <= {i.name for i in runnable}
    with tempfile.TemporaryDirectory() as tmp:
        for impl in runnable:
            c = DriverClient(impl.name, impl.argv(), Path(tmp) / "d.log", schema=SCHEMA, cwd=ROOT)
            c.start()
            try:
                hello = c.request({"cmd": "hello", "versions": [1]}, timeout=120)
                assert hello.kind == "ok", (impl.name, hello.body)
                reply = c.request(_receive_request(bits), timeout=60)
                assert reply.kind == "ok", (impl.name, reply.body)
                active = reply.body["active"]
                assert active[:3] == ["inf", "nan", "-inf"], (impl.name, active[:3])
                assert reply.body["active_bits"][0] == "7f800000", impl.name
                assert reply.body["active_bits"][2] == "ff800000", impl.name
                assert all(isinstance(x, (float, str)) for x in active), impl.name
            finally:
                # the 5 s exit rule is the conformance runner's lifecycle test, not this one's: a
                # loaded machine may take longer to tear JAX down
                c.stop(timeout=60)
