"""Process lifecycle: open transports are closed when the process ends, however it ends.

Why this exists: zenoh-python runs each Python callback (subscriber, queryable, liveliness
subscriber) on its own *non-daemon* Python thread, which ends only when that declaration is undeclared
or its session closed. At interpreter exit, `threading` joins every non-daemon thread *before*
`atexit` hooks run, so a script that raised, got Ctrl-C or simply forgot ``close()`` waited forever
for those threads (measured: a 3-line script never exited).

What this module does, for every transport that calls `register` (the Zenoh transport does):

* a hook registered with `threading`'s own exit hooks (which run *before* the non-daemon threads are
  joined) closes every transport still open and prints one line on stderr, e.g.
  ``delta_fabric: closing 1 open transport at exit (SIGTERM)``; the reason is ``SIGTERM``, the
  uncaught exception (``uncaught ValueError``, ``SIGINT``...) or ``not closed by the program`` (also
  when a multiprocessing child dies of an exception, which bypasses ``sys.excepthook``);
* SIGTERM becomes ``SystemExit(143)`` on the main thread (so ``finally`` blocks and context managers
  run), but only when the process still has the default SIGTERM handler: a handler the application
  installed is left alone;
* ``sys.excepthook`` is wrapped once to remember the uncaught exception's name for the reason line.

A transport closed normally (``close()``, ``with``) unregisters itself and nothing is printed.
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Protocol

__all__ = ["Closeable", "close_all", "open_count", "register", "unregister"]

log = logging.getLogger("delta_fabric.lifecycle")


class Closeable(Protocol):
    def close(self) -> None: ...


_lock = threading.Lock()
_open: dict[int, tuple[weakref.ref[Closeable], str]] = {}
_installed = False
_reason: str | None = None


def register(obj: Closeable, what: str = "transport") -> None:
    """Track ``obj`` until `unregister`; it is closed at process exit if still open."""
    with _lock:
        _open[id(obj)] = (weakref.ref(obj), what)
    _install()


def unregister(obj: Closeable) -> None:
    with _lock:
        _open.pop(id(obj), None)


def open_count() -> int:
    """How many registered objects are still open (and alive)."""
    with _lock:
        return sum(1 for ref, _ in _open.values() if ref() is not None)


def close_all(reason: str) -> int:
    """Close every registered object still open; print one reason line on stderr when there was
    any. Returns how many were closed. Never raises."""
    with _lock:
        items = [(ref(), what) for ref, what in _open.values()]
        _open.clear()
    live = [(o, what) for o, what in items if o is not None]
    if not live:
        return 0
    kinds = sorted({what for _, what in live})
    noun = " and ".join(kinds) if len(live) == 1 else " and ".join(k + "s" for k in kinds)
    line = f"delta_fabric: closing {len(live)} open {noun} at exit ({reason})"
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:
        pass
    log.info("%s", line.removeprefix("delta_fabric: "))
    for obj, _ in live:
        try:
            obj.close()
        except Exception as exc:  # exit must go on
            log.warning("closing %r at exit failed: %s", obj, exc)
    return len(live)


def _at_exit() -> None:
    close_all(_reason or "not closed by the program")


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _reason
    _reason = "SIGTERM"
    raise SystemExit(128 + signal.SIGTERM)


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    register_hook: Callable[[Callable[[], None]], None] | None = getattr(
        threading, "_register_atexit", None
    )
    try:
        if register_hook is not None:
            # runs before threading joins the non-daemon threads (zenoh-python's callback threads)
            register_hook(_at_exit)
    except RuntimeError:  # interpreter already shutting down
        pass
    atexit.register(_at_exit)  # a no-op when the hook above already closed everything
    _wrap_excepthook()
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # not the main interpreter, or no signals here
            pass


def _wrap_excepthook() -> None:
    previous = sys.excepthook

    def hook(
        exc_type: type[BaseException],
        exc: BaseException,
        tb: TracebackType | None,
    ) -> None:
        global _reason
        if _reason is None:
            _reason = (
                "SIGINT"
                if issubclass(exc_type, KeyboardInterrupt)
                else f"uncaught {exc_type.__name__}"
            )
        previous(exc_type, exc, tb)

    sys.excepthook = hook
