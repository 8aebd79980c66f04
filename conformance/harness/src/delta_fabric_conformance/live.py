"""Live scenarios over real Zenoh (``conformance/scenarios/*.json``, format in ``interop/README.md``).

A scenario names nodes with roles ``A`` and ``B``; it runs once per ordered pair of implementations
(``A`` x ``B``, different implementations when two or more support the scenario, else the one with
itself). Every node is its own driver process. The runner picks free loopback ports, joins the nodes one
by one (each connects to every node joined before it: multicast and gossip scouting off, ``tcp/127.0.0.1``
endpoints only), waits for their liveliness tokens, then sends the scenario's phases: one ``peer`` request
per node and phase, all nodes of a phase concurrently. It finally collects a ``report`` of every node and
judges the scenario's checks itself.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.ports import free_ports

from delta_fabric_conformance.claims import (
    config_features,
    not_claimed_reason,
    packet_features,
    packet_file_features,
    spec_1_1_ids,
    vector_level,
)
from delta_fabric_conformance.client import DriverClient, ProtocolViolation
from delta_fabric_conformance.compare import f32_bits
from delta_fabric_conformance.kit.models import model_manifest
from delta_fabric_conformance.results import (
    FAILED,
    NOT_CLAIMED,
    PASSED,
    UNSUPPORTED,
    ImplRun,
    ResultSink,
    level_prefix,
)

__all__ = ["ScenarioError", "free_ports", "load_scenarios", "run_scenarios"]

ROLES = ("A", "B")
INCARNATION_BASE = (
    1_700_000_000_000_000  # microseconds since the epoch of a fixed date (DF-RCV-4 style)
)
INCARNATION_STEP = 1_000_000


class ScenarioError(Exception):
    """The scenario cannot go on (a node failed or answered something other than ok)."""


def load_scenarios(folder: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(folder.glob("*.json")):
        with open(p, encoding="utf-8") as f:
            sc = json.load(f)
        sc.setdefault("id", p.stem)
        out.append(sc)
    return out


def node_id_for(scenario: str, name: str) -> int:
    """A deterministic non-zero node id per scenario and node name."""
    h = int.from_bytes(hashlib.sha256(f"{scenario}/{name}".encode()).digest()[:8], "big")
    return h or 1


@dataclass
class Node:
    name: str
    role: str
    impl: ImplRun
    client: DriverClient
    node_id: int
    port: int
    subscribe: list[str]
    late: bool
    incarnations: list[int] = field(default_factory=list)
    joined: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def hex(self) -> str:
        return f"{self.node_id:016x}"

    @property
    def endpoint(self) -> str:
        return f"tcp/127.0.0.1:{self.port}"


class ScenarioRun:
    """One scenario with one assignment of implementations to roles."""

    def __init__(
        self,
        runner: ResultSink,
        sc: Mapping[str, Any],
        roles: Mapping[str, ImplRun],
        tag: str,
        work: Path,
    ) -> None:
        self.runner = runner
        self.sc = sc
        self.tag = tag
        self.work = work
        self.namespace = f"deltafabric/conformance/{sc['id']}/{secrets.token_hex(4)}"
        self.manifest = model_manifest(
            sc["model"], bool(sc.get("config", {}).get("include_buffers", False))
        )
        specs = sc["nodes"]
        ports = free_ports(len(specs))
        self.nodes: dict[str, Node] = {}
        for i, spec in enumerate(specs):
            name = str(spec["name"])
            impl = roles[str(spec["role"])]
            client = DriverClient(
                impl.name,
                impl.impl.argv(),
                work / "logs" / f"{name}.{impl.name}.stderr.log",
                schema=runner.opts.schema,
                cwd=runner.opts.cwd,
            )
            node = Node(
                name,
                str(spec["role"]),
                impl,
                client,
                node_id_for(str(sc["id"]), name),
                ports[i],
                [str(s) for s in spec.get("subscribe", ["*"])],
                bool(spec.get("late", False)),
                [INCARNATION_BASE + i + 1],
            )
            self.nodes[name] = node
        self.data: dict[str, Any] = {}
        self.timeout = float(sc.get("timeout_s", 60.0))

    # plumbing ---------------------------------------------------------------------------------------
    def start(self) -> None:
        for n in self.nodes.values():
            n.client.start()
            r = n.client.request(
                {"cmd": "hello", "versions": [1], "spec_version": "1.1"}, timeout=120.0
            )
            if r.kind != "ok":
                raise ScenarioError(f"{n.name} ({n.impl.name}): hello answered {r.kind}")

    def stop(self) -> None:
        for n in self.nodes.values():
            if n.client.alive:
                n.client.stop()
            n.client.kill()

    def phase(self, scripts: Mapping[str, list[dict[str, Any]]], timeout: float) -> None:
        """Send one peer request per node (concurrently) and collect every answer."""
        pending = []
        for name, script in scripts.items():
            if not script:
                continue
            n = self.nodes[name]
            try:
                seq = n.client.send(
                    {
                        "cmd": "peer",
                        "session": f"{self.sc['id']}/{name}",
                        "timeout_s": timeout,
                        "script": script,
                    }
                )
            except ProtocolViolation as v:
                n.impl.record(v, f"live {self.sc['id']}")
                raise ScenarioError(f"{name} ({n.impl.name}): {v}") from None
            pending.append((n, seq, script))
        problems = []
        for n, seq, script in pending:
            try:
                r = n.client.receive(seq, timeout + 30.0, "peer")
            except ProtocolViolation as v:
                n.impl.record(v, f"live {self.sc['id']}")
                problems.append(f"{n.name} ({n.impl.name}): {v}")
                continue
            if r.kind != "ok":
                problems.append(
                    f"{n.name} ({n.impl.name}): peer answered {r.kind}: {json.dumps(r.body)[:300]}"
                )
                continue
            events = r.body["events"]
            if len(events) != len(script):
                problems.append(f"{n.name}: {len(events)} events for {len(script)} instructions")
            for ins, ev in zip(script, events, strict=False):
                if ins["op"] == "wait_alive" and set(ev.get("alive", [])) < set(
                    ins.get("nodes", [])
                ):
                    problems.append(f"{n.name}: peers not alive: {ev.get('alive')}")
                if ev.get("op") != ins["op"]:
                    problems.append(
                        f"{n.name}: event {ev.get('op')!r} for instruction {ins['op']!r}"
                    )
                want = not bool(ins.get("expect_timeout", False))
                if ins["op"] == "wait" and ev.get("satisfied") is not want:
                    problems.append(
                        f"{n.name}: wait {json.dumps(ins.get('until'))[:200]} -> {ev.get('satisfied')}"
                    )
            n.events.extend(events)
        if problems:
            raise ScenarioError("; ".join(problems))

    # instruction translation ------------------------------------------------------------------------
    def _ref(self, value: Any, key: str) -> Any:
        """Node names -> hex ids in the members that name nodes; ``name#k`` -> k-th incarnation."""
        if isinstance(value, str):
            if key in ("incarnation", "sender_incarnation") and "#" in value:
                name, _, k = value.partition("#")
                return f"{self.nodes[name].incarnations[int(k)]:016x}"
            if key in ("origin", "from", "sender") and value in self.nodes:
                return self.nodes[value].hex
        return value

    def _translate(self, obj: Any, key: str = "") -> Any:
        if isinstance(obj, dict):
            return {k: self._translate(v, k) for k, v in obj.items()}
        if isinstance(obj, list):
            if key == "nodes":
                return [
                    self.nodes[x].hex if isinstance(x, str) and x in self.nodes else x for x in obj
                ]
            return [self._translate(x, key) for x in obj]
        return self._ref(obj, key)

    def _join_args(self, n: Node) -> dict[str, Any]:
        earlier = [m for m in self.nodes.values() if m.joined and m is not n]
        init = dict(self.sc.get("init", {"kind": "zeros"}))
        init.update(self.sc.get("node_init", {}).get(n.name, {}))
        if init["kind"] == "snapshot":
            init["from"] = self.nodes[init["from"]].hex
        elif init["kind"] == "weights" and "b64" not in init:
            init["b64"] = self.initial_weights()
        return {
            "op": "join",
            "node_id": n.hex,
            "incarnation": f"{n.incarnations[-1]:016x}",
            "namespace": self.namespace,
            "listen": [n.endpoint],
            "connect": [m.endpoint for m in earlier],
            "subscribe": ["*"]
            if n.subscribe == ["*"]
            else [self.nodes[s].hex for s in n.subscribe],
            "model": self.sc["model"],
            "config": self.sc.get("config", {}),
            "init": init,
            "seed": int(self.sc.get("seed", 0)),
        }

    def initial_weights(self) -> str:
        """Deterministic initial weights, identical on every node (PyTorch's default rules, drawn with
        NumPy from the scenario seed): weights of rank >= 2 and their biases uniform in
        +-1/sqrt(fan_in); 1-D ``*.weight`` (normalisation scale) and ``*running_var`` ones;
        other 1-D ``*running_mean`` zeros."""
        rng = np.random.default_rng(int(self.sc.get("seed", 0)))
        shapes = {t.name: t.shape for t in self.manifest.tensors}
        parts = []
        for t in self.manifest.tensors:
            name = t.name
            if name.endswith("running_var") or (name.endswith(".weight") and len(t.shape) == 1):
                parts.append(np.ones(t.numel, dtype=np.float32))
                continue
            weight = shapes.get(name.rsplit(".", 1)[0] + ".weight", t.shape)
            if name.endswith("running_mean") or len(weight) < 2:
                parts.append(np.zeros(t.numel, dtype=np.float32))
                continue
            bound = 1.0 / np.sqrt(float(np.prod(weight[1:])))
            parts.append(rng.uniform(-bound, bound, size=t.numel).astype(np.float32))
        flat = np.concatenate(parts).astype("<f4")
        return base64.b64encode(flat.tobytes()).decode("ascii")

    def instruction(self, n: Node, ins: Mapping[str, Any]) -> dict[str, Any]:
        op = ins["op"]
        if op == "join":
            n.joined = True
            return self._join_args(n)
        out = self._translate(dict(ins))
        if op == "wait_alive" and "nodes" not in ins:
            out["nodes"] = [m.hex for m in self.nodes.values() if m.joined and m is not n]
        elif op == "restart":
            n.incarnations.append(n.incarnations[-1] + INCARNATION_STEP)
            out["incarnation"] = f"{n.incarnations[-1]:016x}"
            out["connect"] = [m.endpoint for m in self.nodes.values() if m.joined and m is not n]
        elif op == "inject":
            pk = []
            for ref in ins.get("vectors", []):
                pk.append(
                    base64.b64encode(
                        (self.runner.opts.vectors / f"{ref}.dfp").read_bytes()
                    ).decode()
                )
            out = {"op": "inject", "packets": pk + list(ins.get("packets", []))}
        elif op == "send":
            out["packets"] = [self._packet(n, p) for p in out["packets"]]
        elif op in ("train", "evaluate") and isinstance(ins.get("data"), str):
            out["data"] = self.data_files(n, str(ins["data"]))
        return dict(out)

    def _packet(self, n: Node, p: Mapping[str, Any]) -> dict[str, Any]:
        inc = f"{n.incarnations[-1]:016x}"
        entries = [
            {"origin": n.hex, "incarnation": inc, "hops": 0, **e} for e in p.get("entries", [])
        ]
        return {
            "version_major": 1,
            "version_minor": 0,
            "sender": n.hex,
            "sender_incarnation": inc,
            "fingerprint": self.manifest.fingerprint.hex(),
            "encoding": "F32",
            **p,
            "entries": entries,
        }

    def data_files(self, n: Node, which: str) -> dict[str, Any]:
        from delta_fabric_conformance.digits import write_shards

        if not self.data:
            trainers = [m.name for m in self.nodes.values()]
            self.data = write_shards(self.work / "data", trainers, self.sc.get("data", {}))
        key = "test" if which == "test" else n.name
        return dict(self.data[key])

    # the run ----------------------------------------------------------------------------------------
    def run(self) -> dict[str, dict[str, Any]]:
        """Run every phase; returns the final report of each node by name."""
        self.start()
        for n in self.nodes.values():
            if not n.late:
                self.phase({n.name: [self.instruction(n, {"op": "join"})]}, self.timeout)
        early = [n for n in self.nodes.values() if not n.late]
        if len(early) > 1:
            self.phase(
                {
                    n.name: [self.instruction(n, {"op": "wait_alive", "timeout_s": 30})]
                    for n in early
                },
                self.timeout,
            )
        for ph in self.sc.get("phases", []):
            scripts: dict[str, list[dict[str, Any]]] = {}
            for key, instrs in ph.items():
                targets = (
                    [n for n in self.nodes.values() if n.joined]
                    if key == "*"
                    else [self.nodes[key]]
                )
                for n in targets:
                    scripts.setdefault(n.name, []).extend(self.instruction(n, i) for i in instrs)
            self.phase(scripts, float(ph.get("timeout_s", self.timeout)))
        reports: dict[str, dict[str, Any]] = {}
        final: dict[str, list[dict[str, Any]]] = {
            n.name: [{"op": "report", "weights": True}, {"op": "leave"}]
            for n in self.nodes.values()
            if n.joined
        }
        self.phase(final, self.timeout)
        for n in self.nodes.values():
            reps = [e for e in n.events if e.get("op") == "report"]
            if reps:
                reports[n.name] = reps[-1]
        return reports


# checks ---------------------------------------------------------------------------------------------


def _weights(
    rep: Mapping[str, Any], which: str = "active"
) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.frombuffer(base64.b64decode(rep[f"{which}_b64"]), dtype="<f4").astype(np.float32)


def _names(run: ScenarioRun, spec: Any) -> list[str]:
    if spec in (None, "*"):
        return [n for n in run.nodes if run.nodes[n].joined or n in run.nodes]
    return [spec] if isinstance(spec, str) else list(spec)


def judge(
    run: ScenarioRun, reports: Mapping[str, Mapping[str, Any]], baseline: Mapping[str, Any] | None
) -> list[str]:
    """Every failed check of the scenario, as messages."""
    problems: list[str] = []
    for chk in run.sc.get("checks", []):
        kind = chk["check"]
        for name in (
            _names(run, chk.get("node", chk.get("nodes"))) if kind != "same_weights" else [None]
        ):
            rep = reports.get(name) if name is not None else None
            if name is not None and rep is None:
                problems.append(f"{kind}: no report from {name}")
                continue
            msg = _check_one(run, chk, name, rep, reports, baseline)
            if msg:
                problems.append(f"{kind}{'[' + name + ']' if name else ''}: {msg}")
    return problems


def _accepted_key(run: ScenarioRun, want: Mapping[str, Any], got: Mapping[str, Any]) -> bool:
    for k, v in want.items():
        exp = run._ref(v, k)
        if got.get(k) != exp:
            return False
    return True


def _check_one(
    run: ScenarioRun,
    chk: Mapping[str, Any],
    name: str | None,
    rep: Mapping[str, Any] | None,
    reports: Mapping[str, Mapping[str, Any]],
    baseline: Mapping[str, Any] | None,
) -> str | None:
    kind = chk["check"]
    if kind == "accepted":
        assert rep is not None
        got = list(rep["accepted"])
        if "exactly" in chk:
            want = list(chk["exactly"])
            if len(want) != len(got):
                return f"accepted {len(got)} entries, expected {len(want)}: {got}"
            remaining = list(got)
            for w in want:
                hit = next((g for g in remaining if _accepted_key(run, w, g)), None)
                if hit is None:
                    return f"no accepted entry matches {w}; accepted {got}"
                remaining.remove(hit)
        for w in chk.get("includes", []):
            if not any(_accepted_key(run, w, g) for g in got):
                return f"no accepted entry matches {w}; accepted {got}"
        return None
    if kind == "counter":
        assert rep is not None
        v: Any = rep["counters"]
        for part in str(chk["path"]).split("."):
            v = v.get(part, 0) if isinstance(v, dict) else 0
        if "eq" in chk and v != chk["eq"]:
            return f"{chk['path']} = {v}, expected {chk['eq']}"
        if "min" in chk and v < chk["min"]:
            return f"{chk['path']} = {v}, expected >= {chk['min']}"
        return None
    if kind == "weights":
        assert rep is not None
        w = _weights(rep, chk.get("which", "active"))
        expect = np.zeros_like(w)
        for i, x in chk["values"].items():
            expect[int(i)] = np.float32(x)
        bad = np.flatnonzero(w.view(np.uint32) != expect.view(np.uint32))
        if bad.size:
            j = int(bad[0])
            wj = float(w[j])
            return (
                f"{bad.size} weights differ; [{j}] = {wj!r} (f32 {f32_bits(wj):08x}), "
                f"expected {float(expect[j])!r}"
            )
        return None
    if kind == "same_weights":
        which = chk.get("which", "active")
        names = _names(run, chk.get("nodes"))
        shas = {n: reports[n][f"{which}_sha256"] for n in names if n in reports}
        if len(set(shas.values())) != 1 or len(shas) != len(names):
            return f"{which} weights differ: {shas}"
        return None
    if kind == "same_as":
        assert rep is not None and name is not None
        other = reports.get(str(chk["other"]))
        if other is None:
            return f"no report from {chk['other']}"
        if "report" in chk:  # the k-th report of each node instead of the final one
            k = int(chk["report"])
            mine = [e for e in run.nodes[name].events if e.get("op") == "report"]
            theirs = [e for e in run.nodes[str(chk["other"])].events if e.get("op") == "report"]
            if len(mine) <= k or len(theirs) <= k:
                return f"report {k} missing"
            rep, other = mine[k], theirs[k]
        a = rep[f"{chk.get('which', 'active')}_sha256"]
        b = other[f"{chk.get('other_which', 'anchor')}_sha256"]
        return (
            None
            if a == b
            else f"{name} {chk.get('which', 'active')} != {chk['other']} {chk.get('other_which', 'anchor')}"
        )
    if kind == "weights_close":  # DF-NUM-1
        tol = float(chk.get("rel_tol", 5e-2))
        names = _names(run, chk.get("nodes"))
        ws = {n: _weights(reports[n]) for n in names if n in reports}
        assert rep is not None and name is not None
        w = ws[name]
        for peer_name, v in ws.items():
            if peer_name <= name:
                continue
            diff = float(np.max(np.abs(w.astype(np.float64) - v)))
            scale = max(float(np.max(np.abs(w))), float(np.max(np.abs(v))))
            if diff > tol * scale:
                return f"max |w_{name} - w_{peer_name}| = {diff:.4g} > {tol} * {scale:.4g}"
        return None
    if kind == "accuracy":
        evs = [e for e in run.nodes[str(name)].events if e.get("op") == "evaluate"]
        if not evs:
            return "no evaluate event"
        acc = float(evs[-1]["accuracy"])
        if acc < float(chk["min"]):
            return f"accuracy {acc:.4f} < {chk['min']}"
        worst = min(float(x) for x in evs[-1]["per_class"])
        if worst < float(chk.get("min_per_class", 0.0)):
            return f"a class has accuracy {worst:.4f} < {chk['min_per_class']}"
        if baseline is not None and "max_drop_vs_baseline" in chk:
            ref = float(baseline["mean_accuracy"])
            if acc < ref - float(chk["max_drop_vs_baseline"]):
                return f"accuracy {acc:.4f} more than {chk['max_drop_vs_baseline']} below baseline {ref:.4f}"
        return None
    return f"unknown check {kind!r}"


def _stated_encodings(obj: Any, vectors: Path | None) -> set[str]:
    """The OPTIONAL features every object of a scenario's configuration or scripts states with an
    ``encoding`` or ``index_encoding`` member (a node's send encoding, a scripted packet), and those the
    decode vectors an ``inject`` instruction sends state in their bytes (under ``vectors``)."""
    out: set[str] = set()
    if isinstance(obj, Mapping):
        if "encoding" in obj or "index_encoding" in obj:
            out |= packet_features(obj)
        if obj.get("op") == "inject" and vectors is not None:
            for ref in obj.get("vectors", []):
                out |= packet_file_features(vectors / f"{ref}.dfp")
        for v in obj.values():
            out |= _stated_encodings(v, vectors)
    elif isinstance(obj, list):
        for v in obj:
            out |= _stated_encodings(v, vectors)
    return out


def scenario_needs(
    sc: Mapping[str, Any], ids_1_1: Sequence[str] | frozenset[str], vectors: Path | None = None
) -> tuple[list[str], str]:
    """What a live scenario needs of both implementations: the OPTIONAL features (its ``features``,
    the cluster configuration's encodings and ``signing``, the encodings its scripts state) and the
    level that requires it (spec DF-CNF-30; see :func:`delta_fabric_conformance.claims.vector_level`)."""
    feats = {str(f) for f in sc.get("features", [])}
    config = sc.get("config", {})
    feats |= config_features(config) | _stated_encodings(sc.get("phases", []), vectors)
    if isinstance(config, Mapping) and config.get("signing"):
        feats.add("signing")
    reqs = [str(r) for r in sc.get("requirements", [])]
    return sorted(feats), vector_level("live", feats, reqs, ids_1_1)


def _pairs(sc: Mapping[str, Any], runs: Sequence[ImplRun]) -> list[tuple[ImplRun, ImplRun]]:
    need = set(sc.get("capabilities", ["peer"]))
    able = [r for r in runs if need <= r.caps and r.abandoned is None]
    if len(able) >= 2:
        return [(a, b) for a, b in itertools.permutations(able, 2)]
    return [(a, a) for a in able]


def _test_id(sc: Mapping[str, Any], a: ImplRun, b: ImplRun, runs: Sequence[ImplRun]) -> str:
    fws = [r.framework for r in runs]
    same_fw = len(set(fws)) != len(fws)
    left, right = (a.name, b.name) if same_fw else (a.framework, b.framework)
    return f"{level_prefix(str(sc.get('level', 'REQUIRED')))}.live.{left}_x_{right}.{sc['id']}"


def run_scenarios(runner: ResultSink, runs: list[ImplRun]) -> None:
    spec = runner.opts.spec
    ids_1_1 = spec_1_1_ids(spec.read_text(encoding="utf-8")) if spec.is_file() else frozenset()
    for sc in load_scenarios(runner.opts.scenarios):
        if runner.opts.scenario_names and sc["id"] not in runner.opts.scenario_names:
            continue
        level = str(sc.get("level", "REQUIRED")).upper()
        feats, spec_level = scenario_needs(sc, ids_1_1, runner.opts.vectors)
        claimed = []
        for r in runs:
            why = not_claimed_reason(spec_level, feats, r.level, r.caps)
            if why is None:
                claimed.append(r)
                continue
            tid = _test_id(sc, r, r, runs)
            if runner.wanted(tid):
                runner.add(
                    tid,
                    level,
                    [r.name],
                    NOT_CLAIMED,
                    why,
                    sc.get("requirements", []),
                    0.0,
                    "live",
                    feats,
                    spec_level=spec_level,
                )
        pairs = _pairs(sc, claimed)
        if not pairs:
            for r in claimed:
                tid = _test_id(sc, r, r, runs)
                if runner.wanted(tid):
                    runner.add(
                        tid,
                        level,
                        [r.name],
                        UNSUPPORTED,
                        f"capabilities {sc.get('capabilities', ['peer'])} not declared",
                        sc.get("requirements", []),
                        0.0,
                        "live",
                        feats,
                        spec_level=spec_level,
                    )
            continue
        baseline: dict[str, Any] | None = None
        for a, b in pairs:
            tid = _test_id(sc, a, b, runs)
            if not runner.wanted(tid):
                continue
            base_fw = sc.get("baseline", {}).get("framework")
            is_baseline = base_fw is not None and a.framework == b.framework == base_fw
            if baseline is None and base_fw is not None and not is_baseline:
                baseline = _baseline(runner, sc, runs)
            t0 = time.monotonic()
            tag = f"{a.name}_x_{b.name}"
            work = runner.opts.output / "live" / str(sc["id"]) / tag
            run = ScenarioRun(runner, sc, {"A": a, "B": b}, tag, work)
            notes = ""
            try:
                reports = run.run()
                problems = judge(run, reports, None if is_baseline else baseline)
                notes = _notes(run, reports, None if is_baseline else baseline)
            except ScenarioError as exc:
                problems = [str(exc)]
            except Exception as exc:  # runner-side failure while driving the scenario
                problems = [f"{type(exc).__name__}: {exc}"]
            finally:
                run.stop()
            (work / "events.json").parent.mkdir(parents=True, exist_ok=True)
            (work / "events.json").write_text(
                json.dumps({n.name: n.events for n in run.nodes.values()}, indent=1),
                encoding="utf-8",
            )
            runner.add(
                tid,
                level,
                [a.name, b.name],
                FAILED if problems else PASSED,
                ("; ".join(problems) + (f" ({notes})" if notes else ""))[:2000],
                sc.get("requirements", []),
                time.monotonic() - t0,
                "live",
                feats,
                spec_level=spec_level,
            )


def _notes(
    run: ScenarioRun, reports: Mapping[str, Mapping[str, Any]], baseline: Mapping[str, Any] | None
) -> str:
    """Figures worth reading even when the scenario passes: accuracies and weight agreement."""
    parts = []
    accs = {
        n.name: float(e["accuracy"])
        for n in run.nodes.values()
        for e in n.events
        if e.get("op") == "evaluate"
    }
    if accs:
        parts.append("accuracy " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(accs.items())))
    if baseline is not None:
        parts.append(f"baseline {baseline['mean_accuracy']:.4f}")
    if any(c["check"] == "weights_close" for c in run.sc.get("checks", [])):
        ws = {n: _weights(r) for n, r in reports.items() if "active_b64" in r}
        worst = 0.0
        for x, y in itertools.combinations(ws.values(), 2):
            scale = max(float(np.max(np.abs(x))), float(np.max(np.abs(y)))) or 1.0
            worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y))) / scale)
        parts.append(f"max weight difference {worst:.3g} x max |w| (tolerance 5e-2)")
    return "; ".join(parts)


def _baseline(
    runner: ResultSink, sc: Mapping[str, Any], runs: Sequence[ImplRun]
) -> dict[str, Any] | None:
    """Run the scenario with every role on the baseline framework's implementation (e.g. all PyTorch)."""
    fw = sc["baseline"]["framework"]
    ref = next((r for r in runs if r.framework == fw), None)
    if ref is None:
        return None
    work = runner.opts.output / "live" / str(sc["id"]) / f"baseline_{ref.name}"
    run = ScenarioRun(runner, sc, {"A": ref, "B": ref}, "baseline", work)
    try:
        run.run()
    except ScenarioError:
        return None
    finally:
        run.stop()
    accs = [
        float(e["accuracy"])
        for n in run.nodes.values()
        for e in n.events
        if e.get("op") == "evaluate"
    ]
    return {"mean_accuracy": float(np.mean(accs)) if accs else 0.0}
