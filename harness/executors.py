"""Executors: where the pending cells of a run are learned and tested.

A run's work is a set of independent (method, source, seed) cells. ``local`` runs them in this
process (learn each artifact once, then the test phase as inspect-ai tasks). ``ray`` runs them as
Ray tasks on a Ray cluster (``ray.init(address=...)``), every task writing into the same output
folder, which must therefore be on a filesystem all nodes share:

1. preflight here (an unreachable endpoint fails before any task is scheduled);
2. learn: one Ray task per source, building that source's pending artifacts one after the other
   (artifacts of one source may share sub-artifacts such as the hybrid index, so they are never
   built by two processes at once; different sources never share them);
3. test: one Ray task per (method, source, seed) cell, loading the frozen artifacts and appending
   its rows to ``results.jsonl``, its counters to ``usage.jsonl``, its logs under ``logs/``.

This process keeps the folder's lock and is the only one that writes ``run.json``, repairs a torn
``results.jsonl`` tail and writes the report. Each task recomputes the seeded splits and skips rows
already present, so a re-run after a crash, a lost node or a Ctrl-C resumes exactly as a local
run does, and both executors produce the same rows.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, SourceBenchError

if TYPE_CHECKING:
    from .planner import Cell
    from .runner import RunConfig, Runner

EXECUTORS = ("local", "ray")
RAY_LOCAL_OBJECT_STORE_BYTES = 256 * 2**20  # a local instance only moves small summaries around


class LocalExecutor:
    """Everything in this process: the default. With ``test_processes`` = N > 1 the test tasks of
    every cell are split by a stable hash of their id into N shards, each tested on its own
    inspect-ai event loop with 1/N of the model connections: this process (which learned) takes
    shard 0 and N - 1 spawned worker processes the others. One event loop spends about 30 ms of CPU
    per sample in inspect-ai alone, which caps one process at about 33 tasks/s whatever the
    endpoint's concurrency (see benchmarks/throughput_bench.py)."""

    async def execute(self, runner: Runner, pending: list[Cell], done: set) -> None:
        n = runner.cfg.test_processes
        if n <= 1:
            await runner.preflight()
            cells = await runner.learn(pending)
            await runner.test(cells, done)
            return
        import concurrent.futures
        import math
        import multiprocessing
        from unittest.mock import patch  # imported here: unittest costs ~0.1 s that one-process runs skip

        cfg = runner.cfg
        # the run's connection budget is shared: each process gets 1/n of it for the test phase
        conns = math.ceil(runner.connections / n) if runner.connections else None
        samples = math.ceil(cfg.max_samples / n) if cfg.max_samples else None
        base = cfg.evolve(out=runner.out.resolve(), test_processes=1, display="none",
                          max_connections=conns, max_samples=samples,
                          data_dir=cfg.data_dir.resolve() if cfg.data_dir else None)
        local = _local_share(cfg, n)
        if local and conns is None:
            conns = local  # this process's share of the cores (its pool keeps its size for learning)
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited event loop or threads
        with concurrent.futures.ProcessPoolExecutor(max_workers=n - 1, mp_context=ctx) as pool:
            # the workers start (and pay their imports, seconds each) while this process probes and learns
            # spawned workers copy the environment: each gets its share of the model contexts
            with patch.dict(os.environ, {"SOURCEBENCH_LOCAL_INSTANCES": str(local)} if local else {}):
                warm = [asyncio.wrap_future(pool.submit(type(runner).warm_worker)) for _ in range(n - 1)]
            await runner.preflight()
            cells = await runner.learn(pending)
            await asyncio.gather(*warm)
            runner.log(f"test phase: {n} processes, each with 1/{n} of every cell's tasks"
                       + (f" and {conns} connection(s)" if conns else ""))
            futures = [asyncio.wrap_future(pool.submit(type(runner).run_share, base.evolve(task_shard=(i, n)), "test"))
                       for i in range(1, n)]
            runner.use_shard((0, n), conns, samples)
            try:
                results = await asyncio.gather(runner.test(cells, done), *futures, return_exceptions=True)
            finally:
                runner.use_shard(None, cfg.max_connections, cfg.max_samples)
        runner.live_calls += sum(int(r.get("live_calls", 0)) for r in results if isinstance(r, dict))
        from .inspect_tasks import scrub_logs, unfinished_logs

        scrub_logs(unfinished_logs(runner.out / "logs"))  # left by killed runs; every process is done
        first = next((r for r in results if isinstance(r, BaseException)), None)
        if first is not None:
            raise first if isinstance(first, SourceBenchError) else RuntimeError(
                f"test process failed: {type(first).__name__}: {first}")


def _local_share(cfg: RunConfig, n: int) -> int | None:
    """In-process contexts per test process when an embedded (``local/``) model's default pool, sized
    for the whole machine, is split over ``n`` processes; None when not applicable or set by the user."""
    models = [cfg.model, cfg.judge_model or ""]
    if not any(m.startswith("local/") for m in models) or os.environ.get("SOURCEBENCH_LOCAL_INSTANCES"):
        return None
    from .providers.local_llama import default_instances, default_threads

    return max(1, default_instances(default_threads()) // n)


class RayExecutor:
    """Cells as Ray tasks; see the module docstring for the stages and the shared-folder contract."""

    def __init__(self, address: str | None = None):
        self.address = address

    def _init(self) -> Any:
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray: Ray is not installed (pip install 'sourcebench[ray]')") from None
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR,
                              "ignore_reinit_error": True, "configure_logging": False}
        if self.address:
            kw["address"] = self.address
        else:  # a private local instance for this run
            kw["object_store_memory"] = RAY_LOCAL_OBJECT_STORE_BYTES
        try:
            ray.init(**kw)
        except (ConnectionError, ValueError, RuntimeError) as e:
            where = self.address or "a local instance"
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"--ray-address {where}: cannot connect to Ray ({msg})") from None
        return ray

    async def execute(self, runner: Runner, pending: list[Cell], done: set) -> None:
        await runner.preflight()
        ray = self._init()
        try:
            task = ray.remote(num_cpus=1, max_retries=0)(type(runner).run_share)
            base = runner.cfg.evolve(out=runner.out.resolve(), executor="local", ray_address=None, display="none",
                                     data_dir=runner.cfg.data_dir.resolve() if runner.cfg.data_dir else None)
            by_source: dict[str, tuple[list[str], list[int]]] = {}
            for cell in pending:
                ms, ss = by_source.setdefault(cell.source.id, ([], []))
                if cell.method.name not in ms:
                    ms.append(cell.method.name)
                if cell.seed not in ss:
                    ss.append(cell.seed)
            # the run's connection budget is shared by the tasks running at once (each gets its share)
            learn_base = _share(base, runner.connections, len(by_source))
            learn = [(f"learn {sid}", task.remote(learn_base.evolve(methods=ms, sources=[sid], seeds=ss), "learn"))
                     for sid, (ms, ss) in by_source.items()]
            await self._gather(ray, learn, runner)
            test_base = _share(base, runner.connections, len(pending))
            test = [(f"{c.method.name}/{c.source.id}/seed{c.seed}",
                     task.remote(test_base.evolve(methods=[c.method.name], sources=[c.source.id], seeds=[c.seed]),
                                 "test"))
                    for c in pending]
            runner.log(f"ray: {len(learn)} learn task(s) done, {len(test)} test cell(s) submitted")
            await self._gather(ray, test, runner)
            from .inspect_tasks import scrub_logs, unfinished_logs

            scrub_logs(unfinished_logs(runner.out / "logs"))  # left by killed runs; every worker is done
        finally:
            ray.shutdown()

    async def _gather(self, ray: Any, labelled: list[tuple[str, Any]], runner: Runner) -> None:
        """Wait for every task; sum their live calls; re-raise the first failure as the local run would."""
        results = await asyncio.gather(*(ref for _, ref in labelled), return_exceptions=True)
        first: BaseException | None = None
        for (label, _), res in zip(labelled, results):
            if isinstance(res, BaseException):
                cause = getattr(res, "cause", None) or res
                if first is None:
                    first = cause if isinstance(cause, SourceBenchError) else RuntimeError(
                        f"ray task {label} failed: {type(cause).__name__}: {cause}")
                continue
            runner.live_calls += int(res.get("live_calls", 0))
        if first is not None:
            raise first


def _share(cfg: RunConfig, connections: int | None, n: int) -> RunConfig:
    """``cfg`` for one of ``n`` tasks that run at once: its share of the run's connection budget."""
    import math

    return cfg.evolve(max_connections=math.ceil(connections / max(1, n))) if connections else cfg


def get_executor(name: str, ray_address: str | None = None, test_processes: int = 1) -> LocalExecutor | RayExecutor:
    if test_processes > 1 and name != "local":
        raise ConfigError("--test-processes: only with --executor local (Ray already spreads cells over processes)")
    if name == "local":
        if ray_address:
            raise ConfigError("--ray-address: only meaningful with --executor ray")
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(ray_address)
    raise ConfigError(f"--executor {name!r}: unknown executor; known: {', '.join(EXECUTORS)}")
