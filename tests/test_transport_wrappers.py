"""Transport wrappers pass the node's pre-queue calls through.

`take_screened`, `set_members`, `serve_info` and `info` are part of the `Transport` protocol (no silent
`getattr` default in `Fabric`), so a wrapper that forgets one is a type error under mypy --strict and
fails `isinstance(x, Transport)`. This file checks the two wrappers the project ships (the demo's
`RoundGate` and the conformance kit's recording transport) forward each call, with the counts and
arguments unchanged: the `invalid_live` scenario once failed because a wrapper dropped the screened
counts (DF-ZEN-154)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from delta_fabric.errors import ErrorCode
from delta_fabric.transports.base import Transport
from delta_fabric.transports.memory import MemoryHub, MemoryTransport
from delta_fabric_conformance.kit.peer import _RecordingTransport
from delta_fabric_demo.rounds import RoundGate


class _Screening(MemoryTransport):
    """A memory transport that reports screened payloads and records what the node told it."""

    def __init__(self, hub: MemoryHub, node_id: int) -> None:
        super().__init__(hub, node_id)
        self.screened = {ErrorCode.BAD_IDENTIFIER: 3, ErrorCode.OVERSIZE: 1}
        self.members: tuple[frozenset[int] | None, bool] | None = None
        self.provider: Callable[[], Mapping[str, Any]] | None = None

    def take_screened(self) -> dict[ErrorCode, int]:
        out, self.screened = self.screened, {}
        return out

    def set_members(self, members: Collection[int] | None, *, live: bool = False) -> None:
        self.members = (None if members is None else frozenset(members), live)

    def serve_info(self, provider: Callable[[], Mapping[str, Any]] | None) -> None:
        self.provider = provider
        super().serve_info(provider)


def _check(wrap: Callable[[Transport], Transport]) -> None:
    hub = MemoryHub()
    inner = _Screening(hub, 1)
    try:
        w = wrap(inner)
        assert isinstance(w, Transport)
        assert w.take_screened() == {ErrorCode.BAD_IDENTIFIER: 3, ErrorCode.OVERSIZE: 1}
        assert w.take_screened() == {}  # taken once, as the inner transport hands them out
        w.set_members({1, 2}, live=True)
        assert inner.members == (frozenset({1, 2}), True)
        w.set_members(None)
        assert inner.members == (None, False)

        def provider() -> dict[str, Any]:
            return {"incarnation": "0" * 16}

        w.serve_info(provider)
        assert inner.provider is provider
        peer = hub.transport(2)
        try:
            peer.serve_info(lambda: {"framework": "numpy"})
            # info queries go through to the inner transport, this node left out
            assert w.info() == {2: {"node": "0000000000000002", "framework": "numpy"}}
            assert w.info(2, timeout=0.5) == w.info()
        finally:
            peer.close()
    finally:
        inner.close()


def test_round_gate_passes_pre_queue_calls_through() -> None:
    _check(lambda t: RoundGate(t, 65536))


def test_recording_transport_passes_pre_queue_calls_through() -> None:
    _check(_RecordingTransport)


def test_memory_transport_screens_nothing() -> None:
    hub = MemoryHub()
    t = hub.transport(5)
    try:
        t.set_members({5, 6}, live=True)
        t.serve_info(None)
        assert t.take_screened() == {}
    finally:
        t.close()
