"""The experiment runner: splits -> learn (once per artifact) -> frozen artifact -> test phase -> rows.

The test phase runs as inspect-ai tasks (one per method x source x seed cell), so every transcript
can be browsed with ``inspect view``. Each scored task is appended to ``results.jsonl`` at once;
a re-run skips finished rows, and the call cache makes any repeated call free, so an interrupted
run resumes where it stopped and a finished run re-run makes zero model calls.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sourcebench.harness.benchmark import Benchmark

from .artifacts import ArtifactStore
from .backend import Backend
from .budget import CallGate
from .config import BackendConfig, BudgetConfig, DataConfig, ExecutionConfig, RunConfig
from .data import Answer, Source, Split, Task
from .embeddings import Embedder, get_embedder
from .errors import BudgetExceeded, ConfigError, DataError, ModelUnavailableError
from .gcpolicy import long_lived_frozen
from .health import build_health
from .io import atomic_write_json, read_json
from .llm import CallCache, ModelSpec, UsageLedger
from .method import Context, LearnContext, Method
from .planner import Cell, Plan, Planner, check_element_ids, limit_tasks, shard_of
from .provenance import command_line, git_commit, package_versions
from .registry import get_benchmark_class, get_method_class, method_code
from .runfolder import RunFolder, RunLock, row_key

__all__ = ["BackendConfig", "BudgetConfig", "Cell", "DataConfig", "ExecutionConfig", "LearnedCell", "Plan",
           "RunConfig", "RunFolder", "RunLock", "Runner", "check_element_ids", "limit_tasks", "row_key", "shard_of"]


@dataclass
class LearnedCell:
    """A cell whose artifact is learned and frozen: what its test phase answers from."""

    cell: Cell
    artifact: Path
    ledger: UsageLedger

    @property
    def method(self) -> Method:
        return self.cell.method

    @property
    def source(self) -> Source:
        return self.cell.source

    @property
    def split(self) -> Split:
        return self.cell.split

    @property
    def tests(self) -> list[Task]:
        return self.cell.tests

    @functools.cached_property
    def split_id(self) -> str:  # hashed once per cell, not once per result row
        return self.split.split_id

    @property
    def label(self) -> str:
        return f"{self.method.name}/{self.source.id}/seed{self.split.seed}"


class Runner:
    """One run on one folder: the planner's pending cells learned (once per artifact) and tested on the
    backend, rows and counters appended to the run folder. Executors, inspect tasks and protocols use its
    public cell API (``preflight``, ``learn``, ``test``, ``context``, ``artifact_inputs``, ``result_row``,
    ``append_row``, ``flush_usage``)."""

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
        from .executors import get_executor

        self.executor = get_executor(cfg.executor, cfg.ray_address, cfg.test_processes)
        self.folder = RunFolder(self.out)
        if cfg.cache_dir:  # absolute, so worker processes (--test-processes, Ray) open the same one
            cfg = self.cfg = cfg.evolve(cache_dir=Path(cfg.cache_dir).resolve())
        self.backend = Backend(cfg, self.bench.needs_judge_model, self.out, self.log)
        self.planner = Planner(self.bench, cfg.seeds, cfg.sources, cfg.limit, cfg.guidance_limit)
        self.store = ArtifactStore(self.out / "artifacts")
        self.run_id = ""
        self.embedder: Embedder | None = None
        self.live_calls = 0
        self.is_worker = False  # a share of a distributed run (see run_worker)
        self.rows_written = 0  # result rows appended by this process
        # before the first model call (the preflight's), which would fix inspect's display to its default
        from .inspect_tasks import settle_inspect_display

        settle_inspect_display(cfg.display)

    # -- the backend's and the folder's parts, as the executors, inspect tasks and protocols see them
    @property
    def spec(self) -> ModelSpec:
        return self.backend.spec

    @property
    def judge_spec(self) -> ModelSpec | None:
        return self.backend.judge_spec

    @property
    def cache(self) -> CallCache:
        return self.backend.cache

    @property
    def cache_dir(self) -> Path:
        return self.backend.cache_dir

    @property
    def gate(self) -> CallGate:
        return self.backend.gate

    @property
    def connections(self) -> int | None:
        return self.backend.connections

    @property
    def results_path(self) -> Path:
        return self.folder.results_path

    @property
    def unavailable(self) -> list[dict[str, str]]:
        return self.planner.unavailable

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

    def flush_usage(self, ledger: UsageLedger, source: str, seed: int | None) -> None:
        """Append the calls ``ledger`` counted since its last flush to usage.jsonl / failures.jsonl."""
        rows, fails = ledger.drain()
        base = {"benchmark": self.bench.name, "source": source, "seed": seed}
        self.live_calls += sum(int(r["calls"]) for r in rows if r["status"] == "live")
        self.folder.append_counters([{**base, **r} for r in rows], [{**base, "seed": seed, **f} for f in fails])

    async def append_row(self, row: dict[str, Any]) -> None:
        """Append one scored task's row to results.jsonl, durable: awaited, the row is on disk before the
        task counts as done; the fsync runs off the event loop (milliseconds per row that would stall
        every running sample)."""
        await asyncio.to_thread(self.folder.append_row, row)
        self.rows_written += 1

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

    # -- main ------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        with self.folder.lock(), long_lived_frozen():
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
        self.backend.adopt_preflight(meta)
        done = self.folder.done_rows(self.cfg.epochs)
        _, plans = self.plan(write_manifests=False)
        pending = self.planner.pending(self.methods, plans, done)
        if pending:
            cells = await self.learn(pending)
            if stage == "test":
                await self.test(cells, done)
        return {"live_calls": self.live_calls}

    def plan(self, write_manifests: bool = True) -> tuple[list[Source], list[Plan]]:
        """Sources and the seeded (source, split, guidance, tests) plans of the run (``planner.Planner``)."""
        self.embedder = get_embedder(self.cfg.embedder, self.cache_dir)
        return self.planner.plan(self.out if write_manifests else None, self.log)

    async def _run(self) -> dict[str, Any]:
        t0 = time.time()
        prev = self.folder.previous(self.bench.name, self.spec.name, self.log)
        self.run_id = (prev or {}).get("run_id") or uuid.uuid4().hex[:12]
        self.folder.repair_torn_tail()
        self.folder.set_aside_stale_rows(self.methods, {m.name: self.code_of(m)["code_hash"] for m in self.methods},
                                         self.cfg.rerun, self.log)
        done = self.folder.done_rows(self.cfg.epochs)
        if n := self.store.remove_staging():
            self.log(f"removed {n} half-built artifact folder(s) left by an interrupted run")
        sources, plans = self.plan()
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

        pending = self.planner.pending(self.methods, plans, done)
        n_total = sum(len(p.tests) for p in plans) * len(self.methods)
        n_pending = sum(len(c.todo(self.bench.name, done)) for c in pending)
        self.log(f"[bold]{self.bench.name}[/]: {len(sources)} source(s), seeds {self.cfg.seeds}, "
                 f"{len(self.methods)} method(s): {n_total} task rows, {n_pending} to do")
        if any(m.uses_guidance for m in self.methods) and plans:
            lo, hi = min(len(p.guidance) for p in plans), max(len(p.guidance) for p in plans)
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
        return self.folder.degraded_cells(self.cfg.max_failure_share)

    def _forget_artifacts(self, plans: list[Plan]) -> None:
        """``--rerun``: remove the frozen artifacts of the named methods for this run's cells, so they are
        learned again (their model calls come from the call cache unless the code asks something new)."""
        import shutil

        for m in (m for m in self.methods if m.name in self.cfg.rerun):
            gone = 0
            for p in plans:
                folder = self.store.path(f"method/{m.name}", self.artifact_inputs(m, p.source, p.split, p.guidance))
                if folder.exists():
                    shutil.rmtree(folder)
                    gone += 1
            self.log(f"{m.name}: --rerun: {gone} artifact(s) removed; learning again")

    async def preflight(self) -> None:
        """The backend's preflight (``Backend.preflight``), its calls counted and its findings in run.json."""
        ledger = UsageLedger()
        await self.backend.preflight(ledger)
        self.backend.record_window(self.folder.run_json)
        self.flush_usage(ledger, "", None)

    # -- learn phase -----------------------------------------------------------------------------
    def artifact_inputs(self, method: Method, source: Source, split: Split, guidance: list[Task]) -> dict[str, Any]:
        """What a method's artifact for this cell is keyed by (the artifact store's inputs)."""
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
        judge_llm = self.backend.llm(self.judge_spec, ledger).bind(method.name, judge_phase) if self.judge_spec else None

        async def judge(task: Task, answer: Answer):
            return await self.bench.score(task, answer, judge_llm)

        return cls(source=source, benchmark=self.bench, llm=self.backend.llm(self.spec, ledger).bind(method.name, phase),
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

    async def learn(self, pending: list[Cell]) -> list[LearnedCell]:
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
        expected = [self._expected_learn_calls(c.method, c.source, c.guidance) for c in pending]
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

            async def learn_one(cell: Cell, expect: float | None) -> LearnedCell:
                method, source, split, guidance = cell.method, cell.source, cell.split, cell.guidance
                async with limit:
                    ledger = UsageLedger()
                    ledgers.append(ledger)
                    inputs = self.artifact_inputs(method, source, split, guidance)
                    label = f"{method.name} on {source.id} (seed {split.seed})"
                    row = bar if concurrency <= 1 else progress.add_task(label, total=None)
                    progress.update(row, description=label)
                    keys = (source.id, split.seed if method.uses_guidance else None)
                    report = self._learn_reporter(label, ledger, lambda text: progress.update(row, description=text),
                                                  lambda: self.flush_usage(ledger, *keys), expect, run_line)

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
                        self.flush_usage(ledger, *keys)
                        if row != bar:
                            progress.remove_task(row)
                    progress.advance(bar)
                    return LearnedCell(cell, folder, UsageLedger())

            jobs = [asyncio.ensure_future(learn_one(c, expect)) for c, expect in zip(pending, expected)]
            try:
                return list(await asyncio.gather(*jobs))
            except BaseException:  # the first failure stops the other cells (their partial builds are removed)
                for j in jobs:
                    j.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                raise

    # -- test phase ------------------------------------------------------------------------------
    async def test(self, cells: list[LearnedCell], done: set) -> None:
        """The test phase of the learned ``cells``: their tasks without a row in ``done`` (of this
        process's shard), as inspect-ai tasks, each scored task appended to results.jsonl."""
        from inspect_ai import eval_async

        import sourcebench.harness.providers._registry  # noqa: F401

        from .inspect_tasks import (
            cell_task,
            scrub_logs,
            settle_inspect_display,
            single_threaded_log_compression,
            unfinished_logs,
        )

        tasks = []
        for cell in cells:
            todo = cell.cell.todo(self.bench.name, done)
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
        settle_inspect_display(self.cfg.display)  # eval_async takes no display: it reads the settled one
        with long_lived_frozen(), single_threaded_log_compression():
            logs = await eval_async(
                tasks, model=self.spec.name, log_dir=str(self.out / "logs"),
                max_samples=self.max_samples(), fail_on_error=False, score_display=False,
                max_tasks=self.max_cells(len(tasks)), log_realtime=False,
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
        self.cfg = self.cfg.evolve(task_shard=shard, max_connections=max_connections, max_samples=max_samples)
        self.backend.use_connections(max_connections, self.cfg.model)

    def max_cells(self, n: int) -> int:
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

    def result_row(self, cell: LearnedCell, task: Task, answer: Answer, score: Any) -> dict[str, Any]:
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
