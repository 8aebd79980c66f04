"""`delta_fabric.ports`: ports for nodes that listen later lie below the kernel's ephemeral range
(never a source port of an outgoing connection), are free when given and never given twice."""

from __future__ import annotations

import socket
from contextlib import closing
from pathlib import Path

import pytest
from delta_fabric import ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low = ports.ephemeral_low()
    got = ports.free_ports(20) + [ports.free_port() for _ in range(20)]
    assert len(set(got)) == 40
    for p in got:
        assert ports.LOWEST <= p < low
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.bind(("127.0.0.1", p))  # still free


def test_a_port_in_use_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # narrow the range to 8 ports, hold one of them: it is never handed out
    low = ports.ephemeral_low()
    monkeypatch.setattr(ports, "SPAN", 7)
    monkeypatch.setattr(ports, "_handed_out", set())
    held = None
    for cand in range(low - 8, low):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", cand))
        except OSError:
            s.close()
            continue
        held = s
        break
    if held is None:
        pytest.fail(f"every port in [{low - 8}, {low}) is in use on this machine")
    try:
        busy = held.getsockname()[1]
        free = ports.free_ports(2)
        assert busy not in free
        assert all(low - 8 <= p < low for p in free)
    finally:
        held.close()


def test_range_exhausted_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "SPAN", 1)
    monkeypatch.setattr(ports, "_handed_out", set(range(1, 65536)))
    with pytest.raises(RuntimeError, match="no 1 free TCP ports"):
        ports.free_port()


@pytest.mark.parametrize("n", [-1, True, 1.5])
def test_bad_count_is_a_value_error(n: object) -> None:
    with pytest.raises(ValueError, match="n must be an integer"):
        ports.free_ports(n)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "want"),
    [("40000\t60999\n", 40000), ("garbage", 32768), ("", 32768), ("80 90", 32768)],
)
def test_ephemeral_low_reads_the_kernel_range(tmp_path: Path, text: str, want: int) -> None:
    f = tmp_path / "range"
    f.write_text(text)
    assert ports.ephemeral_low(f) == want
    assert ports.ephemeral_low(tmp_path / "missing") == 32768
