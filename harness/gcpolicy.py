"""Garbage-collector policy for runs.

A run's process holds millions of long-lived objects (inspect-ai, openai and pydantic modules and
schemas, loaded sources and indexes). CPython's full collections walk all of them: on the
throughput benchmark that was a pause of about 0.3 s every ~9 s during which no model call was in
flight (harness time 11.9 % of wall, 38 ms CPU per task; with the freeze 7-9 % and 32-34 ms, see
benchmarks/throughput_bench.py). ``gc.freeze()`` moves the objects alive now out of the collector's
reach; the outermost ``long_lived_frozen`` hands them back with ``gc.unfreeze()`` when it exits, so
nothing is kept alive across runs in one process (tests, Ray workers). Garbage made during the
frozen span is still collected as usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_depth = 0


@contextlib.contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Freeze what is alive now; nest it to also freeze what a phase built (the outermost exit unfreezes)."""
    global _depth
    gc.freeze()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
