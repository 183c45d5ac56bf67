"""Wall time before the run: how long a run's model calls take at a per-call latency and C connections.

The model is a critical-path (Brent) bound. A run's learning calls are N in all, at most C in flight.
A cell also has dependent calls (a call whose prompt holds an earlier call's reply): the longest
chain of them over the run's cells, the critical path D, takes D x latency however many connections
there are, and while it runs the cell that holds it has fewer than C calls to make (a planning
round, one guidance task after another). A greedy schedule, which the run's shared connection
budget is, finishes the learning within

    (N_learn - D) x latency / C + D x latency

(Brent's bound: the calls off the chain fill the connections; the chain's calls each wait a
latency). The larger of N x latency / C and D x latency alone is a lower bound that no run reaches
when a cell has long narrow parts: SourceLearn on SWE-QA flask (1,740 learning calls, a chain of
about 54, 8 s a call, C = 32) took 2.2x that bound and 1.1x Brent's (docs/performance.md). The test phase (every task independent, a task a short chain of an answer
and a judge call) takes N_test x latency / C plus one task's chain. CPU time of the harness and the
methods (retrieval, clustering, parsing) is not counted: it is small against seconds-long calls, and
``benchmarks/learn_throughput_bench.py`` measures how close a run comes to this bound.

Critical paths per method are measured (``CHAINS``): the wall time of a learning cell with unbounded
connections at a fixed latency, divided by that latency, from ``benchmarks/learn_throughput_bench.py``,
expressed per unit of the work that makes the chain longer (a guidance task for a method that learns
from guidance one task after another; nothing for a method whose stages fan out).
"""

from __future__ import annotations

import itertools
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
# SourceLearn 7 (per-entity consolidation, sequential cross-entity and pair passes) has a longer base,
# read from the call timeline of a SWE-QA flask run (`benchmarks/walltime_check.py`, 8 s a call,
# C = 32; docs/performance.md): 54 waves of calls ended one to three at a time (3 before the
# construction fans out, 16 in the planning/study rounds, 19 in the consolidation's cross-entity and
# pair passes, 11 in the 2 guidance tasks plus their judge calls) besides 1,648 calls in full waves;
# the per-task part stays PhantomWiki's 7 (a refinement's rewrite, grounding and preservation
# included; flask's 2 tasks needed none).
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
    "sourcelearn": Chain(40.0, per_guidance=7.0),  # M0, MS (study rounds, pair passes), the task-guided chain
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
    by_connections = (n_learn - depth) * latency_s / c
    learn = by_connections + depth * latency_s
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


PAUSE_S = 600.0  # a gap between two calls' ends longer than this is a pause between invocations, not work


def call_ends(run_dir: Any) -> list[float]:
    """When each model call of a finished run ended (its reply's time in the folder's own call cache),
    sorted; [] without one, and for a run with a ``--cache-dir`` of its own choosing: a cache shared
    with other runs holds their calls too, whose times say nothing about this run."""
    import json
    import sqlite3
    from pathlib import Path

    run_dir = Path(run_dir)
    try:
        ex = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("execution") or {}
    except (OSError, ValueError):
        ex = {}
    if ex.get("cache_dir"):
        return []
    db = run_dir / "cache" / "llm_calls.sqlite"
    if not db.is_file():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return sorted(float(t) for (t,) in con.execute("SELECT created FROM calls"))
    except sqlite3.DatabaseError:
        return []
    finally:
        con.close()


def busy_seconds(ends: list[float]) -> float:
    """Seconds from the first call's end to the last's, pauses longer than ``PAUSE_S`` (a resumed run's
    time between invocations) left out."""
    return sum(b - a for a, b in itertools.pairwise(ends) if b - a <= PAUSE_S)


def measured_wall(run_dir: Any) -> float | None:
    """A finished run's wall time of model calls (``busy_seconds`` of its calls); None without calls."""
    ends = call_ends(run_dir)
    return busy_seconds(ends) if len(ends) > 1 else None


def measured_calls_per_minute(run_dir: Any) -> float | None:
    """Calls a minute a finished run made: its cached calls over their busy time. For a ``local/``
    model this is the machine's pace (its pool of contexts, its cores), which no latency describes."""
    ends = call_ends(run_dir)
    busy = busy_seconds(ends)
    return 60.0 * (len(ends) - 1) / busy if len(ends) > 1 and busy > 0 else None


def predict_local(cells: list[dict[str, Any]], calls_per_minute: float) -> WallTime:
    """Wall time of the cells on a ``local/`` model at a measured ``calls_per_minute``: its pool of
    contexts is busy all along (cells learn one after another), so the calls take calls / pace."""
    n_learn = sum(float(x.get("learn_calls") or 0) for x in cells)
    n_test = sum(float(x.get("test_calls") or 0) for x in cells)
    per = 60.0 / calls_per_minute
    return WallTime(n_learn * per, n_test * per, "calls per minute", per, 0)


@dataclass(frozen=True)
class Pace:
    """How fast a folder's calls go: a served model's ``latency_s`` a call (C calls in flight), or a
    ``local/`` model's measured ``calls_per_minute`` (None when not measured: no wall time then)."""

    latency_s: float | None = None
    calls_per_minute: float | None = None
    local: bool = False
    origin: str = ""


def predict_at(cells: list[dict[str, Any]], pace: Pace, connections: int) -> WallTime | None:
    if pace.local:
        return predict_local(cells, pace.calls_per_minute) if pace.calls_per_minute else None
    return predict(cells, float(pace.latency_s or 0.0), connections)


def wall_lines(groups: list[tuple[str, list[dict[str, Any]], Pace]], connections: list[int]) -> list[str]:
    """``sourcebench estimate``'s wall-time lines: per folder and in all (folders one after another).
    Served folders at each C; ``local/`` folders at their measured pace (C does not apply)."""
    lines = []
    served = [g for g in groups if not g[2].local]
    local = [g for g in groups if g[2].local]
    latencies = sorted({g[2].latency_s for g in served})
    for c in connections if served else []:
        preds = [(label, predict_at(cells, pace, c)) for label, cells, pace in groups]
        known = [(label, w) for label, w in preds if w is not None]
        total = sum(w.total_s for _, w in known)
        at = f"{latencies[0]:g} s a call" if len(latencies) == 1 else "each backend's latency"
        lines.append(f"wall time at C = {c} and {at}: {human(total)} "
                     f"(learning {human(sum(w.learn_s for _, w in known))[6:]}, "
                     f"testing {human(sum(w.test_s for _, w in known))[6:]}; critical-path model, "
                     "harness CPU not counted" + ("; local folders at their measured pace" if local else "") + ")")
        if len(preds) > 1:
            lines += [f"  {label}: {human(w.total_s)} (learning bound by {w.learn_bound})" if w is not None else
                      f"  {label}: no wall time (no measured calls per minute)" for label, w in preds]
    if not served:
        for label, cells, pace in local:
            w = predict_at(cells, pace, 0)
            lines.append(f"wall time of {label} at {pace.calls_per_minute:.3g} calls a minute ({pace.origin}): "
                         f"{human(w.total_s)} (learning {human(w.learn_s)[6:]}, testing {human(w.test_s)[6:]})"
                         if w is not None else
                         f"wall time of {label}: not estimated, a local model's pace is this machine's: pass "
                         "--calls-per-minute N, or --calibration RUN_DIR with a finished run of the model here")
    return lines
