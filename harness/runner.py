"""The experiment runner: splits -> learn (once per artifact) -> frozen artifact -> test phase -> rows.

The test phase runs as inspect-ai tasks (one per method x source x seed cell), so every transcript
can be browsed with ``inspect view``. Each scored task is appended to ``results.jsonl`` at once;
a re-run skips finished rows, and the call cache makes any repeated call free, so an interrupted
run resumes where it stopped and a finished run re-run makes zero model calls.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import json
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from sourcebench.harness.benchmark import Benchmark

from .artifacts import ArtifactStore
from .budget import Budget, CallGate, default_max_connections
from .data import Answer, Source, Split, Task
from .embeddings import Embedder, get_embedder
from .errors import (
    BenchmarkUnavailable,
    BudgetExceeded,
    ConfigError,
    DataError,
    ModelUnavailableError,
    SourceBenchError,
)
from .gcpolicy import long_lived_frozen
from .health import build_health, run_health
from .io import append_jsonl, atomic_write_json, atomic_write_text, read_json, read_jsonl
from .llm import LLM, UNLIMITED, CallCache, ModelSpec, UsageLedger
from .method import Context, LearnContext, Method
from .options import check_epochs, check_seeds
from .provenance import command_line, git_commit, package_versions
from .providers.discovery import ORIGIN_OPTION, discover_context_window
from .registry import get_benchmark_class, get_method_class, method_code
from .resultrows import check_epochs_agree, read_result_rows
from .splits import write_manifest


@dataclass
class RunConfig:
    benchmark: str
    methods: list[str]
    model: str
    out: Path
    judge_model: str | None = None
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    limit: int | None = None
    guidance_limit: int | None = None
    sources: list[str] | None = None
    data_dir: Path | None = None
    options: dict[str, str] = field(default_factory=dict)
    method_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    embedder: str = "auto"
    max_tokens: int = 512
    temperature: float = 0.0
    context_window: int | None = None
    reasoning_effort: str | None = None  # the solver's (inspect-ai GenerateConfig); None: the provider's default
    judge_reasoning_effort: str | None = None  # the judge's; None: the provider's default
    # reasoning allowance added to every reply bound on a reasoning backend (None: the effort's default,
    # llm.UNLIMITED: no cap sent), for the solver and the judge
    reasoning_tokens: int | None = None
    judge_reasoning_tokens: int | None = None
    # a cell whose learning stage (or test phase) failed more than this share of its calls is degraded
    max_failure_share: float = 0.10
    # --max-cost (USD, with per-million-token prices): stop before a live call would pass it
    max_cost: float | None = None
    price_input: float | None = None
    price_output: float | None = None
    max_samples: int | None = None
    display: str = "none"
    # model-call robustness: bounded retries make a persistent fault a scored failure (see ModelSpec)
    max_retries: int | None = 5
    timeout: int | None = None
    attempt_timeout: int | None = None
    max_connections: int | None = None
    executor: str = "local"  # local | ray (harness/executors.py)
    ray_address: str | None = None
    # local executor: test tasks of every cell split over this many processes (one event loop each)
    test_processes: int = 1
    task_shard: tuple[int, int] | None = None  # (i, n): a worker tests only the tasks of shard i of n
    # cells learned at the same time; None: every pending cell at once for a served model (the connection
    # budget bounds their calls), one at a time for a local/ one (see Runner.learn_concurrency)
    learn_concurrency: int | None = None
    # model-call and embedding caches; None: OUT/cache. A folder shared by several runs answers a call
    # that any of them made (same model, settings, messages) without asking the model again
    cache_dir: Path | None = None
    rerun: list[str] = field(default_factory=list)  # methods whose artifacts and rows are made again
    # answers per test task (inspect-ai epochs, temperature > 0): the task's score is their mean
    epochs: int = 1

    def __post_init__(self) -> None:
        self.seeds = check_seeds(self.seeds, "seeds")
        self.epochs = check_epochs(self.epochs, self.temperature, self.model)

    def to_dict(self) -> dict[str, Any]:
        """Every setting, JSON-ready. Saved whole in ``run.json`` so that whatever runs on the folder later
        (a protocol that calls the model again, a resume) rebuilds exactly this configuration."""
        return _config_adapter().dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        """The configuration ``to_dict`` wrote, validated (types, and the fields it must have)."""
        from pydantic import ValidationError

        try:
            return _config_adapter().validate_python(dict(data) if isinstance(data, dict) else data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ())) or "config"
            raise DataError(f"run configuration: {where}: {err.get('msg')}") from None


@functools.cache
def _config_adapter() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(RunConfig)


# errors of a request the server refused (inspect passes the OpenAI client's exception names on)
_REFUSALS = ("BadRequestError", "InternalServerError", "UnprocessableEntityError", "NotFoundError", "APIStatusError")


def shard_of(task_id: str, n: int) -> int:
    """The shard (0..n-1) a test task belongs to: a stable hash, the same in every process."""
    return int.from_bytes(hashlib.blake2b(task_id.encode(), digest_size=8).digest(), "big") % n


@dataclass
class Cell:
    """One (method, source, seed) of the test phase."""

    method: Method
    source: Source
    split: Split
    tests: list[Task]
    artifact: Path
    ledger: UsageLedger

    @functools.cached_property
    def split_id(self) -> str:  # hashed once per cell, not once per result row
        return self.split.split_id

    @property
    def label(self) -> str:
        return f"{self.method.name}/{self.source.id}/seed{self.split.seed}"


def _move_rows(path: Path, to: Path, rows: list[dict[str, Any]], moved: list[dict[str, Any]]) -> None:
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


_UNSAFE_ID = re.compile(r"[\x00-\x1f\x7f]")


def check_element_ids(source: Source) -> None:
    """Element ids become file names in artifacts and links in reports: refuse ids that are
    absolute, climb out with ``..`` or hold control characters (one line naming the source file)."""
    for e in source.elements:
        path = e.id.split("#", 1)[0]
        parts = re.split(r"[/\\]", path)
        if (not e.id.strip() or path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path) or ".." in parts
                or _UNSAFE_ID.search(e.id)):
            raise DataError(f"{source.origin or source.id}: element id {e.id[:80]!r} is not a safe relative id "
                            "(empty, absolute, '..' or a control character)")


def row_key(r: dict[str, Any]) -> tuple:
    return (r["benchmark"], r["source"], r["method"], int(r["seed"]), str(r["task_id"]))


def limit_tasks(tasks: list[Task], limit: int | None, seed: int) -> list[Task]:
    """A seeded subset shared by all methods, so comparisons stay paired."""
    tasks = sorted(tasks, key=lambda t: t.id)
    if limit is None or limit >= len(tasks):
        return tasks
    order = np.random.default_rng(seed).permutation(len(tasks))[:limit]
    return [tasks[i] for i in sorted(order)]


class _ProbeReply(BaseModel):
    """The preflight's structured probe: the least schema a server must honour."""

    ok: bool


class Runner:
    LEARN_LOG_INTERVAL_S = 30.0  # least time between two call-count lines of a learning cell in a log file
    # least time between two writes of a learning cell's call counts to usage.jsonl: a build can take
    # hours, and a killed process must not take the cost of the calls it made with it
    LEARN_USAGE_FLUSH_S = 30.0

    def __init__(self, cfg: RunConfig, console: Any = None):
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.console = console
        if not cfg.methods:
            raise ConfigError("--methods: give at least one method")
        self.bench: Benchmark = get_benchmark_class(cfg.benchmark)(data_dir=cfg.data_dir, options=cfg.options)
        self.methods: list[Method] = []
        for name in cfg.methods:
            cls = get_method_class(name)
            try:
                self.methods.append(cls(cfg.method_configs.get(name)))
            except Exception as e:  # pydantic validation of the method config
                raise ConfigError(f"method '{name}': invalid config ({str(e).splitlines()[0]})") from None
        # the run's connection budget (--max-connections, else the provider's default): one gate for every
        # call of this process; inspect's own per-model limit is set to the same number so that it never
        # binds tighter than the gate
        self.connections = cfg.max_connections or default_max_connections(cfg.model)
        self.gate = CallGate(self.connections)
        retry = {"max_retries": cfg.max_retries, "timeout": cfg.timeout, "attempt_timeout": cfg.attempt_timeout,
                 "max_connections": self.connections}
        self.spec = ModelSpec(name=cfg.model, role="solver", temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                              context_window=cfg.context_window, reasoning_effort=cfg.reasoning_effort,
                              reasoning_tokens=cfg.reasoning_tokens, **retry)
        judge_name = cfg.judge_model or (cfg.model if self.bench.needs_judge_model else None)
        self.judge_spec = (ModelSpec(name=judge_name, role="judge", temperature=0.0, max_tokens=256,
                                     context_window=cfg.context_window if judge_name == cfg.model else None,
                                     reasoning_effort=cfg.judge_reasoning_effort,
                                     reasoning_tokens=cfg.judge_reasoning_tokens, **retry)
                           if judge_name else None)
        from .executors import get_executor

        self.executor = get_executor(cfg.executor, cfg.ray_address, cfg.test_processes)
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"--out {self.out}: not a directory")
        if cfg.cache_dir:  # absolute, so worker processes (--test-processes, Ray) open the same one
            cfg = self.cfg = replace(cfg, cache_dir=Path(cfg.cache_dir).resolve())
        self.cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else self.out / "cache"
        if self.cache_dir.exists() and not self.cache_dir.is_dir():
            raise ConfigError(f"--cache-dir {self.cache_dir}: not a directory")
        self.cache = CallCache(self.cache_dir / "llm_calls.sqlite")
        self.store = ArtifactStore(self.out / "artifacts")
        self.budget = Budget.create(cfg.max_cost, cfg.price_input, cfg.price_output, self.out / "usage.jsonl")
        self.results_path = self.out / "results.jsonl"
        self.usage_path = self.out / "usage.jsonl"
        self.failures_path = self.out / "failures.jsonl"
        self.run_id = ""
        self.embedder: Embedder | None = None
        self.live_calls = 0
        self.is_worker = False  # a share of a distributed run (see run_worker)
        self.rows_written = 0  # result rows appended by this process

    # -- helpers ---------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(msg)

    def code_of(self, method: Method) -> dict[str, Any]:
        """The hash of the code ``method`` runs and its package version (``registry.method_code``), once per run."""
        codes = self.__dict__.setdefault("_codes", {})
        if method.name not in codes:
            codes[method.name] = method_code(type(method))
        return codes[method.name]

    def _llm(self, spec: ModelSpec, ledger: UsageLedger) -> LLM:
        return LLM(spec, self.cache, ledger, self.budget, self.gate)

    def _flush_usage(self, ledger: UsageLedger, source: str, seed: int | None) -> None:
        rows, fails = ledger.drain()
        base = {"benchmark": self.bench.name, "source": source, "seed": seed}
        self.live_calls += sum(int(r["calls"]) for r in rows if r["status"] == "live")
        # counters: no fsync (a killed process loses nothing; see append_jsonl)
        append_jsonl(self.usage_path, [{**base, **r} for r in rows], durable=False)
        append_jsonl(self.failures_path, [{**base, "seed": seed, **f} for f in fails], durable=False)

    def _metadata(self, sources: list[Source]) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": command_line(),
            "benchmark": self.bench.describe(),
            "methods": [{**m.describe(), **self.code_of(m)} for m in self.methods],
            "model": self.spec.settings(),
            "judge_model": self.judge_spec.settings() if self.judge_spec else None,
            "embedder": self.embedder.name if self.embedder else self.cfg.embedder,
            "seeds": self.cfg.seeds,
            "max_failure_share": self.cfg.max_failure_share,
            "limit": self.cfg.limit,
            "guidance_limit": self.cfg.guidance_limit,
            "sources": [{"id": s.id, "origin": s.origin, "fingerprint": s.fingerprint, "n_elements": len(s.elements),
                         "element_tokens": round(sum(len(e.text) for e in s.elements) / max(1, len(s.elements)) / 4, 1),
                         "kind": s.kind, **({"provenance": s.metadata["provenance"]}  # which tree (e.g. pinned)
                                            if s.metadata.get("provenance") else {})} for s in sources],
            "execution": {"executor": self.cfg.executor, "test_processes": self.cfg.test_processes,
                          "learn_concurrency": self.cfg.learn_concurrency or "auto",
                          "connections": self.connections,
                          "max_samples": self.max_samples(),
                          "max_connections": self.cfg.max_connections, "max_retries": self.cfg.max_retries,
                          "timeout": self.cfg.timeout, "attempt_timeout": self.cfg.attempt_timeout,
                          "cache_dir": str(self.cfg.cache_dir) if self.cfg.cache_dir else None},
            "versions": package_versions(),
            "git_commit": git_commit(),
            "config": {**self.cfg.to_dict(), "rerun": []},  # a rerun is one command's action, not the setup
        }

    def _check_previous(self) -> dict[str, Any] | None:
        path = self.out / "run.json"
        if not path.exists():
            return None
        prev = read_json(path)
        if not isinstance(prev, dict):
            raise DataError(f"{path}: expected a JSON object, got {type(prev).__name__}; move the file away "
                            "if this is not a run folder")
        pb = (prev.get("benchmark") or {}).get("name")
        pm = (prev.get("model") or {}).get("name")
        if ((pb and pb != self.bench.name) or (pm and pm != self.spec.name)) and not self._has_results():
            # a half-made folder (the earlier command failed before scoring anything) never blocks the
            # corrected command: its run record and counters go, its caches and artifacts (keyed) stay
            import shutil

            for f in (path, self.usage_path, self.failures_path):
                f.unlink(missing_ok=True)
            if pb != self.bench.name:
                shutil.rmtree(self.out / "splits", ignore_errors=True)
            self.log(f"{self.out}: holds no results of its earlier {pb} run with {pm}; starting this run there")
            return None
        if pb and pb != self.bench.name:
            raise ConfigError(f"{path}: this folder holds a {pb} run; use another --out for {self.bench.name}")
        if pm and pm != self.spec.name:
            raise ConfigError(f"{path}: this folder holds a run with model {pm}; use another --out for {self.spec.name}")
        return prev

    def _has_results(self) -> bool:
        return any(self.out.glob("results*.jsonl")) and any(
            p.stat().st_size for p in self.out.glob("results*.jsonl"))

    # -- main ------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        with RunLock(self.out), long_lived_frozen():
            return asyncio.run(self._run())

    @staticmethod
    def run_share(cfg: RunConfig, stage: str) -> dict[str, Any]:
        """Body of a worker process or Ray task: learn (``stage="learn"``) or learn and test (``"test"``)
        the cells of ``cfg`` (the executors hand this to their workers, which import it by name)."""
        return Runner(cfg).run_worker(stage)

    @staticmethod
    def warm_worker() -> None:
        """Import what a test worker needs (this module, by unpickling this function), so that it is
        ready when the driver has learned."""
        import inspect_ai  # noqa: F401
        import openai  # noqa: F401

    def run_worker(self, stage: str) -> dict[str, Any]:
        """One share of a run whose driver (``--executor ray``) holds the folder's lock, has written
        ``run.json`` and repaired ``results.jsonl``: learn the cells of this config (``stage="learn"``)
        or learn and test them (``"test"``), appending to the shared files; nothing else is written."""
        with long_lived_frozen():
            return asyncio.run(self._run_worker(stage))

    async def _run_worker(self, stage: str) -> dict[str, Any]:
        self.is_worker = True
        meta = read_json(self.out / "run.json")
        self.run_id = str(meta["run_id"])
        self._adopt_preflight(meta)
        done = self._done_rows()
        _, plans = self._plan(write_manifests=False)
        pending = self._pending(plans, done)
        if pending:
            cells = await self._learn_all(pending)
            if stage == "test":
                await self._test_all(cells, done)
        return {"live_calls": self.live_calls}

    def _done_rows(self) -> set:
        """Keys of the rows already scored, each row checked (types, ranges, one row per task): a
        malformed or duplicated row stops the run naming its line instead of counting as done."""
        rows = read_result_rows(self.results_path) if self.results_path.exists() else []
        check_epochs_agree(self.results_path, rows, self.cfg.epochs)
        return {row_key(r) for r in rows}

    def _pending(self, plans: list, done: set) -> list:
        return [(m, p) for m in self.methods for p in plans
                if any((self.bench.name, p[0].id, m.name, p[1].seed, t.id) not in done for t in p[3])]

    def _plan(self, write_manifests: bool = True) -> tuple[list[Source], list]:
        """Sources, splits and the (source, split, guidance, tests) of every cell, all seeded."""
        source_ids = self.cfg.sources or self.bench.source_ids()
        unknown = set(source_ids) - set(self.bench.source_ids())
        if unknown:
            raise ConfigError(f"--sources: unknown source(s) {', '.join(sorted(unknown))} for {self.bench.name}; "
                              f"known: {', '.join(self.bench.source_ids())}")
        self.embedder = get_embedder(self.cfg.embedder, self.cache_dir)
        plans = []
        sources = []
        self.unavailable: list[dict[str, str]] = []
        for sid in source_ids:
            source = self._loaded(sid, "source", self.bench.load_source)
            if note := (source.metadata.get("provenance") or {}).get("note"):  # e.g. not the pinned tree
                self.log("[yellow]" + note.replace("[", "\\[") + "[/]")  # brackets in a path are not markup
            check_element_ids(source)
            sources.append(source)
            try:
                tasks = self._loaded(sid, "tasks", self.bench.load_tasks)
            except BenchmarkUnavailable as e:  # recorded in run.json and shown by the report, never scored
                self.unavailable.append({"source": sid, "reason": str(e)})
                continue
            by_id = {t.id: t for t in tasks}
            empty = next((t for t in tasks if isinstance(t.reference, list)
                          and not any(str(x).strip() for x in t.reference)), None)
            if empty is not None:  # scored against nothing, it would be 0 for every method
                raise DataError(f"{self.bench.name}/{sid}: task {empty.id} has an empty reference list; fix or "
                                "remove it in the benchmark's data files")
            for split in self.bench.make_splits(source, tasks, self.cfg.seeds):
                if write_manifests:
                    write_manifest(self.out, split)
                guidance = limit_tasks([by_id[i] for i in split.guidance_ids], self.cfg.guidance_limit, split.seed)
                # a field of the wrong type (a difficulty given as text): one line naming the source
                candidates = [by_id[i] for i in split.test_ids]
                chosen = self._loaded(sid, "test tasks", lambda _, c=candidates: self.bench.select_test(c))
                tests = limit_tasks(chosen, self.cfg.limit, split.seed)
                if not tests:
                    raise ConfigError(f"{self.bench.name}/{sid}: the split of seed {split.seed} has 0 test tasks "
                                      f"({len(tasks)} task(s) in all); nothing could be scored")
                plans.append((source, split, guidance, tests))
        return sources, plans

    def _loaded(self, sid: str, what: str, load: Any) -> Any:
        """An adapter's loader, with an unexpected exception on malformed data (a field of the wrong
        type, say) turned into a one-line error naming the source instead of a traceback."""
        try:
            return load(sid)
        except SourceBenchError:
            raise
        except Exception as e:
            msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            raise DataError(f"{self.bench.name}/{sid}: cannot load the {what} from its data files "
                            f"({type(e).__name__}: {msg})") from None

    async def _run(self) -> dict[str, Any]:
        t0 = time.time()
        prev = self._check_previous()
        self.run_id = (prev or {}).get("run_id") or uuid.uuid4().hex[:12]
        self._repair_torn_tail()
        self._set_aside_stale_rows()
        done = self._done_rows()
        if n := self.store.remove_staging():
            self.log(f"removed {n} half-built artifact folder(s) left by an interrupted run")
        sources, plans = self._plan()
        if self.cfg.rerun:
            self._forget_artifacts(plans)
        meta = self._metadata(sources)
        if prev:  # keep the union of methods across invocations into the same folder
            names = {m["name"] for m in meta["methods"]}
            meta["methods"] += [m for m in prev.get("methods", []) if m["name"] not in names]
            meta["created"] = prev.get("created", meta["created"])
        if self.unavailable:
            meta["unavailable"] = self.unavailable
            for u in self.unavailable:
                self.log(f"[yellow]{self.bench.name}/{u['source']}: {u['reason']}[/]")
        atomic_write_json(self.out / "run.json", meta)

        pending = self._pending(plans, done)
        n_total = sum(len(p[3]) for p in plans) * len(self.methods)
        n_pending = sum(1 for m, p in pending for t in p[3] if (self.bench.name, p[0].id, m.name, p[1].seed, t.id) not in done)
        self.log(f"[bold]{self.bench.name}[/]: {len(sources)} source(s), seeds {self.cfg.seeds}, "
                 f"{len(self.methods)} method(s): {n_total} task rows, {n_pending} to do")
        if any(m.uses_guidance for m in self.methods) and plans:
            lo, hi = min(len(p[2]) for p in plans), max(len(p[2]) for p in plans)
            self.log(f"guidance: {lo if lo == hi else f'{lo}-{hi}'} task(s) per source and seed"
                     + (f" (--guidance-limit {self.cfg.guidance_limit})" if self.cfg.guidance_limit else ""))
        if pending:
            await self.executor.execute(self, pending, done)
        if self.embedder is not None and self.embedder.stats.as_dict().get("cut_inputs"):
            self.log(f"[yellow]{self.embedder.stats.summary(self.embedder.name)}[/]")
        degraded = self.degraded_cells()
        for c in degraded:
            self.log(f"[red]{c.line()}[/]")
        return {"out": str(self.out), "rows_done_before": len(done), "rows_new": n_pending,
                "live_calls": self.live_calls, "seconds": round(time.time() - t0, 2),
                "unavailable": self.unavailable, "degraded": [c.line() for c in degraded]}

    def degraded_cells(self) -> list[Any]:
        """The cells of this folder whose build or test phase lost more than ``max_failure_share``."""
        results = read_jsonl(self.results_path, tolerate_torn_tail=True) if self.results_path.exists() else []
        failures = read_jsonl(self.failures_path, tolerate_torn_tail=True) if self.failures_path.exists() else []
        usage = read_jsonl(self.usage_path, tolerate_torn_tail=True) if self.usage_path.exists() else []
        return [c for c in run_health(self.out, results, failures, self.cfg.max_failure_share, usage=usage)
                if c.degraded]

    def _set_aside_stale_rows(self) -> None:
        """Rows a method wrote under another version of itself, or under other code with the same version
        (an edited prompt), or of a method named by ``--rerun``, move to ``results.stale.jsonl`` (kept, not
        reported) and are run again, so a folder never mixes a method's code; whatever the new code asks
        exactly as before comes from the call cache."""
        p = self.results_path
        if not p.exists():
            return
        versions = {m.name: str(m.version) for m in self.methods}
        codes = {m.name: self.code_of(m)["code_hash"] for m in self.methods}
        rerun = set(self.cfg.rerun)

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
        _move_rows(p, self.out / "results.stale.jsonl", rows, stale)
        # their usage and failures too, so the cost tables count each call of the current version once;
        # learning of sub-artifacts that outlive the version (a method's shared_stages) stays billed
        shared = {m.name: m.shared_stages for m in self.methods}

        def old_version(r: dict[str, Any]) -> bool:
            m = r.get("method")
            return m in names and not (r.get("phase") == "learn" and str(r.get("stage", "")).startswith(shared[m]))

        names = {r["method"] for r in stale}
        for counters in (self.usage_path, self.failures_path):
            if counters.exists():
                rows = read_jsonl(counters, tolerate_torn_tail=True)
                _move_rows(counters, counters.with_suffix(".stale.jsonl"), rows, [r for r in rows if old_version(r)])
        moved = "moved to results.stale.jsonl (usage and failures to usage/failures.stale.jsonl)"
        for (m, v, c, reason), n in sorted(Counter((r["method"], str(r.get("method_version")), r.get("method_code"),
                                                   why(r)) for r in stale).items(), key=str):
            if reason == "version":
                self.log(f"{m}: {n} result row(s) of method version {v} {moved}; they are run again with version "
                         f"{versions[m]}")
            elif reason == "code":
                self.log(f"[yellow]{m}: code changed (hash {c} -> {codes[m]}) but version {v} did not: re-learning "
                         f"and re-testing; {n} row(s) of the old code {moved}[/]")
            else:
                self.log(f"{m}: --rerun: {n} result row(s) {moved}; learning and testing again")

    def _forget_artifacts(self, plans: list) -> None:
        """``--rerun``: remove the frozen artifacts of the named methods for this run's cells, so they are
        learned again (their model calls come from the call cache unless the code asks something new)."""
        import shutil

        for m in (m for m in self.methods if m.name in self.cfg.rerun):
            gone = 0
            for source, split, guidance, _ in plans:
                folder = self.store.path(f"method/{m.name}", self._artifact_inputs(m, source, split, guidance))
                if folder.exists():
                    shutil.rmtree(folder)
                    gone += 1
            self.log(f"{m.name}: --rerun: {gone} artifact(s) removed; learning again")

    def _repair_torn_tail(self) -> None:
        """Drop a final line left half-written by a crash, so appends start on a clean line."""
        p = self.results_path
        if p.exists() and p.stat().st_size:
            data = p.read_bytes()
            if not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                with open(p, "r+b") as f:
                    f.truncate(cut)

    async def _preflight(self) -> None:
        """One tiny (cached) call per model role, so an unreachable endpoint fails before any work.

        A probe whose usage reports reasoning tokens marks that role's backend as reasoning, so its
        reply caps get the reasoning allowance from then on (a model of an unknown family that
        reasons by default would otherwise have every bounded reply eaten by its reasoning)."""
        ledger = UsageLedger()
        roles = ["solver"] + (["judge"] if self.judge_spec and self.judge_spec.name != self.spec.name else [])
        for role in roles:
            spec = self.spec if role == "solver" else self.judge_spec
            assert spec is not None
            spec = self._known_window(spec)
            if role == "solver":
                self.spec = spec
                if self.judge_spec and self.judge_spec.name == spec.name and not self.judge_spec.context_window:
                    self.judge_spec = replace(self.judge_spec, context_window=spec.context_window,
                                              context_window_origin=spec.context_window_origin)
            else:
                self.judge_spec = spec
            res = await self._probe(spec, ledger)
            if res.reasoning_tokens and not spec.is_reasoning():
                spec = replace(spec, reasons=True)
                self.log(f"{spec.name} reasons ({res.reasoning_tokens} reasoning tokens for a 16-token probe): "
                         f"reply caps get a reasoning allowance of {spec.reasoning_allowance():,} tokens")
                if role == "solver":
                    self.spec = spec
                    if self.judge_spec and self.judge_spec.name == spec.name:
                        self.judge_spec = replace(self.judge_spec, reasons=True)
                else:
                    self.judge_spec = spec
                res = await self._probe(spec, ledger)
            if res.failed and res.error.startswith("output_cap"):  # reachable; its budget is the user's choice
                self.log(f"[yellow]{spec.name}: the 16-token probe ran out of output cap ({res.error}); bounded "
                         f"replies will fail the same way unless --reasoning-tokens is raised[/]")
            elif res.failed:
                where = spec.resolved_base_url() or spec.name
                raise ModelUnavailableError(f"model {spec.name} ({where}) failed a test call: {res.error}")
            await self._probe_structured(spec, ledger)
            spec = self.spec if role == "solver" else self.judge_spec
            assert spec is not None
            if spec.wanted_reasoning_allowance() not in (spec.reasoning_allowance(), UNLIMITED):
                self.log(f"{spec.name}: the reasoning allowance of {spec.wanted_reasoning_allowance():,} tokens does "
                         f"not fit the {spec.effective_context_window() or 0:,}-token window: {spec.reasoning_allowance():,} (half "
                         "the window) is sent")
        self._record_window()
        self._flush_usage(ledger, "", None)

    def _known_window(self, spec: ModelSpec) -> ModelSpec:
        """The spec with its context window and where it came from: ``--context-window``, else what
        the server says (``harness.providers.discovery``), else none."""
        if spec.context_window:
            return spec if spec.context_window_origin else replace(spec, context_window_origin=ORIGIN_OPTION)
        found = discover_context_window(spec.name, spec.resolved_base_url())
        if found is None:
            return spec
        self.log(f"{spec.name}: context window {found[0]:,} tokens ({found[1]})")
        return replace(spec, context_window=found[0], context_window_origin=found[1])

    def _adopt_preflight(self, meta: dict[str, Any]) -> None:
        """A worker takes what the driver's preflight settled and recorded in run.json (the window and
        its origin, the structured-output form, whether the backend reasons): its calls and artifact
        keys are then the driver's."""
        for attr, entry in (("spec", "model"), ("judge_spec", "judge_model")):
            spec, m = getattr(self, attr), meta.get(entry)
            if spec is None or not isinstance(m, dict) or m.get("name") != spec.name:
                continue
            setattr(self, attr, replace(spec, context_window=m.get("context_window") or spec.context_window,
                                        context_window_origin=m.get("context_window_origin") or spec.context_window_origin,
                                        structured_format=m.get("structured_format") or spec.structured_format,
                                        reasons=True if m.get("reasons") else spec.reasons))

    def _record_window(self) -> None:
        """run.json's model entries with the window the preflight settled and its origin."""
        path = self.out / "run.json"
        if not path.exists():
            return
        meta = read_json(path)
        for entry, spec in (("model", self.spec), ("judge_model", self.judge_spec)):
            if spec is not None and isinstance(meta.get(entry), dict):
                meta[entry] = {**spec.settings(), "context_window_origin": spec.context_window_origin}
        atomic_write_json(path, meta)

    async def _probe_structured(self, spec: ModelSpec, ledger: UsageLedger) -> None:
        """One schema-constrained call on a served model: a server that refuses structured outputs
        (llama-cpp-python's answers ``json_schema`` with HTTP 500) stops the run here, in one line,
        instead of failing every structured call of every method."""
        if spec.name.split("/", 1)[0] in ("local", "scripted"):
            return
        async def probe(s: ModelSpec) -> Any:
            return await self._llm(s, ledger).structured('Reply with the JSON object {"ok": true}.', _ProbeReply,
                                                         method="harness", phase="probe", max_tokens=16,
                                                         max_retries=s.max_retries, timeout=60)

        res = await probe(spec)
        # only the server's refusal of the request (an HTTP error status) says the format is unsupported; a
        # reply cut, unparsable or invalid, or a dropped connection, is a failure of that call, not of the format
        if not res.failed or not res.error.startswith(_REFUSALS):
            return
        other = replace(spec, structured_format="json_object")  # llama-cpp-python's server form
        if not (await probe(other)).failed:
            self.log(f"{spec.name}: the server refused response_format json_schema ({res.error[:160]}) and takes "
                     "the schema as response_format json_object: structured calls use that form")
            if spec.name == self.spec.name:
                self.spec = replace(self.spec, structured_format="json_object")
            if self.judge_spec and self.judge_spec.name == spec.name:
                self.judge_spec = replace(self.judge_spec, structured_format="json_object")
            return
        where = spec.resolved_base_url() or spec.name
        raise ModelUnavailableError(
            f"model {spec.name} ({where}) refused a structured-output request (response_format json_schema): "
            f"{res.error}. Serve the model with a server that supports json_schema structured outputs "
            "(vLLM, llama.cpp's llama-server, LM Studio, Ollama; see docs/backends.md)")

    async def _probe(self, spec: ModelSpec, ledger: UsageLedger) -> Any:
        # 16: the least output cap OpenAI's Responses API accepts (a 4-token probe was refused with HTTP 400)
        # the run's own retries: a transient fault (429, 5xx, a dropped connection) must not stop the run here
        return await self._llm(spec, ledger).generate("Reply with the word OK.", method="harness", phase="probe",
                                                      max_tokens=16, max_retries=spec.max_retries, timeout=30)

    # -- learn phase -----------------------------------------------------------------------------
    def _artifact_inputs(self, method: Method, source: Source, split: Split, guidance: list[Task]) -> dict[str, Any]:
        inputs = {
            "method": method.name, "version": method.version, "config": method.config.model_dump(),
            "benchmark": self.bench.name, "source": source.id, "source_fingerprint": source.fingerprint,
            "model": self.spec.settings(), "embedder": self.embedder.name if self.embedder else "",
            # edited code without a version bump is another artifact, never the old one reused
            "code": self.code_of(method)["code_hash"], "package_version": self.code_of(method)["package_version"],
        }
        if method.uses_guidance:
            inputs["seed"] = split.seed
            inputs["guidance"] = [(t.id, t.item_hash) for t in guidance]
            inputs["judge"] = self.judge_spec.settings() if self.judge_spec else None
        return inputs

    def context(self, cls: type[Context], method: Method, source: Source, split: Split, ledger: UsageLedger,
                phase: str, **kw: Any) -> Context:
        # a judge call made while learning is the method's cost, not scoring (break-even counts learn_judge)
        judge_phase = "learn_judge" if phase == "learn" else "judge"
        judge_llm = self._llm(self.judge_spec, ledger).bind(method.name, judge_phase) if self.judge_spec else None

        async def judge(task: Task, answer: Answer):
            return await self.bench.score(task, answer, judge_llm)

        return cls(source=source, benchmark=self.bench, llm=self._llm(self.spec, ledger).bind(method.name, phase),
                   embedder=self.embedder, store=self.store, seed=split.seed, split=split, judge=judge,
                   **{"progress": lambda msg: None, **kw})

    def learn_concurrency(self, n_cells: int) -> int:
        """Cells learned at once: ``--learn-concurrency`` when given; else, for a served model, every
        pending cell (the connection budget, not the cell count, bounds the calls in flight, so a cell
        whose method is a chain of calls leaves the budget to the others); for an in-process ``local/``
        model one at a time (its contexts keep the prompt prefix of the cell's previous call)."""
        if self.cfg.learn_concurrency:
            return self.cfg.learn_concurrency
        return 1 if self.spec.name.startswith("local/") else max(1, n_cells)

    def _expected_learn_calls(self, method: Method, source: Source, guidance: list[Task]) -> float | None:
        """The learning calls a cell is expected to make (shipped measured rates), for the time left."""
        from .estimate import CellUnits, estimate_cells, load_rates

        rates = getattr(self, "_rates", None)
        if rates is None:
            rates = self._rates = load_rates()
        size = sum(len(e.text) for e in source.elements) / max(1, len(source.elements)) / 4
        cell = CellUnits(method.name, source.id, 0, len(source.elements), size, len(guidance), 0,
                         bool(method.uses_guidance), source.kind)
        est, missing = estimate_cells([cell], rates)
        return None if missing else sum(e.calls for e in est if e.phase in ("learn", "learn_judge")) or None

    def _learn_reporter(self, label: str, ledger: UsageLedger, describe: Callable[[str], None],
                        flush: Callable[[], None] = lambda: None, expected: float | None = None,
                        on_any: Callable[[], None] = lambda: None) -> Callable[[str], None]:
        """What a learning cell shows while it builds (hours, with a local model): the method's own
        progress messages, its model calls so far (done, cached, in flight on the run's connections)
        and the time left at its pace so far for the calls it is expected to make (``expected``, from
        the measured rates; "?" without one). A terminal gets them in the live progress bar; a log
        file (no terminal) gets a timestamped line per message and, at most every
        ``LEARN_LOG_INTERVAL_S``, one with the count of live calls (at every tenth). ``flush`` writes
        the counts so far to usage.jsonl, at most every ``LEARN_USAGE_FLUSH_S``; ``on_any`` updates the
        run's line after each call."""
        from .walltime import eta_s, short

        console = self.console
        lines = console is not None and not console.is_terminal
        t0 = time.monotonic()
        state: dict[str, Any] = {"msg": "", "stage": "", "logged": t0, "flushed": t0}

        def pace() -> str:
            done = ledger.calls("live") + ledger.calls("cached") + ledger.calls("failed")
            left = eta_s(done, expected, time.monotonic() - t0)
            return f"{ledger.in_flight} in flight, ~{short(left)} left"

        def show() -> None:
            live, cached = ledger.calls("live"), ledger.calls("cached")
            stage = f" [{state['stage']}]" if state["stage"] else ""
            describe(f"{label}: {state['msg'] or 'learning'}{stage}, {live} live / {cached} cached calls, {pace()}")

        def line(text: str) -> None:
            if lines:
                console.print(f"{time.strftime('%H:%M:%S')} learn {label}: {text}", highlight=False,  # type: ignore[union-attr]
                              soft_wrap=True)  # one line per message in a log file, whatever its length

        def on_call(stage: str, status: str) -> None:
            state["stage"] = stage
            show()
            on_any()
            if time.monotonic() - state["flushed"] >= self.LEARN_USAGE_FLUSH_S:
                state["flushed"] = time.monotonic()
                flush()
            if status == "live" and ledger.calls("live") % 10 == 0 \
                    and time.monotonic() - state["logged"] >= self.LEARN_LOG_INTERVAL_S:
                state["logged"] = time.monotonic()
                line(f"{ledger.calls('live')} live, {ledger.calls('cached')} cached calls (stage {stage or '-'}), "
                     f"{pace()}")

        def report(msg: str) -> None:
            state["msg"] = msg
            show()
            line(msg)

        ledger.on_call = on_call
        return report

    async def _learn_all(self, pending: list) -> list[Cell]:
        """Learn every pending cell, ``learn_concurrency`` at a time (cells keep their order).

        For a served model every cell at once by default: the run's connection budget (``self.gate``)
        bounds the calls in flight, so a cell whose method is a chain of calls (KB curation, SourceLearn's
        task-guided learning) leaves the connections to the other cells' independent calls. Concurrency
        never changes what is learned: every call is keyed by its messages, and cells sharing a
        sub-artifact (SourceLearn's M0 and MS) wait for one build of it (``ArtifactStore`` locks per key).
        The run's line shows the calls done and in flight on the run's connections and the time left
        for the calls the pending cells are expected to make (measured rates)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from .walltime import eta_s, short

        concurrency = self.learn_concurrency(len(pending))
        limit = asyncio.Semaphore(concurrency)
        expected = [self._expected_learn_calls(m, p[0], p[2]) for m, p in pending]
        total_expected = sum(v for v in expected if v) if all(expected) else None
        ledgers: list[UsageLedger] = []
        t0 = time.monotonic()
        with Progress(TextColumn("[bold]learn[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=self.console, disable=self.console is None,
                      transient=False) as progress:
            bar = progress.add_task("artifacts", total=len(pending))
            last = [0.0]

            def run_line() -> None:  # at most 4 times a second: a fast backend calls this thousands of times
                now = time.monotonic()
                if now - last[0] < 0.25 or concurrency <= 1:
                    return
                last[0] = now
                done = sum(lg.calls("live") + lg.calls("cached") + lg.calls("failed") for lg in ledgers)
                cap = f"/{self.connections}" if self.connections else ""
                progress.update(bar, description=f"artifacts: {done} calls, {self.gate.in_flight}{cap} in flight, "
                                f"~{short(eta_s(done, total_expected, now - t0))} left")

            async def learn_one(method: Method, source: Source, split: Split, guidance: list[Task],
                                tests: list[Task], expect: float | None) -> Cell:
                async with limit:
                    ledger = UsageLedger()
                    ledgers.append(ledger)
                    inputs = self._artifact_inputs(method, source, split, guidance)
                    label = f"{method.name} on {source.id} (seed {split.seed})"
                    row = bar if concurrency <= 1 else progress.add_task(label, total=None)
                    progress.update(row, description=label)
                    keys = (source.id, split.seed if method.uses_guidance else None)
                    report = self._learn_reporter(label, ledger, lambda text: progress.update(row, description=text),
                                                  lambda: self._flush_usage(ledger, *keys), expect, run_line)

                    async def build(folder: Path) -> dict[str, Any]:
                        ctx = self.context(LearnContext, method, source, split, ledger, "learn", workdir=folder,
                                           progress=report)
                        before = self.embedder.stats.as_dict() if self.embedder is not None else None
                        stats = await method.learn(source, guidance, ctx) or {}
                        stats["usage"] = ledger.snapshot()
                        if before is not None:  # inputs cut to the embedding model's limit (approximate when
                            stats["embedding"] = self.embedder.stats.since(before)  # cells learn at once)
                        stats["health"] = build_health(ledger.stage_health(), stats.get("health"))
                        return stats

                    try:
                        folder = await self.store.get_or_build(f"method/{method.name}", inputs, build)
                    finally:
                        self._flush_usage(ledger, *keys)
                        if row != bar:
                            progress.remove_task(row)
                    progress.advance(bar)
                    return Cell(method, source, split, tests, folder, UsageLedger())

            jobs = [asyncio.ensure_future(learn_one(m, *rest, expect)) for (m, rest), expect in zip(pending, expected)]
            try:
                return list(await asyncio.gather(*jobs))
            except BaseException:  # the first failure stops the other cells (their partial builds are removed)
                for j in jobs:
                    j.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                raise

    # -- test phase ------------------------------------------------------------------------------
    async def _test_all(self, cells: list[Cell], done: set) -> None:
        os.environ["INSPECT_DISPLAY"] = self.cfg.display
        from inspect_ai import eval_async

        import sourcebench.harness.providers._registry  # noqa: F401

        from .inspect_tasks import cell_task, scrub_logs, single_threaded_log_compression, unfinished_logs

        tasks = []
        for cell in cells:
            todo = [t for t in cell.tests if (self.bench.name, cell.source.id, cell.method.name, cell.split.seed, t.id)
                    not in done]
            if self.cfg.task_shard:
                i, n = self.cfg.task_shard
                todo = [t for t in todo if shard_of(t.id, n) == i]
            if todo:
                # the cell's artifact and every sub-artifact it used (a shared index, SourceLearn's M0):
                # changed on disk, it is a one-line error, never N failed rows or a wrong score
                self.store.verify_tree(cell.artifact)
                tasks.append(cell_task(self, cell, todo))
        if not tasks:
            return
        self.log(f"test phase: {len(tasks)} cell(s), {sum(len(t.dataset) for t in tasks)} task(s); "
                 f"logs in {self.out / 'logs'}")
        # a worker of a distributed run must not touch the logs other workers are writing
        killed_logs = [] if self.is_worker or self.cfg.task_shard else unfinished_logs(self.out / "logs")
        # log_realtime off: inspect's live sample buffer (an sqlite write per event) cost more CPU per
        # task than the harness itself; rows are on disk per task anyway, and the logs are complete
        # (and viewable) when each cell ends
        rows_before = self.rows_written
        # no full-heap GC pauses (gcpolicy.py) and no compressor thread pools (inspect_tasks.py) while calls
        # could be in flight
        with long_lived_frozen(), single_threaded_log_compression():
            logs = await eval_async(
                tasks, model=self.spec.name, log_dir=str(self.out / "logs"),
                max_samples=self.max_samples(), fail_on_error=False, score_display=False,
                max_tasks=self._max_cells(len(tasks)), log_realtime=False,
                # no control-channel server: nothing drives a SourceBench run through it, and starting
                # it costs about a second per test phase
                ctl_server=False,
            )
        scrub_logs(killed_logs + [log.location for log in logs if log.location])
        if self.store.broken:  # a sub-artifact first opened while answering failed its check: its tasks
            raise DataError(self.store.broken[0])  # raised errors (no rows); the run stops naming it
        expected = sum(len(t.dataset) for t in tasks)
        # reading the samples back costs seconds for a big log: only when some task left no row
        errors = ([s.error.message for log in logs for s in (log.samples or []) if s.error]
                  if self.rows_written - rows_before < expected else [])
        unreachable = [e for e in errors if "ModelUnavailableError" in e or "unreachable" in e]
        if unreachable:
            raise ModelUnavailableError(unreachable[0].strip().splitlines()[-1][:300])
        over = [e for e in errors if "BudgetExceeded" in e]
        if over:  # the tasks it stopped left no row: the same command resumes them
            raise BudgetExceeded(over[0].strip().splitlines()[-1].split("BudgetExceeded: ", 1)[-1][:300])
        if errors:
            self.log(f"[yellow]{len(errors)} task(s) raised errors and were not scored; re-run to retry them "
                     f"(first: {errors[0].strip().splitlines()[-1][:200]})[/]")

    def use_shard(self, shard: tuple[int, int] | None, max_connections: int | None, max_samples: int | None) -> None:
        """Test only shard ``shard`` (i, n) of every cell's tasks, with these limits (``--test-processes``:
        the driver takes shard 0 while worker processes take the others); ``None`` restores a whole run."""
        self.cfg = replace(self.cfg, task_shard=shard, max_connections=max_connections, max_samples=max_samples)
        self.connections = max_connections or default_max_connections(self.cfg.model)
        self.gate = CallGate(self.connections)
        self.spec = replace(self.spec, max_connections=self.connections)
        if self.judge_spec:
            self.judge_spec = replace(self.judge_spec, max_connections=self.connections)

    def _max_cells(self, n: int) -> int:
        """Cells tested at once. An in-process ``local/`` model reuses each context's KV cache for
        the prompt prefix its previous call shares (harness/providers/local_llama.py), and a cell's
        answer prompts share the method's notes (a whole source model of thousands of tokens), so
        its cells go one after another; a server's cells overlap (up to 4) to keep connections busy."""
        if self.spec.name.startswith("local/"):
            return 1
        return max(1, min(n, 4))

    def max_samples(self) -> int | None:
        """Concurrent test tasks. With ``--max-connections C`` and no ``--max-samples``: 2C, so that
        every connection has a task ready while others are being prepared or scored (with C, a
        connection idles whenever its task is busy on the CPU; see benchmarks/throughput_bench.py). Without
        it, C is the run's default connection budget (``default_max_connections``)."""
        if self.cfg.max_samples:
            return self.cfg.max_samples
        return 2 * self.connections if self.connections else None

    def result_row(self, cell: Cell, task: Task, answer: Answer, score: Any) -> dict[str, Any]:
        if self.store.broken:  # an artifact failed its check while answering: no row (the run stops on it)
            raise DataError(self.store.broken[0])
        from .inspect_tasks import sample_id

        failed = bool(answer.failed or score.failed)
        code = self.code_of(cell.method)
        meta = dict(answer.metadata)
        shown = meta.pop("shown", None) or {}
        return {
            "run_id": self.run_id, "benchmark": self.bench.name, "source": cell.source.id,
            "method": cell.method.name, "method_version": cell.method.version,
            "method_code": code["code_hash"], "method_package_version": code["package_version"],
            "seed": cell.split.seed,
            "split_id": cell.split_id, "task_id": task.id, "sample_id": sample_id(self.bench.name, cell.source.id, task),
            "question": task.question, "group": task.group, "item_hash": task.item_hash,
            "score": 0.0 if failed else float(score.value), "correct": False if failed else bool(score.correct),
            "failed": failed, "failure_reason": answer.failure_reason or score.failure_reason,
            "answer": answer.text, "reference": task.reference, "evidence_ids": answer.evidence_ids,
            "evidence_titles": shown.get("evidence_titles", []), "notes": shown.get("notes", ""),
            "context_tokens": answer.context_tokens,
            "judge": {"name": score.judge, "details": score.details},
            "model": self.spec.name, "judge_model": self.judge_spec.name if self.judge_spec else None,
            "artifact": cell.artifact.name, "metadata": {**task.metadata, **meta},
        }
