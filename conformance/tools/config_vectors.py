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

- ``receive/manifest_names_outside_bmp``: names with U+10000, U+1F600 and U+10FFFF, which JSON writes
  as surrogate pairs, and two names whose order differs between UTF-8 bytes (DF-MAN-2) and UTF-16
  code units; the packets carry the fingerprint of the canonical text (DF-MAN-5), so a reader that
  joins a pair wrongly, a sort by UTF-16, or a canonical text in UTF-16 or CESU-8 fails.

- ``config/params/<parameter>`` and ``config/manifest/<area>`` (kind ``config``, added in 1.1 by h52,
  driver command ``check_config``, capability ``config``): whether a node accepts a configuration and
  a manifest (DF-PAR-11: "MUST accept every value in the allowed range, and MUST refuse to start ...
  when a configured value is outside the allowed range"; DF-PAR-260: integer ranges are exact; DF-MAN-1,
  DF-MAN-7). Every integer parameter exactly at each bound and one past it, the binary64 parameters
  at their open and closed bounds, values of the wrong JSON type, and manifests at N = 2^32 and one past,
  a u64 overflow of a shape's product, names with control characters. Each case changes one thing of
  a configuration the node accepts (``{}`` and a manifest of one tensor ``w`` [4]).

Called by ``make_vectors.py`` (``build(vectors_dir) -> index rows``) after ``engine_vectors.py``; the
vectors are written by ``engine_vectors._write_receive``/``_write_generate`` (which run the Python engine
and cross-check it), then their ``config``/``manifest`` members are replaced by the sparse form.
"""

from __future__ import annotations

import json
import shutil
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

#: Names outside the Basic Multilingual Plane (U+10000, U+1F600, U+10FFFF: JSON writes each as a
#: surrogate pair, ``\ud800\udc00`` .. ``\udbff\udfff``), and "w\ufffd", which sorts before
#: "w\U0001f600" by UTF-8 bytes (DF-MAN-2) but after it by UTF-16 code units; N = 24 as above.
ASTRAL_MANIFEST = Manifest.from_named_shapes(
    {"fc\U00010000bias": (4,), "w\U0001f600": (4, 5), "w\ufffd": (2, 0), "z\U0010ffff": (0,)}
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
        config=SyncConfig.v1_0(),
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
        config=SyncConfig.v1_0(sync_interval=1, hop_limit=0, max_packet_size=2**31 - 1),
    )


def _named_manifest_packets(m: Manifest) -> list[bytes]:
    """The two packets of B that the named-manifest cases receive, with ``m``'s fingerprint (N = 24)."""
    b, fp = ev.B, m.fingerprint
    return [
        ev.pkt(ev.ent(b, ev.B_INC, 1, 0, [0, 23], [0.5, 0.25]), fp=fp),
        ev.pkt(ev.ent(b, ev.B_INC, 2, 0, [4], [1.5]), fp=fp),
    ]


def _odd_manifest_receive() -> ev.RecvCase:
    return ev.RecvCase(
        "manifest_minimal_names",
        "The manifest is given as its tensors only (no version, num_params or fingerprint) and its "
        "names hold a space (U+0020), a tilde (U+007E) and U+0080, none of them a control character "
        "of DF-MAN-1; 'z.empty' has shape [2, 0] (0 elements, canonical line 'z.empty\\tf32\\t2,0'). "
        "The packets carry the fingerprint of that manifest (DF-MAN-5), so both are accepted; a "
        "receiver that refuses a name or the shape fails, one that writes the canonical text "
        "differently rejects them as FINGERPRINT_MISMATCH.",
        ["DF-MAN-1", "DF-MAN-2", "DF-MAN-5", "DF-MAN-7", "DF-RCV-1"],
        _named_manifest_packets(ODD_MANIFEST),
    )


def _astral_manifest_receive() -> ev.RecvCase:
    return ev.RecvCase(
        "manifest_names_outside_bmp",
        "Tensor names with characters outside the Basic Multilingual Plane: U+10000 (the lowest), "
        "U+1F600 and U+10FFFF (the highest). The vector's JSON writes each as a surrogate pair "
        "(RFC 8259), which a reader must join into one character; the canonical text holds its 4-byte "
        "UTF-8 form. 'w\\ufffd' sorts before 'w\\U0001f600' by the bytes of UTF-8 (DF-MAN-2), "
        "after it by UTF-16 code units (a string comparison of Java, JavaScript or C#). The packets "
        "carry that manifest's fingerprint (DF-MAN-5), so both are accepted; a receiver that joins a "
        "pair wrongly, sorts by UTF-16, or writes the canonical text in UTF-16 or CESU-8 rejects them "
        "as FINGERPRINT_MISMATCH.",
        ["DF-MAN-1", "DF-MAN-2", "DF-MAN-5", "DF-RCV-1"],
        _named_manifest_packets(ASTRAL_MANIFEST),
    )


#: N = 64: a step's few indices are below N / 8 (the Python engine's sorted union, not its mark pass)
WIDE_MANIFEST = Manifest.from_named_shapes({"fc.bias": (4,), "fc.weight": (4, 15)})


def _sparse_union_receive() -> ev.RecvCase:
    b, c = ev.B, ev.C
    fp = WIDE_MANIFEST.fingerprint
    i = np.arange(64, dtype=np.int64)
    return ev.RecvCase(
        "aggregate_sparse_duplicate_index",
        "N = 64 and one step of 3 indices in 2 packets: B's entry holds indices 1 and 7, C's holds 7. "
        "The step's aggregate has one value per distinct index, index 7 the sum of both entries' "
        "values (DF-RCV-6), applied once. A receiver that forms the union of the indices wrongly "
        "(here: a duplicate that is not the first index kept) applies index 7 twice.",
        ["DF-RCV-6", "DF-RCV-5", "DF-RCV-7"],
        [
            ev.pkt(ev.ent(b, ev.B_INC, 1, 0, [1, 7], [0.5, 0.25]), fp=fp),
            ev.pkt(ev.ent(c, ev.C_INC, 1, 0, [7], [-0.125]), sender=c, fp=fp),
        ],
        active=ev._f32(((i * 7) % 13 - 6) / 16.0),
        anchor=ev._f32(((i * 5) % 11 - 5) / 32.0),
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
        SyncConfig.v1_0(),
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


#: The manifest of every ``config/params`` case: one tensor of 4 values.
SMALL_MANIFEST: dict[str, Any] = {"tensors": [{"name": "w", "shape": [4]}]}

#: (parameter, lowest, highest, requirement) of every integer parameter of section 3.
INT_RANGES: tuple[tuple[str, int, int, str], ...] = (
    ("sync_interval", 1, 2**32 - 1, "DF-PAR-3"),
    ("hop_limit", 0, 255, "DF-PAR-5"),
    ("max_packet_size", 296, 2**31 - 1, "DF-PAR-6"),
    ("replay_window", 1, 2**20, "DF-PAR-7"),
    ("max_incarnations", 1, 2**16, "DF-PAR-8"),
    ("max_origins", 1, 2**20, "DF-PAR-30"),
    ("max_seq_jump", 0, 2**32, "DF-PAR-50"),
    ("average_over", 1, 2**16, "DF-PAR-70"),
    ("max_incarnation_ahead", 0, 2**40, "DF-PAR-175"),
    ("incarnation_grace", 0, 2**40, "DF-PAR-178"),
)


def _case(name: str, accepted: bool, config: Any = None, manifest: Any = None) -> dict[str, Any]:
    return {
        "name": name,
        "config": {} if config is None else config,
        "manifest": SMALL_MANIFEST if manifest is None else manifest,
        "accepted": accepted,
    }


def node_accepts(config: Any, manifest: Any) -> bool:
    """The Python reference's answer: a node starts with ``config`` and ``manifest`` (DF-PAR-11,
    DF-MAN-1, DF-MAN-7: ``1 <= N``), as the kit's ``check_config`` answers it."""
    try:
        SyncConfig.from_json(config)
        m = Manifest.from_json(manifest)
    except (TypeError, ValueError):
        return False
    return m.num_params >= 1


def _int_cases(name: str, lo: int, hi: int) -> list[dict[str, Any]]:
    inside = lo + 1 if lo + 1 <= hi else lo
    return [
        _case(f"{name}_lowest", True, {name: lo}),
        _case(f"{name}_below_lowest", False, {name: lo - 1}),
        _case(f"{name}_highest", True, {name: hi}),
        _case(f"{name}_above_highest", False, {name: hi + 1}),
        # DF-PAR-260: exact, whatever the node's integer width (2^32 + lo reads as lo in 32 bits,
        # 2^64 + lo as lo in 64 bits; 2^64 is beyond every JSON integer reader's u64)
        _case(f"{name}_wraps_32_bits", False, {name: 2**32 + lo}) if hi < 2**32 + lo else None,
        _case(f"{name}_wraps_64_bits", False, {name: 2**64 + lo}),
        _case(f"{name}_wraps_8_bits", False, {name: 256 + lo}) if hi < 256 + lo else None,
        # DF-PAR-260: an integer parameter given as a float, a boolean or a string
        _case(f"{name}_float", False, {name: float(inside)}),
        _case(f"{name}_bool", False, {name: True}),
        _case(f"{name}_string", False, {name: str(inside)}),
        _case(f"{name}_negative", False, {name: -1}),
    ]


def _float_cases(name: str) -> list[dict[str, Any]]:
    tiny = 5e-324  # the smallest positive binary64
    if name == "relay_threshold":  # binary64, >= 0
        edges = [
            _case(f"{name}_zero", True, {name: 0.0}),
            _case(f"{name}_negative_zero", True, {name: -0.0}),
            _case(f"{name}_below_zero", False, {name: -tiny}),
            _case(f"{name}_largest", True, {name: 1.7976931348623157e308}),
            _case(f"{name}_integer", True, {name: 1}),
        ]
    else:  # alpha, ratio: binary64, 0 < x <= 1
        edges = [
            _case(f"{name}_zero", False, {name: 0.0}),
            _case(f"{name}_negative_zero", False, {name: -0.0}),
            _case(f"{name}_smallest", True, {name: tiny}),
            _case(f"{name}_one", True, {name: 1.0}),
            _case(f"{name}_above_one", False, {name: 1.0000000000000002}),
            _case(f"{name}_integer_one", True, {name: 1}),
            _case(f"{name}_integer_two", False, {name: 2}),
            _case(f"{name}_negative", False, {name: -0.5}),
        ]
    return [
        *edges,
        _case(f"{name}_bool", False, {name: True}),
        _case(f"{name}_string", False, {name: "0.5"}),
        _case(f"{name}_null", False, {name: None}),
    ]


def _enum_cases() -> list[dict[str, Any]]:
    return [
        _case("encoding_f32", True, {"encoding": "F32"}),
        _case("encoding_unknown", False, {"encoding": "F64"}),
        _case("encoding_bool", False, {"encoding": True}),
        _case("encoding_float", False, {"encoding": 0.0}),
        _case("encoding_string_number", False, {"encoding": "0"}),
        # h53: the one value past the table (wire value 4) is no encoding, however it is spelled
        _case("encoding_past_the_table", False, {"encoding": 4}),
        # DF-PAR-261: the exact name only, never the wire value or another spelling
        _case("encoding_wire_value", False, {"encoding": 1}),
        _case("encoding_lower_case", False, {"encoding": "f16"}),
        _case("encoding_spaces", False, {"encoding": " F16"}),
        _case("relay_policy_lower_case", False, {"relay_policy": "needed"}),
        _case("index_encoding_lower_case", False, {"index_encoding": "packed"}),
        _case("relay_policy_all", True, {"relay_policy": "ALL"}),
        _case("relay_policy_unknown", False, {"relay_policy": "SOME"}),
        _case("relay_policy_number", False, {"relay_policy": 0}),
        _case("index_encoding_plain", True, {"index_encoding": "PLAIN"}),
        _case("index_encoding_unknown", False, {"index_encoding": "DENSE"}),
        _case("index_encoding_number", False, {"index_encoding": 0}),
        _case("include_buffers_true", True, {"include_buffers": True}),
        _case("include_buffers_false", True, {"include_buffers": False}),
        _case("include_buffers_number", False, {"include_buffers": 1}),
        _case("include_buffers_string", False, {"include_buffers": "true"}),
    ]


def _manifest_cases() -> dict[str, tuple[str, list[str], list[dict[str, Any]]]]:
    def m(*tensors: tuple[str, list[int]]) -> dict[str, Any]:
        return {"tensors": [{"name": n, "shape": s} for n, s in tensors]}

    big = 2**32
    return {
        "element_count": (
            "DF-MAN-7: 1 <= N <= 2^32, N the exact sum of the shapes' products (a product that "
            "overflows 64 bits is more than 2^32, a shape with a zero dimension has 0 elements "
            "whatever its other dimensions); a node refuses to start with N outside the range.",
            ["DF-MAN-7", "DF-MAN-1", "DF-PAR-11"],
            [
                _case("n_one_scalar", True, manifest=m(("s", []))),
                _case("n_is_2_pow_32", True, manifest=m(("a", [65536, 65536]))),
                _case(
                    "n_is_2_pow_32_in_two", True, manifest=m(("a", [65535, 65536]), ("b", [65536]))
                ),
                _case("n_above_2_pow_32", False, manifest=m(("a", [65536, 65536]), ("b", []))),
                _case("n_one_dim_above_2_pow_32", False, manifest=m(("a", [big + 1]))),
                _case("n_zero", False, manifest=m(("a", [0]))),
                _case("n_zero_no_tensor", False, manifest=m()),
                _case("product_wraps_64_bits", False, manifest=m(("a", [big, big]), ("b", [1]))),
                _case(
                    "product_wraps_64_bits_to_one",
                    False,
                    manifest=m(("a", [big, big, 1]), ("b", [1])),
                ),
                _case(
                    "sum_wraps_64_bits",
                    False,
                    manifest=m(("a", [big, big // 2]), ("b", [big, big // 2]), ("c", [1])),
                ),
                _case(
                    "zero_dimension_after_large",
                    True,
                    manifest=m(("a", [2**40, 2**40, 0]), ("b", [4])),
                ),
                _case(
                    "zero_dimension_first", True, manifest=m(("a", [0, 2**40, 2**40]), ("b", [4]))
                ),
                _case("negative_dimension", False, manifest=m(("a", [-1, 4]))),
                _case(
                    "float_dimension", False, manifest={"tensors": [{"name": "a", "shape": [4.0]}]}
                ),
            ],
        ),
        "names": (
            "DF-MAN-1: names are non-empty, unique and hold no control character (U+0000 to U+001F "
            "and U+007F); U+0080 to U+009F and U+0020 are allowed.",
            ["DF-MAN-1", "DF-PAR-11"],
            [
                _case("empty_name", False, manifest=m(("", [4]))),
                _case("name_u0000", False, manifest=m(("w\u0000", [4]))),
                _case("name_u001f", False, manifest=m(("w\u001f", [4]))),
                _case("name_u007f", False, manifest=m(("w\u007f", [4]))),
                _case("name_tab", False, manifest=m(("a\tb", [4]))),
                # the other control characters JSON writes with a short escape (\n \r \b \f)
                _case("name_newline", False, manifest=m(("a\nb", [4]))),
                _case("name_carriage_return", False, manifest=m(("a\rb", [4]))),
                _case("name_backspace", False, manifest=m(("a\bb", [4]))),
                _case("name_form_feed", False, manifest=m(("a\fb", [4]))),
                _case("name_u0020", True, manifest=m((" ", [4]))),
                _case("name_u007e", True, manifest=m(("~", [4]))),
                _case("name_u009f", True, manifest=m(("w\u009f", [4]))),
                _case("name_non_ascii", True, manifest=m(("w\u00e9\U0001f600", [4]))),
                _case("duplicate_names", False, manifest=m(("w", [4]), ("w", [4]))),
                _case(
                    "duplicate_names_apart", False, manifest=m(("w", [4]), ("v", [1]), ("w", [2]))
                ),
                _case("names_differ_by_case", True, manifest=m(("w", [4]), ("W", [4]))),
                _case(
                    "dtype_f16",
                    False,
                    manifest={"tensors": [{"name": "w", "shape": [4], "dtype": "f16"}]},
                ),
            ],
        ),
    }


def _check_vector(
    vectors_dir: Path,
    area: str,
    name: str,
    description: str,
    reqs: list[str],
    cases: list[dict[str, Any]],
) -> dict[str, Any]:
    cases = [c for c in cases if c is not None]
    for c in cases:  # the Python reference agrees with the spec's answer (cross-check)
        got = node_accepts(c["config"], c["manifest"])
        assert got == c["accepted"], (name, c["name"], got)
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), name
    rel = f"config/{area}/{name}"
    path = vectors_dir / f"{rel}.json"
    assert not path.exists(), rel
    path.parent.mkdir(parents=True, exist_ok=True)
    ev._dump(path, {"description": description, "requirements": reqs, "cases": cases})
    return {
        "id": f"config.{area}.{name}",
        "kind": "config",
        "path": rel,
        "requirements": reqs,
        "features": ["config"],
    }


def _check_vectors(vectors_dir: Path) -> list[dict[str, Any]]:
    root = vectors_dir / "config"
    if root.exists():  # every file under config/ is this module's
        shutil.rmtree(root)
    rows = []
    for name, lo, hi, req in INT_RANGES:
        rows.append(
            _check_vector(
                vectors_dir,
                "params",
                name,
                f"{name}: integer, {lo} to {hi} ({req}). Accepted at both bounds; refused one past "
                "either, at every value a 8-, 32- or 64-bit integer would wrap to an allowed one, and "
                "as a float, a boolean, a string or a negative number (DF-PAR-11, DF-PAR-260).",
                sorted({req, "DF-PAR-11", "DF-PAR-260"}),
                _int_cases(name, lo, hi),
            )
        )
    for name, req in (
        ("alpha", "DF-PAR-1"),
        ("ratio", "DF-PAR-2"),
        ("relay_threshold", "DF-PAR-4"),
    ):
        rng = ">= 0" if name == "relay_threshold" else "0 < x <= 1"
        rows.append(
            _check_vector(
                vectors_dir,
                "params",
                name,
                f"{name}: binary64, {rng} ({req}). Accepted at the closed bounds and the smallest "
                "value above an open one, refused just past them; an integer is the same number; a "
                "boolean, a string or null is refused (DF-PAR-11, DF-PAR-260).",
                sorted({req, "DF-PAR-11", "DF-PAR-260"}),
                _float_cases(name),
            )
        )
    rows.append(
        _check_vector(
            vectors_dir,
            "params",
            "enums",
            "The enumerated and boolean parameters: encoding (F32 is REQUIRED; the OPTIONAL F16, BF16 "
            "and Q8 are not asked), relay_policy ALL, index_encoding PLAIN, include_buffers; an "
            "unknown name, another spelling of a name (case, spaces) or a value of another JSON type "
            "(the encoding's wire value included) is refused (DF-PAR-11, DF-PAR-261).",
            ["DF-PAR-10", "DF-PAR-11", "DF-PAR-60", "DF-PAR-110", "DF-PAR-261", "DF-PAR-9"],
            _enum_cases(),
        )
    )
    for area_name, (desc, reqs, cases) in _manifest_cases().items():
        rows.append(_check_vector(vectors_dir, "manifest", area_name, desc, reqs, cases))
    return rows


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir``; return their index rows."""
    rows = []
    for case in (_defaults_receive(), _range_edges_receive()):
        assert not (vectors_dir / "receive" / case.name).exists(), case.name
        rows.append(ev._write_receive(vectors_dir, case))
    _rewrite(vectors_dir / "receive" / "config_defaults" / "case.json", config={})

    # cases with a manifest of their own; tensors_only: the vector gives it as its tensors alone
    for case, m, tensors_only in (
        (_odd_manifest_receive(), ODD_MANIFEST, True),
        (_sparse_union_receive(), WIDE_MANIFEST, False),
        (_astral_manifest_receive(), ASTRAL_MANIFEST, True),
    ):
        assert not (vectors_dir / "receive" / case.name).exists(), case.name
        with _manifest(m):
            rows.append(ev._write_receive(vectors_dir, case))
        if tensors_only:
            tensors = [{"name": t.name, "shape": list(t.shape)} for t in m.tensors]
            _rewrite(
                vectors_dir / "receive" / case.name / "case.json", manifest={"tensors": tensors}
            )

    gen = _defaults_generate()
    assert not (vectors_dir / "generate" / f"{gen.name}.json").exists(), gen.name
    rows.append(ev._write_generate(vectors_dir, gen))
    _rewrite(vectors_dir / "generate" / f"{gen.name}.json", config={})
    rows += _check_vectors(vectors_dir)
    return rows
