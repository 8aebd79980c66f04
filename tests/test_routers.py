"""Two machines, one Zenoh router each: the commands of docs/clusters.md, run as written.

Two network namespaces joined by a veth pair stand for machines A (10.0.0.1) and B (10.0.0.2). The test
reads docs/clusters.md and runs its ``A$`` / ``B$`` lines in order, in the namespace of their machine:
the routers are separate processes (``delta-fabric router``), the nodes are PyTorch nodes in client
mode started by ``delta-fabric run``. Then:

- every node accepted every entry of every other node (the example script prints, per origin, the last
  seq and the number of entries it accepted; seqs run from 1, and the engine accepts each entry once),
  and the final weights agree within DF-NUM-1;
- over mutual TLS with access control: a stranger without a certificate, and one with a certificate from
  another CA, are refused, with a diagnosis that names the certificate and quotes Zenoh's log line;
  machine B's certificate cannot publish on machine A's key (the listener gets B's own puts, never the
  spoofed ones);
- PyTorch nodes on machine A and Burn nodes (``df-node``) on machine B, through the same two routers
  over mutual TLS with access control: every node accepted every entry of every other node (the
  nodes' reports give each origin's last seq and the entries accepted from it), and the final weights
  agree within DF-NUM-1.

Skipped (with the reason) only when not root or when ``ip netns`` is not available; without a built
``df-node`` the mixed cluster is skipped, except under CI (``CI`` set), where it fails. The namespaces,
the veth pair and every process are removed at the end, also on failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("zenoh")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "clusters.md"
HOSTS = {"A": "10.0.0.1", "B": "10.0.0.2"}
NAMESPACE = "team/run1"
DEADLINE = 300.0  # generous: 2 shared CPU cores, torch imports


# the doc -------------------------------------------------------------------------------------------
@dataclass
class Section:
    title: str
    commands: list[tuple[str, str]] = field(default_factory=list)  # (host, command)
    files: dict[str, str] = field(default_factory=dict)


def parse_doc(text: str) -> dict[str, Section]:
    """Sections (by `## ` title) with their `A$` / `B$` lines and `<!-- file: X -->` blocks."""
    sections: dict[str, Section] = {}
    current = Section("")
    pending_file: str | None = None
    in_block = False
    block: list[str] = []
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), Section(line[3:].strip()))
            continue
        m = re.match(r"<!-- file: (\S+) -->", line)
        if m:
            pending_file = m.group(1)
            continue
        if line.startswith("```"):
            if in_block:
                if pending_file is not None:
                    current.files[pending_file] = "\n".join(block) + "\n"
                    pending_file = None
                in_block, block = False, []
            else:
                in_block = True
            continue
        if in_block:
            block.append(line)
            m = re.match(r"^([AB])\$ (.+)$", line)
            if m and pending_file is None:
                current.commands.append((m.group(1), m.group(2)))
    return sections


def test_doc_has_both_setups() -> None:
    sections = parse_doc(DOC.read_text())
    tcp = sections["Plain TCP"]
    tls = sections["Mutual TLS and access control"]
    assert [c for _, c in tcp.commands if "router" in c.split()[:2]], tcp
    assert set(tls.files) == {
        "cluster/router-a.json5",
        "cluster/router-b.json5",
        "cluster/host-a.json5",
        "cluster/host-b.json5",
    }
    assert any(c.startswith("delta-fabric run") for _, c in tls.commands)
    mixed = sections["PyTorch and Burn nodes"]
    assert {h for h, c in mixed.commands if c.startswith("df-node ")} == {"B"}
    assert {h for h, c in mixed.commands if c.startswith("python -m delta_fabric_demo.node ")} == {
        "A"
    }


# the namespaces ------------------------------------------------------------------------------------
def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@dataclass
class Hosts:
    ns: dict[str, str]  # host -> netns name


@pytest.fixture()
def hosts() -> Iterator[Hosts]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed")
    tag = uuid.uuid4().hex[:6]
    ns = {"A": f"df9a-{tag}", "B": f"df9b-{tag}"}
    veth = {"A": f"v9a{tag}", "B": f"v9b{tag}"}
    created: list[str] = []
    try:
        for h in "AB":
            r = _ip("netns", "add", ns[h], check=False)
            if r.returncode != 0:
                pytest.skip(f"`ip netns add` is not available: {r.stderr.strip()}")
            created.append(ns[h])
        _ip("link", "add", veth["A"], "type", "veth", "peer", "name", veth["B"])
        for h in "AB":
            _ip("link", "set", veth[h], "netns", ns[h])
            _ip("-n", ns[h], "addr", "add", f"{HOSTS[h]}/24", "dev", veth[h])
            _ip("-n", ns[h], "link", "set", veth[h], "up")
            _ip("-n", ns[h], "link", "set", "lo", "up")
        yield Hosts(ns)
    finally:
        for name in created:  # deleting a namespace deletes its end of the veth pair, and so both
            _ip("netns", "del", name, check=False)
        _ip("link", "del", veth["A"], check=False)


# processes -----------------------------------------------------------------------------------------
class Proc:
    """A command in a host's namespace; its stdout+stderr are collected by a thread. ``keep_stdin``:
    its stdin is a pipe kept open until it ends (a demo node stops lingering when stdin closes)."""

    def __init__(
        self, ns: str, command: str, cwd: Path, env: dict[str, str], keep_stdin: bool = False
    ) -> None:
        self.command = command
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.p = subprocess.Popen(
            # a plain command replaces the shell (its signals reach it); a shell line runs as is
            [
                "ip",
                "netns",
                "exec",
                ns,
                "bash",
                "-c",
                command if _is_shell(command) else f"exec {command}",
            ],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if keep_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pattern: str, timeout: float) -> str:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if rx.search(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._t.is_alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r} from {self.command!r} "
                        f"(rc {self.p.poll()}):\n{self.text()}"
                    )
                self._cond.wait(min(left, 0.5))

    def wait(self, timeout: float) -> int:
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"{self.command!r} ran past {timeout}s:\n{self.text()}") from None
        self._t.join(timeout=10)
        return rc

    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=10)


def _is_shell(command: str) -> bool:
    return any(op in command for op in ("&&", ";", "|", ">"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT / "python" / "src"), str(ROOT / "python" / "demo" / "src")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("DELTA_FABRIC_LOG", None)
    return env


def _workdir(tmp_path: Path, section: Section) -> Path:
    work = tmp_path / "work"
    (work / "cluster").mkdir(parents=True)
    (work / "python").symlink_to(ROOT / "python")
    for name, text in section.files.items():
        (work / name).write_text(text)
    return work


def _df_node() -> str | None:
    """The df-node binary `cargo build` made (scripts/test.sh puts it on PATH)."""
    found = shutil.which("df-node")
    if found:
        return found
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/delta-fabric/target"))
    binary = target / "debug" / "df-node"
    return str(binary) if binary.is_file() else None


def _env_prefix(cmd: str) -> tuple[str, str]:
    """``("VAR=value ... ", rest)``: the shell's variable assignments before a command."""
    m = re.match(r"((?:[A-Z_][A-Z0-9_]*=\S* )*)(.*)$", cmd)
    assert m is not None
    return m.group(1), m.group(2)


def _is_node(cmd: str) -> bool:
    """A node that the test starts and waits for: the launcher, a demo node, df-node."""
    cmd = _env_prefix(cmd)[1]
    return cmd.startswith(("delta-fabric run ", "python -m delta_fabric_demo.node ", "df-node "))


def _node_id(cmd: str) -> str:
    """The 16-hex-digit id of a node command's ``--node-id``."""
    words = shlex.split(cmd)
    return f"{int(words[words.index('--node-id') + 1], 16):016x}"


def _command(cmd: str, out: Path) -> str:
    """The doc's command as the test runs it: `delta-fabric` and `python` through this interpreter,
    `df-node` as built, a launcher timeout and the script's --out, a node's --dump; variable
    assignments before the command are kept."""
    prefix, cmd = _env_prefix(cmd)
    # through env(1), so that `exec` replaces the shell with the command as before
    return ("env " + prefix if prefix else "") + _command_alone(cmd, out)


def _command_alone(cmd: str, out: Path) -> str:
    if cmd.startswith("python -m delta_fabric_demo.node "):
        dump = shlex.quote(str(out / f"{_node_id(cmd)}.f32"))
        return f"{shlex.quote(sys.executable)} {cmd[len('python ') :]} --dump {dump}"
    if cmd.startswith("python "):
        return f"{shlex.quote(sys.executable)} {cmd[len('python ') :]}"
    if cmd.startswith("df-node "):
        binary = _df_node()
        assert binary is not None
        dump = shlex.quote(str(out / f"{_node_id(cmd)}.f32"))
        return f"{shlex.quote(binary)} {cmd[len('df-node ') :]} --dump {dump}"
    if not cmd.startswith("delta-fabric "):
        return cmd
    rest = cmd[len("delta-fabric ") :]
    if rest.startswith("run "):
        rest = f"run --timeout {int(DEADLINE)} {rest[4:]} --out {shlex.quote(str(out))}"
    return f"{shlex.quote(sys.executable)} -m delta_fabric.cli {rest}"


def run_section(
    hosts: Hosts, section: Section, work: Path, out: Path
) -> tuple[list[Proc], list[Proc]]:
    """Runs the section's lines in order: routers stay up (returned first), launchers are returned
    second, anything else runs to completion."""
    env = _env()
    routers: list[Proc] = []
    launchers: list[Proc] = []
    out.mkdir(parents=True, exist_ok=True)
    for host, cmd in section.commands:
        proc = Proc(hosts.ns[host], _command(cmd, out), work, env, keep_stdin=_is_node(cmd))
        if cmd.startswith("delta-fabric router"):
            routers.append(proc)
            proc.wait_line(r"^router \S+ ready", timeout=60)
        elif _is_node(cmd):
            launchers.append(proc)
        else:
            rc = proc.wait(timeout=60)
            assert rc == 0, f"{cmd!r} failed (rc {rc}):\n{proc.text()}"
    return routers, launchers


def check_cluster(launchers: list[Proc], out: Path, nodes: int) -> None:
    """Every launcher ends with 0; every node accepted every other node's last entry; DF-NUM-1."""
    for proc in launchers:
        rc = proc.wait(timeout=DEADLINE + 30)
        assert rc == 0, f"{proc.command!r} ended with {rc}:\n{proc.text()}"
    text = "\n".join(p.text() for p in launchers)
    progress = {
        m.group(1): (int(m.group(2)), json.loads(m.group(3)))
        for m in re.finditer(
            r"node ([0-9a-f]{16}) progress: last seq (\d+), from origins (\{.*\})$", text, re.M
        )
    }
    assert len(progress) == nodes, text
    for node, (_, seen) in progress.items():
        others = {q: last for q, (last, _) in progress.items() if q != node}
        assert seen == others, f"node {node} accepted {seen}, expected every origin's last {others}"
    # every entry: seqs run 1..last, the engine accepts each (origin, seq) once
    counts = {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r"node ([0-9a-f]{16}) accepted entries: (\{.*\})$", text, re.M)
    }
    assert counts == {
        node: {q: last for q, (last, _) in progress.items() if q != node} for node in progress
    }, f"accepted entries per origin {counts}, sent { ({q: p[0] for q, p in progress.items()}) }"
    _agree([np.load(out / f"{node}.npy") for node in progress])


def _agree(weights: list[np.ndarray]) -> None:
    """DF-NUM-1 for every two nodes."""
    for i in range(len(weights)):
        for j in range(i + 1, len(weights)):
            a, b = weights[i], weights[j]
            scale = max(float(np.abs(a).max()), float(np.abs(b).max()))
            assert float(np.abs(a - b).max()) <= 5e-2 * scale  # DF-NUM-1


def check_mixed(nodes: list[Proc], out: Path, frameworks: dict[str, int]) -> dict[str, object]:
    """Demo nodes and df-node ran with --drain: each ends with 0, reports (``ready`` and ``done``
    JSON lines) that it accepted every entry of every other node, and the dumped weights agree."""
    reports: dict[str, dict[str, object]] = {}
    codes = [proc.wait(timeout=DEADLINE + 30) for proc in nodes]
    # every node's output when one failed: a node that ended well reports its last_seq and counters,
    # which tell a lost or refused packet from a seq another node never sent
    assert codes == [0] * len(nodes), "\n".join(
        f"{proc.command!r} ended with {rc}:\n{proc.text()}"
        for proc, rc in zip(nodes, codes, strict=True)
    )
    for proc in nodes:
        events = {}
        for line in proc.lines:
            if line.startswith("{"):
                ev = json.loads(line)
                events[ev.get("event")] = ev
        assert {"ready", "done"} <= set(events), proc.text()
        reports[str(events["ready"]["node"])] = {**events["done"], **events["ready"]}
    seen = {fw: sum(r["framework"] == fw for r in reports.values()) for fw in frameworks}
    assert seen == frameworks, reports.keys()
    last = {node: r["last_seq"] for node, r in reports.items()}
    for node, r in reports.items():
        others = {q: seq for q, seq in last.items() if q != node}
        # the last entry of every origin, and every entry before it (each is accepted once)
        assert r["origin_progress"] == others, f"{node} ({r['framework']}): {r['origin_progress']}"
        assert r["accepted_by_origin"] == others, (
            f"{node} ({r['framework']}) accepted {r['accepted_by_origin']}, sent {others}"
        )
    _agree([np.fromfile(out / f"{node}.f32", dtype="<f4") for node in reports])
    return {n: (r["framework"], r["last_seq"], r["accepted_by_origin"]) for n, r in reports.items()}


def _stop(procs: list[Proc]) -> None:
    for p in procs:
        p.stop()


def test_two_machines_through_two_routers_plain_tcp(hosts: Hosts, tmp_path: Path) -> None:
    # REQ: DF-ZEN-14 (client mode, explicit endpoints, reaching other nodes through Zenoh routers)
    # REQ: DF-NUM-1
    section = parse_doc(DOC.read_text())["Plain TCP"]
    work, out = _workdir(tmp_path, section), tmp_path / "weights"
    routers: list[Proc] = []
    launchers: list[Proc] = []
    try:
        routers, launchers = run_section(hosts, section, work, out)
        check_cluster(launchers, out, nodes=4)
    finally:
        _stop(launchers + routers[::-1])


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _other_ca(work: Path) -> None:
    """A certificate with the CN of a member, signed by another CA: cluster/other.{pem,key}."""
    d = work / "cluster"
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ca, ca_key = str(d / "other-ca.pem"), str(d / "other-ca.key")
    _openssl(
        "req", "-x509", *ec, "-days", "1", "-subj", "/CN=other-ca", "-keyout", ca_key, "-out", ca
    )
    csr = str(d / "other.csr")
    _openssl("req", *ec, "-subj", "/CN=host-a", "-keyout", str(d / "other.key"), "-out", csr)
    (d / "other.ext").write_text("basicConstraints=CA:FALSE\nsubjectAltName=DNS:host-a\n")
    _openssl(
        *("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "1"),
        *("-extfile", str(d / "other.ext"), "-out", str(d / "other.pem")),
    )


def _stranger_config(work: Path, name: str, cert: str | None) -> str:
    """A client of A's router that trusts the cluster CA, with no certificate or another CA's."""
    tls: dict[str, object] = {"root_ca_certificate": "cluster/ca.pem"}
    if cert is not None:
        tls.update(
            connect_certificate=f"cluster/{cert}.pem",
            connect_private_key=f"cluster/{cert}.key",
            enable_mtls=True,
        )
    config = {
        "mode": "client",
        "connect": {"endpoints": [f"tls/{HOSTS['A']}:7447"]},
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
        "transport": {"link": {"tls": tls}},
    }
    path = f"cluster/{name}.json5"
    (work / path).write_text(json.dumps(config, indent=2))
    return path


def _probe(*args: str) -> str:
    probe = ROOT / "tests" / "cluster_probe.py"
    return " ".join(shlex.quote(a) for a in (sys.executable, str(probe), *args))


def test_two_machines_over_mutual_tls_with_access_control(hosts: Hosts, tmp_path: Path) -> None:
    # REQ: DF-ZEN-14 (mutual TLS and access control through the user's Zenoh config, both languages)
    # REQ: DF-NUM-1
    doc = parse_doc(DOC.read_text())
    section = doc["Mutual TLS and access control"]
    work, out = _workdir(tmp_path, section), tmp_path / "weights"
    env = _env()
    routers: list[Proc] = []
    launchers: list[Proc] = []
    nodes: list[Proc] = []
    probes: list[Proc] = []
    try:
        routers, launchers = run_section(hosts, section, work, out)
        check_cluster(launchers, out, nodes=2)

        # PyTorch nodes on A, Burn nodes on B, through the same routers (same mTLS and ACL)
        if _df_node() is None:
            message = "df-node is not built (cd interop && cargo build -p df-node)"
            if os.environ.get("CI"):
                pytest.fail(message)
            print(f"--- mixed cluster not run: {message}")
        else:
            t0 = time.monotonic()
            _, nodes = run_section(hosts, doc["PyTorch and Burn nodes"], work, tmp_path / "mixed")
            got = check_mixed(nodes, tmp_path / "mixed", {"torch": 2, "burn": 2})
            print(f"--- PyTorch + Burn over mTLS: {time.monotonic() - t0:.1f} s, {got}")

        # strangers: no certificate, and a member's CN from another CA
        _other_ca(work)
        for name, cert in (("stranger", None), ("other-ca", "other")):
            config = _stranger_config(work, name, cert)
            probe = Proc(hosts.ns["B"], _probe("open", config, "0x5", NAMESPACE), work, env)
            probes.append(probe)
            rc = probe.wait(timeout=120)
            text = probe.text()
            print(f"--- {name}:\n{text}")  # shown with -s: what a user sees
            assert rc == 3, f"{name} was not refused (rc {rc}):\n{text}"
            assert "TransportError" in text and "likely causes" in text, text
            assert "certificate refused [seen in the Zenoh log]" in text, text
            assert "Zenoh log:" in text, text
            assert "0 present" not in text, text

        # B's certificate (CN host-b) publishing on A's key: the router drops it
        victim, own = "0xa0", "0xb0"
        listener = Proc(
            hosts.ns["A"],
            _probe("listen", "cluster/host-a.json5", NAMESPACE, victim, own, "60"),
            work,
            env,
        )
        probes.append(listener)
        listener.wait_line(r"^ready$", timeout=60)
        spoofer = Proc(
            hosts.ns["B"],
            _probe("spoof", "cluster/host-b.json5", NAMESPACE, victim, own, "60"),
            work,
            env,
        )
        probes.append(spoofer)
        line = listener.wait_line(r"^\{", timeout=120)
        counts = json.loads(line)
        print(f"--- spoofing member: listener {counts}; router B:\n{routers[1].text()}")
        assert counts["own"] >= 1, f"the listener got none of B's own puts: {listener.text()}"
        assert counts["spoof"] == 0, f"B published on A's key: {counts}"
        # the router says why, with Zenoh's line
        routers[1].wait_line(
            r"^ACL denial: .*CertCommonName\(host-b\).* is unauthorized to Put \(ingress\) on "
            r"team/run1/v1/delta/00000000000000a0$",
            timeout=30,
        )
    finally:
        _stop(probes + nodes + launchers + routers[::-1])
