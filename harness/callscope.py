"""What the model calls being made belong to: the test task whose answer they serve, and its epoch.

The ledger counts a cell's calls; the test tasks of a cell run concurrently, so a task's own calls can
only be told apart by the asyncio context they run in. The test phase sets a ``TaskUsage`` for each
sample (inherited by every asyncio task and thread the method starts for it), the model layer adds
each counted call to it, and the result row carries it: what answering that task cost, which the
break-even protocol needs per task to give its saving an interval.

The epoch (``--epochs N``: repeated answers per task at temperature > 0) changes the seed sent to the
solver model and the cache key of its calls from the second epoch on, so that each repeat is its own
sample and is cached under its own key; epoch 1 keys are those of a run without epochs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_COUNTS = ("calls", "input_tokens", "output_tokens", "reasoning_tokens")


class TaskUsage:
    """Calls and tokens of one task's answering, by phase: live + cached calls (``calls`` and their tokens),
    failed calls apart (``failed_calls``; their tokens are not counted). Live and cached are not told
    apart: which of two tasks asking the same call paid for it, or whether a resumed run found it in the
    cache, is a fact of the schedule, and a row must not depend on the schedule."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.phases: dict[str, dict[str, int]] = {}

    def add(self, phase: str, status: str, inp: int, out: int, reasoning: int) -> None:
        with self._lock:
            p = self.phases.setdefault(phase, {k: 0 for k in (*_COUNTS, "failed_calls")})
            if status == "failed":
                p["failed_calls"] += 1
                return
            p["calls"] += 1
            p["input_tokens"] += int(inp)
            p["output_tokens"] += int(out)
            p["reasoning_tokens"] += int(reasoning)

    def as_dict(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {k: dict(v) for k, v in sorted(self.phases.items())}


TASK_USAGE: ContextVar[TaskUsage | None] = ContextVar("sourcebench_task_usage", default=None)
EPOCH: ContextVar[int] = ContextVar("sourcebench_epoch", default=1)


def count(phase: str, status: str, inp: int, out: int, reasoning: int) -> None:
    """Add one counted call to the task being answered in this context, if any."""
    tally = TASK_USAGE.get()
    if tally is not None:
        tally.add(phase, status, inp, out, reasoning)


def epoch_seed(seed: int) -> int:
    """The solver seed of the current epoch: ``seed`` in epoch 1 (a run without epochs), then seed + k."""
    return seed + EPOCH.get() - 1


@contextlib.contextmanager
def scope(tally: TaskUsage | None = None, epoch: int | None = None) -> Iterator[None]:
    """Calls made inside count into ``tally`` and belong to ``epoch`` (each None: unchanged)."""
    tokens: list[tuple[ContextVar[Any], Any]] = []
    if tally is not None:
        tokens.append((TASK_USAGE, TASK_USAGE.set(tally)))
    if epoch is not None:
        tokens.append((EPOCH, EPOCH.set(epoch)))
    try:
        yield
    finally:
        for var, tok in reversed(tokens):
            var.reset(tok)


def summed(usages: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Per-phase counts added over several ``as_dict`` results (a task's epochs)."""
    out: dict[str, dict[str, int]] = {}
    for u in usages:
        for phase, c in (u or {}).items():
            p = out.setdefault(phase, {})
            for k, v in c.items():
                p[k] = p.get(k, 0) + int(v)
    return {k: out[k] for k in sorted(out)}
