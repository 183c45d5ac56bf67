"""Key-overlap groups (seed 002, E2 "the key-coverage gradient"), for every method of a run.

Test tasks are grouped by how many of their *keys* the guidance tasks of the same split covered,
and each method's accuracy (and actions, for agent methods) is reported per group: a method that
learns from guidance should gain most where the keys overlap and nothing where none does.

Keys of a task (``KEYS_DEFINITION``):

* PhantomWiki: the first and the last entity of the gold reasoning path (``Task.metadata
  ["gold_path"]``, from the Prolog query and every solution trace), i.e. the named start of the
  question and the entity it ends on. A key is the *set* of people that step takes over all
  solution traces (usually one person at the start, sometimes several at the end). Seed 002 does
  not spell out its PhantomWiki keys; this is our reading of "entities on the gold path", and it
  matches its KBGym questions, which name two keys each.
* APIBench: one key, the source element(s) of the gold API record. Splits are grouped by API,
  so the gold API of a test task is never a guidance task's: every task lands in "none" unless
  two records document the same API call (reported as measured, not adjusted).
* Other benchmarks name no gold evidence: the protocol reports them as unavailable.

A key is *covered* when every entity of it is a key entity of at least one guidance task used to
learn that split's artifacts. Groups: "both" (every key covered), "one" (some), "none"; a task
whose first and last entity coincide (or an APIBench task) has one key and lands in both or none.
The paper's fourth group (the trained questions themselves) does not exist here: guidance and
test tasks are disjoint by construction.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from harness.data import Source, Split, Task, fingerprint
from harness.errors import SourceBenchError
from harness.runner import limit_tasks
from harness.splits import load_manifest

from ..leaderboard import RunData, _benchmarks, _methods
from ..stats import macro_accuracy, paired_test
from .session import _data_dir_of

GROUPS = ("both", "one", "none")
NO_KEYS = "no keys"
# Answer metadata fields that count an agent's actions (tool calls / rounds), first one present wins.
ACTION_FIELDS = ("actions", "n_actions", "num_actions", "tool_calls", "rounds", "n_rounds", "steps")

KEYS_DEFINITION = (
    "keys: PhantomWiki, the first and last entity of the gold path (each the set of people that step takes "
    "over all solution traces); APIBench, the gold API's element; a key is covered when all its entities are "
    "keys of the split's guidance tasks; both = every key covered, one = some, none = no key"
)

SPLIT_NOTES = {
    "apibench": "APIBench splits are grouped by API, so a test task's gold API is never a guidance task's key.",
}

Key = frozenset[str]


def phantomwiki_keys(task: Task) -> list[Key] | None:
    path = task.metadata.get("gold_path")
    if not isinstance(path, list):
        return None
    steps = [frozenset(str(x) for x in step) for step in path if step]
    return list(dict.fromkeys([steps[0], steps[-1]])) if steps else []


def apibench_keys(task: Task, source: Source) -> list[Key]:
    """The element(s) documenting the gold API: same rendered record, else same name and call."""
    from adapters.apibench import render_api

    ref = task.reference if isinstance(task.reference, dict) else {}
    fp = fingerprint(render_api(ref)) if ref else ""
    ids = {e.id for e in source.elements if fp and e.fingerprint == fp}
    if not ids:
        name, call = str(ref.get("api_name") or ""), str(ref.get("api_call") or "")
        ids = {e.id for e in source.elements
               if name and e.metadata.get("api_name") == name and (not call or f"api_call: {call}" in e.text)}
    return [frozenset(ids)] if ids else []


def task_keys(benchmark: str, task: Task, source: Source | None) -> list[Key] | None:
    """A task's keys, [] when it has none (e.g. a gold path through no entity), None when unknown."""
    keys = phantomwiki_keys(task)
    if keys is not None:
        return keys
    if benchmark == "apibench" and source is not None:
        return apibench_keys(task, source)
    return None


def group_of(keys: list[Key], covered: set[str]) -> str:
    if not keys:
        return NO_KEYS
    n = sum(1 for k in keys if k <= covered)
    return "both" if n == len(keys) else "one" if n else "none"


def split_groups(benchmark: str, guidance: list[Task], tests: list[Task], source: Source | None) -> dict[str, str]:
    """task id -> group, for the test tasks of one split given the guidance tasks that were learned from."""
    covered: set[str] = set()
    for t in guidance:
        for k in task_keys(benchmark, t, source) or []:
            covered |= k
    out = {}
    for t in tests:
        keys = task_keys(benchmark, t, source)
        out[t.id] = NO_KEYS if keys is None else group_of(keys, covered)
    return out


def row_actions(row: dict[str, Any]) -> float | None:
    meta = row.get("metadata") or {}
    for f in ACTION_FIELDS:
        v = meta.get(f)
        if isinstance(v, list):
            return float(len(v))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


# -- computing the groups of a run ----------------------------------------------------------------


def _benchmark(data: RunData, name: str, data_dir: Path | None) -> Any:
    from harness.registry import get_benchmark_class

    meta = data.run.get("benchmark") or {}
    options = meta.get("options") if isinstance(meta, dict) else None
    return get_benchmark_class(name)(data_dir=data_dir or _data_dir_of(data.run), options=options or {})


def _splits(run_dir: Path, benchmark: str) -> dict[tuple[str, int], Split]:
    out = {}
    for path in sorted((run_dir / "splits" / benchmark).glob("*/seed*.json")):
        sp = load_manifest(path)
        out[(sp.source_id, int(sp.seed))] = sp
    return out


def benchmark_groups(data: RunData, benchmark: str, data_dir: Path | None) -> dict[tuple, str]:
    """(source, seed, task_id) -> group for every result row of the benchmark."""
    bench = _benchmark(data, benchmark, data_dir)
    splits = _splits(data.run_dir, benchmark)
    glimit = data.run.get("guidance_limit")
    cells = sorted({(r["source"], int(r["seed"])) for r in data.results if r["benchmark"] == benchmark},
                   key=lambda c: (str(c[0]), c[1]))
    tasks: dict[str, dict[str, Task]] = {}
    sources: dict[str, Source | None] = {}
    out: dict[tuple, str] = {}
    for source_id, seed in cells:
        if source_id not in tasks:
            tasks[source_id] = {t.id: t for t in bench.load_tasks(source_id)}
            sources[source_id] = bench.load_source(source_id) if benchmark == "apibench" else None
        split = splits.get((source_id, seed))
        if split is None:
            raise SourceBenchError(f"{data.run_dir}/splits/{benchmark}/{source_id}: no manifest for seed {seed}")
        by_id = tasks[source_id]
        guidance = limit_tasks([by_id[i] for i in split.guidance_ids if i in by_id], glimit, seed)
        tested = sorted({r["task_id"] for r in data.results if r["benchmark"] == benchmark
                         and r["source"] == source_id and int(r["seed"]) == seed})
        tests = [by_id[i] for i in tested if i in by_id]
        for tid, g in split_groups(benchmark, guidance, tests, sources[source_id]).items():
            out[(source_id, seed, tid)] = g
    return out


def _cell(rows: list[dict[str, Any]], base: dict[tuple, dict[str, Any]], is_baseline: bool) -> dict[str, Any]:
    acts = [a for a in (row_actions(r) for r in rows) if a is not None]
    cell: dict[str, Any] = {"n": len(rows), "accuracy": macro_accuracy(rows),
                            "actions": float(np.mean(acts)) if acts else None}
    paired = [base[k] for k in (_key(r) for r in rows) if k in base]
    if not is_baseline and paired:
        t = paired_test(rows, paired)
        cell.update(delta_pp=100.0 * float(t["mean_diff"] or 0.0), p_value=t["p_value"], n_pairs=t["n_pairs"])
    return cell


def _key(r: dict[str, Any]) -> tuple:
    return (r["source"], int(r["seed"]), r["task_id"])


def compute(data: RunData, baseline: str = "hybrid_rag", data_dir: Path | None = None) -> dict[str, Any]:
    """Per benchmark: group sizes, and per method and group: n, accuracy, Δ vs baseline, actions.

    Δ is the paired mean difference against the baseline on the same (source, seed, task) items of
    the group, with the leaderboard's paired test (McNemar or sign-flip permutation), unadjusted.
    """
    out: dict[str, Any] = {"protocol": "key-overlap", "definition": KEYS_DEFINITION, "baseline": baseline,
                           "benchmarks": []}
    for bench in _benchmarks(data):
        entry: dict[str, Any] = {"benchmark": bench}
        try:
            groups = benchmark_groups(data, bench, data_dir)
        except SourceBenchError as e:
            out["benchmarks"].append({**entry, "status": "unavailable", "reason": f"benchmark data: {e}"})
            continue
        if not groups or all(g == NO_KEYS for g in groups.values()):
            out["benchmarks"].append({**entry, "status": "unavailable", "reason":
                                      f"{bench} tasks name no gold path or gold evidence, so they have no keys"})
            continue
        rows = [r for r in data.results if r["benchmark"] == bench]
        base = {_key(r): r for r in rows if r["method"] == baseline}
        methods = []
        for m in _methods(data, bench):
            by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in rows:
                if r["method"] == m:
                    by_group[groups.get(_key(r), NO_KEYS)].append(r)
            if by_group:
                methods.append({"method": m, "groups": {g: _cell(by_group[g], base, m == baseline)
                                                        for g in (*GROUPS, NO_KEYS) if by_group.get(g)}})
        sizes = Counter((k[0], k[2], g) for k, g in groups.items())  # distinct tasks, not task x seed
        note = SPLIT_NOTES.get(bench, "")
        out["benchmarks"].append({**entry, "status": "ok", "methods": methods, "note": note,
                                  "tasks_by_group": dict(Counter(g for _, _, g in sizes))})
    return out
