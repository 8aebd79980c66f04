"""The runner's side of the driver protocol: one driver process, requests, checked responses."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

import jsonschema
from delta_fabric.wire import json_dumps, json_loads

__all__ = ["DriverClient", "ProtocolViolation", "Reply", "schema_validator"]

KINDS = ("ok", "rejected", "skipped", "errored", "unsupported")


class ProtocolViolation(Exception):
    """The driver broke the framing rules (non-JSON line, schema, seq echo, timeout, exit)."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule  # framing | schema | seq_echo | timeout | exited


@dataclass
class Reply:
    """A well-formed response: its kind and the member's value."""

    kind: str
    body: dict[str, Any]
    elapsed: float


@cache
def _schema(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        s: dict[str, Any] = json.load(f)
    return s


def schema_validator(schema: Path, ref: str) -> jsonschema.protocols.Validator:
    """A validator of the ``#/$defs/...`` member ``ref`` (e.g. ``response``, ``result/hello``) of the
    driver-protocol schema at ``schema`` (``conformance/driver-protocol.schema.json``)."""
    return _validator(schema, ref)


@cache
def _validator(schema: Path, ref: str) -> jsonschema.protocols.Validator:
    s = _schema(schema)
    sub = {"$schema": s["$schema"], "$defs": s["$defs"], "$ref": f"#/$defs/{ref}"}
    cls = jsonschema.validators.validator_for(sub)
    v: jsonschema.protocols.Validator = cls(sub)
    return v


def _schema_error(schema: Path, ref: str, obj: Any) -> str | None:
    err = jsonschema.exceptions.best_match(_validator(schema, ref).iter_errors(obj))
    if err is None:
        return None
    path = "/".join(str(p) for p in err.absolute_path)
    return f"{ref}: {err.message} at /{path}"


class DriverClient:
    """A running driver. `request` returns a `Reply` or raises `ProtocolViolation` (the process is then
    dead or killed: call `start` again)."""

    def __init__(
        self, name: str, command: Sequence[str], log_path: Path, *, schema: Path, cwd: Path
    ) -> None:
        self.name = name
        self.schema = schema
        self.command = list(command)
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._seq = 0
        self._log: IO[bytes] | None = None
        self.starts = 0

    # lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.kill()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(f"=== start {self.starts + 1}: {' '.join(self.command)}\n".encode())
        self._log.flush()
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )
        self.starts += 1
        self._seq = 0
        self._lines = queue.Queue()
        threading.Thread(
            target=self._pump, args=(self.proc.stdout, self._lines), daemon=True
        ).start()

    @staticmethod
    def _pump(stream: IO[bytes] | None, q: queue.Queue[bytes | None]) -> None:
        assert stream is not None
        for line in stream:
            q.put(line)
        q.put(None)

    def kill(self) -> None:
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self, timeout: float = 5.0) -> bool:
        """Send ``stop``; True when the driver answered ok and exited with status 0 in time."""
        p = self.proc
        if p is None:
            return False
        try:
            reply = self.request({"cmd": "stop"}, timeout=timeout)
            ok = reply.kind == "ok"
            if p.stdin is not None:
                p.stdin.close()
            rc = p.wait(timeout=timeout)
            ok = ok and rc == 0
        except (ProtocolViolation, subprocess.TimeoutExpired, OSError):
            ok = False
        self.kill()
        return ok

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # requests ----------------------------------------------------------------------------------------
    def send(self, args: Mapping[str, Any], *, check_schema: bool = True) -> int:
        """Write one request; returns its seq. ``check_schema=False`` skips the schema check of the
        request (for bulk requests whose shape was checked once)."""
        p = self.proc
        if p is None or p.stdin is None or p.poll() is not None:
            raise ProtocolViolation("exited", f"driver not running (exit status {p and p.poll()})")
        self._seq += 1
        msg = {"v": 1, "seq": self._seq, **args}
        problem = _schema_error(self.schema, "request", msg) if check_schema else None
        if problem is not None:  # a bug of the runner or of a scenario file, not of the driver
            raise ValueError(f"the runner built an invalid request: {problem}")
        try:
            p.stdin.write((json_dumps(msg, separators=(",", ":")) + "\n").encode())
            p.stdin.flush()
        except OSError as exc:
            try:
                rc: int | None = p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = None
            self.kill()
            raise ProtocolViolation(
                "exited", f"driver exited (status {rc}): cannot write to it: {exc}"
            ) from None
        return self._seq

    def receive(self, seq: int, timeout: float, cmd: str, *, check_schema: bool = True) -> Reply:
        """Read the response to request ``seq`` and check it (framing, schema, seq echo).
        ``check_schema=False`` keeps the framing and seq-echo checks and checks only the envelope's
        shape (``seq`` and exactly one kind): for bulk answers (``decode_batch`` of thousands of
        packets) whose schema check would cost more than the work, after one checked answer."""
        t0 = time.monotonic()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise ProtocolViolation(
                "timeout", f"no response to {cmd} within {timeout:.0f}s"
            ) from None
        if line is None:
            rc = self.proc.wait(timeout=5) if self.proc is not None else None
            self.kill()
            raise ProtocolViolation("exited", f"driver exited (status {rc}) before answering {cmd}")
        elapsed = time.monotonic() - t0
        try:
            msg = json_loads(line)  # DF-CNF-20: -0 reads as -0.0
        except ValueError:
            self.kill()
            raise ProtocolViolation(
                "framing", f"non-JSON line on stdout: {line[:120].decode(errors='replace')!r}"
            ) from None
        if check_schema:
            problem = _schema_error(self.schema, "response", msg)
        elif not isinstance(msg, dict) or not isinstance(msg.get("seq"), int):
            problem = "response is not an object with an integer seq"
        elif sum(k in msg for k in KINDS) != 1 or not isinstance(msg[_kind(msg)], dict):
            problem = f"response needs exactly one of {', '.join(KINDS)}, an object"
        else:
            problem = None
        if problem is not None:
            self.kill()
            raise ProtocolViolation("schema", problem)
        if msg["seq"] != seq:
            self.kill()
            raise ProtocolViolation(
                "seq_echo", f"response echoes seq {msg['seq']}, request had {seq}"
            )
        kind = next(k for k in KINDS if k in msg)
        body = msg[kind]
        if check_schema and kind == "ok" and cmd in _schema(self.schema)["$defs"]["result"]:
            problem = _schema_error(self.schema, f"result/{cmd}", body)
            if problem is not None:
                self.kill()
                raise ProtocolViolation("schema", problem)
        return Reply(kind, body, elapsed)

    def request(
        self, args: Mapping[str, Any], timeout: float = 30.0, *, check_schema: bool = True
    ) -> Reply:
        cmd = str(args["cmd"])
        seq = self.send(args, check_schema=check_schema)
        return self.receive(seq, timeout, cmd, check_schema=check_schema)


def _kind(msg: Mapping[str, Any]) -> str:
    return next(k for k in KINDS if k in msg)
