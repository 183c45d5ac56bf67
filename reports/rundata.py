"""A run folder as the reports read it: ``run.json``, the result, failure and usage rows, the cost of
each phase, the declared deviations, the split manifests and the inspect-ai log of each cell.
Read-only; every report is computed from this."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import DataError
from sourcebench.harness.io import iter_jsonl, read_json
from sourcebench.harness.resultrows import RESULT_KEY, iter_result_rows  # noqa: F401 - RESULT_KEY re-exported

from .stats import sort_key
from .text import safe, safe_url

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
    usage = _optional_jsonl(run_dir / "usage.jsonl")
    for u, n in zip(usage, invocations(usage)):
        u["invocation"] = n
    return RunData(
        run_dir=run_dir,
        run=run,
        results=rows,
        usage=usage,
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


PROBE = ("harness", "probe")  # (method, phase) of the endpoint probe every invocation of a run starts with
_CALL_KEY = ("benchmark", "source", "seed", "method", "phase", "stage")


def invocations(usage: list[dict[str, Any]]) -> list[int]:
    """The invocation of the run command that wrote each usage row: usage.jsonl is appended in order
    and every invocation starts with the endpoint probe (``PROBE``); rows before any probe are 0."""
    n, out = 0, []
    for u in usage:
        if (u.get("method"), u.get("phase")) == PROBE:
            n += 1
        out.append(n)
    return out


def replayed_calls(usage: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Per usage row, (calls, tokens) that replay this folder's own earlier live calls from the cache.

    A build interrupted and run again replays the calls it had made from the cache: usage.jsonl then
    holds them once as live (the first invocation) and again as cached (the next). A cached row of a
    later invocation replays, up to their number, the calls (live or cached) of the same cell, phase
    and stage made by earlier invocations; cached calls within one invocation (a repeated prompt, a
    cache shared with another folder) are calls of their own. The invocation is the row's ``invocation`` (set by
    ``load_run`` from the whole file, so that a filtered list keeps it), else counted here."""
    sessions = ([u["invocation"] for u in usage] if all("invocation" in u for u in usage)
                else invocations(usage))
    earlier: dict[tuple, int] = {}  # calls of earlier invocations not yet replayed
    current: dict[tuple, int] = {}  # calls of the invocation being read (live, and cached ones not replays)
    out, last = [], None
    for u, session in zip(usage, sessions):
        if session != last:
            for k, n in current.items():
                earlier[k] = earlier.get(k, 0) + n
            current, last = {}, session
        key = tuple(str(u.get(k)) for k in _CALL_KEY)
        calls = _sum(u.get("calls"))
        if u.get("status") == "live":
            current[key] = current.get(key, 0) + calls
            out.append((0, 0))
        elif u.get("status") == "cached" and calls:
            n = min(calls, earlier.get(key, 0))
            if n:
                earlier[key] -= n
            current[key] = current.get(key, 0) + calls - n
            tokens = _sum(u.get("input_tokens")) + _sum(u.get("output_tokens"))
            out.append((n, round(tokens * n / calls)))
        else:
            out.append((0, 0))
    return out


def usage_cost(usage: list[dict[str, Any]], by: str = "phase") -> dict[str, dict[str, Any]]:
    """``by`` value (phase or stage) -> {calls, calls_live, tokens, tokens_live, failed, seconds,
    replayed}; logical calls = live + cached, each call once: a cached replay of a call this folder
    already made live (``replayed_calls``) is counted under ``replayed``, not again in ``calls``;
    seconds = model time of the live calls, summed over calls. ``usage`` in file order."""
    out: dict[str, dict[str, Any]] = {}
    for u, (rep_calls, rep_tokens) in zip(usage, replayed_calls(usage)):
        c = out.setdefault(
            str(u.get(by) or "other"),
            {**dict.fromkeys(("calls", "calls_live", "tokens", "tokens_live", "failed"), 0), "seconds": 0.0},
        )
        calls = _sum(u.get("calls"))
        tokens = _sum(u.get("input_tokens")) + _sum(u.get("output_tokens"))
        status = u.get("status")
        c.setdefault("reasoning", 0)
        c.setdefault("replayed", 0)
        calls, tokens = calls - rep_calls, tokens - rep_tokens
        c["replayed"] += rep_calls
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


MODEL_SETTINGS = ("base_url", "temperature", "max_tokens", "seed", "context_window", "reasoning_effort",
                  "reasoning_tokens")
EMBEDDER_SETTINGS = ("model", "revision", "dim", "dimensions", "base_url")


def describe_settings(settings: Any, keys: tuple[str, ...]) -> str:
    """'name (k=v, ...)' from a whitelist of keys; never the whole dict (it could hold a key)."""
    if settings is None or settings == {}:
        return "none"
    if not isinstance(settings, dict):
        return safe(settings)
    parts = [
        f"{k}={safe_url(settings[k]) if k == 'base_url' else safe(settings[k])}"
        for k in keys
        if settings.get(k) is not None
    ]
    name = safe(settings.get("name") or settings.get("model") or "unnamed")
    return f"{name} ({', '.join(parts)})" if parts else name


def deviations(run: dict[str, Any]) -> list[tuple[str, str]]:
    """(method or benchmark, deviation) pairs declared in run.json's methods and benchmark, whatever shape each
    entry has."""
    out = []
    bench = run.get("benchmark")
    for m in [*(run.get("methods") or []), *([bench] if isinstance(bench, dict) else [])]:
        if not isinstance(m, dict):
            continue
        dev = m.get("deviations")
        if isinstance(dev, dict):
            items = [f"{k}: {v}" for k, v in dev.items()]
        elif isinstance(dev, list):
            items = dev
        else:
            items = [dev] if dev else []
        out += [(safe(m.get("name")), safe(d)) for d in items if d not in (None, "")]
    return out


def deviations_by_text(devs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """deviation -> the methods declaring it, in first-seen order (variants of one method share most)."""
    out: dict[str, list[str]] = {}
    for m, d in devs:
        if m not in out.setdefault(d, []):
            out[d].append(m)
    return out


def split_manifests(data: RunData) -> tuple[list[list[str]], list[str]]:
    """The run's split manifests: sizes and realised guidance share per (benchmark, source, seed), and the
    splits whose share is off the target by more than 10 points."""
    from sourcebench.harness.splits import guidance_share, load_manifest, share_warning

    rows, warnings = [], []
    for path in sorted((data.run_dir / "splits").glob("**/seed*.json")):
        try:
            sp = load_manifest(path)
        except DataError:
            continue  # an unreadable manifest is the runner's to report; the table lists the readable ones
        w = share_warning(sp)
        rows.append([safe(sp.benchmark), safe(sp.source_id), safe(sp.seed), str(len(sp.guidance_ids)),
                     str(len(sp.test_ids)), f"{100 * guidance_share(sp):.1f}" + (" (off target)" if w else "")])
        if w:
            warnings.append(w)
    return rows, warnings


def failure_kind(reason: Any) -> str:
    """The part of a failure message before its first ':' (e.g. 'context_overflow'), masked."""
    text = safe(reason).split(":", 1)[0].strip() or "unspecified"
    return text[:60]




@dataclass
class CellLog:
    """The inspect-ai log of one test cell (method, source, split seed), as its header says."""

    path: Path
    method: str
    version: str
    source: str
    seed: str
    status: str
    samples: int


def cell_logs(run_dir: Path) -> list[CellLog]:
    """The test phase's inspect-ai logs (``<run>/logs/*.eval``) with the cell each belongs to; a log
    that cannot be read is listed with ``status`` saying so."""
    from inspect_ai.log import read_eval_log

    logs = Path(run_dir) / "logs"
    out = []
    for p in sorted(logs.glob("*.eval")) if logs.is_dir() else []:
        try:
            h = read_eval_log(str(p), header_only=True)
            meta = h.eval.metadata or {}
            method = meta.get("method") or {}
            out.append(CellLog(p, str(method.get("name", "?")), str(method.get("version", "")),
                               str(meta.get("source", "?")), str(meta.get("seed", "?")), str(h.status),
                               int(h.results.total_samples if h.results else 0)))
        except Exception as e:  # noqa: BLE001 - an unreadable log is listed, not fatal
            out.append(CellLog(p, "?", "", "?", "?", f"unreadable ({type(e).__name__})", 0))
    return out
