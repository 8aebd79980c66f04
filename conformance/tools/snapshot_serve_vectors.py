"""Snapshot server vectors (``conformance/vectors/snapshot/serve/``): the snapshot queryable of spec
section 9.5 on the server side (DF-ZEN-5: the selector parameters, their bounds and the error reply;
DF-ZEN-11: the chunk's fields). Called by ``make_vectors.py``, after ``snapshot_vectors.py`` (which
clears ``snapshot/``). Judged through the driver command ``snapshot_serve`` (driver protocol 5.12).

``snapshot/serve/<case>.json``: a served anchor (``anchor``, JSON numbers, with the serving node's
``node``, ``incarnation``, manifest ``fingerprint`` and ``max_packet_size``), the selector parameters of
the queries one joiner sends, in order (``queries``), and per query the reply (``expected.replies``):
``{"chunk": {...}}`` (every field of the chunk but ``snapshot_id``, which the spec does not fix: the
runner checks it is non-zero and the same for every chunk of the vector) or ``{"error":
"BAD_REQUEST"}`` (the Zenoh error reply of DF-ZEN-5).

Every reply is computed twice while the vector is written: by the rules of DF-ZEN-5, DF-ZEN-42,
DF-ZEN-43 and DF-ZEN-11 as written here (:func:`spec_reply`), independently of the implementations,
and by the reference server (:class:`delta_fabric.snapshot.SnapshotServer` through the Python kit's
``snapshot_serve``); a disagreement stops the generation. Since 1.1 (DF-ZEN-42) the spec fixes how
every query string is read (whitespace, a parameter given twice, signs and leading zeros, mixed
separators, empty pieces, ``=`` in a value, non-ASCII digits), and the vectors pin each of these;
DF-ZEN-43 fixes the reply for an anchor holding a NaN or an infinity.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import numpy as np  # noqa: E402
import snapshot_vectors as snv  # noqa: E402
from delta_fabric.snapshot import decode_chunk  # noqa: E402
from delta_fabric_conformance.kit.snapshot_io import chunk_json, run_snapshot_serve  # noqa: E402
from numpy.typing import NDArray  # noqa: E402

__all__ = ["build", "read_params", "spec_reply"]

REQ_SERVE = "DF-ZEN-5"
REQ_FIELDS = "DF-ZEN-11"
REQ_READ = "DF-ZEN-42"
REQ_NON_FINITE = "DF-ZEN-43"
#: The version_minor a server of this document writes (DF-ZEN-11: 1 for 1.1).
VERSION_MINOR = 1
DEFAULT_MPS = 16_777_216
#: The example of spec section 9.5: N = 12, node A's anchor after section 5.9.
EXAMPLE_DIGEST = "e129e540c2e4399eb9e8dbe0fb82830e105b651154ad218c264bfe4ab9474a81"
U64 = 1 << 64


@dataclass
class ServeCase:
    name: str
    description: str
    queries: list[str]
    anchor: NDArray[np.float32] = field(default_factory=lambda: snv.ANCHOR)
    node: int = snv.NODE
    incarnation: int = snv.INCARNATION
    fingerprint: bytes = field(default_factory=lambda: snv.MANIFEST.fingerprint)
    max_packet_size: int = DEFAULT_MPS
    #: requirements pinned beyond DF-ZEN-5 and DF-ZEN-11 (the 1.1 errata DF-ZEN-42, DF-ZEN-43)
    also: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------------------
# DF-ZEN-5 and DF-ZEN-11 as the spec writes them
# ------------------------------------------------------------------------------------------------------

#: DF-ZEN-42 rule 4: 1 to 20 ASCII digits (``[0-9]`` is the code points U+0030 to U+0039, so no
#: other script's digits).
_DECIMAL = re.compile(r"[0-9]{1,20}")
#: DF-ZEN-42 rule 3: the characters removed around a key or a value.
_BLANKS = " \t"


def read_params(query: str) -> dict[str, str]:
    """DF-ZEN-42 rules 1, 2, 3 and 5: the key -> value of a query's selector parameters (the first
    piece of each key)."""
    params: dict[str, str] = {}
    for piece in re.split(r"[&;]", query):
        if piece == "":
            continue  # rule 1: empty pieces are skipped
        key, _, value = piece.partition("=")  # rule 2: the first '='
        key, value = key.strip(_BLANKS), value.strip(_BLANKS)  # rule 3
        if key not in params:  # rule 5: the first piece of a key counts
            params[key] = value
    return params


def spec_reply(
    anchor: NDArray[np.float32], max_packet_size: int, query: str
) -> tuple[int, NDArray[np.float32]] | str:
    """DF-ZEN-5, DF-ZEN-42, DF-ZEN-43: ``(offset, values)`` of the chunk a server replies with, or
    the kind of its error reply (``"BAD_REQUEST"``, or ``"NON_FINITE"`` for a query that would get a
    chunk of a capture holding a NaN or an infinity). The chunk is served iff ``chunk`` and
    ``chunk_size`` are decimal integers (rule 4), ``1 <= c``, ``4 * c + 1024 <= max_packet_size``,
    ``0 <= i < ceil(N / c)`` and every value of the anchor is finite."""
    params = read_params(query)
    nums: dict[str, int] = {}
    for k in ("chunk", "chunk_size"):
        raw = params.get(k)
        if raw is None or _DECIMAL.fullmatch(raw) is None:
            return "BAD_REQUEST"  # missing, or not a decimal integer
        nums[k] = int(raw)
    i, c = nums["chunk"], nums["chunk_size"]
    n = int(anchor.size)
    if not (1 <= c and 4 * c + 1024 <= max_packet_size and 0 <= i < -(-n // c)):
        return "BAD_REQUEST"
    if not bool(np.isfinite(anchor).all()):
        return "NON_FINITE"
    return i * c, anchor[i * c : min((i + 1) * c, n)]


def _expected_chunk(case: ServeCase, offset: int, values: NDArray[np.float32]) -> dict[str, Any]:
    digest = hashlib.sha256(np.ascontiguousarray(case.anchor, dtype="<f4").tobytes()).hexdigest()
    return {
        "version_major": 1,
        "version_minor": VERSION_MINOR,
        "node": f"{case.node:016x}",
        "incarnation": f"{case.incarnation:016x}",
        "fingerprint": case.fingerprint.hex(),
        "total": int(case.anchor.size),
        "offset": offset,
        "digest": digest,
        "values": snv._floats(values),
        "values_bits": snv._bits(values),
    }


# ------------------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------------------


def _q(i: int | str, c: int | str, sep: str = "&") -> str:
    return f"chunk={i}{sep}chunk_size={c}"


def serve_cases() -> list[ServeCase]:
    one = np.array([0.5], dtype=np.float32)
    return [
        ServeCase(
            "example_chunks",
            "The example of spec section 9.5: N = 12 (node A's anchor after section 5.9), "
            "chunk_size 5. Chunks 0, 1 and 2 have offsets 0, 5 and 10 with 5, 5 and 2 values, one "
            "snapshot id, total 12 and the digest e129e540...; chunk 3 gets the error reply.",
            [_q(0, 5), _q(1, 5), _q(2, 5), _q(3, 5)],
        ),
        ServeCase(
            "semicolon_separator",
            "Zenoh's native ';' between the two pairs (DF-ZEN-5: both separators are accepted): "
            "chunks 0, 1 and 2 of the section 9.5 example, chunk 3 is the error reply.",
            [_q(0, 5, ";"), _q(1, 5, ";"), _q(2, 5, ";"), _q(3, 5, ";")],
            also=(REQ_READ,),
        ),
        ServeCase(
            "parameter_order",
            "chunk_size before chunk, with either separator: the parameters are named, not "
            "positional.",
            ["chunk_size=5&chunk=1", "chunk_size=5;chunk=2", "chunk_size=4&chunk=0"],
        ),
        ServeCase(
            "unknown_parameters",
            "Unknown parameters are ignored (DF-ZEN-5), wherever they are: before, between and "
            "after the two pairs, with names that contain or extend 'chunk' (chunks, chunk_sizes, "
            "xchunk, size), and a key without a value.",
            [
                "x=y&chunk=1&chunk_size=5",
                "chunk=2;from=0000000000000002;chunk_size=5",
                "chunk=0&chunk_size=5&chunks=7",
                "chunk_sizes=9;chunk=1;chunk_size=4;xchunk=2",
                "size=3&chunk=0&chunk_size=12&flag",
                "chunk_size_max=1&chunk=11&chunk_size=1",
            ],
            also=(REQ_READ,),
        ),
        ServeCase(
            "parameter_missing",
            "A query without chunk, without chunk_size, without either (no parameter at all, or only "
            "unknown ones), or with an empty value, gets the error reply; the last query is "
            "complete and gets chunk 1.",
            [
                "",
                "chunk=1",
                "chunk_size=5",
                "chunk=1&chunk_sizes=5",
                "chunks=1;chunk_size=5",
                "x=1&y=2",
                "chunk=&chunk_size=5",
                "chunk=1&chunk_size=",
                "chunk&chunk_size=5",
                "chunk=1;chunk_size",
                _q(1, 5),
            ],
            also=(REQ_READ,),
        ),
        ServeCase(
            "not_decimal",
            "Values that are not decimal integers get the error reply: hexadecimal, a fraction, an "
            "exponent, letters, a trailing letter, an underscore; the last query gets chunk 1.",
            [
                _q("0x1", 5),
                _q(1, "0x5"),
                _q(1, "5.0"),
                _q("1.0", 5),
                _q(1, "1e1"),
                _q("one", 5),
                _q(1, "5a"),
                _q(1, "5_0"),
                _q("1_0", 5),
                _q(1, 5),
            ],
            also=(REQ_READ,),
        ),
        ServeCase(
            "negative",
            "Negative values are outside the bounds (0 <= i, 1 <= c): error replies; the last query "
            "gets chunk 1.",
            [_q(-1, 5), _q(1, -5), _q(-1, -1), _q(-2, 5, ";"), _q(1, 5)],
        ),
        ServeCase(
            "chunk_size_zero",
            "chunk_size 0 is outside 1 <= c (and ceil(N / 0) does not exist): error replies, for "
            "chunk 0 and chunk 1; chunk_size 1 is the smallest that is served.",
            [_q(0, 0), _q(1, 0), _q(0, 1), _q(11, 1), _q(12, 1)],
        ),
        ServeCase(
            "packet_size_exact",
            "max_packet_size 1044 = 4 * 5 + 1024: chunk_size 5 is served (the bound holds with "
            "equality), chunk_size 6 gets the error reply, for every chunk index.",
            [_q(0, 5), _q(2, 5), _q(0, 6), _q(1, 6), _q(1, 5)],
            max_packet_size=1044,
        ),
        ServeCase(
            "packet_size_one_past",
            "max_packet_size 1047, not a multiple of 4: 4 * 5 + 1024 = 1044 <= 1047 is served, "
            "4 * 6 + 1024 = 1048 is one past it (a server that rounds (1047 - 1024) / 4 up serves "
            "it).",
            [_q(0, 6), _q(1, 5), _q(1, 6), _q(2, 5)],
            max_packet_size=1047,
        ),
        ServeCase(
            "packet_size_one_value",
            "max_packet_size 1028 = 4 * 1 + 1024: only chunk_size 1 is served.",
            [_q(0, 1), _q(0, 2), _q(11, 1), _q(5, 2)],
            max_packet_size=1028,
        ),
        ServeCase(
            "packet_size_none",
            "max_packet_size 1027 = 4 * 1 + 1024 - 1: 4 * c + 1024 exceeds it for every c >= 1, so "
            "every query gets the error reply.",
            [_q(0, 1), _q(0, 5), _q(11, 1)],
            max_packet_size=1027,
        ),
        ServeCase(
            "packet_size_minimum",
            "max_packet_size 296 (the smallest allowed, DF-PAR-6): no chunk_size is served.",
            [_q(0, 1), _q(0, 12)],
            max_packet_size=296,
        ),
        ServeCase(
            "packet_size_default",
            "The default max_packet_size 16777216: chunk_size 4194048 = (16777216 - 1024) / 4 is "
            "served (one chunk of the 12 values), 4194049 gets the error reply.",
            [_q(0, 4194048), _q(0, 4194049), _q(1, 4194048)],
        ),
        ServeCase(
            "packet_size_largest",
            "The largest max_packet_size, 2147483647: chunk_size 536870655 is served, 536870656 "
            "(4 * c + 1024 = 2147483648) gets the error reply.",
            [_q(0, 536870655), _q(0, 536870656), _q(0, 536870657)],
            max_packet_size=2_147_483_647,
        ),
        ServeCase(
            "last_chunk",
            "The last chunk is short: min((i + 1) * c, N) - i * c values (N = 12: c = 5, 7, 11 give "
            "2, 5 and 1 values); the index after it, i = ceil(N / c), gets the error reply; "
            "chunk_size N and N + 1 give one chunk of all N values.",
            [
                _q(2, 5),
                _q(3, 5),
                _q(1, 7),
                _q(2, 7),
                _q(1, 11),
                _q(2, 11),
                _q(0, 12),
                _q(1, 12),
                _q(0, 13),
                _q(1, 13),
                _q(0, 1000),
            ],
        ),
        ServeCase(
            "divisible",
            "N divisible by c (N = 12: c = 4, 6, 3): every chunk is full and there are exactly N / c "
            "chunks; index N / c gets the error reply (a server that counts floor(N / c) + 1 chunks "
            "serves an empty one).",
            [_q(0, 4), _q(2, 4), _q(3, 4), _q(1, 6), _q(2, 6), _q(3, 3), _q(4, 3), _q(6, 2)],
        ),
        ServeCase(
            "single_value",
            "An anchor of one value (N = 1): chunk 0 holds it at any chunk_size (1, 5); chunk 1 gets "
            "the error reply.",
            [_q(0, 1), _q(1, 1), _q(0, 5), _q(1, 5)],
            anchor=one,
        ),
        ServeCase(
            "huge_values",
            "Values past 64 bits or whose products wrap: chunk 2^64 and 2^64 + 1, chunk_size "
            "2^64 + 5, 2^32 + 5 and 2^64 - 1, chunk 2^32, and chunk 3689348814741910324 at chunk_size "
            "5 (i * c = 2^64 + 4, which wraps to offset 4) all get the error reply; a server that "
            "reduces them modulo 2^64 or 2^32 serves a chunk.",
            [
                _q(U64, 5),
                _q(U64 + 1, 5),
                _q(0, U64 + 5),
                _q(0, (1 << 32) + 5),
                _q(1 << 32, 5),
                _q(0, U64 - 1),
                _q(U64 - 1, 1),
                _q(3689348814741910324, 5),
                _q(1, 5),
            ],
        ),
        ServeCase(
            "bit_patterns",
            "An anchor whose bits matter (-0.0, subnormals, the largest finite f32 and their "
            "negatives): the chunks carry the values bit for bit and the digest is the SHA-256 of "
            "the little-endian bit patterns (-0.0 is 00 00 00 80).",
            [_q(0, 5), _q(1, 5), _q(2, 5)],
            anchor=snv.SPECIAL,
        ),
        ServeCase(
            "duplicate_parameters",
            "A parameter given twice (DF-ZEN-42 rule 5): the first piece of a key counts, whatever "
            "the later ones hold. chunk 1 then 2 serves chunk 1; chunk_size 5 then 4 serves at 5 "
            "(offset 5, not 4); a later 'x' or an empty value is ignored; a first 'x' or empty "
            "value is the error reply even when a later piece is valid; chunk 3 then 0 is the error "
            "reply (chunk 3 is out of range); keys that are equal once spaces are removed are the "
            "same key.",
            [
                "chunk=1&chunk=2&chunk_size=5",
                "chunk=1&chunk_size=5&chunk_size=4",
                "chunk=1&chunk=x&chunk_size=5",
                "chunk=x&chunk=1&chunk_size=5",
                "chunk_size=5;chunk=2;chunk_size=7;chunk=0",
                "chunk=1&chunk_size=5&chunk_size=",
                "chunk=1&chunk_size=&chunk_size=5",
                "chunk=3&chunk_size=5&chunk=0",
                "chunk=1& chunk =2&chunk_size=5",
                "chunk&chunk=1&chunk_size=5",
            ],
            also=(REQ_READ,),
        ),
        ServeCase(
            "signs_and_leading_zeros",
            "A decimal integer is 1 to 20 ASCII digits (DF-ZEN-42 rule 4): '+1', '+5', '-0', '+0' "
            "are the error reply; leading zeros are allowed ('01', '005', '00', '0012', 20 digits "
            "'00000000000000000001'); 21 digits are the error reply even when their value is 1 or "
            "5; digits of other scripts (Arabic-Indic one, fullwidth one, superscript one) are the "
            "error reply.",
            [
                "chunk=+1&chunk_size=5",
                "chunk=1&chunk_size=+5",
                "chunk=-0&chunk_size=5",
                "chunk=+0&chunk_size=5",
                "chunk=01&chunk_size=5",
                "chunk=1&chunk_size=005",
                "chunk=00&chunk_size=0012",
                "chunk=00000000000000000001&chunk_size=5",
                "chunk=000000000000000000001&chunk_size=5",
                "chunk=1&chunk_size=00000000000000000005",
                "chunk=1&chunk_size=000000000000000000005",
                "chunk=\u0661&chunk_size=5",
                "chunk=\uff11&chunk_size=5",
                "chunk=\u00b9&chunk_size=5",
                "chunk=1&chunk_size=5",
            ],
            also=(REQ_READ,),
        ),
        ServeCase(
            "whitespace",
            "Spaces and tabs at the start and end of a key or a value are removed, and nothing else "
            "(DF-ZEN-42 rule 3): spaces or tabs around keys and values serve the chunk; a space "
            "inside a value, a no-break space, an em space, a line feed, a carriage return, a "
            "vertical tab and a form feed around a value are the error reply; a key with a line "
            "feed is unknown (chunk missing).",
            [
                "chunk= 1&chunk_size=5",
                "chunk=1 &chunk_size=5",
                " chunk=1&chunk_size=5",
                "chunk =1&chunk_size=5",
                "\tchunk\t=\t1\t;\tchunk_size\t=\t5\t",
                " chunk_size = 5 & chunk = 2 ",
                "chunk=1 2&chunk_size=5",
                "chunk=\u00a01&chunk_size=5",
                "chunk=\u20031&chunk_size=5",
                "chunk=1\n&chunk_size=5",
                "chunk=\r1&chunk_size=5",
                "chunk=1&chunk_size=\x0b5",
                "chunk=1&chunk_size=5\x0c",
                "\nchunk=1&chunk_size=5",
                "chunk=1&chunk_size=5",
            ],
            also=(REQ_READ,),
        ),
        ServeCase(
            "separators_and_pieces",
            "Pieces split at every '&' and ';' in any mix, empty pieces skipped, a key and value "
            "split at the first '=' (DF-ZEN-42 rules 1 and 2): mixed separators and empty pieces "
            "(leading, trailing, doubled) serve the chunk; only separators is the error reply "
            "(nothing given); '=' inside a value makes it no integer; an empty key is unknown; keys "
            "compare case-sensitively ('Chunk', 'CHUNK_SIZE' are unknown).",
            [
                "chunk=1&chunk_size=5;x=y",
                "chunk=1;chunk_size=5&x",
                "chunk=1&&chunk_size=5",
                "chunk=1;;chunk_size=5",
                "&chunk=1&chunk_size=5&",
                ";&chunk=2;&chunk_size=5&;",
                "chunk=1&;chunk_size=5",
                "&&;;",
                "chunk=1=1&chunk_size=5",
                "chunk=1&chunk_size=5=",
                "chunk==1&chunk_size=5",
                "=1&chunk=1&chunk_size=5",
                "Chunk=1&chunk_size=5",
                "chunk=1&CHUNK_SIZE=5",
                "chunk=0;chunk_size=12",
            ],
            also=(REQ_READ,),
        ),
        ServeCase(
            "non_finite_inf",
            "An anchor whose last value is +inf is never served (DF-ZEN-43): every query that would "
            "get a chunk gets the error reply NON_FINITE, also for chunk 0 whose values are all "
            "finite; queries that are bad by DF-ZEN-5 (chunk 3, chunk 'x', chunk_size 0) get "
            "BAD_REQUEST as for a finite anchor.",
            [_q(0, 5), _q(2, 5), _q(1, 5, ";"), _q(0, 12), _q(3, 5), _q("x", 5), _q(0, 0)],
            anchor=np.concatenate([snv.ANCHOR[:11], np.array([np.inf], dtype=np.float32)]),
            also=(REQ_NON_FINITE,),
        ),
        ServeCase(
            "non_finite_nan",
            "An anchor holding a quiet NaN (value 0), -inf (value 6) and a signalling NaN (value 9, "
            "bits 7f800001): every chunk query that is valid gets NON_FINITE, whichever chunk; a "
            "chunk index past the end gets BAD_REQUEST.",
            [_q(0, 5), _q(1, 5), _q(2, 5), _q(5, 2), _q(11, 1), _q(12, 1)],
            anchor=np.array(
                [0x7FC00000, 0, 0, 0, 0, 0, 0xFF800000, 0, 0, 0x7F800001, 0, 0], dtype=np.uint32
            ).view(np.float32),
            also=(REQ_NON_FINITE,),
        ),
        ServeCase(
            "header_fields",
            "node 2^64 - 1, incarnation 2^63 and another manifest's fingerprint: the chunk carries "
            "the serving node's own values in full 64 bits, in their own fields.",
            [_q(1, 4), _q(0, 4)],
            node=U64 - 1,
            incarnation=1 << 63,
            fingerprint=snv.OTHER_MANIFEST.fingerprint,
        ),
    ]


# ------------------------------------------------------------------------------------------------------
# Writing, checked against the reference server
# ------------------------------------------------------------------------------------------------------


def _anchor_json(a: NDArray[np.float32]) -> dict[str, Any]:
    """``anchor`` as JSON numbers, with ``"nan"``, ``"inf"``, ``"-inf"`` for the values that are not
    finite (driver protocol section 4) and then ``anchor_bits`` too (a NaN's payload kept)."""
    if bool(np.isfinite(a).all()):
        return {"anchor": snv._floats(a)}
    with np.errstate(invalid="ignore"):  # a signalling NaN widened to f64
        wide: list[float] = np.asarray(a, dtype=np.float32).astype(np.float64).tolist()
    shown: list[float | str] = [
        x if np.isfinite(x) else ("nan" if np.isnan(x) else ("inf" if x > 0 else "-inf"))
        for x in wide
    ]
    return {"anchor": shown, "anchor_bits": snv._bits(a)}


def _vector(case: ServeCase) -> dict[str, Any]:
    return {
        **_anchor_json(case.anchor),
        "node": f"{case.node:016x}",
        "incarnation": f"{case.incarnation:016x}",
        "fingerprint": case.fingerprint.hex(),
        "max_packet_size": case.max_packet_size,
        "queries": case.queries,
    }


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write ``snapshot/serve/`` under ``vectors_dir``; return its index rows."""
    rows: list[dict[str, Any]] = []
    for case in serve_cases():
        reqs = sorted({REQ_SERVE, REQ_FIELDS, *case.also})
        vector = _vector(case)
        replies: list[dict[str, Any]] = []
        for q in case.queries:
            r = spec_reply(case.anchor, case.max_packet_size, q)
            replies.append(
                {"error": r} if isinstance(r, str) else {"chunk": _expected_chunk(case, *r)}
            )
        # the reference server must agree, field by field (snapshot_id: one, non-zero)
        got = run_snapshot_serve(vector)["replies"]
        ids = set()
        for q, want, g in zip(case.queries, replies, got, strict=True):
            if "error" in want:
                if g.get("error") != want["error"]:
                    raise AssertionError(f"snapshot serve {case.name} {q!r}: reference {g}")
                continue
            if "chunk" not in g:
                raise AssertionError(f"snapshot serve {case.name} {q!r}: reference refused: {g}")
            c = decode_chunk(base64.b64decode(g["chunk"]))
            cj = chunk_json(c)
            ids.add(cj.pop("snapshot_id"))
            if cj != want["chunk"]:
                raise AssertionError(f"snapshot serve {case.name} {q!r}: {cj} != {want['chunk']}")
        if len(ids) > 1 or "0000000000000000" in ids:
            raise AssertionError(f"snapshot serve {case.name}: snapshot ids {ids}")
        if case.name == "example_chunks":
            assert replies[0]["chunk"]["digest"] == EXAMPLE_DIGEST
            assert [len(r["chunk"]["values"]) for r in replies[:3]] == [5, 5, 2]
        if not any("chunk" in r for r in replies):
            # only the packet sizes below 4 * 1 + 1024, and anchors that are not finite, serve nothing
            assert case.max_packet_size < 1028 or not np.isfinite(case.anchor).all(), case.name
        rel = f"snapshot/serve/{case.name}"
        snv._dump(
            vectors_dir / f"{rel}.json",
            {
                "description": case.description,
                "requirements": reqs,
                **vector,
                "expected": {"replies": replies},
            },
        )
        rows.append(
            {
                "id": f"snapshot.serve.{case.name}",
                "kind": "snapshot",
                "path": rel,
                "requirements": reqs,
                "expect": "ok",
            }
        )
    return rows
