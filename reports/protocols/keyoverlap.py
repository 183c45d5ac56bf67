"""Key-overlap groups (seed 002, E2 "the key-coverage gradient"), for every method of a run.

Test tasks are grouped by how many of their *keys* the guidance tasks of the same split covered,
and each method's accuracy (and actions, for agent methods) is reported per group: a method that
learns from guidance should gain most where the keys overlap and nothing where none does.

A task's keys are what its question names (``KEYS_DEFINITION``), read through the benchmark's
``task_keys`` hook (``sourcebench.harness.benchmark.Benchmark.task_keys``), never its answer: seed 002's keys are
the named keys a reader's search uses (a person and a relation, or an attribute value). PhantomWiki
names them in the question text (the people it names that are article titles of the universe, the
attribute value of "the person whose A is V", its relation and attribute words); a benchmark that
names none (the default hook finds no ``named_keys`` in the task metadata) is reported as unavailable.

A key is *covered* when a guidance task used to learn that split's artifacts names it too. Groups:
"all" (every key covered), "some", "none"; the paper's questions name two keys (both / one / none),
ours any number. The paper's fourth group (the trained questions themselves) does not exist here:
guidance and test tasks are disjoint by construction. A group with fewer than ``MIN_GROUP_TASKS``
distinct test tasks gets no interval, difference or p (too small to compare), and a benchmark whose
test tasks nearly all land in one group (``GRADIENT_MAX_SHARE``) is said to be too small for the
gradient: its universe repeats the same named keys across templates.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from sourcebench.harness.config import recorded_data_dir
from sourcebench.harness.data import Split, Task
from sourcebench.harness.errors import SourceBenchError
from sourcebench.harness.planner import limit_tasks
from sourcebench.harness.splits import load_manifest

from ..rundata import RunData, benchmarks, methods_of
from ..stats import accuracy_ci, macro_accuracy, paired_test

GROUPS = ("all", "some", "none")
NO_KEYS = "no keys"
MIN_GROUP_TASKS = 5  # distinct test tasks a group needs for an interval, a difference and a p-value
GRADIENT_MAX_SHARE = 0.9  # a group holding more of the test tasks than this leaves no gradient to read
N_BOOT = 2000
# Answer metadata fields that count an agent's actions (tool calls / rounds), first one present wins.
ACTION_FIELDS = ("actions", "n_actions", "num_actions", "tool_calls", "rounds", "n_rounds", "steps")

KEYS_DEFINITION = (
    "keys: what the question names, never its answer (seed 002: the named keys a reader's search uses), from "
    "the benchmark's task_keys; PhantomWiki: each person the question names (an article title), the attribute "
    "value it names (hobby = shogi) and its relation and attribute words; a key is covered when a guidance task "
    "of the split names it too; all = every key covered, some = at least one, none = no key"
)

Key = str


def task_keys(bench: Any, task: Task) -> list[Key] | None:
    """A task's named keys through the benchmark's hook; [] when it names none, None when unknown."""
    hook = getattr(bench, "task_keys", None)
    keys = hook(task) if callable(hook) else None
    return None if keys is None else [str(k) for k in keys]


def group_of(keys: list[Key], covered: set[Key]) -> str:
    if not keys:
        return NO_KEYS
    n = sum(1 for k in keys if k in covered)
    return "all" if n == len(keys) else "some" if n else "none"


def split_groups(bench: Any, guidance: list[Task], tests: list[Task]) -> dict[str, str]:
    """task id -> group, for the test tasks of one split given the guidance tasks that were learned from."""
    covered: set[Key] = set()
    for t in guidance:
        covered |= set(task_keys(bench, t) or [])
    out = {}
    for t in tests:
        keys = task_keys(bench, t)
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


def gradient_note(tasks_by_group: dict[str, int]) -> str:
    """Why this benchmark's groups show no gradient, or '' when at least two groups can be compared."""
    keyed = {g: n for g, n in tasks_by_group.items() if g in GROUPS and n}
    total = sum(keyed.values())
    if not total:
        return ""
    top, n_top = max(keyed.items(), key=lambda kv: kv[1])
    comparable = [g for g, n in keyed.items() if n >= MIN_GROUP_TASKS]
    lead = (f"Too small for the key-coverage gradient: {n_top} of {total} test tasks ({100 * n_top / total:.0f} %) "
            f"are in group '{top}' and {len(comparable)} group(s) reach {MIN_GROUP_TASKS} tasks")
    if n_top / total > GRADIENT_MAX_SHARE:
        return (f"{lead}; the questions of this universe name the same few keys, so the guidance tasks cover "
                "nearly every test task's keys (a larger universe spreads them).")
    if len(comparable) < 2:
        return f"{lead}; too few test tasks per group to compare groups."
    return ""


# -- computing the groups of a run ----------------------------------------------------------------


def _benchmark(data: RunData, name: str, data_dir: Path | None) -> Any:
    from sourcebench.harness.registry import get_benchmark_class

    meta = data.run.get("benchmark") or {}
    options = meta.get("options") if isinstance(meta, dict) else None
    return get_benchmark_class(name)(data_dir=data_dir or recorded_data_dir(data.run), options=options or {})


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
    out: dict[tuple, str] = {}
    for source_id, seed in cells:
        if source_id not in tasks:
            tasks[source_id] = {t.id: t for t in bench.load_tasks(source_id)}
        split = splits.get((source_id, seed))
        if split is None:
            raise SourceBenchError(f"{data.run_dir}/splits/{benchmark}/{source_id}: no manifest for seed {seed}")
        by_id = tasks[source_id]
        guidance = limit_tasks([by_id[i] for i in split.guidance_ids if i in by_id], glimit, seed)
        tested = sorted({r["task_id"] for r in data.results if r["benchmark"] == benchmark
                         and r["source"] == source_id and int(r["seed"]) == seed})
        tests = [by_id[i] for i in tested if i in by_id]
        for tid, g in split_groups(bench, guidance, tests).items():
            out[(source_id, seed, tid)] = g
    return out


def _cell(rows: list[dict[str, Any]], base: dict[tuple, dict[str, Any]] | None, seed: int = 0) -> dict[str, Any]:
    acts = [a for a in (row_actions(r) for r in rows) if a is not None]
    n_tasks = len({(r["source"], r["task_id"]) for r in rows})
    cell: dict[str, Any] = {"n": len(rows), "n_tasks": n_tasks, "accuracy": macro_accuracy(rows),
                            "actions": float(np.mean(acts)) if acts else None,
                            "too_small": n_tasks < MIN_GROUP_TASKS}
    if cell["too_small"]:
        return cell
    cell["ci_lo"], cell["ci_hi"] = accuracy_ci(rows)
    paired = [base[k] for k in (_key(r) for r in rows) if k in base] if base is not None else []
    if paired:
        t = paired_test(rows, paired, seed=seed, n_boot=N_BOOT)
        cell.update(delta_pp=None if t["mean_diff"] is None else 100.0 * t["mean_diff"], p_value=t["p_value"],
                    p_mc_se=t["p_mc_se"], n_pairs=t["n_pairs"], n_groups=t["n_groups"],
                    delta_lo=None if t["ci_lo"] is None else 100.0 * t["ci_lo"],
                    delta_hi=None if t["ci_hi"] is None else 100.0 * t["ci_hi"], untested=t.get("reason"))
    return cell


def _key(r: dict[str, Any]) -> tuple:
    return (r["source"], int(r["seed"]), r["task_id"])


def compute(data: RunData, baseline: str = "hybrid_rag", data_dir: Path | None = None,
            seed: int = 0) -> dict[str, Any]:
    """Per benchmark: group sizes, and per method and group: n, accuracy [CI], Δ vs its reference, p, actions.

    The reference is the method's own zero-learning variant (``Method.zero_learning_variant``) when the
    run has it, as in seed 002's gradient and the break-even protocol; else the baseline (said). Δ is the
    paired statistic on the same (source, seed, task) items of the group, with the leaderboard's paired
    test (each task once, seeds averaged, groups as clusters; seeded by ``seed``), unadjusted, with the
    number of paired tasks; groups with fewer than ``MIN_GROUP_TASKS`` distinct tasks get neither interval
    nor Δ nor p.
    """
    from .breakeven import zero_learning_variant

    out: dict[str, Any] = {"protocol": "key-overlap", "definition": KEYS_DEFINITION, "baseline": baseline,
                           "min_group_tasks": MIN_GROUP_TASKS, "benchmarks": []}
    for bench in benchmarks(data):
        entry: dict[str, Any] = {"benchmark": bench}
        try:
            groups = benchmark_groups(data, bench, data_dir)
        except SourceBenchError as e:
            out["benchmarks"].append({**entry, "status": "unavailable", "reason": f"benchmark data: {e}"})
            continue
        if not groups or all(g == NO_KEYS for g in groups.values()):
            out["benchmarks"].append({**entry, "status": "unavailable", "reason":
                                      f"{bench} questions name no keys (its adapter's task_keys gives none)"})
            continue
        rows = [r for r in data.results if r["benchmark"] == bench]
        ran = {r["method"] for r in rows}
        methods = []
        for m in methods_of(data, bench):
            variant = zero_learning_variant(m)
            ref = variant if variant in ran and variant != m else baseline if m != baseline else None
            base = {_key(r): r for r in rows if r["method"] == ref} if ref else None
            by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in rows:
                if r["method"] == m:
                    by_group[groups.get(_key(r), NO_KEYS)].append(r)
            if by_group:
                methods.append({"method": m, "reference": ref,
                                "reference_kind": "zero-learning variant" if ref == variant else "baseline",
                                "groups": {g: _cell(by_group[g], base, seed)
                                           for g in (*GROUPS, NO_KEYS) if by_group.get(g)}})
        sizes = Counter((k[0], k[2], g) for k, g in groups.items())  # distinct tasks, not task x seed
        tasks_by_group = dict(Counter(g for _, _, g in sizes))
        out["benchmarks"].append({**entry, "status": "ok", "methods": methods,
                                  "tasks_by_group": tasks_by_group,
                                  "rows_by_group": dict(Counter(groups.values())),
                                  "note": gradient_note(tasks_by_group)})
    return out
