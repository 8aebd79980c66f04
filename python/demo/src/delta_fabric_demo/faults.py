"""Network faults between real Zenoh nodes on loopback (issue 12 item 9): a user-space TCP proxy that
can cut and restore a link, and the partition scenario of anti-entropy (spec section 7.9).

`CutProxy` listens on ``127.0.0.1:<port>`` and forwards every accepted connection to a target port.
`CutProxy.cut` closes every forwarded connection and, until `CutProxy.restore`, closes each new one at
once: Zenoh sees the link go down, and the connecting side keeps retrying its endpoint.

`partition_scenario` runs two `delta_fabric.fabric.Fabric` nodes (NumPy stores, seeded synthetic
training) over Zenoh (scouting off, explicit endpoints), node B connected to node A through the proxy.
It is judged in sync rounds, not wall time: a round is one sync of each node, and (link up) waiting
until each node accepted the other's newest seq, so everything published before has arrived
(one reliable, ordered Zenoh link). Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import queue
import random
import resource
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CutProxy", "DelayProxy", "PartitionResult", "partition_scenario"]


class CutProxy:
    """A TCP forwarder ``127.0.0.1:port -> 127.0.0.1:target`` whose link can be cut and restored."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(16)
        self._srv.settimeout(0.05)
        self.port: int = self._srv.getsockname()[1]
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._cut = False
        self._stop = False
        self.connections = 0
        self.refused = 0
        self._thread = threading.Thread(target=self._accept, name="cut-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                continue
            with self._lock:
                if self._cut or self._stop:
                    self.refused += 1
                    conn.close()
                    continue
            try:
                up = socket.create_connection(("127.0.0.1", self.target), timeout=2.0)
            except OSError:
                conn.close()
                continue
            up.settimeout(None)
            with self._lock:
                self._socks += [conn, up]
                self.connections += 1
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            self._relay(src, dst)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _relay(self, src: socket.socket, dst: socket.socket) -> None:
        """Forward one direction until ``src`` ends (the hook a delaying proxy overrides)."""
        while data := src.recv(65536):
            dst.sendall(data)

    def cut(self) -> None:
        """Close every forwarded connection; refuse new ones until `restore`."""
        with self._lock:
            self._cut = True
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._stop = True
        self.cut()
        self._thread.join(timeout=2.0)
        self._srv.close()


class DelayProxy(CutProxy):
    """`CutProxy` that delivers every forwarded chunk ``delay_s`` after it was read and, with
    probability ``stall_rate`` per chunk (a seeded RNG), holds the stream for ``stall_s`` more (the
    stall blocks everything behind it, as a stalled TCP stream does). ``stalls`` counts them."""

    def __init__(
        self, target: int, delay_s: float, stall_rate: float, stall_s: float, seed: int
    ) -> None:
        self.delay_s, self.stall_rate, self.stall_s = delay_s, stall_rate, stall_s
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self.stalls = 0
        super().__init__(target)

    def _relay(self, src: socket.socket, dst: socket.socket) -> None:
        q: queue.Queue[tuple[float, bytes] | None] = queue.Queue()

        def writer() -> None:
            with contextlib.suppress(OSError):
                while (item := q.get()) is not None:
                    due, data = item
                    with self._rng_lock:
                        stall = self._rng.random() < self.stall_rate
                        self.stalls += stall
                    wait = due - time.monotonic() + (self.stall_s if stall else 0.0)
                    if wait > 0:
                        time.sleep(wait)
                    dst.sendall(data)
            # dst failed or the stream ended: end the reader too (the pump shuts both down)
            with contextlib.suppress(OSError):
                src.shutdown(socket.SHUT_RDWR)

        w = threading.Thread(target=writer, daemon=True)
        w.start()
        try:
            while data := src.recv(65536):
                q.put((time.monotonic() + self.delay_s, data))
        finally:
            q.put(None)
            w.join()


@dataclass
class PartitionResult:
    """What `partition_scenario` measured. ``spread``: the largest |difference| between the two
    anchors at one index, after each round; ``bound``: the clean level (the rounding of the same
    sum applied in another order, 8 ulps of the largest anchor magnitude)."""

    repair: bool
    rounds_before: int
    cut_rounds: int
    cut_seconds: float
    spread: list[float] = field(default_factory=list)
    heal_round: int = 0
    reconnect_s: float = 0.0
    bound: float = 0.0
    rounds_to_clean: int | None = None
    counters: list[dict[str, Any]] = field(default_factory=list)
    peak_rss_mib: float = 0.0
    longest_round_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["spread_at_heal"] = self.spread[self.heal_round - 1] if self.heal_round else None
        d["spread_final"] = self.spread[-1] if self.spread else None
        d["spread"] = [float(f"{s:.3g}") for s in self.spread]
        return d


def partition_scenario(
    *,
    repair: bool,
    rounds_before: int = 5,
    cut_rounds: int = 8,
    cut_seconds: float = 0.0,
    rounds_after: int = 20,
    n: int = 256,
    wait: float = 30.0,
) -> PartitionResult:
    """Two nodes, ``rounds_before`` connected rounds, a cut of ``cut_rounds`` rounds lasting at least
    ``cut_seconds`` (rounds go on during the cut, one every ``cut_seconds / cut_rounds`` s), the
    heal (waiting, at most ``wait`` s, until each node sees the other alive again), then
    ``rounds_after`` rounds. ``TimeoutError`` when a bounded wait runs out."""
    from delta_fabric.config import SyncConfig
    from delta_fabric.fabric import Fabric
    from delta_fabric.ports import free_ports
    from delta_fabric.stores.numpy import NumpyStore
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    res = PartitionResult(repair, rounds_before, cut_rounds, cut_seconds)
    ns = f"dftest/repair-{uuid.uuid4().hex[:12]}"
    pa, pb = free_ports(2)
    proxy = CutProxy(pa)
    cfg = SyncConfig.v1_0(ratio=0.1, sync_interval=1)
    init = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    ta = ZenohTransport(ZenohOptions(node_id=0xA, namespace=ns, listen=[f"tcp/127.0.0.1:{pa}"]))
    tb = ZenohTransport(
        ZenohOptions(
            node_id=0xB,
            namespace=ns,
            listen=[f"tcp/127.0.0.1:{pb}"],
            connect=[f"tcp/127.0.0.1:{proxy.port}"],
        )
    )
    fabs = [
        Fabric.v1_0(NumpyStore({"w": init.copy()}), t, cfg, node_id=t.node_id, repair=repair)
        for t in (ta, tb)
    ]
    rngs = [np.random.default_rng(i) for i in range(2)]

    def wait_for(cond: Any, what: str, bound: float = wait) -> bool:
        t_end = time.monotonic() + bound
        while not cond():
            if time.monotonic() > t_end:
                if bound < wait:
                    return False
                raise TimeoutError(f"{what} within {wait}s")
            for f in fabs:
                f.poll()
            time.sleep(0.005)
        return True

    def newest_seen() -> bool:
        prog = [f.origin_progress() for f in fabs]
        for me, other in ((0, 1), (1, 0)):
            want = (fabs[other].engine.incarnation, fabs[other].engine.next_seq - 1)
            if prog[me].get(fabs[other].node_id, (0, 0)) < want:
                return False
        return True

    def one_round(link_up: bool) -> bool:
        """One sync of each node; ``link_up``: wait until each accepted the other's newest seq
        (bounded by ``wait``). Returns whether both newest seqs arrived (within 1 s when not
        ``link_up``, 0 s during the cut)."""
        t0 = time.monotonic()
        for f, rng in zip(fabs, rngs, strict=True):
            w = f.store.gather()
            f.store.load(w + 0.01 * rng.standard_normal(n).astype(np.float32))
            f.sync_now()
        if link_up:
            through = wait_for(newest_seen, "each node accepts the other's newest seq")
        else:
            through = wait_for(newest_seen, "", 1.0 if not proxy._cut else 0.0)
        for f in fabs:
            f.poll()
        anchors = np.stack([f.engine.anchor for f in fabs])
        res.spread.append(float((anchors.max(0) - anchors.min(0)).max()))
        res.longest_round_s = max(res.longest_round_s, time.monotonic() - t0)
        return through

    def until_through() -> None:
        """Rounds (counted) until a round's newest seqs get through: the link and both
        subscriptions are up, and from then on the link is reliable and ordered."""
        t_end = time.monotonic() + wait
        while not one_round(False):
            if time.monotonic() > t_end:
                raise TimeoutError(f"no round got through within {wait}s")

    try:
        wait_for(lambda: ta.peers() == {0xB} and tb.peers() == {0xA}, "the nodes see each other")
        until_through()
        for _ in range(rounds_before):
            one_round(True)
        proxy.cut()
        wait_for(lambda: not ta.peers() and not tb.peers(), "the cut is seen")
        pace = cut_seconds / cut_rounds if cut_rounds else 0.0
        for _ in range(cut_rounds):
            one_round(False)
            if pace:
                time.sleep(pace)
        t_heal = time.monotonic()
        proxy.restore()
        wait_for(lambda: ta.peers() == {0xB} and tb.peers() == {0xA}, "the nodes reconnect")
        res.reconnect_s = round(time.monotonic() - t_heal, 2)
        res.heal_round = len(res.spread)
        until_through()
        while len(res.spread) - res.heal_round < rounds_after:
            one_round(True)
        mag = max(float(np.abs(f.engine.anchor).max()) for f in fabs)
        res.bound = 8 * float(np.finfo(np.float32).eps) * mag
        after = res.spread[res.heal_round :]
        for i in range(len(after)):
            if all(s <= res.bound for s in after[i:]):
                res.rounds_to_clean = i + 1
                break
        res.counters = [
            {"repair": f.stats()["repair"], "receive_drops": f.stats()["receive"]["drops"]}
            for f in fabs
        ]
        res.peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return res
    finally:
        for f in fabs:
            f.close()
        for t in (ta, tb):
            t.close()
        proxy.close()
