"""The Python reference driver of the conformance suite (``conformance/driver-protocol.md``).

Run as ``python -m delta_fabric.conformance_driver``: JSON lines on stdin, exactly one JSON line per request
on stdout (flushed), logs on stderr. Every command is an in-process call into :mod:`delta_fabric`:
``decode``/``encode`` into :mod:`delta_fabric.wire`, ``generate``/``receive`` into the sans-IO
:class:`~delta_fabric.engine.Engine`, ``peer`` into :mod:`delta_fabric.conformance.peer` (the Zenoh
transport and the NumPy / PyTorch adapters).

Other drivers can reuse :class:`Driver` and override one handler (the runner's self-test does exactly that
to plant faults in fake drivers).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import IO, Any

from delta_fabric import __version__
from delta_fabric.conformance.engine_io import run_generate, run_receive
from delta_fabric.errors import DecodeError
from delta_fabric.wire import (
    decode_packet,
    encode_packet,
    packet_from_json,
    packet_to_json,
    validate_packet,
)

__all__ = ["Driver", "Rejected", "Skipped", "main"]

PROTOCOL_VERSION = 1
SPEC_VERSION = "1.0"


class Rejected(Exception):
    """The input was refused as the protocol requires (answered as ``rejected``)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Skipped(Exception):
    """The implementation does not support this case (answered as ``skipped``)."""


Handler = Callable[[Mapping[str, Any]], dict[str, Any]]


def _log(msg: str) -> None:
    print(f"[python-driver] {msg}", file=sys.stderr, flush=True)


class Driver:
    """Request dispatch. ``handlers`` maps command names to functions returning the ``ok`` result."""

    name = "python"
    language = "python"

    def __init__(self) -> None:
        self._peer: Any = (
            None  # delta_fabric.conformance.peer.PeerHost, created on the first peer request
        )
        self.handlers: dict[str, Handler] = {
            "hello": self.hello,
            "decode": self.decode,
            "encode": self.encode,
            "generate": self.generate,
            "receive": self.receive,
            "peer": self.peer,
            "stop": self.stop,
        }
        self.stopping = False

    # commands --------------------------------------------------------------------------------------
    def framework(self) -> str:
        return "torch" if importlib.util.find_spec("torch") is not None else "numpy"

    def capabilities(self) -> list[str]:
        caps = [
            "decode",
            "encode",
            "generate",
            "generate.fast",
            "receive",
            "encoding.f16",
            "encoding.bf16",
        ]
        if importlib.util.find_spec("zenoh") is None:
            return caps
        caps += ["peer", "peer.snapshot"]
        if self.framework() == "torch":
            caps.append("peer.train")
        return caps

    def hello(self, req: Mapping[str, Any]) -> dict[str, Any]:
        versions = req.get("versions", [PROTOCOL_VERSION])
        if PROTOCOL_VERSION not in versions:
            raise ValueError(f"driver protocol versions {versions} not supported (this driver: 1)")
        return {
            "name": self.name,
            "version": __version__,
            "language": self.language,
            "framework": self.framework(),
            "spec_version": SPEC_VERSION,
            "protocol_versions": [PROTOCOL_VERSION],
            "capabilities": self.capabilities(),
        }

    def decode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        buf = base64.b64decode(req["packet"], validate=True)
        ctx = req["context"]
        try:
            pkt = decode_packet(buf, int(ctx["max_packet_size"]))
            validate_packet(
                pkt,
                fingerprint=bytes.fromhex(ctx["fingerprint"]),
                num_params=int(ctx["num_params"]),
                hop_limit=int(ctx["hop_limit"]),
            )
        except DecodeError as exc:
            raise Rejected(exc.code.value, exc.detail) from None
        return {"packet": packet_to_json(pkt)}

    def encode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        pkt = packet_from_json(req["packet"])
        return {"packet": base64.b64encode(encode_packet(pkt)).decode("ascii")}

    def generate(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return run_generate(req["vector"])

    def receive(self, req: Mapping[str, Any]) -> dict[str, Any]:
        packets = [base64.b64decode(p, validate=True) for p in req["packets"]]
        return run_receive(req["vector"], packets)

    def peer(self, req: Mapping[str, Any]) -> dict[str, Any]:
        if self._peer is None:
            from delta_fabric.conformance.peer import PeerHost

            self._peer = PeerHost(framework=self.framework())
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
            _log(f"{cmd} failed: {type(exc).__name__}: {exc}")
            return {
                "errored": {
                    "message": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
            }

    def write(self, out: IO[str], seq: Any, body: Mapping[str, Any]) -> None:
        out.write(json.dumps({"seq": seq, **body}, separators=(",", ":"), allow_nan=False) + "\n")
        out.flush()

    def serve(self, inp: IO[str], out: IO[str]) -> int:
        for line in inp:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError("request is not a JSON object")
            except ValueError as exc:
                _log(f"unreadable request: {exc}")
                self.write(out, 0, {"errored": {"message": f"unreadable request: {exc}"}})
                continue
            self.write(out, req.get("seq", 0), self.respond(req))
            if self.stopping:
                break
        if self._peer is not None:
            self._peer.close()
        return 0


def main(driver: Driver | None = None) -> int:
    # Keep stdout for protocol lines only: anything a library prints goes to stderr.
    protocol_out = sys.stdout
    sys.stdout = sys.stderr
    try:
        return (driver or Driver()).serve(sys.stdin, protocol_out)
    finally:
        sys.stdout = protocol_out


if __name__ == "__main__":
    sys.exit(main())
