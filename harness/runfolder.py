"""A run's output folder: its lock, its append-only files and what a resume reads back from them.

``results.jsonl`` (one row per scored task), ``usage.jsonl`` and ``failures.jsonl`` (call counters)
are only ever appended to, by several processes of one run at most (``--test-processes``, Ray), all
under the lock of the process that started the run. A crash can leave a half-written last line: it
is cut before the next append. Rows of another version or code of a method are set aside, never
mixed with the current ones, and the cells that lost too many calls are reported as degraded.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .errors import ConfigError, DataError, SourceBenchError
from .health import run_health
from .io import append_jsonl, atomic_write_text, read_json, read_jsonl
from .method import Method
from .resultrows import check_epochs_agree, read_result_rows

Log = Callable[[str], None]


def row_key(r: dict[str, Any]) -> tuple:
    """A result row's identity: one row per (benchmark, source, method, seed, task)."""
    return (r["benchmark"], r["source"], r["method"], int(r["seed"]), str(r["task_id"]))


def move_rows(path: Path, to: Path, rows: list[dict[str, Any]], moved: list[dict[str, Any]]) -> None:
    """Append ``moved`` (a subset of ``rows``, the lines of ``path``) to ``to``, then rewrite ``path``
    without them; appended first, so a crash in between duplicates rows but never loses one."""
    if not moved:
        return
    append_jsonl(to, moved)
    gone = {id(r) for r in moved}
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows
                                    if id(r) not in gone))


class RunLock:
    """An exclusive lock on the output folder: two runs must not interleave their appends."""

    def __init__(self, out: Path):
        self.path = out / ".lock"
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise SourceBenchError(f"{self.path.parent}: another sourcebench run is using this folder") from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, str(os.getpid()).encode())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


class RunFolder:
    """The files of one run folder and the operations a run (or a resume) makes on them."""

    def __init__(self, out: Path):
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"--out {self.out}: not a directory")
        self.results_path = self.out / "results.jsonl"
        self.usage_path = self.out / "usage.jsonl"
        self.failures_path = self.out / "failures.jsonl"
        self.run_json = self.out / "run.json"

    def lock(self) -> RunLock:
        return RunLock(self.out)

    # -- appends ---------------------------------------------------------------------------------
    def append_counters(self, usage: list[dict[str, Any]], failures: list[dict[str, Any]]) -> None:
        """Call counters: no fsync (a killed process loses nothing; see append_jsonl)."""
        append_jsonl(self.usage_path, usage, durable=False)
        append_jsonl(self.failures_path, failures, durable=False)

    def append_row(self, row: dict[str, Any]) -> None:
        append_jsonl(self.results_path, [row])

    # -- what a resume reads ---------------------------------------------------------------------
    def repair_torn_tail(self) -> None:
        """Drop a final line left half-written by a crash, so appends start on a clean line."""
        p = self.results_path
        if p.exists() and p.stat().st_size:
            data = p.read_bytes()
            if not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                with open(p, "r+b") as f:
                    f.truncate(cut)

    def done_rows(self, epochs: int = 1) -> set:
        """Keys of the rows already scored, each row checked (types, ranges, one row per task, the run's
        answers per task): a malformed or duplicated row, or rows of another ``--epochs``, stop the run
        naming the file instead of counting as done."""
        rows = read_result_rows(self.results_path) if self.results_path.exists() else []
        check_epochs_agree(self.results_path, rows, epochs)
        return {row_key(r) for r in rows}

    def has_results(self) -> bool:
        return any(self.out.glob("results*.jsonl")) and any(
            p.stat().st_size for p in self.out.glob("results*.jsonl"))

    def previous(self, bench: str, model: str, log: Log) -> dict[str, Any] | None:
        """The ``run.json`` of an earlier run into this folder, or None. A folder of another benchmark or
        model is refused, unless it scored nothing (a half-made folder never blocks the corrected
        command: its run record and counters go, its caches and artifacts, keyed, stay)."""
        path = self.run_json
        if not path.exists():
            return None
        prev = read_json(path)
        if not isinstance(prev, dict):
            raise DataError(f"{path}: expected a JSON object, got {type(prev).__name__}; move the file away "
                            "if this is not a run folder")
        pb = (prev.get("benchmark") or {}).get("name")
        pm = (prev.get("model") or {}).get("name")
        if ((pb and pb != bench) or (pm and pm != model)) and not self.has_results():
            for f in (path, self.usage_path, self.failures_path):
                f.unlink(missing_ok=True)
            if pb != bench:
                shutil.rmtree(self.out / "splits", ignore_errors=True)
            log(f"{self.out}: holds no results of its earlier {pb} run with {pm}; starting this run there")
            return None
        if pb and pb != bench:
            raise ConfigError(f"{path}: this folder holds a {pb} run; use another --out for {bench}")
        if pm and pm != model:
            raise ConfigError(f"{path}: this folder holds a run with model {pm}; use another --out for {model}")
        return prev

    def degraded_cells(self, max_failure_share: float) -> list[Any]:
        """The cells of this folder whose build or test phase lost more than ``max_failure_share``."""
        def rows(p: Path) -> list[dict[str, Any]]:
            return read_jsonl(p, tolerate_torn_tail=True) if p.exists() else []

        return [c for c in run_health(self.out, rows(self.results_path), rows(self.failures_path), max_failure_share,
                                      usage=rows(self.usage_path))
                if c.degraded]

    def set_aside_stale_rows(self, methods: Iterable[Method], codes: dict[str, str], rerun: Iterable[str],
                             log: Log) -> None:
        """Rows a method wrote under another version of itself, or under other code with the same version
        (an edited prompt; ``codes``: each method's code hash), or of a method named in ``rerun``, move to
        ``results.stale.jsonl`` (kept, not reported) and are run again, so a folder never mixes a method's
        code; whatever the new code asks exactly as before comes from the call cache."""
        p = self.results_path
        if not p.exists():
            return
        methods = list(methods)
        versions = {m.name: str(m.version) for m in methods}
        rerun = set(rerun)

        def why(r: dict[str, Any]) -> str | None:
            m = r.get("method")
            if m not in versions:
                return None
            if m in rerun:
                return "rerun"
            if str(r.get("method_version")) != versions[m]:
                return "version"
            if r.get("method_code") and r["method_code"] != codes[m]:  # rows written before hashes: unknown
                return "code"
            return None

        rows = read_jsonl(p)
        stale = [r for r in rows if why(r)]
        if not stale:
            return
        move_rows(p, self.out / "results.stale.jsonl", rows, stale)
        # their usage and failures too, so the cost tables count each call of the current version once;
        # learning of sub-artifacts that outlive the version (a method's shared_stages) stays billed
        shared = {m.name: m.shared_stages for m in methods}

        def old_version(r: dict[str, Any]) -> bool:
            m = r.get("method")
            return m in names and not (r.get("phase") == "learn" and str(r.get("stage", "")).startswith(shared[m]))

        names = {r["method"] for r in stale}
        for counters in (self.usage_path, self.failures_path):
            if counters.exists():
                rows = read_jsonl(counters, tolerate_torn_tail=True)
                move_rows(counters, counters.with_suffix(".stale.jsonl"), rows, [r for r in rows if old_version(r)])
        moved = "moved to results.stale.jsonl (usage and failures to usage/failures.stale.jsonl)"
        for (m, v, c, reason), n in sorted(Counter((r["method"], str(r.get("method_version")), r.get("method_code"),
                                                   why(r)) for r in stale).items(), key=str):
            if reason == "version":
                log(f"{m}: {n} result row(s) of method version {v} {moved}; they are run again with version "
                    f"{versions[m]}")
            elif reason == "code":
                log(f"[yellow]{m}: code changed (hash {c} -> {codes[m]}) but version {v} did not: re-learning "
                    f"and re-testing; {n} row(s) of the old code {moved}[/]")
            else:
                log(f"{m}: --rerun: {n} result row(s) {moved}; learning and testing again")
