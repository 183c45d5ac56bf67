"""Wall time before the run: how long a run's model calls take at a per-call latency and C connections.

The model is a critical-path bound. A run's calls are N in all; at most C are in flight, so they take
at least N x latency / C. A cell also has dependent calls (a call whose prompt holds an earlier
call's reply): its longest chain of them, the critical path D, takes D x latency however many
connections there are. Cells learn at the same time and share the C connections, so the learning
phase takes about

    max(N_learn x latency / C, max over cells of D x latency)

and the test phase (every task independent, a task a short chain of an answer and a judge call)
N_test x latency / C plus one task's chain. CPU time of the harness and the methods (retrieval,
clustering, parsing) is not counted: it is small against seconds-long calls, and
``benchmarks/learn_throughput_bench.py`` measures how close a run comes to this bound.

Critical paths per method are measured (``CHAINS``): the wall time of a learning cell with unbounded
connections at a fixed latency, divided by that latency, from ``benchmarks/learn_throughput_bench.py``,
expressed per unit of the work that makes the chain longer (a guidance task for a method that learns
from guidance one task after another; nothing for a method whose stages fan out).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

# Default seconds a call takes, per reasoning effort, for ``sourcebench estimate --latency``: the
# medians a hosted reasoning model (gpt-5 class) answers a method's prompts of a few thousand tokens
# in; None (no effort given, a non-reasoning model) is a chat model's couple of seconds.
DEFAULT_LATENCY_S: dict[str | None, float] = {None: 2.0, "none": 2.0, "minimal": 3.0, "low": 6.0, "medium": 12.0,
                                              "high": 30.0, "xhigh": 60.0, "max": 60.0}


@dataclass(frozen=True)
class Chain:
    """A method's longest chain of dependent learning calls: ``base`` + ``per_guidance`` x guidance tasks
    + ``per_level`` x log2(elements) (a hierarchy whose levels wait for each other) + ``per_call`` x its
    learning calls (what a method's own fixed cap on calls at once adds: its stages then take
    calls / cap rounds each)."""

    base: float
    per_guidance: float = 0.0
    per_level: float = 0.0
    per_call: float = 0.0

    def depth(self, elements: int, guidance: int, calls: float = 0.0) -> float:
        return (self.base + self.per_guidance * guidance + self.per_level * math.log2(max(2, elements))
                + self.per_call * calls)


# From benchmarks/learn_throughput_bench.py (PhantomWiki seed1_people51_depth20, --limit 3: 2 guidance
# tasks, 500 ms a call, unbounded connections; docs/performance.md): the wall time over the latency,
# rounded up; where a method's chain grows with the guidance tasks, the measured path is split into a
# base and a per-task part by the method's stages (SourceLearn: 39 calls at 2 tasks with its stages
# unbounded, 7 calls a task: answer, status, lesson, coverage, rewrite, grounding, preservation;
# kb-curator: 19 of 19 calls, one chain). SourceLearn's stages cap themselves at 4 calls at once
# (``SourceLearnConfig.concurrency``): measured 84 calls deep for 236 calls with the cap, 39 without,
# so the cap adds (84 - 39) / 236 = 0.19 a call; drop ``per_call`` when the cap is lifted. A method
# missing here is estimated as one call deep.
CHAINS: dict[str, Chain] = {
    "no_source": Chain(0.0),
    "full_context": Chain(0.0),
    "bm25": Chain(0.0),
    "hybrid_rag": Chain(0.0),  # no learning calls
    "navigator": Chain(0.0),  # no learning calls
    "raptor": Chain(0.0, per_level=0.5),  # a layer's summaries at once; layers one after another
    "hipporag2": Chain(3.0),  # NER then triples per chunk, all passages at once (+ a corrective retry)
    "awm": Chain(3.0),  # guidance answered and judged at once, then one induction call
    "rika": Chain(3.0, per_guidance=1.0),  # batches of 5 tasks in a chain, each ~5 calls deep
    "kb-curator": Chain(1.0, per_guidance=9.0),  # one agent loop over the guidance tasks
    "sourcelearn": Chain(25.0, per_guidance=7.0),  # M0, MS, then the task-guided chain
}
UNKNOWN_CHAIN = Chain(1.0)
DEFAULT_CONNECTIONS = 32  # harness.budget.DEFAULT_API_CONNECTIONS, `run`'s default for a served model


@dataclass
class WallTime:
    """Predicted seconds of a run's phases and what bounds each (``"connections"`` or ``"chain"``)."""

    learn_s: float
    test_s: float
    learn_bound: str
    latency_s: float
    connections: int

    @property
    def total_s(self) -> float:
        return self.learn_s + self.test_s


def predict(cells: list[dict[str, Any]], latency_s: float, connections: int) -> WallTime:
    """Wall time of the cells ``[{"method", "elements", "guidance", "learn_calls", "test_calls"}]`` (calls
    expected, e.g. from ``harness.estimate``) at ``latency_s`` a call and ``connections`` in flight."""
    c = max(1, connections)
    n_learn = sum(float(x.get("learn_calls") or 0) for x in cells)
    n_test = sum(float(x.get("test_calls") or 0) for x in cells)
    depth = max((min(float(x.get("learn_calls") or 0),
                     CHAINS.get(x["method"], UNKNOWN_CHAIN).depth(int(x.get("elements") or 0),
                                                                  int(x.get("guidance") or 0),
                                                                  float(x.get("learn_calls") or 0)))
                 for x in cells), default=0.0)
    by_connections = n_learn * latency_s / c
    learn = max(by_connections, depth * latency_s)
    test = n_test * latency_s / c + (2 * latency_s if n_test else 0.0)
    return WallTime(learn, test, "connections" if by_connections >= depth * latency_s else "chain", latency_s, c)


def human(seconds: float) -> str:
    """``about 3.2 hours``, ``about 14 minutes``, ``about 40 s``."""
    if seconds >= 3600:
        return f"about {seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"about {seconds / 60:.0f} minutes"
    return f"about {seconds:.0f} s"


def eta_s(done: int, expected: float | None, elapsed_s: float) -> float | None:
    """Seconds left for ``expected`` calls when ``done`` took ``elapsed_s`` (None: no expectation yet, or
    more calls made than expected, when the method is past its estimate)."""
    if not expected or done <= 0 or elapsed_s <= 0 or done >= expected:
        return None
    return (expected - done) * elapsed_s / done


def short(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def cells_of(cells: list[Any], estimates: list[Any]) -> list[dict[str, Any]]:
    """``predict``'s cells from ``harness.estimate``'s ``CellUnits`` and ``Estimate`` rows."""
    calls: dict[tuple, dict[str, float]] = {}
    for e in estimates:
        slot = calls.setdefault((e.method, e.source, e.seed), {"learn": 0.0, "test": 0.0})
        slot["learn" if e.phase.startswith("learn") else "test"] += e.calls
    out = []
    for c in cells:
        n = calls.get((c.method, c.source, c.seed), {"learn": 0.0, "test": 0.0})
        out.append({"method": c.method, "elements": c.elements, "guidance": c.guidance, "learn_calls": n["learn"],
                    "test_calls": n["test"]})
    return out


def measured_learn_wall(run_dir: Any) -> float | None:
    """Seconds of a finished run's learning: from the start of its first artifact build to the end of
    its last (the manifests' ``created`` and ``build_seconds``); None without artifacts."""
    import calendar
    import json
    from pathlib import Path

    spans = []
    for man in Path(run_dir).glob("artifacts/*/*/artifact.json"):
        try:
            m = json.loads(man.read_text(encoding="utf-8"))
            end = calendar.timegm(time.strptime(m["created"], "%Y-%m-%dT%H:%M:%SZ"))
        except (OSError, ValueError, KeyError):
            continue
        spans.append((end - float(m.get("build_seconds") or 0), end))
    if not spans:
        return None
    return max(b for _, b in spans) - min(a for a, _ in spans)


def wall_lines(groups: list[tuple[str, list[dict[str, Any]]]], latency_s: float, connections: list[int]) -> list[str]:
    """``sourcebench estimate``'s wall-time lines: per folder and in all (folders one after another)."""
    lines = []
    for c in connections:
        preds = [(label, predict(cells, latency_s, c)) for label, cells in groups]
        total = sum(p.total_s for _, p in preds)
        lines.append(f"wall time at C = {c} and {latency_s:g} s a call: {human(total)} "
                     f"(learning {human(sum(p.learn_s for _, p in preds))[6:]}, "
                     f"testing {human(sum(p.test_s for _, p in preds))[6:]}; critical-path model, "
                     "harness CPU not counted)")
        if len(preds) > 1:
            lines += [f"  {label}: {human(p.total_s)} (learning bound by {p.learn_bound})" for label, p in preds]
    return lines
