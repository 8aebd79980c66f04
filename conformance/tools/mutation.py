"""Suite strength: mutation testing of both implementations against the conformance vectors.

The test command of every mutant is the conformance suite itself (every vector of
``conformance/vectors/index.json`` plus the encode round trip, judged by the runner's own code), never
the unit tests: a mutant that no vector kills is a behaviour the suite does not pin.

- ``python``: a seeded AST mutator over the Python core (``delta_fabric.{wire, engine, replay,
  selection, encodings, config, manifest, compact, signing, snapshot, repair}``). Each mutant runs in a
  forked child that imports the mutated module in place of the original and drives every vector
  through the Python driver
  (:class:`delta_fabric_conformance.kit.driver.Driver`) in-process, judged by
  :class:`delta_fabric_conformance.runner.Runner` (JSON round trip of every answer, as on the pipe).
- ``rust``: ``cargo mutants`` on ``df-core`` with ``cargo test -p df-core --test vectors`` (every vector
  against ``df_core`` and the runner's encode round trip, ``interop/crates/df-core/tests/vectors.rs``)
  as the test command.

A surviving mutant is either killed by a new vector (``conformance/tools/make_vectors.py``,
``engine_vectors.py``) or listed with the reason it is equivalent in
``conformance/mutation/equivalent-{python,rust}.txt`` (``<key>  # <reason>``). The command prints the
score per implementation, every survivor that is not listed and every listed mutant that a vector kills
(stale: its reason is wrong), and exits 1 if there is either.

    python conformance/tools/mutation.py python [--sample N --seed S] [--timeout-factor F]
    python conformance/tools/mutation.py rust   [--sample N --seed S] [--cargo-mutants-args ...]
    python conformance/tools/mutation.py all    # both
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MUTATION_DIR = ROOT / "conformance" / "mutation"
PY_SRC = ROOT / "python" / "src"
PY_MODULES = (
    "wire",
    "engine",
    "replay",
    "selection",
    "encodings",
    "config",
    "manifest",
    "compact",
    "signing",
    "snapshot",
    "repair",
    "_fastbuild",
    "errors",
)
RUST_CRATE_DIR = ROOT / "interop" / "crates" / "df-core"
#: snapshot code outside the snapshot module (the engine's capture and restore, DF-ZEN-5/12): not
#: mutated here. The module ``snapshot`` itself (DFS1 chunk decode and assembly, and since h63 the server:
#: parameters, chunk encoding, ``SnapshotServer``) is campaigned against the snapshot vectors
#: (``snapshot_decode`` / ``snapshot_assemble`` / ``snapshot_serve``), which every mutant's run includes
OUT_OF_SCOPE = ("Snapshot", "Engine.snapshot", "Engine.restore", "Engine.from_snapshot")
#: vector kinds not run: ``forward`` checks a training framework's model (the kit's digits CNN, DF-CNF
#: forward check), not the protocol core, and needs PyTorch/JAX in every mutant's child
SKIPPED_KINDS = ("forward",)
#: the vectors the campaigns run (``--vectors``: e.g. an older commit's, for a score before a change)
VECTORS = ROOT / "conformance" / "vectors"
#: df-core files mutated: every file of df-core but lib.rs (module declarations and re-exports)
RUST_FILES = (
    "wire.rs",
    "engine.rs",
    "replay.rs",
    "selection.rs",
    "encodings.rs",
    "config.rs",
    "manifest.rs",
    "compact.rs",
    "signing.rs",
    "snapshot.rs",
    "repair.rs",
    "repair_io.rs",
    "json.rs",
    "error.rs",
)


# --------------------------------------------------------------------------------------------------
# the Python mutator
# --------------------------------------------------------------------------------------------------
_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BIN_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
}
_SYM: dict[type[ast.AST], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.And: "and",
    ast.Or: "or",
}


@dataclass(frozen=True)
class PyMutant:
    """One mutation: the ``index``-th site of ``module`` (walk order) and its variant."""

    module: str  # "wire"
    site: int  # index into the walk of the module's tree
    variant: str  # what is done (see _variants)
    key: str  # stable name: file::function: `source` : change
    line: int


def _skipped_subtrees(tree: ast.AST) -> set[int]:
    """Ids of nodes never mutated: annotations, f-strings, raise arguments (messages), __all__,
    ``if TYPE_CHECKING`` blocks, logging calls, docstrings."""
    skip: set[int] = set()

    def mark(n: ast.AST | None) -> None:
        if n is not None:
            for m in ast.walk(n):
                skip.add(id(m))

    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(n.returns)
            for a in (*n.args.args, *n.args.kwonlyargs, *n.args.posonlyargs):
                mark(a.annotation)
            if n.args.vararg:
                mark(n.args.vararg.annotation)
            if n.args.kwarg:
                mark(n.args.kwarg.annotation)
        elif isinstance(n, ast.AnnAssign):
            mark(n.annotation)
        elif isinstance(n, ast.JoinedStr):
            mark(n)
        elif isinstance(n, ast.Raise):
            # the exception's arguments beyond the first (the code) are messages
            if isinstance(n.exc, ast.Call):
                for extra in n.exc.args[1:]:
                    mark(extra)
                for kw in n.exc.keywords:
                    mark(kw.value)
        elif isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets
        ):
            mark(n)
        elif (
            isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
        ):
            mark(n)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if isinstance(n.func.value, ast.Name) and n.func.value.id in ("log", "logger", "_log"):
                mark(n)
    return skip


def _variants(n: ast.AST) -> list[tuple[str, str]]:
    """(variant id, description) of every mutation of node ``n``."""
    out: list[tuple[str, str]] = []
    if isinstance(n, ast.Compare):
        for i, op in enumerate(n.ops):
            new = _CMP_SWAP.get(type(op))
            if new is not None:
                out.append((f"cmp{i}", f"{_SYM[type(op)]} -> {_SYM[new]}"))
    elif isinstance(n, (ast.BinOp, ast.AugAssign)):
        new_b = _BIN_SWAP.get(type(n.op))
        if new_b is not None:
            out.append(("bin", f"{_SYM[type(n.op)]} -> {_SYM[new_b]}"))
    elif isinstance(n, ast.BoolOp):
        other = "or" if isinstance(n.op, ast.And) else "and"
        out.append(("bool", f"{_SYM[type(n.op)]} -> {other}"))
    elif isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.Not, ast.USub, ast.Invert)):
        out.append(("unary", f"drop {type(n.op).__name__.lower()}"))
    elif isinstance(n, ast.Constant) and type(n.value) is bool:
        out.append(("const", f"{n.value} -> {not n.value}"))
    elif isinstance(n, ast.Constant) and type(n.value) is int:
        out.append(("const", f"{n.value} -> {n.value + 1}"))
    elif isinstance(n, ast.Constant) and type(n.value) is float:
        out.append(("const", f"{n.value!r} -> {n.value + 1.0!r}"))
    elif isinstance(n, ast.Return) and n.value is not None:
        if not (isinstance(n.value, ast.Constant) and n.value.value is None):
            out.append(("retnone", "return None"))
    return out


def _qualnames(tree: ast.Module) -> dict[int, str]:
    """id(node) -> enclosing function/class qualified name."""
    names: dict[int, str] = {}

    def visit(n: ast.AST, prefix: str) -> None:
        for c in ast.iter_child_nodes(n):
            p = prefix
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                p = f"{prefix}.{c.name}" if prefix else c.name
            names[id(c)] = p or "<module>"
            visit(c, p)

    visit(tree, "")
    return names


def _segment(src: str, n: ast.AST) -> str:
    seg = ast.get_source_segment(src, n) or ""
    seg = re.sub(r"\s+", " ", seg).strip()
    return seg if len(seg) <= 70 else seg[:67] + "..."


def py_mutants(module: str) -> list[PyMutant]:
    path = PY_SRC / "delta_fabric" / f"{module}.py"
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    skip = _skipped_subtrees(tree)
    # docstrings
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            b = n.body
            if b and isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant):
                skip.add(id(b[0].value))
    quals = _qualnames(tree)
    out: list[PyMutant] = []
    seen: dict[str, int] = {}
    rel = f"python/src/delta_fabric/{module}.py"
    for i, n in enumerate(ast.walk(tree)):
        if id(n) in skip or (
            module != "snapshot" and quals.get(id(n), "").startswith(OUT_OF_SCOPE)
        ):
            continue
        for variant, desc in _variants(n):
            base = f"{rel}::{quals.get(id(n), '<module>')}: `{_segment(src, n)}`: {desc}"
            k = seen.get(base, 0)
            seen[base] = k + 1
            key = base if k == 0 else f"{base} (#{k + 1})"
            out.append(PyMutant(module, i, variant, key, getattr(n, "lineno", 0)))
    return out


def _apply(tree: ast.Module, m: PyMutant) -> ast.Module:
    tree = copy.deepcopy(tree)
    parents: dict[int, tuple[ast.AST, str, int | None]] = {}
    for p in ast.walk(tree):
        for field_name, value in ast.iter_fields(p):
            if isinstance(value, list):
                for j, c in enumerate(value):
                    if isinstance(c, ast.AST):
                        parents[id(c)] = (p, field_name, j)
            elif isinstance(value, ast.AST):
                parents[id(value)] = (p, field_name, None)
    node = list(ast.walk(tree))[m.site]
    v = m.variant
    if v.startswith("cmp"):
        assert isinstance(node, ast.Compare)
        j = int(v[3:])
        node.ops[j] = _CMP_SWAP[type(node.ops[j])]()
    elif v == "bin":
        assert isinstance(node, (ast.BinOp, ast.AugAssign))
        node.op = _BIN_SWAP[type(node.op)]()
    elif v == "bool":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif v == "unary":
        assert isinstance(node, ast.UnaryOp)
        parent, field_name, pos = parents[id(node)]
        if pos is None:
            setattr(parent, field_name, node.operand)
        else:
            getattr(parent, field_name)[pos] = node.operand
    elif v == "const":
        assert isinstance(node, ast.Constant)
        if type(node.value) is bool:
            node.value = not node.value
        else:
            assert isinstance(node.value, (int, float))
            node.value = node.value + 1
    elif v == "retnone":
        assert isinstance(node, ast.Return)
        node.value = ast.Constant(None)
    ast.fix_missing_locations(tree)
    return tree


class _MutantFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the mutated code for one module name."""

    def __init__(self, fullname: str, code: Any, origin: str) -> None:
        self.fullname, self.code, self.origin = fullname, code, origin

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.fullname:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=self.origin)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__file__ = self.origin
        exec(self.code, module.__dict__)


def _purge() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in ("delta_fabric", "delta_fabric_conformance"):
            del sys.modules[name]


def run_vectors_inprocess(output: Path, fail_fast: bool = False) -> list[str]:
    """Every vector (and the encode round trip) against the Python driver, in this process; returns
    the failures (``test id: message``), only the first one with ``fail_fast``."""
    from delta_fabric_conformance.client import Reply
    from delta_fabric_conformance.kit.driver import Driver
    from delta_fabric_conformance.results import PASSED, ImplRun, Options
    from delta_fabric_conformance.runner import Runner, round_trips
    from delta_fabric_conformance.suite import Suite

    class InProcess(ImplRun):
        def __init__(self) -> None:  # no client, no registry entry: the driver runs here
            self.driver = Driver()
            self.caps = set(self.driver.capabilities())
            self.abandoned = None
            self.violations = {}

        @property
        def name(self) -> str:
            return "python"

        def call(self, args: Any, context: str, timeout: float = 0.0) -> Reply | str:
            # the JSON round trip of the pipe (numbers, -0.0, no NaN)
            resp = json.loads(json.dumps(self.driver.respond(json.loads(json.dumps(args)))))
            ((kind, body),) = resp.items()
            return Reply(kind, body, 0.0)

    opts = Options.from_suite(Suite(ROOT), output, live=False, vectors=VECTORS)
    runner = Runner([], opts)
    run = InProcess()
    rows = runner.load_index()

    def failures() -> list[str]:
        return [f"{r.id}: {r.message}" for r in runner.results if r.result != PASSED]

    for row in rows:
        if row["kind"] in SKIPPED_KINDS:
            continue
        runner.run_vector(row, [run])
        if fail_fast and failures():
            return failures()
    for row in rows:
        if round_trips(row):  # the runner's own rule (decoder-only Q8 vectors have none)
            runner.run_encode(row, [run])
            if fail_fast and failures():
                return failures()
    return failures()


def _child(m: PyMutant | None, output: Path, timeout: float) -> int:
    """In a forked child: import the mutant (if any) and run the vectors. Exit 0: all passed."""
    signal.alarm(max(1, int(timeout)))
    _purge()
    if m is not None:
        path = PY_SRC / "delta_fabric" / f"{m.module}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        code = compile(_apply(tree, m), str(path), "exec")
        sys.meta_path.insert(0, _MutantFinder(f"delta_fabric.{m.module}", code, str(path)))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # the driver logs tracebacks of errored requests
    try:
        failures = run_vectors_inprocess(output, fail_fast=m is not None)
    except BaseException:  # an import-time crash kills the mutant
        return 3
    return 1 if failures else 0


def _covered_lines(output: Path) -> dict[str, set[int]]:
    """Module -> lines of the Python core that the vector run executes (in a forked child)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(rfd)
        code = 3
        try:
            _purge()
            lines: dict[str, set[int]] = {}
            prefix = str(PY_SRC / "delta_fabric") + os.sep

            def tracer(frame: Any, event: str, arg: Any) -> Any:
                f = frame.f_code.co_filename
                if not f.startswith(prefix):
                    return None
                mod = f[len(prefix) : -3]
                if event == "line" or event == "call":
                    lines.setdefault(mod, set()).add(frame.f_lineno)
                return tracer

            sys.settrace(tracer)
            run_vectors_inprocess(output)
            sys.settrace(None)
            with os.fdopen(wfd, "w") as w:
                json.dump({k: sorted(v) for k, v in lines.items()}, w)
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd) as r:
        data = r.read()
    os.waitpid(pid, 0)
    return {k: set(v) for k, v in json.loads(data).items()} if data else {}


def _run_forked(m: PyMutant | None, output: Path, timeout: float) -> str:
    """'killed', 'survived' or 'timeout' (the baseline: 'survived' means all vectors pass)."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 3
        try:
            code = _child(m, output, timeout)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "timeout" if os.WTERMSIG(status) == signal.SIGALRM else "killed"
    return "survived" if os.WEXITSTATUS(status) == 0 else "killed"


def load_equivalent(name: str) -> dict[str, str]:
    """``key  # reason`` lines of conformance/mutation/equivalent-<name>.txt."""
    path = MUTATION_DIR / f"equivalent-{name}.txt"
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, reason = line.partition("  # ")
        if not sep or not reason.strip():
            raise SystemExit(f"{path}: every entry needs '  # <reason>': {line!r}")
        out[key.strip()] = reason.strip()
    return out


@dataclass
class Campaign:
    name: str
    total: int
    killed: int
    timeouts: int
    survivors: list[str]
    equivalent: dict[str, str]
    seconds: float
    unviable: int = 0
    #: keys of the mutants a vector killed (not by timeout, which load can cause)
    caught: list[str] = field(default_factory=list)

    @property
    def unlisted(self) -> list[str]:
        return [s for s in self.survivors if s not in self.equivalent]

    @property
    def stale(self) -> list[str]:
        """Listed keys whose mutant a vector killed: the listed reason is wrong (delete the line)."""
        return [k for k in self.caught if k in self.equivalent]

    def report(self) -> str:
        viable = self.total - self.unviable
        caught = self.killed + self.timeouts
        eq = len([s for s in self.survivors if s in self.equivalent])
        raw = 100.0 * caught / viable if viable else 100.0
        adj = 100.0 * caught / (viable - eq) if viable - eq else 100.0
        per = self.seconds / self.total if self.total else 0.0
        lines = [
            f"{self.name}: {viable} mutants ({self.unviable} unviable not counted), "
            f"{caught} killed ({self.timeouts} by timeout), {len(self.survivors)} survived "
            f"({eq} listed equivalent); score {raw:.1f}% raw, {adj:.1f}% without equivalents; "
            f"{self.seconds:.0f} s ({per:.2f} s per mutant)"
        ]
        for s in self.unlisted:
            lines.append(f"  SURVIVED {s}")
        for s in self.stale:
            lines.append(f"  STALE    {s}  (listed, but a vector kills it: delete its line)")
        return "\n".join(lines)


def _sample(items: list[Any], n: int | None, seed: int) -> list[Any]:
    if n is None or n >= len(items):
        return items
    return sorted(random.Random(seed).sample(items, n), key=items.index)


def python_campaign(
    modules: Sequence[str],
    sample: int | None,
    seed: int,
    timeout_factor: float,
    only: str | None,
    verbose: bool,
    names: set[str] | None = None,
) -> Campaign:
    mutants = [m for mod in modules for m in py_mutants(mod)]
    if only:
        mutants = [m for m in mutants if re.search(only, m.key)]
    if names is not None:
        mutants = [m for m in mutants if m.key in names]
    mutants = _sample(mutants, sample, seed)
    equivalent = load_equivalent("python")
    # warm: third-party modules stay imported in the forked children; only ours are imported again
    import delta_fabric_conformance.kit.driver
    import delta_fabric_conformance.runner  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="df-mutation-") as tmp:
        out = Path(tmp)
        t0 = time.monotonic()
        if _run_forked(None, out, 600) != "survived":
            _purge()
            print("\n".join(run_vectors_inprocess(out)[:20]), file=sys.stderr)
            raise SystemExit("python: the unmutated code fails the vectors; fix that first")
        base = time.monotonic() - t0
        timeout = max(10.0, timeout_factor * base)
        covered = _covered_lines(out)
        uncovered = [m for m in mutants if m.line not in covered.get(m.module, set())]
        print(
            f"python: baseline {base:.1f} s, {len(mutants)} mutants ({len(uncovered)} on lines no "
            f"vector executes: survivors, not run), timeout {timeout:.0f} s",
            flush=True,
        )
        killed = timeouts = 0
        survivors: list[str] = []
        caught: list[str] = []
        t0 = time.monotonic()
        for i, m in enumerate(mutants):
            if m in uncovered:
                survivors.append(m.key)
                if verbose:
                    print(f"[{i + 1}/{len(mutants)}] {'no-cover':8s} {m.key}", flush=True)
                continue
            r = _run_forked(m, out, timeout)
            if r == "killed":
                killed += 1
                caught.append(m.key)
            elif r == "timeout":
                timeouts += 1
            else:
                survivors.append(m.key)
            if verbose:
                print(f"[{i + 1}/{len(mutants)}] {r:8s} {m.key}", flush=True)
        seconds = time.monotonic() - t0
    return Campaign(
        "python", len(mutants), killed, timeouts, survivors, equivalent, seconds, caught=caught
    )


# --------------------------------------------------------------------------------------------------
# Rust: cargo mutants
# --------------------------------------------------------------------------------------------------
_RUST_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<what>.*)$")


def rust_keys(names: Sequence[str]) -> dict[str, str]:
    """cargo-mutants' names -> keys: the name without line:column (stable when code above moves), with
    ``(#n)`` for the n-th mutant of the same description in the same file (listing order)."""
    seen: dict[str, int] = {}
    out: dict[str, str] = {}
    for name in names:
        m = _RUST_LINE.match(name.strip())
        base = f"{m['file']}: {m['what']}" if m else name.strip()
        k = seen.get(base, 0)
        seen[base] = k + 1
        out[name.strip()] = base if k == 0 else f"{base} (#{k + 1})"
    return out


def rust_workspace(dest: Path) -> Path:
    """A copy of ``df-core`` (sources, tests, manifest) in a workspace of its own under ``dest``, with
    the checkout's ``Cargo.lock`` and profiles: the mutants are applied to this copy (``--in-place``
    there), never to the checkout, and cargo resolves a 1-member workspace instead of 5 (a no-op
    ``cargo test`` there takes 0.05 s of CPU instead of 0.3 s, and a mutant runs cargo twice).
    Same compiler, dependency versions and profile as the checkout's ``df-core``. Returns the
    workspace's root."""
    interop = ROOT / "interop"
    ws = dest / "interop"
    crate = ws / "crates" / "df-core"
    crate.parent.mkdir(parents=True)
    ignore = shutil.ignore_patterns("target", "*.orig", "*.rej")
    # fresh modification times (copy, not copy2): the scratch workspace maps to the same artifacts of
    # CARGO_TARGET_DIR as every earlier one (cargo hashes workspace-relative paths), and sources older
    # than the last mutant's build would let cargo reuse that mutated build as the "unmutated" baseline
    shutil.copytree(RUST_CRATE_DIR, crate, ignore=ignore, copy_function=shutil.copy)
    shutil.copy2(interop / "Cargo.lock", ws / "Cargo.lock")
    manifest = (interop / "Cargo.toml").read_text(encoding="utf-8")
    manifest, n = re.subn(
        r"(?ms)^members = \[.*?\]", 'members = ["crates/df-core"]', manifest, count=1
    )
    if n != 1:
        raise SystemExit("rust: interop/Cargo.toml has no `members = [...]`")
    (ws / "Cargo.toml").write_text(manifest, encoding="utf-8")
    return ws


def rust_campaign(
    rs_files: Sequence[str],
    sample: int | None,
    seed: int,
    extra: list[str],
    verbose: bool,
    names: set[str] | None = None,
    output: Path | None = None,
) -> Campaign:
    """``cargo mutants`` on ``rs_files`` of a scratch copy of df-core (:func:`rust_workspace`) with
    the ``mutants`` profile (``interop/Cargo.toml``) and ``cargo test --test vectors`` against a copy
    of the vectors taken at the start. ``output``: keep cargo-mutants' ``mutants.out`` there (its
    ``caught.txt`` / ``missed.txt`` grow while it runs), else in a temporary folder."""
    exe = shutil.which("cargo-mutants") or str(Path.home() / ".cargo" / "bin" / "cargo-mutants")
    if not Path(exe).exists():
        raise SystemExit("rust: cargo-mutants not found (cargo install --locked cargo-mutants)")
    with tempfile.TemporaryDirectory(prefix="df-mutants-") as tmp:
        ws = rust_workspace(Path(tmp))
        vectors = Path(tmp) / "vectors"
        shutil.copytree(VECTORS, vectors)
        files: list[str] = []
        for f in rs_files:
            files += ["-f", f"crates/df-core/src/{f}"]
        base = ["cargo", "mutants", "-p", "df-core", "--in-place", *files]
        base += ["--profile", "mutants", *extra]
        listed = subprocess.run(
            [*base, "--list"], cwd=ws, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        listed = [x for x in listed if x.strip()]
        equivalent = load_equivalent("rust")
        keys = rust_keys(listed)
        everything = len(listed)
        if names is not None:
            listed = [x for x in listed if x.strip() in names or keys[x.strip()] in names]
        chosen = _sample(listed, sample, seed)
        out = output if output is not None else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        cmd = [*base, "--output", str(out), "--no-shuffle", "--baseline", "run"]
        if len(chosen) != everything:
            # an exact selection: one regex per chosen mutant name
            for name in chosen:
                cmd += ["--re", "^" + re.escape(name) + "$"]
        cmd += ["--", "--test", "vectors"]
        print(f"rust: {len(chosen)} of {everything} mutants: {' '.join(cmd[:8])} ...", flush=True)
        t0 = time.monotonic()
        env = dict(os.environ, DF_CONFORMANCE_VECTORS=str(vectors))
        proc = subprocess.run(
            cmd, cwd=ws, env=env, stdout=None if verbose else subprocess.DEVNULL, check=False
        )
        seconds = time.monotonic() - t0
        outdir = out / "mutants.out"
        if proc.returncode not in (0, 2, 3) or not (outdir / "outcomes.json").exists():
            raise SystemExit(f"rust: cargo mutants failed (exit {proc.returncode})")

        def read_list(f: str) -> list[str]:
            p = outdir / f
            return [x for x in p.read_text().splitlines() if x.strip()] if p.exists() else []

        caught, missed = read_list("caught.txt"), read_list("missed.txt")
        timeouts, unviable = read_list("timeout.txt"), read_list("unviable.txt")
    survivors = [keys.get(x.strip(), x.strip()) for x in missed]
    eq = {k: v for k, v in equivalent.items()}
    return Campaign(
        "rust",
        len(caught) + len(missed) + len(timeouts) + len(unviable),
        len(caught),
        len(timeouts),
        survivors,
        eq,
        seconds,
        unviable=len(unviable),
        caught=[keys.get(x.strip(), x.strip()) for x in caught],
    )


def _use_vectors(path: Path) -> None:
    global VECTORS
    VECTORS = path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("which", choices=("python", "rust", "all", "list-python"))
    ap.add_argument("--sample", type=int, default=None, help="run a seeded sample of N mutants")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout-factor", type=float, default=5.0)
    ap.add_argument(
        "--modules",
        default=",".join(PY_MODULES),
        help="python: comma-separated modules of delta_fabric (default: %(default)s)",
    )
    ap.add_argument(
        "--files",
        default=",".join(RUST_FILES),
        help="rust: comma-separated files of df-core/src (default: %(default)s)",
    )
    ap.add_argument(
        "--vectors",
        type=Path,
        default=VECTORS,
        help="the vectors to run (default: %(default)s)",
    )
    ap.add_argument(
        "--names",
        type=Path,
        default=None,
        help="only the mutants whose key (or cargo-mutants name) is a line of this file",
    )
    ap.add_argument(
        "--only", default=None, help="python: only mutants whose key matches this regex"
    )
    ap.add_argument(
        "--output",
        type=Path,
        default=None,
        help="rust: keep cargo-mutants' mutants.out in this folder (default: a temporary one)",
    )
    ap.add_argument("--cargo-mutants-args", nargs=argparse.REMAINDER, default=[])
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    if not (a.vectors / "index.json").is_file():
        ap.error(f"--vectors {a.vectors}: no index.json there")
    _use_vectors(a.vectors.resolve())
    names: set[str] | None = None
    if a.names is not None:
        # the keys (or cargo-mutants names) of a list, e.g. the survivors of an earlier run
        names = {
            line.partition("  # ")[0].strip()
            for line in a.names.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")
        }
    if a.sample is not None and a.sample < 1:
        ap.error("--sample must be at least 1")
    if a.which == "list-python":
        for mod in PY_MODULES:
            for m in py_mutants(mod):
                print(f"{m.line}: {m.key}")
        return 0
    camps: list[Campaign] = []
    if a.which in ("python", "all"):
        camps.append(
            python_campaign(
                a.modules.split(","),
                a.sample,
                a.seed,
                a.timeout_factor,
                a.only,
                a.verbose,
                names,
            )
        )
        print(camps[-1].report(), flush=True)
    if a.which in ("rust", "all"):
        camps.append(
            rust_campaign(
                a.files.split(","),
                a.sample,
                a.seed,
                a.cargo_mutants_args,
                a.verbose,
                names,
                a.output,
            )
        )
        print(camps[-1].report(), flush=True)
    return 1 if any(c.unlisted or c.stale for c in camps) else 0


def _iter_keys(c: Campaign) -> Iterator[str]:
    yield from c.survivors


if __name__ == "__main__":
    sys.exit(main())
