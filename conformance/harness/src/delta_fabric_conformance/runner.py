"""The conformance runner: drives every registered implementation through the vectors, the encode
producer x consumer matrix and the live scenarios, and judges every answer itself."""

from __future__ import annotations

import base64
import fnmatch
import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from delta_fabric._generated.deltafabric.v1 import Packet as _gen_packet
from delta_fabric.snapshot import SnapshotError, decode_chunk
from delta_fabric.wire import json_loads

from delta_fabric_conformance.claims import (
    claim_problems,
    config_features,
    not_claimed_reason,
    packet_features,
    packet_file_features,
    refusal_code,
    spec_1_1_ids,
    unsupported_claim_failure,
    vector_level,
)
from delta_fabric_conformance.client import Reply
from delta_fabric_conformance.compare import diff_json
from delta_fabric_conformance.engine_checks import check_engine_result
from delta_fabric_conformance.forward_checks import check_forward_result
from delta_fabric_conformance.kit.snapshot_io import chunk_json
from delta_fabric_conformance.live import run_scenarios
from delta_fabric_conformance.recipes import expand_vector
from delta_fabric_conformance.registry import ExpectedFailures, Implementation
from delta_fabric_conformance.results import (
    FAILED,
    NOT_CLAIMED,
    PASSED,
    SKIPPED,
    UNSUPPORTED,
    ImplRun,
    Options,
    TestResult,
    level_prefix,
)
from delta_fabric_conformance.suite import SuiteError, parameter_problems

__all__ = ["Options", "Runner", "TestResult", "level_prefix", "vector_test_id"]
#: Seconds the runner waits for a ``forward`` answer: the first one loads the training framework.
FORWARD_TIMEOUT = 120.0
#: Commands every registered implementation must answer (an `unsupported` answer fails the test).
REQUIRED_COMMANDS = frozenset({"hello", "decode", "stop"})
PROTOCOL_RULES = {
    "framing": "Required.protocol.framing.stdout_json_lines",
    "schema": "Required.protocol.framing.schema_valid",
    "seq_echo": "Required.protocol.framing.seq_echo",
    "timeout": "Required.protocol.lifecycle.responsive",
    "exited": "Required.protocol.lifecycle.no_crash",
}


def round_trips(row: Mapping[str, Any]) -> bool:
    """Whether a vector gets the encode round trip: a valid decode vector, unless it says
    ``"encode": false`` (decoder-only, 1.1: Q8 values an encoder need not reproduce)."""
    valid = row["kind"] == "decode-valid" or (
        row["kind"] == "decode" and row.get("expect", "ok") == "ok"
    )
    return valid and bool(row.get("encode", True))


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(0x80 | (v & 0x7F))
        v >>= 7
    out.append(v)
    return bytes(out)


def request_vector(data: Mapping[str, Any]) -> dict[str, Any]:
    """A vector as a driver receives it: without its ``expected``, ``description`` and
    ``requirements`` (driver protocol section 5)."""
    return {k: v for k, v in data.items() if k not in ("expected", "description", "requirements")}


def shorter_packed_form(indices: Sequence[int]) -> bytes:
    """The packed indices a sender MUST write (DF-PKT-110, DF-PKT-116): the shorter of the delta and
    bitmap forms, delta on a tie. Written here from the spec's table, not taken from
    ``delta_fabric.compact``, so that the runner judges the reference's encoder too."""
    delta = bytes([0]) + b"".join(
        _varint(i - (indices[j - 1] if j else 0)) for j, i in enumerate(indices)
    )
    base, span = indices[0], indices[-1] - indices[0] + 1
    head = bytes([1]) + _varint(base)
    if len(head) + (span + 7) // 8 >= len(delta):
        return delta
    bitmap = bytearray((span + 7) // 8)
    for i in indices:
        bitmap[(i - base) // 8] |= 1 << ((i - base) % 8)
    return head + bytes(bitmap)


def packed_form_problems(packet: Mapping[str, Any], data: bytes) -> list[str]:
    """DF-PKT-116 on an encoder's bytes of ``packet`` (a vector's JSON form): every entry of a
    ``PACKED`` packet carries the shorter form of its indices. Called once a decoder read the bytes
    as ``packet``."""
    if packet.get("index_encoding") != "PACKED":
        return []
    try:
        root = _gen_packet.Packet.GetRootAs(data, 0)
        got: list[bytes | None] = []
        for j in range(root.EntriesLength()):
            e = root.Entries(j)
            if e is None or e.PackedIndicesIsNone():
                got.append(None)
            else:
                got.append(e.PackedIndicesAsNumpy().tobytes())
    except Exception as e:  # unreadable producer bytes are a finding, not a crash
        return [f"its packed indices are unreadable ({type(e).__name__})"]
    problems = []
    for j, (g, entry) in enumerate(zip(got, packet["entries"], strict=False)):
        want = shorter_packed_form([int(i) for i in entry["indices"]])
        if g != want:
            problems.append(
                f"entries[{j}] packs its indices as {g.hex(' ') if g else g}, not the shorter form "
                f"{want.hex(' ')} (DF-PKT-116)"
            )
    return problems


def _has_1_1_fields(packet: Mapping[str, Any]) -> bool:
    """Whether a packet (JSON form) carries a field only 1.1 defines: ``heard`` (DF-PKT-60), an entry's
    ``signature`` (DF-PKT-140) or a ``PACKED`` index encoding (DF-PKT-110)."""
    entries = packet.get("entries", [])
    return (
        "heard" in packet
        or packet.get("index_encoding", "PLAIN") != "PLAIN"
        or any(isinstance(e, Mapping) and "signature" in e for e in entries)
    )


def vector_needs(
    row: Mapping[str, Any], kind: str, data: Mapping[str, Any], base: Path, ids_1_1: Iterable[str]
) -> tuple[list[str], str]:
    """What a vector needs of an implementation: the OPTIONAL features (the index row's ``features``
    and what its content states: a packet's value and index encodings, a node's configured send
    encodings, fast mode, signing) and the level that requires it (``"1.0"`` or ``"1.1"``, spec
    DF-CNF-30; see :func:`delta_fabric_conformance.claims.vector_level`)."""
    feats = {str(f) for f in row.get("features", [])}
    command, content_1_1 = kind, False
    if kind == "decode":
        if isinstance(data.get("packet"), Mapping):
            feats |= packet_features(data["packet"])
            content_1_1 = _has_1_1_fields(data["packet"])
        else:
            feats |= packet_file_features(base.with_name(base.name + ".dfp"))
    elif kind in ("generate", "receive"):
        feats |= config_features(data.get("config"))
        if kind == "generate" and (bool(data.get("fast")) or data.get("mode") == "fast"):
            feats.add("generate.fast")
        if isinstance(data.get("node"), Mapping) and "signing" in data["node"]:
            feats.add("signing")
        if kind == "receive":
            folder = base if base.is_dir() else base.parent
            for p in data.get("packets", []):
                feats |= packet_file_features(folder / str(p))
    elif kind == "config":
        for case in data.get("cases", []):
            feats |= config_features(case.get("config"))
    elif kind == "snapshot" and Path(str(row["path"])).parent.name == "serve":
        command = "snapshot.serve"
    reqs = [str(r) for r in row.get("requirements", [])]
    return sorted(feats), vector_level(command, feats, reqs, ids_1_1, content_1_1)


#: Counters a receive step's report gives since 1.1 (DF-RCV-30 added the first two; drivers report
#: ``relay_dropped_oversize`` of DF-RCV-10 since 1.1): not compared for a 1.0 node.
COUNTERS_1_1 = ("packets_received", "values_applied", "relay_dropped_oversize")


def expected_at_level(kind: str, expected: Mapping[str, Any], level: str) -> Mapping[str, Any]:
    """A vector's ``expected`` for an implementation of ``level``. For a 1.0 node: its relay packets
    carry ``version_minor = 0`` (DF-VER-1) where the vector (written by 1.1 nodes) has 1; the counters
    compared since 1.1 (:data:`COUNTERS_1_1`) are not compared, and a generate vector's
    ``max_entry_values`` (the split bound of DF-GEN-30, an erratum of 1.1) is not checked. The error
    codes and drop reasons 1.1 added need no change (an absent one reads as 0, driver protocol 5.5).
    Every other member is the same at both levels: with these, the expectations of the vectors 1.0
    had are 1.0's."""
    if level != "1.0":
        return expected
    if kind == "generate" and "max_entry_values" in expected:
        return {k: v for k, v in expected.items() if k != "max_entry_values"}
    if kind != "receive":
        return expected
    out = dict(expected)
    if isinstance(out.get("relay"), list):
        out["relay"] = [
            {**p, "version_minor": 0} if isinstance(p, Mapping) and "version_minor" in p else p
            for p in out["relay"]
        ]
    if isinstance(out.get("counters"), Mapping):
        out["counters"] = {k: v for k, v in out["counters"].items() if k not in COUNTERS_1_1}
    return out


def _show_reply(g: object) -> str:
    """A ``snapshot_serve`` reply, short: the error and its message, or a chunk's size."""
    if isinstance(g, Mapping) and "chunk" in g:
        return f"a chunk ({len(str(g['chunk']))} base64 characters)"
    if isinstance(g, Mapping) and "error" in g:
        return f"error {g['error']} ({str(g.get('message', ''))[:80]})"
    return repr(g)[:80]


def vector_test_id(row: Mapping[str, Any], level: str = "REQUIRED") -> str:
    """``<Level>.<command>.<area>.<case>`` of a vector: decode ids already have an area
    (``decode.invalid.nan_value``); generate and receive ids (``generate.basic``) get one: ``exact`` or
    ``fast`` (the selection mode) for generate, ``step`` for receive."""
    vid = str(row["id"])
    parts = vid.split(".")
    if len(parts) == 2 and parts[0] == "generate":
        vid = f"generate.{'fast' if row.get('fast') else 'exact'}.{parts[1]}"
    elif len(parts) == 2 and parts[0] == "receive":
        vid = f"receive.step.{parts[1]}"
    return f"{level_prefix(level)}.{vid}"


class Runner:
    def __init__(self, impls: list[Implementation], opts: Options) -> None:
        self.opts = opts
        self.runs = [ImplRun(i, opts) for i in impls]
        self.results: list[TestResult] = []
        self.xfail = {
            i.name: ExpectedFailures.load(opts.expected_failures / f"{i.name}.txt") for i in impls
        }
        # producer -> consumer -> {passed, failed}
        self.encode_matrix: dict[str, dict[str, dict[str, int]]] = {}
        self.decode_passed: dict[tuple[str, str], bool] = {}  # (impl, vector id) -> passed
        # vector id -> (the OPTIONAL features it needs, the level that requires it)
        self.needs: dict[str, tuple[list[str], str]] = {}
        self.ids_1_1 = (
            spec_1_1_ids(opts.spec.read_text(encoding="utf-8"))
            if opts.spec.is_file()
            else frozenset()
        )
        self.log: Callable[[str], None] = print if opts.verbose else (lambda _m: None)

    # results ----------------------------------------------------------------------------------------
    def wanted(self, test_id: str) -> bool:
        return not self.opts.tests or any(fnmatch.fnmatchcase(test_id, p) for p in self.opts.tests)

    def add(
        self,
        test_id: str,
        level: str,
        impls: Iterable[str],
        result: str,
        message: str = "",
        requirements: Iterable[str] = (),
        duration: float = 0.0,
        category: str = "",
        features: Iterable[str] = (),
        *,
        enforce_claims: bool = True,
        spec_level: str = "",
    ) -> TestResult:
        names = tuple(impls)
        features = sorted(set(features))
        if result == UNSUPPORTED and level == "REQUIRED" and enforce_claims:
            # DF-CNF-30: a REQUIRED test of a claimed target may not be unsupported
            for run in self.runs:
                if run.name in names:
                    why = unsupported_claim_failure(
                        test_id, run.accepted_claims, run.caps, features
                    )
                    if why is not None:
                        result, message = FAILED, f"{why}: {message}"
                        break
        pattern = None
        for n in names:
            xf = self.xfail.get(n)
            if xf is not None:
                pattern = xf.match(test_id)
                if pattern is not None:
                    break
        required = level == "REQUIRED" or self.opts.enforce_recommended
        if result == FAILED:
            verdict = (
                "expected_failure" if pattern else ("unexpected_failure" if required else "warning")
            )
        elif result == PASSED:
            verdict = "unexpected_pass" if pattern else "ok"
        elif result == SKIPPED:
            verdict = "skipped"
        elif result == NOT_CLAIMED:
            verdict = "not_claimed"
        else:
            verdict = "ok"
        r = TestResult(
            test_id,
            level,
            names,
            result,
            message,
            sorted(set(requirements)),
            pattern,
            verdict,
            duration,
            category or test_id.split(".")[1],
            features,
            spec_level,
        )
        self.results.append(r)
        self.log(f"{result:11s} {test_id} [{', '.join(names)}] {message}")
        return r

    # the run ----------------------------------------------------------------------------------------
    def run(self) -> list[TestResult]:
        index = self.load_index()  # SuiteError before any driver starts
        for run in self.runs:
            self.handshake(run)
        live = [r for r in self.runs if r.hello is not None]
        for row in index:
            self.run_vector(row, live)
            if row["kind"] in ("decode", "decode-valid") and row.get("expect", "ok") == "ok":
                self.run_refusal(row, live)
        for row in index:
            if round_trips(row):
                self.run_encode(row, live)
        if self.opts.live:
            run_scenarios(self, live)
        for run in self.runs:
            self.finish(run)
        return self.results

    def handshake(self, run: ImplRun) -> None:
        missing = run.impl.missing_requirements()
        if missing is not None and run.impl.optional:
            # an optional implementation whose framework is not installed: reported, never failed
            run.skipped = f"optional implementation not run: {missing}"
            self.add(
                "Required.protocol.hello.handshake",
                "REQUIRED",
                [run.name],
                SKIPPED,
                run.skipped,
            )
            return
        t0 = time.monotonic()
        problem = run.start()
        if problem is not None and missing is not None:
            problem += f" ({missing})"
        if problem is not None and "status 127" in problem and run.impl.build:
            problem += f" (command not found: build it with `{run.impl.build}`)"
        reqs: list[str] = []
        self.add(
            "Required.protocol.hello.handshake",
            "REQUIRED",
            [run.name],
            FAILED if problem else PASSED,
            problem or "",
            reqs,
            time.monotonic() - t0,
        )
        if problem is not None:
            run.abandoned = f"no hello: {problem}"
            run.client.kill()
            return
        declared, said = set(run.impl.capabilities), run.caps
        match = (
            declared == said
            and run.framework == run.impl.framework
            and set(run.impl.claims) == set(run.claims)
        )
        self.add(
            "Required.protocol.hello.registry_match",
            "REQUIRED",
            [run.name],
            PASSED if match else FAILED,
            ""
            if match
            else f"registry: {sorted(declared)} / {run.impl.framework} / claims "
            f"{sorted(run.impl.claims)}; hello: {sorted(said)} / {run.framework} / claims "
            f"{sorted(run.claims)}",
        )
        # DF-CNF-30: a claim of a target whose capabilities the driver lacks is refused
        refused = claim_problems(run.claims, run.caps)
        run.accepted_claims = () if refused else run.claims
        self.add(
            "Required.protocol.hello.claims",
            "REQUIRED",
            [run.name],
            FAILED if refused else PASSED,
            "claim refused: " + "; ".join(refused) if refused else "",
            ["DF-CNF-1", "DF-CNF-30"],
        )
        bogus = f"x-conformance-{secrets.token_hex(4)}"
        r = run.call({"cmd": bogus, "payload": {"probe": True}}, "unknown command")
        if isinstance(r, str):
            self.add(
                "Required.protocol.unknown_command.unsupported", "REQUIRED", [run.name], FAILED, r
            )
        else:
            ok = r.kind == "unsupported"
            self.add(
                "Required.protocol.unknown_command.unsupported",
                "REQUIRED",
                [run.name],
                PASSED if ok else FAILED,
                "" if ok else f"answered {r.kind} to unknown command {bogus!r}",
            )

    def finish(self, run: ImplRun) -> None:
        if run.skipped is not None:
            return
        if run.hello is not None and run.abandoned is None:
            ok = run.client.stop()
            self.add(
                "Required.protocol.lifecycle.stop",
                "REQUIRED",
                [run.name],
                PASSED if ok else FAILED,
                "" if ok else "stop not answered ok, or the driver did not exit 0 within 5 s",
            )
        else:
            run.client.kill()
        for rule, test_id in PROTOCOL_RULES.items():
            seen = run.violations.get(rule, [])
            if run.hello is None and not seen:
                continue  # a driver that never answered hello is not credited with passes
            msg = "; ".join(seen[:3]) + (f" (+{len(seen) - 3} more)" if len(seen) > 3 else "")
            self.add(test_id, "REQUIRED", [run.name], FAILED if seen else PASSED, msg)

    # vectors ----------------------------------------------------------------------------------------
    def load_index(self) -> list[dict[str, Any]]:
        path = self.opts.vectors / "index.json"
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        if d.get("version") != 1:
            raise ValueError(f"{path}: unsupported index version {d.get('version')!r}")
        rows: list[dict[str, Any]] = d["vectors"]
        problems: list[str] = []
        for row in rows:
            data, _base = self.vector_files(row)
            for member in ("context", "config"):
                if member in data:
                    problems += [
                        f"{row['id']}: {p}" for p in parameter_problems(data[member], member)
                    ]
        if problems:
            more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
            raise SuiteError(
                f"{path}: vectors outside the spec's parameter ranges: "
                + "; ".join(problems[:3])
                + more
            )
        return rows

    def vector_files(self, row: Mapping[str, Any]) -> tuple[dict[str, Any], Path]:
        base = self.opts.vectors / str(row["path"])
        path = base / "case.json" if base.is_dir() else base.with_name(base.name + ".json")
        # DF-CNF-20; recipes expanded: the runner judges, and drivers receive, the full form
        data: dict[str, Any] = expand_vector(json_loads(path.read_text(encoding="utf-8")))
        return data, base

    def run_vector(self, row: Mapping[str, Any], runs: list[ImplRun]) -> None:
        kind = str(row["kind"])
        if kind in ("decode-valid", "decode-invalid"):  # spelling of spec Appendix B.1
            kind = "decode"
        level = str(row.get("level", "REQUIRED")).upper()
        test_id = vector_test_id(row, level)
        if not self.wanted(test_id):
            return
        data, base = self.vector_files(row)
        reqs = list(row.get("requirements", []))
        feats, spec_level = self.needs[str(row["id"])] = vector_needs(
            row, kind, data, base, self.ids_1_1
        )
        for run in runs:
            t0 = time.monotonic()
            why = not_claimed_reason(spec_level, feats, run.level, run.caps)
            if why is not None:
                if kind == "decode":
                    self.decode_passed[(run.name, str(row["id"]))] = False
                self.add(
                    test_id,
                    level,
                    [run.name],
                    NOT_CLAIMED,
                    why,
                    reqs,
                    0.0,
                    kind,
                    feats,
                    spec_level=spec_level,
                )
                continue
            if kind == "decode":
                result, msg = self.judge_decode(run, row, data, base)
            elif kind in ("generate", "receive"):
                result, msg = self.judge_engine(run, kind, row, data, base)
            elif kind == "snapshot":
                result, msg = self.judge_snapshot(run, row, data, base)
            elif kind == "forward":
                result, msg = self.judge_forward(run, row, data)
            elif kind == "config":
                result, msg = self.judge_config(run, row, data)
            elif kind == "repair":
                result, msg = self.judge_repair(run, row, data, base)
            else:
                result, msg = UNSUPPORTED, f"unknown vector kind {kind!r}"
            if kind == "decode":
                self.decode_passed[(run.name, str(row["id"]))] = result == PASSED
            self.add(
                test_id,
                level,
                [run.name],
                result,
                msg,
                reqs,
                time.monotonic() - t0,
                kind,
                feats,
                spec_level=spec_level,
            )

    def run_refusal(self, row: Mapping[str, Any], runs: list[ImplRun]) -> None:
        """``Required.decode.refused.<case>``: a valid packet of an encoding an implementation does
        not claim, sent to that implementation, must be rejected with the code the spec gives for
        its level (:func:`delta_fabric_conformance.claims.refusal_code`; DF-VER-114 for a 1.0
        receiver). Run only against the implementations that do not claim the encoding."""
        test_id = f"Required.decode.refused.{str(row['id']).split('.')[-1]}"
        if not self.wanted(test_id):
            return
        data, base = self.vector_files(row)
        packet = base.with_name(base.name + ".dfp").read_bytes()
        for run in runs:
            refusal = refusal_code(data["packet"], run.level, run.caps)
            if refusal is None or "decode" not in run.caps:
                continue
            want, reqs = refusal
            t0 = time.monotonic()
            r = run.call(
                {
                    "cmd": "decode",
                    "packet": base64.b64encode(packet).decode(),
                    "context": data["context"],
                },
                f"decode {row['id']} (not claimed: a refusal is expected)",
            )
            v = self._reply_verdict(run, "decode", r)
            if v is not None:
                result, msg = v
            else:
                assert isinstance(r, Reply)
                got = r.body["code"] if r.kind == "rejected" else None
                result = PASSED if got == want else FAILED
                msg = (
                    ""
                    if got == want
                    else (
                        f"{'rejected with ' + got if got else 'accepted'} a packet of an encoding the "
                        f"implementation does not claim (level {run.level}); expected {want}"
                    )
                )
            self.add(
                test_id,
                "REQUIRED",
                [run.name],
                result,
                msg,
                reqs,
                time.monotonic() - t0,
                "decode",
                spec_level=run.level,
            )

    def _reply_verdict(self, run: ImplRun, cmd: str, r: Reply | str) -> tuple[str, str] | None:
        """Common verdicts: failures, skips and unsupported answers (None: look at the answer)."""
        if isinstance(r, str):
            return FAILED, r
        if r.kind == "errored":
            return FAILED, f"errored: {r.body.get('message', '')}"
        if r.kind == "skipped":
            return UNSUPPORTED, f"skipped: {r.body.get('reason', '')}"
        if r.kind == "unsupported":
            if cmd in REQUIRED_COMMANDS or cmd in run.caps:
                return FAILED, f"answered unsupported to {cmd}, a required or declared command"
            return UNSUPPORTED, f"{cmd} unsupported"
        return None

    def judge_decode(
        self, run: ImplRun, row: Mapping[str, Any], data: Mapping[str, Any], base: Path
    ) -> tuple[str, str]:
        if "decode" not in run.caps:
            return FAILED, "decode capability missing (decode is required)"
        packet = base.with_name(base.name + ".dfp").read_bytes()
        r = run.call(
            {
                "cmd": "decode",
                "packet": base64.b64encode(packet).decode(),
                "context": data["context"],
            },
            f"decode {row['id']}",
        )
        v = self._reply_verdict(run, "decode", r)
        if v is not None:
            return v
        assert isinstance(r, Reply)
        if "error" in data:
            want = data["error"]
            if r.kind == "rejected":
                got = r.body["code"]
                return (
                    (PASSED, "")
                    if got == want
                    else (FAILED, f"rejected with {got}, expected {want}")
                )
            return FAILED, f"accepted an invalid packet (expected {want})"
        if r.kind == "rejected":
            return FAILED, f"rejected a valid packet: {r.body['code']} {r.body.get('message', '')}"
        d = diff_json(data["packet"], r.body["packet"])
        return (PASSED, "") if d is None else (FAILED, f"decoded packet differs: {d}")

    def judge_engine(
        self, run: ImplRun, kind: str, row: Mapping[str, Any], data: Mapping[str, Any], base: Path
    ) -> tuple[str, str]:
        needed = kind
        if kind == "generate" and (bool(data.get("fast")) or data.get("mode") == "fast"):
            needed = "generate.fast"
        if isinstance(data.get("node"), Mapping) and "signing" in data["node"]:
            needed = "signing"  # signed entries (1.1, OPTIONAL; spec section 13.1)
        if needed not in run.caps:
            return UNSUPPORTED, f"capability {needed} not declared"
        args: dict[str, Any] = {"cmd": kind, "vector": request_vector(data)}
        if kind == "receive":
            folder = base if base.is_dir() else base.parent
            args["packets"] = [
                base64.b64encode((folder / str(p)).read_bytes()).decode()
                for p in data.get("packets", [])
            ]
        r = run.call(args, f"{kind} {row['id']}")
        v = self._reply_verdict(run, kind, r)
        if v is not None:
            return v
        assert isinstance(r, Reply)
        if r.kind == "rejected":
            return FAILED, f"{kind} answered rejected ({r.body['code']}); results are expected"
        expected = expected_at_level(kind, data.get("expected", {}), run.level)
        problem = check_engine_result(kind, data, expected, r.body)
        return (PASSED, "") if problem is None else (FAILED, problem)

    def _needed(self, run: ImplRun, capability: str, implied_by: str) -> tuple[str, str] | None:
        """A vector kind's capability: absent is *unsupported*, unless the driver declares
        ``implied_by`` (a node that serves snapshots must check them; a node that trains the digits
        CNN must run ``forward``): then it is a failure."""
        if capability in run.caps:
            return None
        if implied_by in run.caps:
            return FAILED, f"capability {capability} missing (required with {implied_by})"
        return UNSUPPORTED, f"capability {capability} not declared"

    def judge_snapshot(
        self, run: ImplRun, row: Mapping[str, Any], data: Mapping[str, Any], base: Path
    ) -> tuple[str, str]:
        if Path(str(row["path"])).parent.name == "serve":
            return self.judge_snapshot_serve(run, row, data)
        v = self._needed(run, "snapshot", "peer.snapshot")
        if v is not None:
            return v
        expected = data["expected"]
        if base.is_dir():
            cmd = "snapshot_assemble"
            vector = {
                k: x
                for k, x in data.items()
                if k not in ("expected", "description", "requirements", "chunks")
            }
            args: dict[str, Any] = {
                "cmd": cmd,
                "vector": vector,
                "chunks": [
                    base64.b64encode((base / str(c)).read_bytes()).decode() for c in data["chunks"]
                ],
            }
        else:
            cmd = "snapshot_decode"
            chunk = base.with_name(base.name + ".dfs").read_bytes()
            args = {"cmd": cmd, "chunk": base64.b64encode(chunk).decode()}
        r = run.call(args, f"{cmd} {row['id']}")
        verdict = self._reply_verdict(run, "snapshot", r)  # the capability, declared here
        if verdict is not None:
            return verdict
        assert isinstance(r, Reply)
        if r.kind != "ok":
            return FAILED, f"{cmd} answered {r.kind}; an outcome is expected"
        got = r.body.get("outcome")
        if got != expected["outcome"]:
            where = f" at chunk {r.body.get('at')}" if cmd == "snapshot_assemble" else ""
            return FAILED, f"outcome {got}{where} ({r.body.get('message', '')}), expected " + str(
                expected["outcome"]
            ) + (f" at chunk {expected['at']}" if "at" in expected else "")
        d = diff_json(expected, r.body, subset=True)
        return (PASSED, "") if d is None else (FAILED, f"{cmd} result differs: {d}")

    def judge_snapshot_serve(
        self, run: ImplRun, row: Mapping[str, Any], data: Mapping[str, Any]
    ) -> tuple[str, str]:
        """A ``snapshot/serve`` vector (driver protocol 5.12; spec DF-ZEN-5, DF-ZEN-11): the server
        side. Every query of the vector goes, in order, to one ``snapshot_serve`` request; each chunk
        answered is decoded with the reference decoder (:func:`delta_fabric.snapshot.decode_chunk`)
        and every field must equal the vector's, values by bit pattern. ``snapshot_id``, which the
        spec does not fix, must be non-zero (the decoder checks it) and the same for every chunk of
        the vector (one capture). A query the vector expects an error reply for must get it, of the
        kind expected: ``BAD_REQUEST`` (DF-ZEN-5, DF-ZEN-42) or ``NON_FINITE`` (DF-ZEN-43)."""
        if "snapshot.serve" not in run.caps:
            return UNSUPPORTED, "capability snapshot.serve not declared"
        r = run.call(
            {"cmd": "snapshot_serve", "vector": request_vector(data)}, f"snapshot_serve {row['id']}"
        )
        verdict = self._reply_verdict(run, "snapshot.serve", r)  # the capability, declared here
        if verdict is not None:
            return verdict
        assert isinstance(r, Reply)
        if r.kind != "ok":
            return FAILED, f"snapshot_serve answered {r.kind}; replies are expected"
        want = list(data["expected"]["replies"])
        got = r.body.get("replies")
        if not isinstance(got, list) or len(got) != len(want):
            n = len(got) if isinstance(got, list) else got
            return FAILED, f"{n} replies for {len(want)} queries"
        ids: set[int] = set()
        for k, (query, w, g) in enumerate(zip(data["queries"], want, got, strict=True)):
            what = f"query {k} ({query!r})"
            if "error" in w:
                if "chunk" in g or g.get("error") != w["error"]:
                    return FAILED, f"{what}: answered {_show_reply(g)}, expected the error reply"
                continue
            if "chunk" not in g:
                return FAILED, f"{what}: answered {_show_reply(g)}, expected a chunk"
            try:
                chunk = decode_chunk(base64.b64decode(str(g["chunk"]), validate=True))
            except (SnapshotError, ValueError) as exc:
                return FAILED, f"{what}: the chunk does not decode ({exc})"
            d = diff_json(w["chunk"], chunk_json(chunk), subset=True)
            if d is not None:
                return FAILED, f"{what}: chunk differs: {d}"
            ids.add(chunk.snapshot_id)
        if len(ids) > 1:
            shown = ", ".join(f"{i:016x}" for i in sorted(ids))
            return FAILED, f"chunks of one capture carry different snapshot ids ({shown})"
        return PASSED, ""

    def judge_config(
        self, run: ImplRun, row: Mapping[str, Any], data: Mapping[str, Any]
    ) -> tuple[str, str]:
        """A ``config`` vector (1.1): one ``check_config`` request per case; every case's
        ``accepted`` must be the vector's (DF-PAR-11, DF-PAR-260, DF-MAN-1, DF-MAN-7)."""
        if "config" not in run.caps:
            return UNSUPPORTED, "capability config not declared"
        wrong: list[str] = []
        for case in data["cases"]:
            r = run.call(
                {"cmd": "check_config", "config": case["config"], "manifest": case["manifest"]},
                f"check_config {row['id']} {case['name']}",
            )
            v = self._reply_verdict(run, "config", r)
            if v is not None:
                return v[0], f"{case['name']}: {v[1]}"
            assert isinstance(r, Reply)
            if r.kind != "ok":
                return FAILED, f"{case['name']}: check_config answered {r.kind}; ok is expected"
            got = r.body.get("accepted")
            if got is not case["accepted"]:
                what = "refused" if got is False else f"answered accepted={got!r}"
                if case["accepted"]:
                    wrong.append(f"{case['name']} {what} ({r.body.get('message', '')})")
                else:
                    wrong.append(f"{case['name']} accepted (a node must refuse it)")
        if wrong:
            more = f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else ""
            return FAILED, "; ".join(wrong[:3]) + more
        return PASSED, ""

    def judge_repair(
        self, run: ImplRun, row: Mapping[str, Any], data: Mapping[str, Any], base: Path
    ) -> tuple[str, str]:
        """A ``repair`` vector (1.1, driver protocol 5.11; spec 7.9). ``repair/request``: the
        buffer's ``repair_decode`` outcome (and fields); ``repair/encode``: ``repair_encode``'s
        outcome, and for ``ok`` the bytes decoded back to the fields by the same driver's
        ``repair_decode`` (its decoder is judged by the request vectors); ``repair/gaps`` and
        ``repair/resend``: the whole case in one request, every expected member equal."""
        if "repair" not in run.caps:
            return UNSUPPORTED, "capability repair not declared"
        area = Path(str(row["path"])).parent.name
        expected = data["expected"]
        args: dict[str, Any]
        if area == "request":
            buf = base.with_name(base.name + ".dfr").read_bytes()
            cmd, args = "repair_decode", {"bytes": base64.b64encode(buf).decode()}
        elif area == "encode":
            cmd, args = "repair_encode", {"request": data["request"]}
        elif area in ("gaps", "resend"):
            cmd, args = f"repair_{area}", {"vector": request_vector(data)}
        else:
            return UNSUPPORTED, f"unknown repair vector area {area!r}"
        r = run.call({"cmd": cmd, **args}, f"{cmd} {row['id']}")
        verdict = self._reply_verdict(run, "repair", r)  # the capability, declared here
        if verdict is not None:
            return verdict
        assert isinstance(r, Reply)
        if r.kind != "ok":
            return FAILED, f"{cmd} answered {r.kind}; ok is expected"
        if "outcome" in expected and r.body.get("outcome") != expected["outcome"]:
            return FAILED, (
                f"outcome {r.body.get('outcome')} ({r.body.get('message', '')}), expected "
                f"{expected['outcome']}"
            )
        d = diff_json(expected, r.body, subset=True)
        if d is not None:
            return FAILED, f"{cmd} result differs: {d}"
        if area == "encode" and expected["outcome"] == "ok":
            back = run.call(
                {"cmd": "repair_decode", "bytes": r.body.get("bytes", "")},
                f"repair_decode of the encoding of {row['id']}",
            )
            verdict = self._reply_verdict(run, "repair", back)
            if verdict is not None:
                return verdict
            assert isinstance(back, Reply)
            if back.kind != "ok" or back.body.get("outcome") != "ok":
                return FAILED, f"its encoding does not decode: {back.kind} {back.body}"
            d = diff_json(data.get("decodes_to", data["request"]), back.body.get("request"))
            if d is not None:
                return FAILED, f"its encoding decodes to other fields: {d}"
        return PASSED, ""

    def judge_forward(
        self, run: ImplRun, row: Mapping[str, Any], data: Mapping[str, Any]
    ) -> tuple[str, str]:
        v = self._needed(run, "forward", "peer.train")
        if v is not None:
            return v
        vector = request_vector(data)
        # the first forward call imports the framework (like hello: 120 s, driver protocol 2.7)
        r = run.call(
            {"cmd": "forward", "vector": vector}, f"forward {row['id']}", timeout=FORWARD_TIMEOUT
        )
        verdict = self._reply_verdict(run, "forward", r)
        if verdict is not None:
            return verdict
        assert isinstance(r, Reply)
        if r.kind != "ok":
            return FAILED, f"forward answered {r.kind}; results are expected"
        problem = check_forward_result(data, r.body)
        return (PASSED, "") if problem is None else (FAILED, problem)

    # encode: producer x consumer -------------------------------------------------------------------
    def run_encode(self, row: Mapping[str, Any], runs: list[ImplRun]) -> None:
        level = str(row.get("level", "REQUIRED")).upper()
        vid = str(row["id"])
        test_id = f"{level_prefix(level)}.encode.{vid.split('.', 1)[1]}"
        if not self.wanted(test_id):
            return
        data, base = self.vector_files(row)
        reqs = list(row.get("requirements", []))
        if vid not in self.needs:
            self.needs[vid] = vector_needs(row, "decode", data, base, self.ids_1_1)
        feats, spec_level = self.needs[vid]
        consumers = [
            c for c in runs if "decode" in c.caps and self.decode_passed.get((c.name, vid), False)
        ]
        for prod in runs:
            t0 = time.monotonic()
            why = not_claimed_reason(spec_level, feats, prod.level, prod.caps)
            if why is not None:
                self.add(
                    test_id,
                    level,
                    [prod.name],
                    NOT_CLAIMED,
                    why,
                    reqs,
                    0.0,
                    "encode",
                    feats,
                    spec_level=spec_level,
                )
                continue
            if "encode" not in prod.caps:
                self.add(
                    test_id,
                    level,
                    [prod.name],
                    UNSUPPORTED,
                    "encode not declared",
                    reqs,
                    0.0,
                    "encode",
                    feats,
                    spec_level=spec_level,
                )
                continue
            r = prod.call({"cmd": "encode", "packet": data["packet"]}, f"encode {vid}")
            v = self._reply_verdict(prod, "encode", r)
            if v is not None:
                self.add(
                    test_id,
                    level,
                    [prod.name],
                    v[0],
                    v[1],
                    reqs,
                    time.monotonic() - t0,
                    "encode",
                    feats,
                    spec_level=spec_level,
                )
                continue
            assert isinstance(r, Reply)
            if r.kind != "ok":
                self.add(
                    test_id,
                    level,
                    [prod.name],
                    FAILED,
                    f"encode answered {r.kind}",
                    reqs,
                    features=feats,
                    spec_level=spec_level,
                )
                continue
            if not consumers:
                self.add(
                    test_id,
                    level,
                    [prod.name],
                    UNSUPPORTED,
                    "no decoder passed this vector's decode test",
                    reqs,
                    time.monotonic() - t0,
                    "encode",
                    feats,
                    enforce_claims=False,  # nothing judged the producer: not its fault
                    spec_level=spec_level,
                )
                continue
            problems = []
            for cons in consumers:
                got = cons.call(
                    {"cmd": "decode", "packet": r.body["packet"], "context": data["context"]},
                    f"decode of {prod.name}'s encoding of {vid}",
                )
                cell = self.encode_matrix.setdefault(prod.name, {}).setdefault(
                    cons.name, {"passed": 0, "failed": 0, "consumer_errors": 0}
                )
                if isinstance(got, str) or got.kind not in ("ok", "rejected"):
                    # the consumer broke (protocol violation, errored...): its own tests report it;
                    # the producer is not blamed
                    cell["consumer_errors"] += 1
                    continue
                if got.kind == "rejected":
                    problem: str | None = (
                        f"rejected: {got.body['code']} {got.body.get('message', '')}"
                    )
                else:
                    problem = diff_json(data["packet"], got.body["packet"])
                cell["failed" if problem else "passed"] += 1
                if problem:
                    problems.append(f"{cons.name} reads it differently: {problem}")
            if not problems:
                problems += packed_form_problems(data["packet"], base64.b64decode(r.body["packet"]))
            self.add(
                test_id,
                level,
                [prod.name],
                FAILED if problems else PASSED,
                "; ".join(problems),
                reqs,
                time.monotonic() - t0,
                "encode",
                feats,
                spec_level=spec_level,
            )
