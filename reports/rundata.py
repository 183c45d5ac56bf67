"""A run folder as the reports read it: ``run.json``, the result, failure and usage rows, and the
cost of each phase. Read-only; every report is computed from this."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import DataError
from sourcebench.harness.io import iter_jsonl, read_json
from sourcebench.harness.resultrows import RESULT_KEY, iter_result_rows  # noqa: F401 - RESULT_KEY re-exported

from .stats import sort_key

PHASES = ("learn", "answer", "judge")


@dataclass
class RunData:
    """The parsed files of one run folder; optional files that are absent are empty lists."""

    run_dir: Path
    run: dict[str, Any]
    results: list[dict[str, Any]]
    usage: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)


def _optional_jsonl(path: Path) -> list[dict[str, Any]]:
    """Counters and failure logs are appended like results, so a torn last line is tolerated too."""
    return [row for _, row in iter_jsonl(path, tolerate_torn_tail=True)] if path.exists() else []


def load_run(run_dir: str | Path) -> RunData:
    """Read a run folder. Every result row is checked (types, ranges) and a second row for the same
    (benchmark, source, method, seed, task) is an error naming both lines: a run appends one row per
    task, so a duplicate is an edit or a copy, and which of the two counts is not for a report to guess.
    """
    run_dir = Path(run_dir)
    run_path, results_path = run_dir / "run.json", run_dir / "results.jsonl"
    if not run_path.is_file():
        raise DataError(f"{run_path}: file not found (not a run folder?)")
    run = read_json(run_path)
    if not isinstance(run, dict):
        raise DataError(f"{run_path}: expected a JSON object, got {type(run).__name__}")
    if not results_path.is_file() and not run.get("unavailable"):  # an unavailable benchmark scores nothing
        raise DataError(f"{results_path}: file not found (no task has been scored yet?)")
    rows = [row for _, row in iter_result_rows(results_path)] if results_path.is_file() else []
    return RunData(
        run_dir=run_dir,
        run=run,
        results=rows,
        usage=_optional_jsonl(run_dir / "usage.jsonl"),
        failures=_optional_jsonl(run_dir / "failures.jsonl"),
    )


def _sum(v: Any) -> int:
    return int(v or 0)


def with_failures(cost: dict[str, dict[str, Any]], fails: list[dict[str, Any]], by: str = "phase"
                   ) -> dict[str, dict[str, Any]]:
    """Failed calls per phase or stage counted from failures.jsonl: besides the calls that got no
    reply (usage status "failed"), it holds the replies that stayed invalid after the structured-output
    retry, which the method could not use either. The Failures table lists the same entries."""
    counts = Counter(str(f.get(by) or "other") for f in fails)
    for key, n in counts.items():
        c = cost.setdefault(key, {**dict.fromkeys(("calls", "calls_live", "tokens", "tokens_live"), 0),
                                  "failed": 0, "seconds": 0.0})
        c["failed"] = max(c["failed"], n)  # never fewer than the calls usage.jsonl counted as failed
    return cost


def usage_cost(usage: list[dict[str, Any]], by: str = "phase") -> dict[str, dict[str, Any]]:
    """``by`` value (phase or stage) -> {calls, calls_live, tokens, tokens_live, failed, seconds};
    logical = live + cached; seconds = model time of the live calls, summed over calls."""
    out: dict[str, dict[str, Any]] = {}
    for u in usage:
        c = out.setdefault(
            str(u.get(by) or "other"),
            {**dict.fromkeys(("calls", "calls_live", "tokens", "tokens_live", "failed"), 0), "seconds": 0.0},
        )
        calls = _sum(u.get("calls"))
        tokens = _sum(u.get("input_tokens")) + _sum(u.get("output_tokens"))
        status = u.get("status")
        c.setdefault("reasoning", 0)
        if status == "failed":
            c["failed"] += calls
        elif status in ("live", "cached"):
            c["calls"] += calls
            c["tokens"] += tokens
            c["reasoning"] += _sum(u.get("reasoning_tokens"))
            if status == "live":
                c["calls_live"] += calls
                c["tokens_live"] += tokens
                c["seconds"] += float(u.get("seconds") or 0.0)
    return out


def benchmarks(data: RunData) -> list[str]:
    declared = data.run.get("benchmark")
    if isinstance(declared, dict):  # run.json stores the benchmark's description
        declared = declared.get("name")
    names = set(declared if isinstance(declared, list) else [declared] if declared else [])
    names |= {r["benchmark"] for r in data.results}
    names |= {u["benchmark"] for u in data.usage if u.get("benchmark")}
    return sorted(names, key=sort_key)


def methods_of(data: RunData, benchmark: str) -> list[str]:
    """Methods configured in run.json plus any that left results or usage for this benchmark."""
    names = [m.get("name") for m in data.run.get("methods") or [] if isinstance(m, dict)]
    names += [r["method"] for r in data.results if r["benchmark"] == benchmark]
    names += [u.get("method") for u in data.usage if u.get("benchmark") == benchmark]
    # "harness" (the endpoint probe) and "audit" are overheads of the run, not methods under comparison
    return list(dict.fromkeys(n for n in names if n and n not in ("harness", "audit")))


def unavailable_sources(data: RunData, benchmark: str) -> list[dict[str, str]]:
    """The run's ``unavailable`` records (sources that could not be evaluated, with the reason)."""
    declared = data.run.get("benchmark")
    name = declared.get("name") if isinstance(declared, dict) else declared
    recs = data.run.get("unavailable") or []
    return [r for r in recs if isinstance(r, dict)] if name == benchmark else []


def missing_rows(results: list[dict[str, Any]], benchmark: str | None, method: str) -> tuple[int, int]:
    """(rows missing, rows planned) for a method: planned are the (source, seed, task) rows that any method
    of the folder scored in the sources this method answered (every method of a run folder tests the same
    split tasks); missing are those it has no row for, e.g. after an inspect task errored."""
    results = [r for r in results if benchmark is None or r["benchmark"] == benchmark]
    own = {(r["source"], r["seed"], r["task_id"]) for r in results if r["method"] == method}
    sources = {k[0] for k in own}
    planned = {(r["source"], r["seed"], r["task_id"]) for r in results if r["source"] in sources}
    return len(planned - own), len(planned)
