"""Fake drivers that claim less than the reference driver: the reference driver (the kit, registered
like it) with its ``hello`` and its behaviour filtered down to a smaller claim, as an implementation that
offers less would answer (spec DF-CNF-2, DF-CNF-30, DF-VER-1, DF-VER-114; driver protocol 5.1).

- :class:`F32Only`: no OPTIONAL encoding (``encoding.f16``, ``encoding.bf16``, ``encoding.q8``,
  ``index.packed``): a packet that states one is ``UNSUPPORTED_ENCODING`` (DF-PKT-13, DF-PKT-14,
  DF-PKT-115, DF-VER-114), a configuration that sends one is refused, and an engine request that needs
  one is answered ``skipped``.
- :class:`Spec10`: a node of version 1.0 (``hello.spec_version`` "1.0"): none of the commands and
  features 1.1 added, ``version_minor = 0`` in the packets it sends (DF-VER-1), the 1.1 packet fields
  unread (DF-VER-2), a ``Q8`` packet ``UNSUPPORTED_ENCODING`` and a ``PACKED`` one ``LENGTH_MISMATCH``
  (DF-VER-114).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from _base import Driver, Rejected
from delta_fabric_conformance.claims import COMMANDS_1_1, FEATURES_1_1, packet_header
from delta_fabric_conformance.kit import Skipped

__all__ = ["F32_ONLY_DROPS", "F32Only", "Spec10"]

#: the capabilities an F32-only implementation does not declare
F32_ONLY_DROPS = frozenset({"encoding.f16", "encoding.bf16", "encoding.q8", "index.packed"})
#: the rejection codes of the checks before the encoding check (spec DF-RCV-20, steps 1 to 5)
BEFORE_ENCODING = frozenset({"OVERSIZE", "BAD_IDENTIFIER", "MALFORMED", "UNSUPPORTED_VERSION"})


class Filtered(Driver):
    """The reference driver without ``drops`` among its capabilities; the packets and configurations
    that need a dropped encoding are handled by :meth:`refuse_packet` / :meth:`supports`."""

    drops: frozenset[str] = frozenset()
    encodings = frozenset({"F32", "F16", "BF16", "Q8"})
    index_encodings = frozenset({"PLAIN", "PACKED"})

    def capabilities(self) -> list[str]:
        return [c for c in super().capabilities() if c not in self.drops]

    def supports(self, stated: Mapping[str, Any]) -> bool:
        """Whether a packet or configuration (JSON form) states only encodings this driver offers."""
        return (
            str(stated.get("encoding", "F32")) in self.encodings
            and str(stated.get("index_encoding", "PLAIN")) in self.index_encodings
        )

    def refuse_packet(
        self, buf: bytes, code: str | None, packet: Mapping[str, Any] | None = None
    ) -> str | None:
        """The rejection code for a packet whose header states an encoding this driver does not offer
        (``code``: what the reference answered, None for accepted, then ``packet`` is what it read);
        None to keep the reference's answer."""
        head = packet_header(buf)
        if head is None or (code is not None and code in BEFORE_ENCODING):
            return None
        enc, ienc = head
        known = enc in ("F32", "F16", "BF16", "Q8") and ienc in ("PLAIN", "PACKED")
        if known and not self.supports({"encoding": enc, "index_encoding": ienc}):
            return "UNSUPPORTED_ENCODING"
        return None

    def _decode_filtered(self, buf: bytes, ctx: Mapping[str, Any]) -> dict[str, Any]:
        try:
            out: dict[str, Any] = {"packet": self._decode_one(buf, ctx)}
            code = None
        except Exception as exc:  # the reference's rejection (DecodeError)
            code = getattr(getattr(exc, "code", None), "value", None)
            if code is None:
                raise
            out = {"rejected": code}
        refused = self.refuse_packet(buf, code, out.get("packet"))
        if refused is not None:
            return {"rejected": refused}
        return out

    def decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        out = self._decode_filtered(base64.b64decode(req["packet"], validate=True), req["context"])
        if "rejected" in out:
            raise Rejected(out["rejected"], "filtered by the fake's claim")
        return out

    def decode_batch(self, req: Mapping[str, Any]) -> dict[str, Any]:
        ctx = req["context"]
        return {
            "results": [
                self._decode_filtered(base64.b64decode(b, validate=True), ctx)
                for b in req["packets"]
            ]
        }

    def encode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        if not self.supports(req["packet"]):
            raise Skipped("an encoding this implementation does not offer")
        return super().encode(req)

    def _engine_supported(self, req: Mapping[str, Any]) -> None:
        vector = req["vector"]
        if not self.supports(vector.get("config", {})):
            raise Skipped("a configuration that sends an encoding this implementation lacks")
        for b in req.get("packets", []):
            if self.refuse_packet(base64.b64decode(b, validate=True), None) is not None:
                raise Skipped("a packet of an encoding this implementation lacks")

    def generate(self, req: Mapping[str, Any]) -> dict[str, Any]:
        self._engine_supported(req)
        return super().generate(req)

    def receive(self, req: Mapping[str, Any]) -> dict[str, Any]:
        self._engine_supported(req)
        return super().receive(req)

    def check_config(self, req: Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(req["config"], Mapping) and not self.supports(req["config"]):
            return {"accepted": False, "message": "an encoding this implementation does not offer"}
        return super().check_config(req)


class F32Only(Filtered):
    """An implementation of 1.1 that sends and reads ``F32`` and ``PLAIN`` only."""

    name = "f32_only"
    drops = F32_ONLY_DROPS
    encodings = frozenset({"F32"})
    index_encodings = frozenset({"PLAIN"})


class Spec10(Filtered):
    """An implementation of 1.0: ``F32``, ``F16``, ``BF16``, plain indices, 1.0's commands."""

    name = "spec_1_0"
    spec_version = "1.0"
    drops = FEATURES_1_1 | COMMANDS_1_1
    encodings = frozenset({"F32", "F16", "BF16"})
    index_encodings = frozenset({"PLAIN", "PACKED"})  # PACKED: unknown to 1.0, see refuse_packet

    def hello(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return {**super().hello(req), "spec_version": self.spec_version}

    def refuse_packet(
        self, buf: bytes, code: str | None, packet: Mapping[str, Any] | None = None
    ) -> str | None:
        head = packet_header(buf)
        if head is None or (code is not None and code in BEFORE_ENCODING):
            return None
        if head[0] == "Q8":
            return "UNSUPPORTED_ENCODING"  # encoding 3 is unknown to 1.0 (DF-VER-3)
        if head[1] == "PACKED" and head[0] in self.encodings:
            # 1.0 does not know packed_indices: `indices` is empty, the values are not (DF-VER-114);
            # a packet without entries has nothing to misread
            if packet is not None and not packet.get("entries"):
                return None
            return "LENGTH_MISMATCH"
        return None

    def _decode_filtered(self, buf: bytes, ctx: Mapping[str, Any]) -> dict[str, Any]:
        out = super()._decode_filtered(buf, ctx)
        pkt = out.get("packet")
        if isinstance(pkt, dict):  # the fields 1.1 added are unknown to a 1.0 reader (DF-VER-2)
            pkt.pop("heard", None)
            pkt.pop("index_encoding", None)
            for e in pkt.get("entries", []):
                e.pop("signature", None)
        return out

    def receive(self, req: Mapping[str, Any]) -> dict[str, Any]:
        out = super().receive(req)
        for p in out.get("relay", []):  # a 1.0 sender writes version_minor 0 (DF-VER-1)
            if isinstance(p, dict) and "version_minor" in p:
                p["version_minor"] = 0
        self.counters_1_0(out.get("counters"))
        return out

    @staticmethod
    def counters_1_0(counters: object) -> None:
        """Leave out of a report what a 1.0 driver does not report: the counters of DF-RCV-30,
        ``relay_dropped_oversize`` (reported since 1.1) and the codes and reasons 1.1 added
        (``NON_FINITE_RESULT``, ``BAD_SIGNATURE``, ``not_member``, ``seq_jump``)."""
        if not isinstance(counters, dict):
            return
        for k in ("packets_received", "values_applied", "relay_dropped_oversize"):
            counters.pop(k, None)
        for group, keys in (
            ("errors", ("NON_FINITE_RESULT", "BAD_SIGNATURE")),
            ("drops", ("not_member", "seq_jump")),
        ):
            if isinstance(counters.get(group), dict):
                for k in keys:
                    counters[group].pop(k, None)
