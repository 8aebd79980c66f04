"""Vectors that pin the parameters and the manifest as the driver reads them (issue 10, "Suite
strength": survivors of ``conformance/tools/mutation.py python --modules config,manifest``; h40).

- ``*config_defaults``: the vector's ``config`` is ``{}``, so every parameter takes the default of the
  spec's section 3 table (DF-PAR-11: "a node MUST use the default value of every parameter ... unless it
  is configured otherwise"; the section's example: "every key that is absent takes its default"). The
  receive case is built so that a different ``replay_window``, ``max_incarnations``, ``hop_limit``,
  ``relay_threshold``, ``alpha`` or send ``encoding`` changes its outcome; the generate case pins ``ratio``.
- ``receive/config_range_edges``: values at the edges of the allowed ranges, which a node MUST accept
  (DF-PAR-11): ``sync_interval`` 1, ``hop_limit`` 0 and ``max_packet_size`` 2147483647.
- ``receive/manifest_minimal_names``: a manifest given as its tensors only (no ``version``,
  ``num_params`` or ``fingerprint``), with names that DF-MAN-1 allows although they look unusual (a
  space U+0020, a tilde U+007E, U+0080, which is a C1 control in Unicode but not a control of DF-MAN-1)
  and a tensor with a zero dimension (DF-MAN-1: "non-negative integers"); the packets carry the
  fingerprint of that manifest (DF-MAN-5), so a receiver that refuses a name or the shape, or writes
  the canonical text differently, fails the case.

Called by ``make_vectors.py`` (``build(vectors_dir) -> index rows``) after ``engine_vectors.py``; the
vectors are written by ``engine_vectors._write_receive``/``_write_generate`` (which run the Python engine
and cross-check it), then their ``config``/``manifest`` members are replaced by the sparse form.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.manifest import Manifest

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import engine_vectors as ev  # noqa: E402

__all__ = ["build"]

#: DF-MAN-1 allows every one of these names; N = 24, the layout of ``engine_vectors.MANIFEST``.
ODD_MANIFEST = Manifest.from_named_shapes(
    {"fc bias": (4,), "fc.weight~\u0080": (4, 5), "z.empty": (2, 0)}
)


def _defaults_receive() -> ev.RecvCase:
    b, c = ev.B, ev.C
    history = [(b, ev.B_INC, 1025)] + [(c, ev.C_INC + j, 1) for j in range(4)]
    packets = [
        # replay_window 1024: H = 1025, seq 1 is too_old (1 <= H - W), seq 2 is accepted
        ev.pkt(ev.ent(b, ev.B_INC, 1, 0, [0], [1.0]), ev.ent(b, ev.B_INC, 2, 0, [1], [0.5])),
        # max_incarnations 4: a fifth incarnation of C evicts the lowest, whose next entry is stale
        ev.pkt(
            ev.ent(c, ev.C_INC + 4, 1, 0, [2], [0.25]),
            ev.ent(c, ev.C_INC, 2, 0, [3], [0.75]),
            sender=c,
        ),
        # hop_limit 16: hops 15 is relayed (as 16), hops 16 is accepted but not relayed;
        # relay_threshold 1e-6: 2e-6 is relayed, 5e-7 is not
        ev.pkt(
            ev.ent(b, ev.B_INC, 3, 15, [4, 5], [0.5, 2e-6]),
            ev.ent(b, ev.B_INC, 4, 16, [6], [0.5]),
            ev.ent(b, ev.B_INC, 5, 0, [7, 8], [0.125, 5e-7]),
        ),
    ]
    return ev.RecvCase(
        "config_defaults",
        "The config is {}: every parameter takes its section 3 default (DF-PAR-11). replay_window "
        "1024: with B's highest accepted seq 1025, seq 1 is too_old and seq 2 accepted; "
        "max_incarnations 4: C's fifth incarnation evicts the lowest, whose next entry is "
        "stale_incarnation; hop_limit 16: an entry with hops 15 is relayed (hops 16), one with hops 16 "
        "is accepted and not relayed; relay_threshold 1e-6: 2e-6 is relayed, 5e-7 is not; alpha 1.0: "
        "values are applied unchanged; encoding F32: the relay packet is F32.",
        [
            "DF-PAR-11",
            "DF-PAR-1",
            "DF-PAR-4",
            "DF-PAR-5",
            "DF-PAR-7",
            "DF-PAR-8",
            "DF-PAR-10",
            "DF-RCV-4",
        ],
        packets,
        config=SyncConfig(),
        history=history,
    )


def _range_edges_receive() -> ev.RecvCase:
    b = ev.B
    return ev.RecvCase(
        "config_range_edges",
        "Parameters at the edges of their allowed ranges, which a node MUST accept (DF-PAR-11): "
        "sync_interval 1, hop_limit 0, max_packet_size 2147483647. With hop_limit 0 an entry with "
        "hops 0 is accepted and not relayed (hops 1 would exceed the limit), and a packet that carries "
        "an entry with hops 1 is rejected as HOP_LIMIT.",
        ["DF-PAR-11", "DF-PAR-3", "DF-PAR-5", "DF-PAR-6"],
        [
            ev.pkt(ev.ent(b, ev.B_INC, 1, 0, [0, 9], [0.5, -0.25])),
            ev.pkt(ev.ent(b, ev.B_INC, 2, 1, [1], [0.5])),
        ],
        config=SyncConfig(sync_interval=1, hop_limit=0, max_packet_size=2**31 - 1),
    )


def _odd_manifest_receive() -> ev.RecvCase:
    b = ev.B
    fp = ODD_MANIFEST.fingerprint
    return ev.RecvCase(
        "manifest_minimal_names",
        "The manifest is given as its tensors only (no version, num_params or fingerprint) and its "
        "names hold a space (U+0020), a tilde (U+007E) and U+0080, none of them a control character "
        "of DF-MAN-1; 'z.empty' has shape [2, 0] (0 elements, canonical line 'z.empty\\tf32\\t2,0'). "
        "The packets carry the fingerprint of that manifest (DF-MAN-5), so both are accepted; a "
        "receiver that refuses a name or the shape fails, one that writes the canonical text "
        "differently rejects them as FINGERPRINT_MISMATCH.",
        ["DF-MAN-1", "DF-MAN-2", "DF-MAN-5", "DF-MAN-7", "DF-RCV-1"],
        [
            ev.pkt(ev.ent(b, ev.B_INC, 1, 0, [0, 23], [0.5, 0.25]), fp=fp),
            ev.pkt(ev.ent(b, ev.B_INC, 2, 0, [4], [1.5]), fp=fp),
        ],
    )


def _defaults_generate() -> ev.GenCase:
    anchor = ev._pattern(7, 13, 6, 16.0)
    active = anchor + ev._pattern(11, 29, 14, 7.0)
    return ev.GenCase(
        "config_defaults",
        "The config is {}: every parameter takes its section 3 default (DF-PAR-11): ratio 0.05 gives "
        "k = ceil(24 * 0.05) = ceil(1.2000000000000002) = 2 (DF-GEN-2), encoding F32.",
        ["DF-PAR-11", "DF-PAR-2", "DF-GEN-2", "DF-GEN-3"],
        active.astype(np.float32),
        anchor,
        SyncConfig(),
    )


@contextmanager
def _manifest(m: Manifest) -> Iterator[None]:
    """``engine_vectors._write_receive`` builds its engine from the module's MANIFEST."""
    saved = ev.MANIFEST
    ev.MANIFEST = m
    try:
        yield
    finally:
        ev.MANIFEST = saved


def _rewrite(path: Path, **members: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(members)
    ev._dump(path, data)


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir``; return their index rows."""
    rows = []
    for case in (_defaults_receive(), _range_edges_receive()):
        assert not (vectors_dir / "receive" / case.name).exists(), case.name
        rows.append(ev._write_receive(vectors_dir, case))
    _rewrite(vectors_dir / "receive" / "config_defaults" / "case.json", config={})

    odd = _odd_manifest_receive()
    assert not (vectors_dir / "receive" / odd.name).exists(), odd.name
    with _manifest(ODD_MANIFEST):
        rows.append(ev._write_receive(vectors_dir, odd))
    tensors = [{"name": t.name, "shape": list(t.shape)} for t in ODD_MANIFEST.tensors]
    _rewrite(vectors_dir / "receive" / odd.name / "case.json", manifest={"tensors": tensors})

    gen = _defaults_generate()
    assert not (vectors_dir / "generate" / f"{gen.name}.json").exists(), gen.name
    rows.append(ev._write_generate(vectors_dir, gen))
    _rewrite(vectors_dir / "generate" / f"{gen.name}.json", config={})
    return rows
