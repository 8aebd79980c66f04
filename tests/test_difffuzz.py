"""The differential decode fuzz (conformance/tools/difffuzz.py) in CI: 100,000 seeded packets through
every registered implementation that can start here, by batches over the driver protocol
(``decode_batch``), with 0 disagreements of acceptance, code or decoded content. The full campaign
(>= 1 M packets) is the same script run by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "difffuzz", ROOT / "conformance" / "tools" / "difffuzz.py"
)
assert _spec is not None and _spec.loader is not None
difffuzz = importlib.util.module_from_spec(_spec)
sys.modules["difffuzz"] = difffuzz
_spec.loader.exec_module(difffuzz)

CI_PACKETS = 100_000
CI_SEED = 20261130


def test_generator_is_seeded_and_covers_every_mutation_kind() -> None:
    # REQ: DF-PKT-20, DF-PKT-21, DF-SEC-20
    a = list(difffuzz.packets(7, 2000))
    assert a == list(difffuzz.packets(7, 2000))
    assert a != list(difffuzz.packets(8, 2000))
    # misaligned shifts, truncations and random bytes all occur
    lengths = {len(p) for p in a}
    assert 0 in lengths or min(lengths) < 8
    assert len(lengths) > 100


def test_one_verdict_per_packet_in_every_implementation(capsys: pytest.CaptureFixture[str]) -> None:
    # REQ: DF-RCV-20, DF-PKT-20, DF-PKT-21, DF-SEC-20, DF-RCV-1
    impls = difffuzz.available(difffuzz.REGISTRY, [])
    assert {"python", "rust"} <= {i.name for i in impls}
    fig = difffuzz.run(impls, seed=CI_SEED, count=CI_PACKETS, batch=4096)
    with capsys.disabled():
        print(
            f"\ndifffuzz: {fig.packets} packets through {[i.name for i in impls]}: "
            f"{fig.seconds:.1f} s wall, CPU drivers {fig.cpu_drivers:.1f} s + runner "
            f"{fig.cpu_runner:.1f} s; accepted {dict(fig.accepted)}"
        )
    assert fig.packets == CI_PACKETS
    assert (fig.acceptance, fig.code, fig.content) == (0, 0, 0), fig.samples[:3]
    # the mix is meaningful: both verdicts, and most codes, occur
    accepted = fig.accepted["python"]
    assert 0.02 * CI_PACKETS < accepted < 0.5 * CI_PACKETS
    assert len(fig.codes) >= 10, fig.codes
