"""Stopping a command with SIGTERM the way Ctrl-C stops it, reliably.

The handler raises KeyboardInterrupt, so the runner's cleanup runs (call counts written, half-built
artifact folders removed) and the same command resumes. A signal handler's exception is raised
wherever the main thread happens to be, and Python swallows exceptions raised in a few places
(``__del__``, weakref and GC callbacks: "Exception ignored in ..."), so the request is also
remembered: every model call checks it (:func:`check`) and raises KeyboardInterrupt again. A
stop is therefore at most one model call late, never lost.
"""

from __future__ import annotations

import signal
import threading

_requested = threading.Event()


def _on_sigterm(signum: int, frame: object) -> None:
    _requested.set()
    raise KeyboardInterrupt


def install() -> None:
    """SIGTERM stops the command as Ctrl-C does (main thread only; signals are delivered there)."""
    _requested.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def check() -> None:
    """Raise KeyboardInterrupt if a stop was requested (a model call is about to start)."""
    if _requested.is_set():
        raise KeyboardInterrupt
