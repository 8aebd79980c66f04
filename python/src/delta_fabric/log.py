"""Logging: the stdlib logger ``delta_fabric`` (and its children), silent by default.

The package attaches only a ``NullHandler``: an application that configures `logging` gets our
records like any other library's. The environment variable ``DELTA_FABRIC_LOG`` (a level name:
``debug``, ``info``, ``warning``, ``error``) turns logging on without touching code: a stderr handler on
the ``delta_fabric`` logger at that level, and Zenoh's own log at the same level
(``zenoh.init_log_from_env_or``, when the Zenoh transport is first used; ``RUST_LOG`` still wins for
Zenoh). Zenoh writes its log lines to **stdout**.

Zenoh log capture (diagnostics): a transport that leaves loopback (a Zenoh config file, client mode or
a non-loopback endpoint) calls :func:`capture_zenoh_log`. Zenoh's log (Rust ``tracing``) can only go to
the process's stdout, so the capture points file descriptor 1 at a pipe and a thread reads it: Zenoh's
lines (at ``warn`` and above, or at ``DELTA_FABRIC_LOG``'s level when set) are kept in a ring buffer of
the last 200 and are echoed only when ``DELTA_FABRIC_LOG`` is set; every other line (the program's own
output) goes on to the original stdout unchanged. At exit the original stdout is put back after the
pipe is drained. With ``DELTA_FABRIC_LOG`` set, every Zenoh transport goes through the capture, so
Zenoh's echoed lines carry no colour codes, and its "Gossip is disabled" warning (given by every
peer-mode session with gossip scouting off, as DeltaFabric runs them) is dropped.
``DELTA_FABRIC_ZENOH_CAPTURE=0`` turns the capture off. :func:`zenoh_log_lines`
returns the kept lines; `PeerTimeoutError` and a failed session open quote them (see
:func:`delta_fabric.transports.zenoh.diagnose`).

Loggers: ``delta_fabric.fabric`` (node start, snapshot served and fetched, packet rejects at debug
with their code, close), ``delta_fabric.transport`` (open with endpoints, peer joined and left, close),
``delta_fabric.lifecycle`` (transports closed at exit and why).
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable

__all__ = [
    "CAPTURE_ENV",
    "LOGGER_NAME",
    "LOG_ENV",
    "add_zenoh_log_listener",
    "capture_zenoh_log",
    "enable_logging",
    "env_level",
    "init_zenoh_log",
    "original_stdout",
    "warn_loudly",
    "zenoh_log_lines",
]

LOGGER_NAME = "delta_fabric"
LOG_ENV = "DELTA_FABRIC_LOG"
CAPTURE_ENV = "DELTA_FABRIC_ZENOH_CAPTURE"

_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "off": None,
}
_lock = threading.Lock()
_handler: logging.Handler | None = None
_zenoh_done = False


def env_level() -> str | None:
    """The level named by ``DELTA_FABRIC_LOG`` (lower case), or None when unset, empty or ``off``.
    An unknown name counts as ``info`` (and says so on stderr once logging is on)."""
    raw = os.environ.get(LOG_ENV, "").strip().lower()
    if not raw or raw == "off":
        return None
    return raw if raw in _LEVELS else "info"


def enable_logging(level: str | int = "info") -> logging.Logger:
    """Attach one stderr handler to the ``delta_fabric`` logger at ``level`` (idempotent: a second
    call only changes the level). Returns the logger."""
    global _handler
    if isinstance(level, str):
        lvl = _LEVELS.get(level.lower())
        if lvl is None:
            raise ValueError(f"unknown log level {level!r}; use one of debug, info, warning, error")
    else:
        lvl = int(level)
    logger = logging.getLogger(LOGGER_NAME)
    with _lock:
        if _handler is None:
            _handler = logging.StreamHandler(sys.stderr)
            _handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
            logger.addHandler(_handler)
        logger.setLevel(lvl)
    return logger


def init_zenoh_log(capture: bool = False) -> None:
    """Turn Zenoh's log on at ``DELTA_FABRIC_LOG``'s level (once; called by the Zenoh transport).
    ``capture``: also capture it for diagnostics (:func:`capture_zenoh_log`), at ``warn`` at least.
    With ``DELTA_FABRIC_LOG`` set, Zenoh's lines always pass through the capture (unless
    ``DELTA_FABRIC_ZENOH_CAPTURE=0``), which drops their colour codes and `_BENIGN` lines."""
    if (capture or env_level() is not None) and os.environ.get(CAPTURE_ENV, "").strip() != "0":
        capture_zenoh_log()
        return
    global _zenoh_done
    level = env_level()
    with _lock:
        if _zenoh_done or level is None:
            return
        _zenoh_done = True
    import zenoh

    zenoh.init_log_from_env_or("warn" if level == "warning" else level)


# A Zenoh (tracing) log line: `2026-01-01T00:00:00.000000Z  WARN thread zenoh_x::y: message`
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ZENOH_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[0-9:.]+Z\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s")
# Zenoh lines that say nothing about a DeltaFabric node: every peer-mode session with gossip
# scouting off (DeltaFabric's rule, its nodes are given their endpoints) warns that it cannot
# de-duplicate data across region gateways, which a DeltaFabric cluster does not have.
_BENIGN = ("Gossip is disabled: cannot de-duplicate data traversing region gateways",)
_KEEP = 200
_captured: collections.deque[str] = collections.deque(maxlen=_KEEP)
_capture_state: dict[str, object] = {}
_listeners: list[Callable[[str], None]] = []


_SYNC = b"\x00delta-fabric-log-sync "
_synced = threading.Condition(_lock)
_sync_seen = [0]
_sync_issued = [0]


def zenoh_log_lines(sync: float = 1.0) -> list[str]:
    """The Zenoh log lines captured so far (the last 200; empty without a capture). With a capture,
    first waits (up to ``sync`` seconds) until the lines already written to the pipe are read."""
    if "thread" in _capture_state and sync > 0:
        with _lock:
            _sync_issued[0] += 1
            token = _sync_issued[0]
        try:
            os.write(1, _SYNC + str(token).encode() + b"\n")
        except OSError:
            token = 0
        deadline = time.monotonic() + sync
        with _synced:
            while token and _sync_seen[0] < token:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                _synced.wait(left)
    with _lock:
        return list(_captured)


def original_stdout() -> int | None:
    """The file descriptor of the stdout that the capture replaced (None without a capture)."""
    saved = _capture_state.get("saved")
    return saved if isinstance(saved, int) else None


def add_zenoh_log_listener(listener: Callable[[str], None]) -> None:
    """Call ``listener(line)`` (on the capture's thread) for each captured Zenoh log line."""
    with _lock:
        _listeners.append(listener)


def capture_zenoh_log(filter: str | None = None, echo: bool | None = None) -> bool:
    """Start the Zenoh log capture described in the module docstring (once per process; a later call
    does nothing). ``filter``: Zenoh's log filter (``RUST_LOG`` syntax; default ``warn``, or
    ``DELTA_FABRIC_LOG``'s level when lower); ``echo``: also print Zenoh's lines (default: when
    ``DELTA_FABRIC_LOG`` is set). False when Zenoh's log was already turned on without it, or stdout
    cannot be redirected (no file descriptor 1)."""
    global _zenoh_done
    with _lock:
        if _zenoh_done:
            return "thread" in _capture_state
        _zenoh_done = True
    level = env_level()
    if echo is None:
        echo = level is not None
    if filter is None:
        filter = "warn" if level in (None, "warning", "error") else str(level)
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        r, w = os.pipe()
        os.dup2(w, 1)
        os.close(w)
    except (OSError, ValueError, AttributeError):
        import zenoh

        if level is not None:
            zenoh.init_log_from_env_or("warn" if level == "warning" else level)
        return False

    def pump() -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(r, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                if buf:
                    _forward(buf, saved, echo)
                os.close(r)
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                _forward(line + b"\n", saved, echo)

    t = threading.Thread(target=pump, name="delta-fabric-zenoh-log", daemon=True)
    t.start()
    _capture_state.update(thread=t, saved=saved)
    atexit.register(_stop_capture)
    import zenoh

    zenoh.init_log_from_env_or(filter)
    return True


def _forward(line: bytes, saved: int, echo: bool) -> None:
    if line.startswith(_SYNC):
        with _synced:
            _sync_seen[0] = max(_sync_seen[0], int(line[len(_SYNC) :].strip() or b"0"))
            _synced.notify_all()
        return
    text = _ANSI.sub("", line.decode("utf-8", "replace")).rstrip("\n")
    is_zenoh = _ZENOH_LINE.match(text) is not None
    if is_zenoh and any(b in text for b in _BENIGN):
        return
    if is_zenoh:
        with _lock:
            _captured.append(text)
            listeners = list(_listeners)
        for listener in listeners:
            try:
                listener(text)
            except Exception:  # a failing listener must not stop the capture
                pass
    if echo or not is_zenoh:
        try:
            os.write(saved, (text + "\n").encode() if is_zenoh else line)  # no colour codes
        except OSError:
            pass


def _stop_capture() -> None:
    """At exit: put the original stdout back and let the reader drain the pipe."""
    t = _capture_state.get("thread")
    saved = _capture_state.get("saved")
    if not isinstance(t, threading.Thread) or not isinstance(saved, int):
        return
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        os.dup2(saved, 1)  # closes the pipe's last write end held by fd 1
    except OSError:
        return
    t.join(timeout=2.0)


def warn_loudly(logger: logging.Logger, msg: str, *args: object) -> None:
    """A WARNING that a user must see even when nothing configured logging (a misconfigured
    cluster): logged on ``logger``, and also written to stderr as one line when no handler but the
    package's ``NullHandler`` would emit it."""
    logger.warning(msg, *args)
    if not logger.isEnabledFor(logging.WARNING):
        return
    cur: logging.Logger | None = logger
    while cur is not None:
        if any(not isinstance(h, logging.NullHandler) for h in cur.handlers):
            return  # the application (or DELTA_FABRIC_LOG) shows it
        if not cur.propagate:
            break
        cur = cur.parent
    try:
        print(f"delta-fabric: warning: {msg % args if args else msg}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _configure_from_env() -> None:
    logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())
    level = env_level()
    if level is not None:
        enable_logging(level)
        raw = os.environ.get(LOG_ENV, "").strip().lower()
        if raw not in _LEVELS:
            logging.getLogger(LOGGER_NAME).warning(
                "%s=%r is not a level name; logging at info", LOG_ENV, raw
            )
