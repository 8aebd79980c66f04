"""The request loop of a Python driver (``conformance/driver-protocol.md``): JSON lines on stdin, exactly
one JSON line per request on stdout (flushed), logs on stderr (prefixed ``[<name>-driver]``, with the
traceback of every errored request).

Every command is an in-process call into :mod:`delta_fabric`: ``decode``/``encode`` into
:mod:`delta_fabric.wire`, ``generate``/``receive`` into the sans-IO engine (through the framework's
``gather``/``apply`` hooks when given), ``peer`` into :class:`~delta_fabric_conformance.kit.peer.PeerHost`
(the Zenoh transport, the NumPy adapter for the flat model and the driver's :class:`ModelKit` for the
digits CNN). A framework's driver is a :class:`Driver` built with its name, framework and model kit
(see :mod:`delta_fabric_conformance.drivers.torch`). Drivers can also override one handler (the
runner's self-test does exactly that to plant faults in fake drivers).
"""

from __future__ import annotations

import base64
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import IO, Any

from delta_fabric import __version__
from delta_fabric.errors import DecodeError
from delta_fabric.wire import (
    decode_packet,
    encode_packet,
    json_dumps,
    json_loads,
    packet_from_json,
    packet_to_json,
    validate_packet,
)

from delta_fabric_conformance.claims import TARGET_CAPABILITIES, TARGETS
from delta_fabric_conformance.kit.engine_io import (
    Apply,
    Gather,
    run_check_config,
    run_generate,
    run_receive,
)
from delta_fabric_conformance.kit.forward import ForwardKit, run_forward
from delta_fabric_conformance.kit.peer import ModelKit, NodeFactory, PeerHost
from delta_fabric_conformance.kit.repair_io import (
    run_repair_decode,
    run_repair_encode,
    run_repair_gaps,
    run_repair_resend,
)
from delta_fabric_conformance.kit.snapshot_io import (
    decode_b64,
    run_snapshot_assemble,
    run_snapshot_decode,
    run_snapshot_serve,
)

__all__ = ["Driver", "Rejected", "Skipped", "main"]

PROTOCOL_VERSION = 1
SPEC_VERSION = "1.1"


class Rejected(Exception):
    """The input was refused as the protocol requires (answered as ``rejected``)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Skipped(Exception):
    """The implementation does not support this case (answered as ``skipped``)."""


Handler = Callable[[Mapping[str, Any]], dict[str, Any]]


class Driver:
    """Request dispatch. ``handlers`` maps command names to functions returning the ``ok`` result.

    ``name`` is the registry name (``hello``'s ``name``), ``framework`` the framework it reports.
    ``kit`` builds, trains and evaluates the digits CNN in that framework (capability ``peer.train``);
    without one the driver runs the ``flat`` live model only. ``node_factory`` replaces how a live
    node is built (default: :class:`~delta_fabric_conformance.kit.peer.PeerNode` with ``kit``);
    ``gather`` / ``apply`` route the ``generate`` / ``receive`` vectors through the framework.
    """

    name = "python"
    language = "python"

    def __init__(
        self,
        name: str | None = None,
        framework: str = "numpy",
        kit: ModelKit | None = None,
        *,
        node_factory: NodeFactory | None = None,
        gather: Gather | None = None,
        apply: Apply | None = None,
        version: str = __version__,
    ) -> None:
        if kit is not None and kit.framework != framework:
            raise ValueError(f"model kit for {kit.framework!r} given to a {framework!r} driver")
        self.name = name or type(self).name
        self._framework = framework
        self.kit = kit
        self.node_factory = node_factory
        self.gather = gather
        self.apply = apply
        self.version = version
        self._peer: PeerHost | None = None  # created on the first peer request
        self.handlers: dict[str, Handler] = {
            "hello": self.hello,
            "decode": self.decode,
            "decode_batch": self.decode_batch,
            "encode": self.encode,
            "generate": self.generate,
            "receive": self.receive,
            "check_config": self.check_config,
            "snapshot_decode": self.snapshot_decode,
            "snapshot_assemble": self.snapshot_assemble,
            "snapshot_serve": self.snapshot_serve,
            "repair_decode": self.repair_decode,
            "repair_encode": self.repair_encode,
            "repair_gaps": self.repair_gaps,
            "repair_resend": self.repair_resend,
            "peer": self.peer,
            "stop": self.stop,
        }
        if isinstance(kit, ForwardKit):
            self.handlers["forward"] = self.forward
        self.stopping = False

    # commands --------------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        """One line on stderr, prefixed with the driver's name."""
        print(f"[{self.name}-driver] {msg}", file=sys.stderr, flush=True)

    def framework(self) -> str:
        return self._framework

    def capabilities(self) -> list[str]:
        caps = [
            "decode",
            "decode.batch",
            "encode",
            "generate",
            "generate.fast",
            "receive",
            "encoding.f16",
            "encoding.bf16",
            "encoding.q8",
            "index.packed",
            "snapshot",
            "snapshot.serve",
            "signing",
            "config",
            "repair",
        ]
        if importlib.util.find_spec("zenoh") is None:
            return caps
        caps += ["peer", "peer.snapshot"]
        if self.kit is not None or self.node_factory is not None:
            caps.append("peer.train")
        if "forward" in self.handlers:
            caps.append("forward")
        return caps

    def claims(self) -> list[str]:
        """The conformance targets claimed (DF-CNF-30): every target whose capabilities this driver
        has (a driver without Zenoh claims ``codec`` and ``engine`` only)."""
        caps = set(self.capabilities())
        return [t for t in TARGETS if TARGET_CAPABILITIES[t] <= caps]

    def hello(self, req: Mapping[str, Any]) -> dict[str, Any]:
        versions = req.get("versions", [PROTOCOL_VERSION])
        if PROTOCOL_VERSION not in versions:
            raise ValueError(f"driver protocol versions {versions} not supported (this driver: 1)")
        return {
            "name": self.name,
            "version": self.version,
            "language": self.language,
            "framework": self.framework(),
            "spec_version": SPEC_VERSION,
            "protocol_versions": [PROTOCOL_VERSION],
            "capabilities": self.capabilities(),
            "claims": self.claims(),
        }

    @staticmethod
    def _decode_one(buf: bytes, ctx: Mapping[str, Any]) -> dict[str, Any]:
        """Decode then validate (spec DF-RCV-8, in the order of DF-RCV-20): the packet JSON.
        Raises :class:`DecodeError`."""
        pkt = decode_packet(buf, int(ctx["max_packet_size"]))
        validate_packet(
            pkt,
            fingerprint=bytes.fromhex(ctx["fingerprint"]),
            num_params=int(ctx["num_params"]),
            hop_limit=int(ctx["hop_limit"]),
        )
        return packet_to_json(pkt)

    def decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        buf = base64.b64decode(req["packet"], validate=True)
        try:
            return {"packet": self._decode_one(buf, req["context"])}
        except DecodeError as exc:
            raise Rejected(exc.code.value, exc.detail) from None

    def decode_batch(self, req: Mapping[str, Any]) -> dict[str, Any]:
        """``decode`` of every packet of the request, in order (capability ``decode.batch``)."""
        ctx = req["context"]
        results: list[dict[str, Any]] = []
        for b64 in req["packets"]:
            buf = base64.b64decode(b64, validate=True)
            try:
                results.append({"packet": self._decode_one(buf, ctx)})
            except DecodeError as exc:
                results.append({"rejected": exc.code.value})
        return {"results": results}

    def encode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        pkt = packet_from_json(req["packet"])
        return {"packet": base64.b64encode(encode_packet(pkt)).decode("ascii")}

    def generate(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_generate(req["vector"], gather=self.gather)

    def receive(self, req: Mapping[str, Any]) -> dict[str, Any]:
        packets = [base64.b64decode(p, validate=True) for p in req["packets"]]
        return run_receive(req["vector"], packets, apply=self.apply)

    def check_config(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_check_config(req["config"], req["manifest"])

    def snapshot_decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_snapshot_decode(base64.b64decode(req["chunk"], validate=True))

    def snapshot_assemble(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_snapshot_assemble(req["vector"], decode_b64(req["chunks"]))

    def snapshot_serve(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_snapshot_serve(req["vector"])

    def repair_decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_repair_decode(base64.b64decode(req["bytes"], validate=True))

    def repair_encode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_repair_encode(req["request"])

    def repair_gaps(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_repair_gaps(req["vector"])

    def repair_resend(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_repair_resend(req["vector"])

    def forward(self, req: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(self.kit, ForwardKit):
            raise Skipped("no model kit with forward_check")
        return run_forward(self.kit, req["vector"])

    def peer(self, req: Mapping[str, Any]) -> dict[str, Any]:
        if self._peer is None:
            self._peer = PeerHost(self.kit, node_factory=self.node_factory)
        events: list[dict[str, Any]] = self._peer.run(
            str(req["session"]), list(req["script"]), float(req["timeout_s"])
        )
        return {"events": events}

    def stop(self, req: Mapping[str, Any]) -> dict[str, Any]:
        self.stopping = True
        if self._peer is not None:
            self._peer.close()
        return {}

    # dispatch --------------------------------------------------------------------------------------
    def respond(self, req: Mapping[str, Any]) -> dict[str, Any]:
        """The response object (without ``seq``) for one request."""
        cmd = req.get("cmd")
        handler = self.handlers.get(cmd) if isinstance(cmd, str) else None
        if handler is None:
            return {"unsupported": {"cmd": str(cmd)}}
        try:
            return {"ok": handler(req)}
        except Rejected as exc:
            out: dict[str, Any] = {"code": exc.code}
            if exc.message:
                out["message"] = exc.message
            return {"rejected": out}
        except Skipped as exc:
            return {"skipped": {"reason": str(exc)}}
        except Exception as exc:
            tb = traceback.format_exc()
            self.log(f"{cmd} failed: {type(exc).__name__}: {exc}\n{tb.rstrip()}")
            return {"errored": {"message": f"{type(exc).__name__}: {exc}", "traceback": tb}}

    def write(self, out: IO[str], seq: Any, body: Mapping[str, Any]) -> None:
        # DF-CNF-20: floats in float form, non-finite values as "nan" / "inf" / "-inf"
        out.write(json_dumps({"seq": seq, **body}, separators=(",", ":")) + "\n")
        out.flush()

    def serve(self, inp: IO[str], out: IO[str]) -> int:
        for line in inp:
            if not line.strip():
                continue
            try:
                req = json_loads(line)
                if not isinstance(req, dict):
                    raise ValueError("request is not a JSON object")
            except ValueError as exc:
                self.log(f"unreadable request: {exc}")
                self.write(out, 0, {"errored": {"message": f"unreadable request: {exc}"}})
                continue
            self.write(out, req.get("seq", 0), self.respond(req))
            if self.stopping:
                break
        if self._peer is not None:
            self._peer.close()
        return 0


def main(driver: Driver) -> int:
    """Serve ``driver`` on stdin/stdout until ``stop`` or end of input, then end the process. Keeps
    stdout for protocol lines only: anything a library prints goes to stderr.

    After the last answer is flushed and every live session is closed (``serve``), the process ends
    with ``os._exit``: the interpreter's teardown of a process that imported PyTorch (the ``forward``
    check, ``peer.train``) takes 5 s and more on a loaded machine, and the driver protocol gives a
    driver 5 s to exit after ``stop`` (section 2, item 6)."""
    protocol_out = sys.stdout
    sys.stdout = sys.stderr
    try:
        rc = driver.serve(sys.stdin, protocol_out)
    finally:
        sys.stdout = protocol_out
    protocol_out.flush()
    sys.stderr.flush()
    os._exit(rc)
