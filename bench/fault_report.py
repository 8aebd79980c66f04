"""Every fault of issue 12 item 9 against a clean run of the same setup, in one invocation, with one
report (``report.md`` + ``report.json`` in ``--out``).

Real node processes (``bench/fault_node.py``: a `Fabric` training a 64-256-10 MLP on its
label-skewed part of the digits, 19,210 parameters: a snapshot of 3 chunks of 8,192 values) over
real Zenoh on loopback: scouting off, ``tcp/127.0.0.1`` endpoints, a namespace per run. Delay, stalls and the
partition go through a user-space TCP proxy (`delta_fabric_demo.faults.CutProxy`; its `DelayProxy`
adds latency and stalls). The default setup is the hardened one: a configured member list,
signed entries (DF-SEC-140), gap repair (DF-RCV-160), pacing on live members (DF-ZEN-156).

Faults (``--only``): ``clean`` (always run: the baseline), ``kill9`` (kill -9 of one of 3 paced nodes,
restart from a trusted snapshot), ``snapshot_kill`` (a joiner's snapshot source SIGKILLed between
chunk 0 and chunk 1, while a stranger with the lowest node id serves a poisoned anchor),
``delay_stalls`` (20 ms each way, 200 ms stalls on 10 % of the forwarded chunks), ``partition``
(one node cut off for ``--cut-seconds``, then healed), ``flood`` (garbage, valid hostile and mutated
packets from a stranger, bounded), ``packet248`` (the 248-byte packet: two finite 3e38 values at one
index, every round, to a cluster with no member list and no signatures, so the check that stops it
is the aggregate check DF-RCV-50), ``forged`` (forged seq 2^64-1, forged incarnations and a
4,096-origin packet, on the victim's own key and a stranger's), ``forged_unsigned`` (the same
without signatures, against the member list, DF-PAR-50's seq bound and the 1.1 incarnation bounds,
DF-RCV-175's clock bound and DF-RCV-178's grace for a live incarnation; it still fails: a writer on a
member's key gets entries under fresh incarnations just above the real one applied while the origin's
incarnation table has free slots, which only signatures or a Zenoh ACL stop).

Per fault: final accuracy against the clean run (points), the peak memory of every node process
(``VmHWM``, sampled while it runs and read by the node at its end), the node counters, the longest
stall (the longest gap between consecutive completed steps of a node that finished), and verdicts
against issue 12's targets. Verdicts are judged on counts and exact state (which entries every node
accepted, which it refused and why, what anchor a joiner installed); the two targets that are rates or
accuracies (pacing within 10 %, accuracy within 2 points) are figures of one run and are marked so.
kill9's accuracy figure needs the full run's length: in ``--quick`` the restarted node trains for
about 30 steps, too few to win back what the cluster forgot of its classes while it was dead.
Every node stops after a bounded number of steps, every wait is bounded.

    nice -n 10 python bench/fault_report.py --out fault-report [--quick] [--only a,b] [--seed 0]

Exit status 0 when every verdict passes, 1 otherwise, 2 for a bad option. The full set took 13 min
at load 11 on 2 cores; ``--quick`` about 20 s per fault.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
NODE = HERE / "fault_node.py"
sys.path.insert(0, str(HERE))

from delta_fabric.ports import free_port  # noqa: E402
from delta_fabric_demo.faults import CutProxy, DelayProxy  # noqa: E402
from fault_node import init_params, vm_hwm_kib  # noqa: E402

MEMBERS = (0x10, 0x11, 0x12)
JOINER = 0x13
#: The values per snapshot chunk the joiner asks for: 19,210 parameters are 3 chunks.
CHUNK = 8192
#: The partition lasts at least this many steps of every node.
CUT_MIN_STEPS = 5
STRANGER = 0x1  # lower than every member: the source a naive joiner picks first
FAULTS = (
    "clean",
    "kill9",
    "snapshot_kill",
    "delay_stalls",
    "partition",
    "flood",
    "packet248",
    "forged",
    "forged_unsigned",
)
#: The faults `tests/test_fault_report.py` runs in CI (kill9 has its own CI test,
#: tests/test_fault_pacing.py; delay_stalls' verdict is an accuracy, a figure of a full run).
LIGHT = ("clean", "snapshot_kill", "partition", "flood", "packet248", "forged")


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class Params:
    steps: int
    step_s: float
    hidden: int
    cut_seconds: float
    #: the cut ends after at most this many steps of the fastest node, even before cut_seconds: the
    #: entries lost grow with the steps of the cut, gap repair's budget is in rounds (attempts, retry,
    #: values per round), so a cut bounded only in seconds lost more than repair can resend on a fast
    #: machine (1,121 steps in 2 s without step pacing: 449 seqs given up) and the verdict hung on speed
    cut_max_steps: int
    partition_steps: int
    flood_puts: int
    attack_rounds: int
    window_s: float
    rounds_after_heal: int
    drain_s: float = 60.0
    batch: int = 32
    lr: float = 0.05
    ratio: float = 0.05
    peer_deadline: float = 2.0
    max_seq_jump: int = 1 << 20
    queue_capacity: int = 256


QUICK = Params(
    steps=60,
    step_s=0.0,
    hidden=256,
    cut_seconds=2.0,
    cut_max_steps=200,
    # a bound only: the partition ends on stop files once the links are back (about 90 steps/s
    # quiet, so a 2 s cut and Zenoh's reconnect take a few hundred)
    partition_steps=5000,
    flood_puts=3000,
    attack_rounds=10,
    window_s=2.0,
    rounds_after_heal=20,
)
FULL = Params(
    steps=300,
    step_s=0.02,
    hidden=256,
    cut_seconds=30.0,
    cut_max_steps=1500,  # 30 s at step_s 0.02: the bound only acts on a machine faster than the pacing
    partition_steps=5000,
    flood_puts=20000,
    attack_rounds=40,
    window_s=5.0,
    rounds_after_heal=40,
)


# ---------------------------------------------------------------------------------------------------------
# The delay proxy
# ---------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------
# A cluster of node processes
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One node process: its parsed output and its sampled peak memory."""

    label: str
    node_id: int
    proc: subprocess.Popen[bytes]
    log: Path
    offset: int = 0
    steps: list[tuple[int, float]] = field(default_factory=list)
    accs: list[tuple[float, float]] = field(default_factory=list)  # (t, test accuracy)
    ready: dict[str, Any] | None = None
    done: list[int] | None = None
    final: dict[str, Any] | None = None
    hwm_kib: int = 0
    seq: int = 0  # the node's last own seq, from its latest step line
    heard: dict[int, int] = field(default_factory=dict)  # origin -> highest seq it accepted
    live: frozenset[int] = frozenset()  # the peers its transport sees live (direct links)
    missing: int = 0  # seqs its gap tracker misses now (repair on)
    given_up: int = 0  # seqs its gap tracker gave up so far
    killed: bool = False
    may_die: bool = False
    total: int = 0

    def read(self) -> None:
        self.hwm_kib = max(self.hwm_kib, vm_hwm_kib(self.proc.pid))
        if not self.log.exists():
            return
        with self.log.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].decode().splitlines():
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if "step" in d:
                self.steps.append((int(d["step"]), float(d["t"])))
                self.seq = int(d.get("seq", self.seq))
                self.heard = {int(o, 16): int(s) for o, s in d.get("heard", {}).items()}
                self.live = frozenset(int(o, 16) for o in d.get("live", ()))
                self.missing = int(d.get("missing", 0))
                self.given_up = int(d.get("given_up", 0))
                if "acc" in d:
                    self.accs.append((float(d["t"]), float(d["acc"])))
            elif "ready" in d:
                self.ready = d
            elif "done" in d:
                self.done = d["done"]
            elif "final" in d:
                self.final = d["final"]
                self.hwm_kib = max(self.hwm_kib, int(self.final["vm_hwm_kib"]))

    @property
    def step(self) -> int:
        return self.steps[-1][0] if self.steps else 0

    def longest_stall(self) -> float:
        ts = [t for _, t in self.steps]
        return max((b - a for a, b in itertools.pairwise(ts)), default=0.0)


class Cluster:
    def __init__(self, name: str, work: Path, p: Params, data: Path, seed: int) -> None:
        self.name, self.p, self.data, self.seed = name, p, data, seed
        self.dir = work / name
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in self.dir.glob("*"):
            old.unlink()
        self.ns = f"dftest/faults-{uuid.uuid4().hex[:12]}"
        self.ports = {n: free_port() for n in (*MEMBERS, JOINER)}
        self.runs: list[Run] = []
        self.proxies: list[Any] = []

    def config(self, nid: int, **over: Any) -> dict[str, Any]:
        p = self.p
        c: dict[str, Any] = {
            "node_id": nid,
            "namespace": self.ns,
            "port": self.ports[nid],
            "connect": [],
            "peers": [m for m in MEMBERS if m != nid],
            "members": [*MEMBERS, JOINER],
            "all_members": [*MEMBERS, JOINER],
            "signed": True,
            "repair": True,
            "quorum": 2,
            "bootstrap": False,
            "steps": p.steps,
            "step_s": p.step_s,
            "hidden": p.hidden,
            "batch": p.batch,
            "lr": p.lr,
            "ratio": p.ratio,
            "peer_deadline": p.peer_deadline,
            "max_seq_jump": p.max_seq_jump,
            "queue_capacity": p.queue_capacity,
            "drain_s": p.drain_s,
            "seed": self.seed,
            "data": str(self.data),
            "part": MEMBERS.index(nid) if nid in MEMBERS else 3,
            "ctl": str(self.dir),
        }
        c.update(over)
        return c

    def endpoint(self, to: int, proxy: Callable[[int], Any] | None = None) -> str:
        if proxy is None:
            return f"tcp/127.0.0.1:{self.ports[to]}"
        px = proxy(self.ports[to])
        self.proxies.append(px)
        return f"tcp/127.0.0.1:{px.port}"

    def start(self, nid: int, label: str | None = None, **over: Any) -> Run:
        label = label or f"{nid:x}"
        cfg_path = self.dir / f"node-{label}.json"
        cfg = self.config(nid, **over)
        cfg_path.write_text(json.dumps(cfg))
        log = self.dir / f"node-{label}.jsonl"
        with log.open("wb") as out, (self.dir / f"node-{label}.err").open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(NODE), str(cfg_path)],
                stdout=out,
                stderr=err,
                env={**os.environ, "RUST_LOG": "off"},
            )
        may_die = over.get("die_on_chunk") is not None
        run = Run(label, nid, proc, log, may_die=may_die, total=int(cfg["steps"]))
        self.runs.append(run)
        return run

    def start_members(self, proxy: Callable[[int, int], Callable[[int], Any] | None]) -> None:
        """The three members, each connecting to the lower ids (through ``proxy(frm, to)``)."""
        for i, nid in enumerate(MEMBERS):
            connect = [self.endpoint(to, proxy(nid, to)) for to in MEMBERS[:i]]
            self.start(nid, connect=connect)

    def poll(self) -> None:
        for r in self.runs:
            r.read()
            if r.proc.poll() is not None and r.final is None and not r.killed:
                r.read()
                if r.may_die and r.proc.returncode == -signal.SIGKILL:
                    r.killed = True  # it SIGKILLed itself, as configured (die_on_chunk)
                    continue
                if r.final is None:
                    err = (self.dir / f"node-{r.label}.err").read_text()[-2000:]
                    raise RuntimeError(f"{self.name}: node {r.label} exited: {err}")

    def wait(self, cond: Callable[[], bool], what: str, timeout: float) -> None:
        t_end = time.monotonic() + timeout
        while True:
            self.poll()
            if cond():
                return
            if time.monotonic() > t_end:
                raise TimeoutError(f"{self.name}: {what} within {timeout:.0f}s")
            time.sleep(0.05)

    def alive(self) -> list[Run]:
        return [r for r in self.runs if not r.killed]

    def wait_steps(self, k: int, timeout: float = 300.0) -> None:
        self.wait(
            lambda: all(r.step >= min(k, r.total) for r in self.alive()),
            f"every node at step {k}",
            timeout,
        )

    def kill(self, run: Run) -> float:
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait(10)
        run.killed = True
        return time.monotonic()

    def finish(self, timeout: float = 600.0) -> None:
        """Wait for every live node's last step, hand them each other's last seqs, wait for
        their finals."""
        self.wait(
            lambda: all(r.done is not None or r.proc.poll() is not None for r in self.alive()),
            "every node done",
            timeout,
        )
        for r in self.runs:  # a node that killed itself (die_on_chunk)
            if not r.killed and r.done is None and r.proc.poll() is not None:
                r.killed = True
        targets = {str(r.node_id): r.done for r in self.alive()}
        tmp = self.dir / "final.json.tmp"
        tmp.write_text(json.dumps(targets))
        tmp.rename(self.dir / "final.json")
        self.wait(
            lambda: all(r.final is not None for r in self.alive()),
            "every node's final",
            self.p.drain_s + 60.0,
        )

    def close(self) -> None:
        for r in self.runs:
            if r.proc.poll() is None:
                r.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.proc.wait(10)
        for px in self.proxies:
            px.close()


# ---------------------------------------------------------------------------------------------------------
# Attack packets
# ---------------------------------------------------------------------------------------------------------


def fingerprint(hidden: int) -> bytes:
    from delta_fabric.stores.numpy import NumpyStore

    fp: bytes = NumpyStore(init_params(hidden, 0)).manifest.fingerprint
    return fp


def packet(fp: bytes, *entries: tuple[int, int, int, list[int], list[float]]) -> bytes:
    from delta_fabric.wire import Entry, Packet, encode_packet

    es = tuple(
        Entry(o, inc, seq, 0, np.array(idx, np.uint32), np.array(vals, np.float32))
        for o, inc, seq, idx, vals in entries
    )
    return encode_packet(Packet(0x5EED, 1, fp, es))


class Attacker:
    """A raw Zenoh session (scouting off) connected to every member: it puts what it likes on
    any delta key."""

    def __init__(self, cl: Cluster) -> None:
        import zenoh
        from delta_fabric.transports.zenoh import delta_key

        self._key = delta_key
        self.ns = cl.ns
        raw = zenoh.Config()
        raw.insert_json5("mode", '"peer"')
        eps = json.dumps([f"tcp/127.0.0.1:{cl.ports[m]}" for m in MEMBERS])
        raw.insert_json5("connect/endpoints", eps)
        raw.insert_json5("listen/endpoints", "[]")
        raw.insert_json5("scouting/multicast/enabled", "false")
        raw.insert_json5("scouting/gossip/enabled", "false")
        self.session = zenoh.open(raw)
        self.pubs: dict[int, Any] = {}
        self.puts = 0
        self.bytes = 0
        # until every member's token reached this session: a node declares its delta subscriber
        # before its token (transports/zenoh.py), so each member's subscription is known here and
        # every put reaches every member (a publisher's matching status says "some subscriber":
        # a put made then could miss a member whose session was still opening, and that member's
        # verdict then hung on timing)
        from delta_fabric.transports.zenoh import alive_key

        want = {alive_key(cl.ns, m) for m in MEMBERS}
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            seen = {
                str(r.ok.key_expr)
                for r in self.session.liveliness().get(f"{cl.ns}/v1/alive/*", timeout=1.0)
                if r.ok is not None
            }
            links = len(list(self.session.info.peers_zid()))
            if want <= seen and links >= len(MEMBERS):
                break
            time.sleep(0.05)
        else:
            self.session.close()  # type: ignore[no-untyped-call]
            raise RuntimeError(f"the attacker did not see every member live: {sorted(want)}")

    def put(self, key_node: int, buf: bytes) -> None:
        if key_node not in self.pubs:
            pub = self.session.declare_publisher(self._key(self.ns, key_node))
            deadline = time.monotonic() + 30.0  # until the nodes' subscriptions reached it
            while time.monotonic() < deadline:
                status: Any = pub.matching_status  # an object with `matching` (the stub: bool)
                if getattr(status, "matching", status) is True:
                    break
                time.sleep(0.02)
            self.pubs[key_node] = pub
        self.pubs[key_node].put(buf)
        self.puts += 1
        self.bytes += len(buf)

    def close(self) -> None:
        self.session.close()  # type: ignore[no-untyped-call]


# ---------------------------------------------------------------------------------------------------------
# The faults
# ---------------------------------------------------------------------------------------------------------

Fault = Callable[[Cluster], dict[str, Any]]


def no_proxy(frm: int, to: int) -> None:
    return None


def f_clean(cl: Cluster) -> dict[str, Any]:
    cl.start_members(no_proxy)
    cl.finish()
    return {}


def f_kill9(cl: Cluster) -> dict[str, Any]:
    p = cl.p
    for i, nid in enumerate(MEMBERS):  # bounded by 3x the steps; stopped below
        connect = [cl.endpoint(to) for to in MEMBERS[:i]]
        cl.start(nid, connect=connect, steps=3 * p.steps)
    cl.wait_steps(p.steps // 4)
    t0 = time.monotonic()
    cl.wait(lambda: time.monotonic() - t0 >= p.window_s, "a window before the kill", 60)
    victim = cl.runs[2]
    t_kill = cl.kill(victim)
    cl.wait(lambda: time.monotonic() - t_kill >= p.window_s, "a window after the kill", 60)
    survivors = cl.runs[:2]
    eps = [cl.endpoint(m) for m in MEMBERS[:2]]
    t_restart = time.monotonic()
    restarted = cl.start(MEMBERS[2], "12r", connect=eps, bootstrap=True, steps=3 * p.steps)
    # everybody stops together once the restarted node trained for half a run
    cl.wait(lambda: restarted.step >= p.steps // 2, "the restarted node's steps", 600)
    for m in MEMBERS:
        (cl.dir / f"stop-{m:x}").touch()
    cl.finish()

    def acc_at(r: Run, t0: float) -> float:  # the last evaluation before t0
        return next((a for t, a in reversed(r.accs) if t <= t0), 0.0)

    at_kill = [acc_at(r, t_kill) for r in survivors]
    at_restart = [acc_at(r, t_restart) for r in survivors]
    at_end = [r.final["accuracy"] if r.final else 0.0 for r in survivors]
    last = (restarted.final or {}).get("incarnation"), (restarted.final or {}).get("last_seq")
    heard = [
        tuple((r.final or {}).get("origin_progress", {}).get(f"{MEMBERS[2]:x}", ())) == last
        for r in survivors
    ]

    def rate(r: Run, a: float, b: float) -> float:
        s = [k for k, t in r.steps if a <= t < b]
        return (max(s) - min(s)) / (b - a) if len(s) > 1 else 0.0

    before = [rate(r, t_kill - p.window_s, t_kill) for r in survivors]
    after = [rate(r, t_kill, t_kill + p.window_s) for r in survivors]
    ratios = [a / b if b else 0.0 for a, b in zip(after, before, strict=True)]
    return {
        "steps_per_s_before_kill": [round(x, 2) for x in before],
        "steps_per_s_after_kill": [round(x, 2) for x in after],
        "pacing_ratio": [round(x, 3) for x in ratios],
        "restarted_bootstrapped": bool(restarted.ready and restarted.ready["bootstrapped"]),
        "survivors_accuracy_at_kill": at_kill,
        "survivors_accuracy_at_restart": at_restart,
        "survivors_accuracy_at_end": at_end,
        "survivors_got_every_restarted_seq": all(heard),
        "restarted_steps": restarted.step,
    }


def f_snapshot_kill(cl: Cluster) -> dict[str, Any]:
    from delta_fabric.snapshot import SnapshotSource
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    p = cl.p
    # the lowest member dies when the joiner asks for its chunk 1 (after serving chunk 0); the
    # members are bounded by 3x the steps and stopped below, after the joiner joined (judged by
    # state: a bootstrap slowed by load must not find the members already finished, DF-RCV-50)
    for i, nid in enumerate(MEMBERS):
        connect = [cl.endpoint(to) for to in MEMBERS[:i]]
        cl.start(nid, connect=connect, die_on_chunk=1 if i == 0 else None, steps=3 * p.steps)
    sport = free_port()
    stranger = ZenohTransport(
        ZenohOptions(
            node_id=STRANGER,
            namespace=cl.ns,
            listen=[f"tcp/127.0.0.1:{sport}"],
            connect=[cl.endpoint(m) for m in MEMBERS],
        )
    )
    fp = fingerprint(p.hidden)
    n = sum(v.size for v in init_params(p.hidden, 0).values())
    poison = np.full(n, 1e3, np.float32)
    stranger.serve_snapshot(lambda: SnapshotSource(7, fp, poison))
    try:
        cl.wait_steps(p.steps // 3)
        eps = [cl.endpoint(m) for m in MEMBERS] + [f"tcp/127.0.0.1:{sport}"]
        joiner = cl.start(
            JOINER,
            connect=eps,
            bootstrap=True,
            steps=max(10, p.steps // 2),
            chunk_size=CHUNK,
            peers=[*MEMBERS, STRANGER],
        )
        cl.wait(lambda: joiner.ready is not None, "the joiner bootstrapped", 120)
        # the members stop once the joiner accepted an entry of every live member and trained
        # half its steps; each member's last entries then reach the joiner, which is still running
        alive = cl.runs[1 : len(MEMBERS)]
        cl.wait(
            lambda: (
                (
                    all(joiner.heard.get(m.node_id, 0) > 0 for m in alive)
                    and joiner.step >= max(10, p.steps // 2) // 2
                )
                or joiner.final is not None
            ),
            "the joiner heard every live member",
            600,
        )
        for m in MEMBERS:
            (cl.dir / f"stop-{m:x}").touch()
        cl.finish()
    finally:
        stranger.close()
    assert joiner.final is not None
    return {
        "source_killed": cl.runs[0].killed,
        "joiner_bootstrapped": bool(joiner.ready and joiner.ready["bootstrapped"]),
        "joiner_installed_max_abs": joiner.ready["anchor_max_abs"] if joiner.ready else None,
        "joiner_snapshot_trust": joiner.final["stats"]["snapshot_trust"],
        "poison_value": 1e3,
    }


def f_delay_stalls(cl: Cluster) -> dict[str, Any]:
    seeds = iter(range(cl.seed * 100, cl.seed * 100 + 100))
    cl.start_members(lambda frm, to: lambda port: DelayProxy(port, 0.02, 0.1, 0.2, next(seeds)))
    cl.finish()
    return {"proxy_stalls": sum(px.stalls for px in cl.proxies), "delay_ms": 20, "stall_ms": 200}


def f_partition(cl: Cluster) -> dict[str, Any]:
    p = cl.p
    cut_node = MEMBERS[2]

    def via(frm: int, to: int) -> Callable[[int], Any] | None:
        return CutProxy if frm == cut_node else None

    steps = p.partition_steps
    for i, nid in enumerate(MEMBERS):
        connect = [cl.endpoint(to, via(nid, to)) for to in MEMBERS[:i]]
        cl.start(nid, connect=connect, steps=steps)
    cl.wait_steps(p.steps // 4)
    at_cut = max(r.step for r in cl.runs)
    for px in cl.proxies:
        px.cut()
    t_cut = time.monotonic()
    # at least CUT_MIN_STEPS steps of every node (entries are lost at any load), then until
    # cut_seconds have passed or the fastest node has taken cut_max_steps steps (the loss stays
    # within what gap repair resends, at any speed); at most until a node nears its last step
    cl.wait(
        lambda: (
            (
                (
                    time.monotonic() - t_cut >= p.cut_seconds
                    or max(r.step for r in cl.runs) >= at_cut + p.cut_max_steps
                )
                and all(r.step >= at_cut + CUT_MIN_STEPS for r in cl.runs)
            )
            or max(r.step for r in cl.runs) >= steps - steps // 8
        ),
        "the cut's end",
        p.cut_seconds + 600,
    )
    cut_s = time.monotonic() - t_cut
    at_heal = max(r.step for r in cl.runs)
    seq_at_heal = {r.node_id: r.seq for r in cl.runs}
    for px in cl.proxies:
        px.restore()
    # the links are back when every node sees every other live (Zenoh reconnects each link on
    # its own schedule) and accepted an entry that every other node sent after the heal: judged
    # by state, not by time. Entries relayed over the first link back reveal gaps whose origin
    # is still out of reach; no request goes to it before it is live (DF-RCV-230) ...
    cl.wait(
        lambda: all(
            o.node_id in r.live and r.heard.get(o.node_id, 0) > seq_at_heal[o.node_id]
            for r in cl.runs
            for o in cl.runs
            if o is not r
        ),
        "every link back after the heal",
        p.cut_seconds + 600,
    )
    at_links = max(r.step for r in cl.runs)
    # ... then at least rounds_after_heal rounds, and until no node misses a seq (repaired) or
    # one gave a seq up (the verdict then fails): the steps bound only the time of the cut
    cl.wait_steps(at_links + p.rounds_after_heal, p.cut_seconds + 600)
    cl.wait(
        lambda: all(r.missing == 0 for r in cl.runs) or any(r.given_up for r in cl.runs),
        "every gap repaired after the heal",
        p.cut_seconds + 600,
    )
    for r in cl.runs:
        (cl.dir / f"stop-{r.node_id:x}").touch()
    cl.finish()
    return {
        "cut_seconds": round(cut_s, 2),
        "cut_from_step": at_cut,
        "healed_at_step": at_heal,
        "links_back_at_step": at_links,
        "steps": steps,
        "proxy_refused_connections": sum(px.refused for px in cl.proxies),
    }


def f_flood(cl: Cluster) -> dict[str, Any]:
    p = cl.p
    cl.start_members(no_proxy)
    cl.wait_steps(p.steps // 4)
    att = Attacker(cl)
    fp = fingerprint(p.hidden)
    rng = np.random.default_rng(cl.seed + 11)
    hostile = [packet(fp, (0x7000 + i, 1, 1, [i], [0.5])) for i in range(64)]
    garbage = [rng.bytes(int(rng.integers(1, 400))) for _ in range(64)]
    mutated = [b"\0\0\0\0DFP1" + rng.bytes(200) for _ in range(64)]
    try:
        for i in range(p.flood_puts):
            kind = i % 3
            buf = (garbage, hostile, mutated)[kind][i % 64]
            att.put(0x5EED + (i % 4), buf)
        cl.finish()
    finally:
        att.close()
    return {"stranger_puts": att.puts, "stranger_bytes": att.bytes}


def f_packet248(cl: Cluster) -> dict[str, Any]:
    p = cl.p
    for i, nid in enumerate(MEMBERS):  # the default configuration: no member list, no signatures
        connect = [cl.endpoint(to) for to in MEMBERS[:i]]
        cl.start(nid, connect=connect, members=None, signed=False)
    fp = fingerprint(p.hidden)
    s = 0x5EED_0000_0000_0000
    size = len(packet(fp, (s, 1, 1, [7], [3e38]), (s + 1, 1, 1, [7], [3e38])))
    att = Attacker(cl)
    try:
        for r in range(p.attack_rounds):
            cl.wait_steps(p.steps // 4 + 2 * r)
            att.put(s, packet(fp, (s, 1, r + 1, [7], [3e38]), (s + 1, 1, r + 1, [7], [3e38])))
        cl.finish()
    finally:
        att.close()
    return {"packet_bytes": size, "packets_sent": att.puts}


def f_forged(cl: Cluster, signed: bool = True, **over: Any) -> dict[str, Any]:
    p = cl.p
    for i, nid in enumerate(MEMBERS):
        connect = [cl.endpoint(to) for to in MEMBERS[:i]]
        cl.start(nid, connect=connect, signed=signed, **over)
    fp = fingerprint(p.hidden)
    victim = MEMBERS[1]
    origins = packet(fp, *[(0x7000_0000 + i, 1, 1, [3], [1e-30]) for i in range(4096)])
    att = Attacker(cl)
    try:
        cl.wait_steps(p.steps // 4)
        vrun = cl.runs[MEMBERS.index(victim)]
        cl.wait(lambda: vrun.ready is not None, "the victim ready", 60)
        ready = vrun.ready
        assert ready is not None
        inc = int(ready["incarnation"])  # read off the victim's packets by the attacker
        for r in range(p.attack_rounds):
            cl.wait_steps(p.steps // 4 + 2 * r)
            # seq 2^64-1 on the victim's origin, as if from its own incarnation (guessed: the
            # attacker reads it from any packet) and from incarnations it never had
            # on the victim's own key: without an ACL anyone may put there (DF-ZEN-152 counts
            # them in the victim's share), so only the entry checks stand in the way
            att.put(victim, packet(fp, (victim, inc, (1 << 64) - 1, [5], [0.25])))
            incs = [(victim, inc + 1 + 4 * r + k, 1, [5], [0.25]) for k in range(4)]
            att.put(victim, packet(fp, *incs))
            if r == 0:  # the origin flood, once on a stranger's key and once on the victim's
                att.put(0x5EEE, origins)
                att.put(victim, origins)
        cl.finish()
    finally:
        att.close()
    return {
        "signed": signed,
        "victim": f"{victim:x}",
        "puts": att.puts,
        "origin_flood_bytes": len(origins),
    }


#: DF-PAR-175 and DF-PAR-178 of the unsigned cluster: incarnations more than 60 s ahead of the
#: receiver's clock are refused, and a member's incarnation that accepted an entry in the last 10 s
#: is not evicted by a new one
UNSIGNED_BOUNDS = {"max_incarnation_ahead": 60_000_000, "incarnation_grace": 10_000_000}


def f_forged_unsigned(cl: Cluster) -> dict[str, Any]:
    """The same forgeries against a member list, DF-PAR-50's seq bound and the incarnation bounds
    (DF-RCV-175, DF-RCV-178), without signatures."""
    out = f_forged(cl, signed=False, **UNSIGNED_BOUNDS)
    out.update(UNSIGNED_BOUNDS)
    return out


FAULT_FNS: dict[str, Fault] = {
    "clean": f_clean,
    "kill9": f_kill9,
    "snapshot_kill": f_snapshot_kill,
    "delay_stalls": f_delay_stalls,
    "partition": f_partition,
    "flood": f_flood,
    "packet248": f_packet248,
    "forged": f_forged,
    "forged_unsigned": f_forged_unsigned,
}


# ---------------------------------------------------------------------------------------------------------
# Figures and verdicts
# ---------------------------------------------------------------------------------------------------------


def counters(final: dict[str, Any]) -> dict[str, Any]:
    st = final["stats"]
    rc = st["receive"]
    tr = st["transport"]
    return {
        "receive_errors": {k: v for k, v in rc.get("errors", {}).items() if v},
        "receive_drops": {k: v for k, v in rc.get("drops", {}).items() if v},
        "entries_accepted": rc.get("entries_accepted"),
        "repair": {k: v for k, v in st["repair"].items() if v},
        "snapshot_trust": {k: v for k, v in st["snapshot_trust"].items() if v},
        "transport": {
            k: tr[k]
            for k in (
                "received_packets",
                "dropped_packets",
                "rejected_not_member",
                "rate_limited",
                "snapshot_refused",
            )
            if k in tr
        },
    }


def exact_delivery(finals: list[dict[str, Any]]) -> bool:
    """Every finished node accepted every entry of every other finished node: its highest seq is
    the other's last (incarnation and seq), and it accepted exactly as many of its entries as that
    seq (one entry per sync; none lost, none twice; a joiner: its highest seq only). Not for a
    restarted node (two incarnations)."""
    last = {f["node_id"]: (f["incarnation"], f["last_seq"]) for f in finals}
    for f in finals:
        prog = {int(k, 16): tuple(v) for k, v in f["origin_progress"].items()}
        got = {int(k, 16): n for k, n in f["accepted_by_origin"].items()}
        joined = f["stats"]["bootstrapped"]  # a joiner gets the seqs after its join only
        for o, want in last.items():
            if o == f["node_id"]:
                continue
            if prog.get(o) != want or (not joined and got.get(o) != want[1]):
                return False
    return True


def summarize(name: str, cl: Cluster, extra: dict[str, Any], wall: float) -> dict[str, Any]:
    finals = [r.final for r in cl.runs if r.final is not None]
    survivors = [r for r in cl.runs if r.final is not None]
    anchors = [np.load(cl.dir / f"anchor-{r.node_id:x}.npy") for r in survivors]
    spread = float((np.max(anchors, 0) - np.min(anchors, 0)).max()) if len(anchors) > 1 else 0.0
    stalls = {r.label: round(r.longest_stall(), 3) for r in survivors}
    return {
        "fault": name,
        "wall_s": round(wall, 1),
        "accuracy": {
            r.label: round(f["accuracy"], 4) for r, f in zip(survivors, finals, strict=True)
        },
        "accuracy_mean": round(float(np.mean([f["accuracy"] for f in finals])), 4),
        "all_finite": all(f["finite"] and f["anchor_finite"] for f in finals),
        "max_abs_weight": round(max(f["max_abs_weight"] for f in finals), 3),
        "exact_delivery": exact_delivery(finals),
        "drained": all(f["delivery_complete"] for f in finals),
        "anchor_spread": spread,
        "peak_rss_mib": {r.label: round(r.hwm_kib / 1024, 1) for r in cl.runs},
        "longest_stall_s": max(stalls.values(), default=0.0),
        "longest_stall_by_node": stalls,
        "steps": {r.label: r.step for r in cl.runs},
        "killed": [r.label for r in cl.runs if r.killed],
        "counters": {r.label: counters(f) for r, f in zip(survivors, finals, strict=True)},
        "origins_tracked": {
            r.label: f["origins_tracked"] for r, f in zip(survivors, finals, strict=True)
        },
        "details": extra,
    }


#: Drops of a healthy mesh (a relayed copy of an entry already applied, or of one's own entry):
#: counted in report.json, left out of the report's refusals.
BENIGN = frozenset({"duplicate", "own_origin"})


def _sum(res: dict[str, Any], section: str, key: str) -> int:
    return sum(int(c[section].get(key, 0)) for c in res["counters"].values())


def verdicts(res: dict[str, Any], clean: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"target", "pass", "basis"}]``: basis "exact" (counts and state) or "figure" (a rate or
    an accuracy of this one run)."""
    v: list[dict[str, Any]] = []

    def add(target: str, ok: bool, basis: str = "exact") -> None:
        v.append({"target": target, "pass": bool(ok), "basis": basis})

    name, d = res["fault"], res["details"]
    add("no non-finite weight", res["all_finite"])
    if name != "kill9":
        add("every entry of every finished node delivered once (exact seqs)", res["exact_delivery"])
    n_members = len(res["origins_tracked"])
    if clean is not None and name == "delay_stalls":  # the accuracy target (item 3)
        pts = 100 * (res["accuracy_mean"] - clean["accuracy_mean"])
        add(f"accuracy within 2 points of the clean run ({pts:+.2f})", pts >= -2.0, "figure")
    if name == "kill9":
        add(
            "pacing within 10 % (survivors' steps/s after/before)",
            all(x >= 0.9 for x in d["pacing_ratio"]),
            "figure",
        )
        add(
            "the restarted node rejoined from a trusted snapshot; the survivors got its seqs",
            d["restarted_bootstrapped"] and d["survivors_got_every_restarted_seq"],
        )
        pulled = min(
            100 * (e - b)
            for e, b in zip(
                d["survivors_accuracy_at_end"], d["survivors_accuracy_at_restart"], strict=True
            )
        )
        add(
            f"the rejoin does not pull the survivors' accuracy down ({pulled:+.2f} points)",
            pulled >= -2.0,
            "figure",
        )
    elif name == "snapshot_kill":
        t = d["joiner_snapshot_trust"]
        add(
            "the source was killed mid-transfer and counted",
            d["source_killed"] and t.get("sources_failed", 0) >= 1,
        )
        add(
            "poisoned snapshot refused (stranger counted, its anchor not installed)",
            t.get("sources_refused", 0) >= 1
            and d["joiner_bootstrapped"]
            and d["joiner_installed_max_abs"] < d["poison_value"] / 10,
        )
    elif name == "partition":
        add(
            "re-convergence after the partition: every lost entry repaired, none given up",
            res["exact_delivery"]
            and _sum(res, "repair", "entries_resent") > 0
            and _sum(res, "repair", "seqs_given_up") == 0,
        )
    elif name == "flood":
        add(
            "the flood does not evict members (exact delivery, no packet dropped from a queue)",
            res["exact_delivery"] and _sum(res, "transport", "dropped_packets") == 0,
        )
        add(
            "flood refused and counted",
            _sum(res, "transport", "rejected_not_member")
            + _sum(res, "receive_errors", "BAD_IDENTIFIER")
            > 0,
        )
        add(
            "only members tracked", all(n <= n_members - 1 for n in res["origins_tracked"].values())
        )
    elif name == "packet248":
        add(
            "every 3e38 packet refused whole and counted (NON_FINITE_RESULT)",
            all(
                c["receive_errors"].get("NON_FINITE_RESULT", 0) >= 1
                for c in res["counters"].values()
            ),
        )
    elif name in ("forged", "forged_unsigned"):
        refused = sum(
            sum(int(n) for k, n in c[sec].items() if k not in BENIGN)
            for c in res["counters"].values()
            for sec in ("receive_errors", "receive_drops")
        )
        add("forged claims refused and counted", refused > 0)
        add(
            "no forged origin or incarnation tracked (members only, their real incarnations)",
            res["exact_delivery"]
            and all(n <= n_members - 1 for n in res["origins_tracked"].values()),
        )
    return v


# ---------------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------------


def write_report(out: Path, report: dict[str, Any]) -> None:
    (out / "report.json").write_text(json.dumps(report, indent=1))
    clean = report["faults"].get("clean")
    lines = [
        "# Fault report (issue 12 item 9)",
        "",
        f"Command: `{report['command']}`  ",
        f"Mode: {report['mode']}, seed {report['seed']}, {report['nodes']} node processes "
        f"(Python, NumPy MLP 64-{report['params']['hidden']}-10, "
        f"{report['params']['steps']} steps), real Zenoh on loopback.",
        "",
        "| fault | accuracy (mean) | vs clean (points) | peak RSS max (MiB) | longest stall (s) "
        "| refusals (sum over nodes) | verdicts |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in report["faults"].items():
        pts = (
            f"{100 * (r['accuracy_mean'] - clean['accuracy_mean']):+.2f}"
            if clean is not None
            else "-"
        )
        refused: dict[str, int] = {}
        for c in r["counters"].values():
            for sec in ("receive_errors", "receive_drops"):
                for k, n in c[sec].items():
                    if k not in BENIGN:
                        refused[k] = refused.get(k, 0) + int(n)
            nm = int(c["transport"].get("rejected_not_member", 0))
            if nm:
                refused["pre-queue not member"] = refused.get("pre-queue not member", 0) + nm
        ref = ", ".join(f"{k} {n}" for k, n in sorted(refused.items())) or "none"
        ok = sum(v["pass"] for v in r["verdicts"])
        bad = [v["target"] for v in r["verdicts"] if not v["pass"]]
        verdict = f"{ok}/{len(r['verdicts'])} pass" + (f" (FAIL: {'; '.join(bad)})" if bad else "")
        lines.append(
            f"| {name} | {r['accuracy_mean']:.4f} | {pts} | {max(r['peak_rss_mib'].values()):.0f} "
            f"| {r['longest_stall_s']:.2f} | {ref} | {verdict} |"
        )
    for name, err in report["errors"].items():
        lines.append(f"| {name} | - | - | - | - | - | ERROR: {err[:200]} |")
    lines += ["", "## Per fault", ""]
    for name, r in report["faults"].items():
        lines.append(f"### {name}")
        lines.append("")
        for v in r["verdicts"]:
            lines.append(f"- {'PASS' if v['pass'] else 'FAIL'} ({v['basis']}): {v['target']}")
        lines.append(f"- accuracy per node: {r['accuracy']}; peak RSS MiB: {r['peak_rss_mib']}")
        lines.append(
            f"- longest stall per node (s): {r['longest_stall_by_node']}; "
            f"anchor spread {r['anchor_spread']:.3g}; wall {r['wall_s']} s"
        )
        lines.append(f"- details: `{json.dumps(r['details'])}`")
        lines.append("")
    (out / "report.md").write_text("\n".join(lines))


def prepare_data(out: Path, seed: int) -> Path:
    from delta_fabric_demo.data import load_split, partition

    d = load_split(seed)
    parts = partition(d.train, len(MEMBERS), "skewed", seed)
    arrays: dict[str, Any] = {"xt": d.test.x.reshape(-1, 64), "yt": d.test.y}
    for i, s in enumerate(parts):
        arrays[f"x{i}"], arrays[f"y{i}"] = s.x.reshape(-1, 64), s.y
    arrays["x3"], arrays["y3"] = d.train.x.reshape(-1, 64), d.train.y
    path = out / "data.npz"
    np.savez(path, **arrays)
    return path


def parse(argv: list[str] | None) -> argparse.Namespace:
    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:
            raise UsageError(message)

    ap = Parser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", required=True, type=Path, help="directory for report.md/.json")
    ap.add_argument("--quick", action="store_true", help="reduced sizes (CI)")
    ap.add_argument(
        "--only", help="comma-separated faults (clean is always run): " + ",".join(FAULTS)
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cut-seconds", type=float, help="partition length (default 30, quick 2)")
    a = ap.parse_args(argv)
    only = FAULTS if a.only is None else tuple(x.strip() for x in a.only.split(","))
    bad = [x for x in only if x not in FAULTS]
    if bad or not only:
        raise UsageError(
            f"--only: unknown fault {', '.join(bad) or repr(a.only)} (known: {', '.join(FAULTS)})"
        )
    a.faults = ("clean", *[f for f in FAULTS if f in only and f != "clean"])
    if a.seed < 0:
        raise UsageError("--seed must be >= 0")
    if a.cut_seconds is not None and not 0 < a.cut_seconds <= 120:
        raise UsageError("--cut-seconds must be in (0, 120]")
    return a


def run_report(
    out: Path,
    faults: tuple[str, ...],
    quick: bool,
    seed: int,
    cut_seconds: float | None = None,
    command: str = "",
    keep_going: bool = True,
) -> dict[str, Any]:
    """Run ``faults`` (the first must be ``clean``), write the report after each; a fault that
    fails to run (a node that died, a bounded wait that ran out) is recorded in ``errors`` when
    ``keep_going``."""
    out.mkdir(parents=True, exist_ok=True)
    p = QUICK if quick else FULL
    if cut_seconds is not None:
        p = Params(**{**p.__dict__, "cut_seconds": cut_seconds})
    data = prepare_data(out, seed)
    report: dict[str, Any] = {
        "command": command,
        "mode": "quick" if quick else "full",
        "seed": seed,
        "nodes": len(MEMBERS),
        "params": dict(p.__dict__),
        "faults": {},
        "errors": {},
    }
    for name in faults:
        cl = Cluster(name, out, p, data, seed)
        t0 = time.monotonic()
        try:
            extra = FAULT_FNS[name](cl)
        except (RuntimeError, TimeoutError, OSError) as exc:  # one fault's failure, not the run's
            if name == "clean" or not keep_going:
                raise
            report["errors"][name] = f"{type(exc).__name__}: {exc}"
            print(f"{name:14s} ERROR {report['errors'][name]}", flush=True)
            write_report(out, report)
            continue
        finally:
            cl.close()
        res = summarize(name, cl, extra, time.monotonic() - t0)
        res["verdicts"] = verdicts(res, report["faults"].get("clean"))
        report["faults"][name] = res
        ok = all(v["pass"] for v in res["verdicts"])
        print(
            f"{name:14s} acc {res['accuracy_mean']:.4f} stall {res['longest_stall_s']:.2f}s "
            f"rss {max(res['peak_rss_mib'].values()):.0f}MiB {res['wall_s']}s "
            f"{'PASS' if ok else 'FAIL'}",
            flush=True,
        )
        write_report(out, report)
    return report


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse(argv)
    except UsageError as exc:
        print(f"fault_report.py: {exc}", file=sys.stderr)
        return 2
    cmd = "python bench/fault_report.py " + " ".join(sys.argv[1:] if argv is None else argv)
    report = run_report(a.out, a.faults, a.quick, a.seed, a.cut_seconds, cmd)
    failed = [n for n, r in report["faults"].items() if not all(v["pass"] for v in r["verdicts"])]
    failed += list(report["errors"])
    print(f"report: {a.out / 'report.md'}; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
