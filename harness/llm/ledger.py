"""The usage ledger: calls and tokens per method, phase, stage and live/cached/failed."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .. import callscope


class UsageLedger:
    """Counts calls and tokens by (method, phase, stage, status). status: live | cached | failed.

    ``snapshot`` is everything counted so far (a method diffs two snapshots to cost a stage);
    ``drain`` hands over only what was counted since the last drain, so the runner can write the
    counts to usage.jsonl while a build is still running without writing any call twice."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(_zero_counts)
        self._undrained: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(_zero_counts)
        self.failures: list[dict[str, str]] = []
        self.failed_by_stage: dict[tuple[str, str, str], int] = defaultdict(int)  # not drained
        self.requests_by_stage: dict[tuple[str, str, str], int] = defaultdict(int)
        self.in_flight = 0  # live calls of this ledger holding a connection (counted by CallGate)
        # called after every counted call with (stage, status): the runner's progress display
        self.on_call: Callable[[str, str], None] | None = None

    def add(self, method: str, phase: str, stage: str, status: str, inp: int, out: int, secs: float,
            reasoning: int = 0) -> None:
        """Count one call: ``out`` visible output tokens, ``reasoning`` reasoning tokens apart."""
        with self._lock:
            for table in (self.rows, self._undrained):
                r = table[(method, phase, stage, status)]
                r["calls"] += 1
                r["input_tokens"] += inp
                r["output_tokens"] += out
                r["reasoning_tokens"] += reasoning
                r["seconds"] += secs
        callscope.count(phase, status, inp, out, reasoning)  # the test task being answered, if any
        if self.on_call is not None:
            self.on_call(stage, status)

    def calls(self, status: str) -> int:
        with self._lock:
            return int(sum(v["calls"] for (_, _, _, s), v in self.rows.items() if s == status))

    def add_failure(self, method: str, phase: str, stage: str, error: str) -> None:
        with self._lock:
            self.failures.append({"method": method, "phase": phase, "stage": stage, "error": error[:300]})
            self.failed_by_stage[(method, phase, stage)] += 1

    def count_request(self, method: str, phase: str, stage: str) -> None:
        """One request of a stage (a ``generate`` or ``structured`` call, whatever its retries)."""
        with self._lock:
            self.requests_by_stage[(method, phase, stage)] += 1

    def stage_health(self, phase: str | None = None) -> dict[str, dict[str, int]]:
        """Per stage: requests made, calls they took (live, cached and failed attempts, retries
        included) and requests that failed for good (a failed call, a reply the output cap cut twice,
        a structured reply still invalid after its retry), for build health."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}

            def slot(st: str) -> dict[str, int]:
                return out.setdefault(st, {"requests": 0, "calls": 0, "failed": 0})

            for (_, p, st, _status), v in self.rows.items():
                if phase is None or p == phase:
                    slot(st)["calls"] += int(v["calls"])
            for (_, p, st), n in self.requests_by_stage.items():
                if phase is None or p == phase:
                    slot(st)["requests"] += n
            for (_, p, st), n in self.failed_by_stage.items():
                if phase is None or p == phase:
                    slot(st)["failed"] += n
            return out

    def live_calls(self) -> int:
        return self.calls("live")

    @staticmethod
    def _listed(table: dict[tuple[str, str, str, str], dict[str, float]]) -> list[dict[str, Any]]:
        return [{"method": m, "phase": p, "stage": st, "status": s, **v} for (m, p, st, s), v in sorted(table.items())]

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return self._listed(self.rows)

    def drain(self) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """Return and reset the counts (and failures) added since the last drain."""
        with self._lock:
            rows = self._listed(self._undrained)
            fails = list(self.failures)
            self._undrained.clear()
            self.failures.clear()
        return rows, fails


def _zero_counts() -> dict[str, float]:
    return {"calls": 0, "input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "seconds": 0.0}
