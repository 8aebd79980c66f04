"""Zero-configuration LAN discovery (DF-ZEN-15's optional mode) inside a private network namespace.

Two nodes started with ``ZenohOptions.lan_default`` (multicast scouting on interface ``lo``, no endpoints)
must find each other and exchange packets; the control run without multicast scouting must find nobody,
which shows that discovery came from scouting. Skips only when the namespace cannot be created.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("zenoh")


def _helper() -> ModuleType:
    path = Path(__file__).with_name("netns_discovery.py")
    spec = importlib.util.spec_from_file_location("netns_discovery", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("netns_discovery", mod)
    spec.loader.exec_module(mod)
    return mod


def _run(multicast: bool, timeout: float) -> list:  # type: ignore[type-arg]
    nd = _helper()
    try:
        return list(nd.run(timeout=timeout, multicast=multicast))
    except nd.NetnsUnavailable as exc:
        pytest.skip(f"network namespace unavailable: {exc}")


def test_two_default_nodes_discover_each_other_by_multicast_scouting() -> None:
    # REQ: DF-ZEN-15
    results = _run(multicast=True, timeout=20.0)
    assert len(results) == 2, results
    by_node = {r.node: r for r in results}
    assert set(by_node) == {0xA1, 0xB2}, results
    for me, other in ((0xA1, 0xB2), (0xB2, 0xA1)):
        r = by_node[me]
        assert r.ok, r
        assert r.peers == [other]
        assert f"hello from {other:016x}" in r.received


def test_without_multicast_scouting_nobody_is_found() -> None:
    # REQ: DF-ZEN-15
    results = _run(multicast=False, timeout=2.0)
    assert len(results) == 2, results
    for r in results:
        assert not r.ok and r.peers == [] and r.received == [], r


def test_namespace_is_always_deleted() -> None:
    nd = _helper()
    before = _list(nd)
    _run(multicast=False, timeout=0.5)
    assert _list(nd) == before


def _list(nd: ModuleType) -> set[str]:
    out = nd._ip("netns", "list", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}
