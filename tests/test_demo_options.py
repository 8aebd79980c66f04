"""The demo checks every option before it starts a node: a bad value is one line on stderr and exit
2, never a traceback, and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BAD = {
    "ratio 0": (["--ratio", "0"], "--ratio"),
    "ratio > 1": (["--ratio", "1.5"], "--ratio"),
    "ratio nan": (["--ratio", "nan"], "--ratio"),
    "alpha 0": (["--alpha", "0"], "--alpha"),
    "alpha > 1": (["--alpha", "2"], "--alpha"),
    "alpha inf": (["--alpha", "inf"], "--alpha"),
    "sync-interval 0": (["--sync-interval", "0"], "--sync-interval"),
    "batch 0": (["--batch", "0"], "--batch"),
    "lr 0": (["--lr", "0"], "--lr"),
    "lr negative": (["--lr", "-0.1"], "--lr"),
    "lr nan": (["--lr", "nan"], "--lr"),
    "lr inf": (["--lr", "inf"], "--lr"),
    "steps 0": (["--steps", "0"], "--steps"),
    "timeout 0": (["--timeout", "0"], "--timeout"),
    "timeout nan": (["--timeout", "nan"], "--timeout"),
    "eval-every 0": (["--eval-every", "0"], "--eval-every"),
    "momentum 1": (["--momentum", "1"], "--momentum"),
    "max-lead negative": (["--max-lead", "-1"], "--max-lead"),
    "unknown framework": (["--frameworks", "torch,tensorflow"], "tensorflow"),
    "no framework": (["--frameworks", ","], "--frameworks"),
    "nodes 0": (["--nodes", "0"], "--nodes"),
    "nodes vs frameworks": (["--nodes", "2", "--frameworks", "torch,torch,torch"], "--nodes"),
    "unwritable output": (["--output", "{file}/out"], "--output"),
    "average-over 0": (["--average-over", "0"], "--average-over"),
    "lockstep on in a ring of 5": (
        ["--nodes", "5", "--topology", "ring", "--lockstep", "on"],
        "--lockstep",
    ),
    # a df-node build without the option (its --help does not list it): refused when asked for
    # explicitly (by default the run falls back to 1.0's value for every node)
    "relay-policy NEEDED, native node lacks it": (
        ["--frameworks", "torch,torch,burn", "--burn-bin", "{old_bin}", "--relay-policy", "NEEDED"],
        "--relay-policy",
    ),
    "encoding F16, native node lacks it": (
        ["--frameworks", "torch,torch,burn", "--burn-bin", "{old_bin}", "--encoding", "F16"],
        "--encoding",
    ),
    "index-encoding PACKED, native node lacks it": (
        [
            "--frameworks",
            "torch,torch,burn",
            "--burn-bin",
            "{old_bin}",
            "--index-encoding",
            "PACKED",
        ],
        "--index-encoding",
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_option_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    args, names = BAD[case]
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    old_bin = tmp_path / "df-node-old"  # a native node whose --help lists none of the 1.1 options
    old_bin.write_text("#!/bin/sh\necho 'usage: df-node --ratio R --average-over C'\n")
    old_bin.chmod(0o755)
    args = [a.replace("{file}", str(a_file)).replace("{old_bin}", str(old_bin)) for a in args]
    if "--output" not in args:
        args += ["--output", str(tmp_path / "out")]
    r = subprocess.run(
        [sys.executable, "-m", "delta_fabric.cli", "demo", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("demo: ") and names in lines[0]
    assert r.stdout == ""
    assert not (tmp_path / "out").exists()  # checked before anything was written


def test_native_node_without_a_1_1_option_falls_back_to_1_0_values(tmp_path: Path) -> None:
    """The demo's defaults (relay NEEDED, PACKED indices) go to every node that knows them; with a
    df-node build that lacks an option the whole run uses protocol 1.0's value, and an option given
    explicitly keeps its value (an unsupported one is refused: the cases above)."""
    import argparse

    from delta_fabric_demo.lockstep import DEMO_DEFAULTS
    from delta_fabric_demo.runner import _native_option, add_arguments

    old_bin = tmp_path / "df-node-old"
    old_bin.write_text("#!/bin/sh\necho 'usage: df-node --ratio R --average-over C'\n")
    old_bin.chmod(0o755)
    new_bin = tmp_path / "df-node-new"
    new_bin.write_text("#!/bin/sh\necho 'usage: df-node --index-encoding E --relay-policy P'\n")
    new_bin.chmod(0o755)
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args([])
    assert args.index_encoding is None  # resolved per run, against its nodes
    for name, v10 in (("index-encoding", "PLAIN"), ("relay-policy", "ALL")):
        default = DEMO_DEFAULTS[name.replace("-", "_")]
        assert default != v10
        assert _native_option(args, {}, name, default, v10) == default  # PyTorch only
        assert _native_option(args, {"burn": str(new_bin)}, name, default, v10) == default
        assert _native_option(args, {"burn": str(old_bin)}, name, default, v10) == v10
    given = p.parse_args(["--index-encoding", "plain"])
    assert _native_option(given, {}, "index-encoding", "PACKED", "PLAIN") == "PLAIN"


def test_sync_parameter_messages_are_the_librarys() -> None:
    """The demo reports a bad sync parameter with SyncConfig's own message."""
    import argparse

    from delta_fabric.config import SyncConfig
    from delta_fabric_demo.runner import UsageError, _check_options, add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(ValueError) as lib:
        SyncConfig.v1_0(ratio=1.5)
    with pytest.raises(UsageError) as demo:
        _check_options(p.parse_args(["--ratio", "1.5"]))
    assert str(demo.value) == f"--ratio: {lib.value}"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cluster-size", "0"], "node: --cluster-size 0 must be >= 1"),
        (
            ["--zenoh-config", "z.json5", "--connect", "tcp/127.0.0.1:7447"],
            "node: --zenoh-config is used as is: give the endpoints and the mode in the file",
        ),
        (["--drain"], "node: --drain needs --neighbours (the nodes to wait for) and --sync on"),
        (
            ["--drain", "--neighbours", "a1", "--sync", "off"],
            "node: --drain needs --neighbours (the nodes to wait for) and --sync on",
        ),
    ],
)
def test_demo_node_cluster_options_are_checked_before_anything_opens(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    from delta_fabric_demo.node import parse_args, run_node

    class RecordingChannel:
        def __init__(self) -> None:
            self.events: list[dict[str, object]] = []

        def emit(self, obj: dict[str, object]) -> None:
            self.events.append(obj)

        def stop_requested(self, timeout: float) -> bool:
            return True

    base = ["--index", "0", "--node-id", "a0", "--steps", "1", "--lr", "0.1"]
    missing = tmp_path / "no-such-dir"  # never read: the check comes first
    argv = [*base, "--data", str(missing), "--init", str(missing / "init.f32"), *extra]
    channel = RecordingChannel()
    assert run_node(parse_args(argv), channel) == 2
    assert capsys.readouterr().err.strip() == message
    assert channel.events == []
