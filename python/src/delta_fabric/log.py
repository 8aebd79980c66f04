"""Logging: the stdlib logger ``delta_fabric`` (and its children), silent by default.

The package attaches only a ``NullHandler``: an application that configures `logging` gets our
records like any other library's. The environment variable ``DELTA_FABRIC_LOG`` (a level name:
``debug``, ``info``, ``warning``, ``error``) turns logging on without touching code: a stderr handler on
the ``delta_fabric`` logger at that level, and Zenoh's own log at the same level
(``zenoh.init_log_from_env_or``, when the Zenoh transport is first used; ``RUST_LOG`` still wins for
Zenoh). Zenoh writes its log lines to **stdout**.

Loggers: ``delta_fabric.fabric`` (node start, snapshot served and fetched, packet rejects at debug
with their code, close), ``delta_fabric.transport`` (open with endpoints, peer joined and left, close),
``delta_fabric.lifecycle`` (transports closed at exit and why).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

__all__ = ["LOGGER_NAME", "LOG_ENV", "enable_logging", "env_level", "init_zenoh_log"]

LOGGER_NAME = "delta_fabric"
LOG_ENV = "DELTA_FABRIC_LOG"

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


def init_zenoh_log() -> None:
    """Turn Zenoh's log on at ``DELTA_FABRIC_LOG``'s level (once; called by the Zenoh transport)."""
    global _zenoh_done
    level = env_level()
    with _lock:
        if _zenoh_done or level is None:
            return
        _zenoh_done = True
    import zenoh

    zenoh.init_log_from_env_or("warn" if level == "warning" else level)


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
