"""Command-line polish: ``--version`` on every entry point, defaults in every option's help, a user
description at the top, a quiet exit when stdout's reader goes away, and the extra to install when
an optional dependency is missing."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from delta_fabric.cli_support import HelpFormatter, software_versions
from delta_fabric.extras import MissingExtraError
from delta_fabric.wire import Entry, Packet, encode_packet

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("delta_fabric.cli", "delta-fabric"),
        ("delta_fabric_demo", "delta-fabric-demo"),
        ("delta_fabric_conformance", "delta-fabric-conformance"),
    ],
)
def test_version_on_every_entry_point(module: str, prog: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0 and r.stderr == ""
    line = r.stdout.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"{prog} 0.1.0 (") and "protocol 1.1" in line
    v = software_versions()
    for dist in ("torch", "eclipse-zenoh", "delta-fabric-native"):
        if v[dist] is not None:
            assert f"{dist} {v[dist]}" in line
        else:
            assert dist in line.split("not installed:")[1]


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest not in ("help", "version")]


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from delta_fabric import cli_inspect
    from delta_fabric_conformance import cli as conformance_cli
    from delta_fabric_demo import add_arguments as demo_arguments

    out = {}
    for name, add in (("demo", demo_arguments), ("inspect", cli_inspect.add_arguments)):
        p = argparse.ArgumentParser(prog=name, formatter_class=HelpFormatter)
        add(p)
        out[name] = p
    top = argparse.ArgumentParser(prog="conformance", formatter_class=HelpFormatter)
    conformance_cli.add_arguments(top)
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        out[f"conformance {name}"] = p
    return out


@pytest.mark.parametrize("name", ["demo", "inspect", "conformance run", "conformance coverage"])
def test_every_option_has_help_with_its_default(name: str) -> None:
    parser = _parsers()[name]
    text = " ".join(parser.format_help().split())
    for action in _options(parser):
        assert action.help, f"{name} {action.option_strings[0]} has no help"
        d = action.default
        if d is None or d is False or d == []:
            continue  # nothing to state, or the text says what None means
        shown = f"(default: {d})" in text or "default" in action.help
        assert shown, f"{name} {action.option_strings[0]}: default {d!r} not in the help"
    if name == "demo":
        from delta_fabric_demo.lockstep import DEMO_DEFAULTS

        assert "(default: 1200)" in text and f"(default: {DEMO_DEFAULTS['ratio']})" in text


def test_top_level_help_is_for_users() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "delta_fabric.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0
    assert "decentralized sparse weight synchronization" in r.stdout
    assert "dispatcher" not in r.stdout and "add_arguments" not in r.stdout
    for command in ("inspect", "demo", "conformance", "--version"):
        assert command in r.stdout


def test_inspect_into_a_pipe_closed_early(tmp_path: Path) -> None:
    """``delta-fabric inspect big.dfp | head -c 100``: no BrokenPipeError traceback."""
    n = 30_000  # ~0.5 MB of JSON: far more than a pipe buffer, so the writer is still writing
    packet = Packet(1, 2, bytes(32), (Entry(3, 4, 5, 0, list(range(n)), [0.5] * n),))
    f = tmp_path / "big.dfp"
    f.write_bytes(encode_packet(packet))
    proc = subprocess.Popen(
        [sys.executable, "-m", "delta_fabric.cli", "inspect", str(f)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(100)
    proc.stdout.close()  # the reader goes away, like `head` after its lines
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert head.startswith(b"{")
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert err == "" and rc == 141


@pytest.mark.parametrize(
    ("module", "extra", "dist"),
    [
        ("delta_fabric.transports.zenoh", "zenoh", "eclipse-zenoh"),
        ("delta_fabric.stores.torch", "torch", "torch"),
    ],
)
def test_missing_extra_names_the_pip_install(
    module: str, extra: str, dist: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A base install without the extra: importing the module says which extra to install."""
    monkeypatch.setitem(sys.modules, extra, None)  # `import <extra>` now fails as if not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingExtraError) as info:
        importlib.import_module(module)
    assert f"pip install 'delta-fabric[{extra}]'" in str(info.value)
    assert dist in str(info.value) and info.value.name == extra
    assert isinstance(info.value, ModuleNotFoundError)


def test_demo_without_torch_names_the_extra_in_one_line(tmp_path: Path) -> None:
    """``delta-fabric demo`` on an install without torch: one line naming the extra, exit 2."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from delta_fabric.cli import main\n"
        f"sys.exit(main(['demo', '--steps', '1', '--output', {str(tmp_path / 'out')!r}]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "pip install 'delta-fabric[torch]'" in r.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--bogus"],
            "delta-fabric: error: unknown option '--bogus': options go after the command",
        ),
        ([], "delta-fabric: error: no command given; commands: inspect, run, status"),
        (["bogus"], "delta-fabric: error: unknown command 'bogus'; commands: inspect"),
        (["run"], "delta-fabric run: error: no training script given: delta-fabric run [OPTIONS]"),
        (["run", "--bogus", "x.py"], "delta-fabric run: error: unrecognized arguments: --bogus"),
        (["demo", "--bogus"], "delta-fabric demo: error: unrecognized arguments: --bogus"),
        (["demo", "--steps", "x"], "delta-fabric demo: error: argument --steps: invalid int"),
        (["conformance"], "delta-fabric conformance: error: the following arguments are required"),
        (["conformance", "run"], "delta-fabric conformance run: error: the following arguments"),
        (["router", "--bogus"], "delta-fabric router: error: unrecognized arguments: --bogus"),
        (["inspect"], "delta-fabric inspect: error: the following arguments are required"),
        (["status", "--bogus"], "delta-fabric status: error: unrecognized arguments: --bogus"),
    ],
)
def test_every_usage_error_is_one_line_and_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from delta_fabric.cli import main

    with pytest.raises(SystemExit) as exc:
        rc = main(argv)
        raise SystemExit(rc)  # `run` without a script returns 2 instead of raising
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(expected), err
