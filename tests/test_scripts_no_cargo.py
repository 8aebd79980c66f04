"""`scripts/demo.sh` on a machine without a Rust toolchain: the PyTorch-only path needs no cargo.

The test hides cargo from PATH and points the scripts at a virtual environment that sees the
packages of the running interpreter (a ``.pth`` file) and carries the demo profile's setup stamp, so
``scripts/setup.sh --demo`` only checks, and nothing is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _path_without_cargo() -> str:
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    kept = [d for d in dirs if not Path(d, "cargo").exists() and ".cargo" not in d]
    path = os.pathsep.join(kept)
    assert shutil.which("cargo", path=path) is None
    assert shutil.which("rustc", path=path) is None
    return path


def _venv_seeing_this_interpreter(where: Path) -> Path:
    """A fresh venv (no pip) whose ``site-packages`` has a ``.pth`` listing this interpreter's
    ``sys.path``: the installed torch, zenoh, ... and the sources under test (PYTHONPATH)."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    py = where / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()
    entries = [p for p in sys.path if p and Path(p).is_dir()]
    Path(site, "outer.pth").write_text("\n".join(entries) + "\n")
    return where


def _no_cargo_env(tmp_path: Path) -> dict[str, str]:
    env_dir = _venv_seeing_this_interpreter(tmp_path / "venv")
    stamp = subprocess.run(
        ["bash", "scripts/setup.sh", "--print-stamp", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (env_dir / ".deltafabric-setup-demo").write_text(stamp + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUSTUP", "PYTHON"))}
    env.update(
        PATH=_path_without_cargo(),
        DELTA_FABRIC_VENV=str(env_dir),
        PYTHONPATH=os.pathsep.join(
            str(ROOT / p) for p in ("python/src", "conformance/harness/src", "python/demo/src")
        ),
    )
    return env


def test_demo_sh_runs_without_cargo(tmp_path: Path) -> None:
    env = _no_cargo_env(tmp_path)
    out = tmp_path / "demo-out"
    proc = subprocess.run(
        [
            "bash", "scripts/demo.sh", "--nodes", "2", "--steps", "20", "--eval-every", "10",
            "--skip-nosync", "--skip-baseline", "--no-plot", "--no-progress",
            "--timeout", "120", "--output", str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "setup: ok (demo," in proc.stderr  # the demo profile only checked: no pip, no cargo
    assert "cargo" not in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nodes"] == 2 and summary["frameworks"] == ["torch", "torch"]
    assert all(n["curve"][-1][0] == 20 for n in summary["runs"]["sync"]["nodes"])


def test_setup_with_rust_but_no_cargo_says_so(tmp_path: Path) -> None:
    env_dir = _venv_seeing_this_interpreter(tmp_path / "venv")
    stamp = subprocess.run(
        ["bash", "scripts/setup.sh", "--print-stamp", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (env_dir / ".deltafabric-setup-demo").write_text(stamp + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUSTUP"))}
    env.update(PATH=_path_without_cargo(), DELTA_FABRIC_VENV=str(env_dir))
    proc = subprocess.run(
        ["bash", "scripts/setup.sh", "--demo", "--rust"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "needs cargo" in proc.stderr and "rustup.rs" in proc.stderr


def test_only_the_frameworks_value_asks_for_burn(tmp_path: Path) -> None:
    # an argument that merely contains "burn" (an output folder) does not set up Rust or build
    # df-node, and a --burn-bin that does not exist is one line and exit 2, with nothing built
    env = _no_cargo_env(tmp_path)
    cases = [
        (
            ["--output", str(tmp_path / "burn-out"), "--steps", "0"],
            "demo: --steps must be >= 1, got 0",
        ),
        (
            ["--frameworks", "torch,burn", "--burn-bin", str(tmp_path / "nope"), "--steps", "5"],
            f"demo: --burn-bin {tmp_path / 'nope'}: no such file",
        ),
        (
            ["--frameworks=torch,burn", f"--burn-bin={tmp_path / 'nope'}", "--steps", "5"],
            f"demo: --burn-bin {tmp_path / 'nope'}: no such file",
        ),
    ]
    for argv, line in cases:
        proc = subprocess.run(
            ["bash", "scripts/demo.sh", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, (argv, proc.stderr[-2000:])
        assert proc.stderr.strip().splitlines()[-1] == line, proc.stderr[-2000:]
        assert "cargo" not in proc.stderr and "--rust" not in proc.stderr, proc.stderr[-2000:]
        assert "setup: ok (demo," in proc.stderr
