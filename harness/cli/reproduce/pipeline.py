"""The reproduction's driver: per (backend, benchmark) one run folder, run by the ordinary runner.

In each folder, in order:

1. every method variant the enabled tables need (``reports.plan``), variants under an alias;
2. the budget-matched counterparts of Table 2, which read the reference's per-task prompt sizes
   (they wait until the reference has scored every task the folder's other methods scored);
3. the derived data (``derive``): regions (Table 5), cycle statistics (Table 6), and the SourceLearn
   audits (Tables 3-4, Figure 4) through the run's judge model (cached, counted under method ``audit``).

Then ``reports.reproduce.write_reports`` renders the tables from what the folders hold. Running
models belongs to the application tier, so the driver lives here; the config model, the plan of
cells, the status names and the rendering stay in ``reports/``, which only reads run folders.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sourcebench.harness.errors import SourceBenchError
from sourcebench.harness.health import DEFAULT_MAX_FAILURE_SHARE
from sourcebench.harness.io import atomic_write_json
from sourcebench.reports.config import Backend, BenchmarkEntry, ExperimentConfig
from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.plan import FolderPlan, Variant, cycles_variant, plan, resolve_method
from sourcebench.reports.reproduce import write_reports
from sourcebench.reports.results import FAILED, INCOMPLETE, NOT_RUN, RAN, cell_key, status_path

# ------------------------------------------------------------------------------------ variants

def variant_class(base_cls: type, v: Variant, learn_config: dict[str, Any] | None) -> type:
    """A subclass of the method stored under the variant's alias; a task-time variant learns with
    ``learn_config`` (the base settings), so its artifact equals the base one (cached calls)."""
    attrs: dict[str, Any] = {"name": v.alias, "__module__": base_cls.__module__,
                             "__qualname__": f"{base_cls.__qualname__}[{v.alias}]"}
    if learn_config is not None:
        async def learn(self, source, guidance, ctx):
            return await base_cls(learn_config).learn(source, guidance, ctx)

        attrs["learn"] = learn
    return type(f"{base_cls.__name__}Variant", (base_cls,), attrs)


def registered(classes: dict[str, type]) -> contextlib.AbstractContextManager[None]:
    """Register alias classes for one runner call, and remove them afterwards (process-local)."""
    from sourcebench.harness import registry

    return registry.registered(registry.METHOD_GROUP, classes)


@contextlib.contextmanager
def backend_env(backend: Backend) -> Iterator[None]:
    """Set a backend's endpoint variables while it runs."""
    old = {k: os.environ.get(k) for k in backend.env}
    os.environ.update(backend.env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ------------------------------------------------------------------------------------- driver

class Reproduction:
    def __init__(self, cfg: ExperimentConfig, root: Path, console: Any = None, limit: int | None = None,
                 only: set[str] | None = None, cache_dir: Path | None = None,
                 reasoning_tokens: int | None = None, judge_reasoning_tokens: int | None = None,
                 max_failure_share: float = DEFAULT_MAX_FAILURE_SHARE):
        self.cfg = cfg
        # command-line overrides of every backend's reasoning allowance
        self.reasoning_tokens, self.judge_reasoning_tokens = reasoning_tokens, judge_reasoning_tokens
        self.max_failure_share = max_failure_share
        self.degraded: list[str] = []  # one line per degraded cell of the folders run
        self.cache_dir = cache_dir or (Path(cfg.cache_dir) if cfg.cache_dir else None)
        self.root = Path(root)
        self.console = console
        self.limit = limit
        self.only = only
        self.status: dict[str, Any] = {"config": cfg.name, "cells": {}, "derived": {}}
        path = status_path(self.root, cfg.name)
        if only and path.is_file():  # a partial run keeps the status of the cells it does not touch
            from sourcebench.harness.io import read_json

            old = read_json(path)
            self.status["cells"].update(old.get("cells") or {})
            self.status["derived"].update(old.get("derived") or {})
        self.failed = False

    def log(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(msg)

    def _set(self, b: str, bn: str, alias: str, status: str, reason: str = "", **kw: Any) -> None:
        self.status["cells"][cell_key(b, bn, alias)] = {"status": status, "reason": reason, **kw}
        self.failed |= status == FAILED

    def _step(self, b: str, bn: str, step: str, status: str, reason: str = "") -> None:
        self.status["derived"][cell_key(b, bn, step)] = {"status": status, "reason": reason}
        self.failed |= status == FAILED

    def save_status(self) -> None:
        self.status["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        atomic_write_json(status_path(self.root, self.cfg.name), self.status)

    # -- availability ------------------------------------------------------------------------------
    def _benchmark(self, bench: BenchmarkEntry) -> tuple[Any | None, str, str]:
        """(benchmark object, status, reason): not run when the adapter or its data is missing."""
        from sourcebench.harness.registry import benchmark_names, get_benchmark_class

        if bench.registered not in benchmark_names():
            return None, NOT_RUN, f"benchmark {bench.registered} is not registered"
        try:
            cls = get_benchmark_class(bench.registered)
        except Exception as e:  # noqa: BLE001 - an adapter module missing or broken: not run, with why
            return None, NOT_RUN, f"benchmark {bench.registered} is not available ({type(e).__name__}: {e})"
        data_dir = Path(self.cfg.data_dir) if self.cfg.data_dir else None
        try:
            obj = cls(data_dir=data_dir, options=bench.options)
        except SourceBenchError as e:
            return None, FAILED, str(e)
        st = obj.data_status()
        if not st.present:
            return None, NOT_RUN, f"data unavailable: {st.detail}"
        return obj, RAN, ""

    def _variant(self, v: Variant) -> tuple[type | None, dict[str, Any], str]:
        """(class to register or None for a native method, config, reason it cannot run)."""
        cls, why = resolve_method(v.method)
        if cls is None:
            return None, {}, why
        config = v.config(self.cfg)
        if v.matched_to:
            config["match_context_file"] = "matched.json"  # the real path is known once the reference has run
        try:
            cls(config)
        except ValidationError as e:
            bad = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()[:3])
            return None, {}, f"{v.method} does not support this variant's settings ({bad})"
        except Exception as e:  # noqa: BLE001 - a method's own config checks may raise anything
            return None, {}, f"{v.method}: invalid config ({type(e).__name__}: {e})"
        if v.is_native:
            return None, config, ""
        learn = v.learn_config(self.cfg) if (v.task_time or v.matched_to) else None
        return variant_class(cls, v, learn), config, ""

    # -- one folder ---------------------------------------------------------------------------------
    def run_config(self, backend: Backend, bench: BenchmarkEntry, folder: Path, methods: list[str],
                   configs: dict[str, dict[str, Any]]):
        from sourcebench.harness.config import (
            BackendConfig,
            BudgetConfig,
            DataConfig,
            ExecutionConfig,
            RunConfig,
        )

        return RunConfig(
            out=folder,
            data=DataConfig(benchmark=bench.registered, methods=methods, method_configs=configs,
                            options=dict(bench.options), sources=bench.sources,
                            data_dir=Path(self.cfg.data_dir) if self.cfg.data_dir else None, seeds=list(self.cfg.seeds),
                            limit=self.limit or bench.limit or self.cfg.limit,
                            guidance_limit=bench.guidance_limit or self.cfg.guidance_limit),
            backend=BackendConfig(model=backend.model, judge_model=backend.judge_model,
                                  embedder=backend.embedder or self.cfg.embedder, max_tokens=backend.max_tokens,
                                  temperature=backend.temperature, context_window=backend.context_window,
                                  reasoning_effort=backend.reasoning_effort,
                                  judge_reasoning_effort=backend.judge_reasoning_effort,
                                  reasoning_tokens=_first(self.reasoning_tokens, backend.reasoning_tokens),
                                  judge_reasoning_tokens=_first(self.judge_reasoning_tokens,
                                                                backend.judge_reasoning_tokens),
                                  cache_dir=self.cache_dir),
            execution=ExecutionConfig(max_samples=backend.max_samples, display="none"),
            budget=BudgetConfig(max_failure_share=self.max_failure_share))

    def _run(self, backend: Backend, bench: BenchmarkEntry, folder: Path, todo: list[tuple[Variant, type | None,
             dict[str, Any]]]) -> None:
        from sourcebench.harness.runner import Runner

        if not todo:
            return
        names = [v.alias for v, _, _ in todo]
        self.log(f"[bold]{backend.id} / {bench.id}[/]: {', '.join(names)}")
        classes = {v.alias: cls for v, cls, _ in todo if cls is not None}
        try:
            with registered(classes):
                cfg = self.run_config(backend, bench, folder, names, {v.alias: c for v, _, c in todo})
                Runner(cfg, console=self.console).run()
                write_report(folder, data_dir=cfg.data_dir)
        except SourceBenchError as e:
            for n in names:
                self._set(backend.id, bench.id, n, FAILED, str(e))
            return
        except Exception as e:  # noqa: BLE001 - a bug in one folder must not lose the others; exit 1
            for n in names:
                self._set(backend.id, bench.id, n, FAILED, f"{type(e).__name__}: {e}")
            return
        self._count(backend, bench, folder, names)

    def _count(self, backend: Backend, bench: BenchmarkEntry, folder: Path, names: list[str]) -> None:
        from sourcebench.harness.health import run_health
        from sourcebench.reports.rundata import load_run, missing_rows

        data = load_run(folder)
        rows = data.results
        for c in run_health(folder, rows, data.failures, self.max_failure_share, usage=data.usage):
            if c.degraded and c.method in names:
                self.degraded.append(f"{backend.id} / {bench.id}: {c.line()}")
                self.log(f"[red]{self.degraded[-1]}[/]")
        for n in names:
            k = sum(1 for r in rows if r["method"] == n)
            failed = sum(1 for r in rows if r["method"] == n and r.get("failed"))
            if k == 0:
                self._set(backend.id, bench.id, n, FAILED, "no test task was scored (see the inspect logs)", rows=0)
                continue
            missing, planned = missing_rows(rows, None, n)
            if missing:  # some inspect tasks errored: the cell's value is over fewer tasks than the others'
                self._set(backend.id, bench.id, n, INCOMPLETE, f"{missing} of {planned} planned rows missing"
                          + (f", {failed} scored failure(s)" if failed else ""), rows=k)
                continue
            self._set(backend.id, bench.id, n, RAN, f"{failed} scored failure(s)" if failed else "", rows=k)

    def run_folder(self, fp: FolderPlan) -> None:
        backend, bench = self.cfg.backend(fp.backend), self.cfg.benchmark(fp.benchmark)
        folder = self.root / backend.id / bench.id
        obj, st, why = self._benchmark(bench)
        if obj is None:
            for v in fp.variants:
                self._set(backend.id, bench.id, v.alias, st, why)
            self.log(f"[yellow]{backend.id} / {bench.id}: {st}: {why}[/]")
            return
        first, second = [], []
        recorded = _recorded_configs(folder)
        for v in fp.variants:
            cls, config, why = self._variant(v)
            if why:
                self._set(backend.id, bench.id, v.alias, NOT_RUN, why)
                continue
            clash = _clash(recorded.get(v.alias), (cls or resolve_method(v.method)[0]), config)
            if clash:
                self._set(backend.id, bench.id, v.alias, FAILED, f"{folder} already holds {v.alias} run with other "
                          f"settings ({clash}); use another output root or the same method settings")
                continue
            (second if v.matched_to else first).append((v, cls, config))
        self._run(backend, bench, folder, first)
        self._matched(backend, bench, folder, second)
        self.derive(fp, backend, bench, obj, folder)

    def _matched(self, backend: Backend, bench: BenchmarkEntry, folder: Path, todo: list) -> None:
        from .derive import write_matched

        ready = []
        for v, cls, config in todo:
            ref = v.matched_to
            st = self.status["cells"].get(cell_key(backend.id, bench.id, ref), {})
            if st.get("status") not in (RAN, INCOMPLETE):
                self._set(backend.id, bench.id, v.alias, NOT_RUN, f"needs {ref}, which did not run "
                          f"({st.get('reason') or st.get('status') or 'not planned'})")
                continue
            path, missing = write_matched(folder, ref)
            if missing:
                self._set(backend.id, bench.id, v.alias, NOT_RUN, f"{ref} has not scored {missing} task(s) the "
                          "other methods scored; re-run reproduce once it has")
                continue
            ready.append((v, cls, {**config, "match_context_file": str(path)}))
        self._run(backend, bench, folder, ready)

    # -- derived data -------------------------------------------------------------------------------
    def derive(self, fp: FolderPlan, backend: Backend, bench: BenchmarkEntry, obj: Any, folder: Path) -> None:
        from .derive import derive_cycles, derive_regions

        tabs = self.cfg.tables
        if not (folder / "results.jsonl").is_file():
            return
        with backend_env(backend):
            if "table5" in fp.tables:
                self._guard(backend, bench, "regions", lambda: derive_regions(
                    folder, obj, backend.embedder or self.cfg.embedder, tabs.table5.anchor_k,
                    bench.guidance_limit or self.cfg.guidance_limit))
            if "table6" in fp.tables:
                t6 = tabs.table6
                aliases = {c: cycles_variant(self.cfg, t6.method, t6.m0_method, c).alias for c in t6.cycles}
                self._guard(backend, bench, "cycles", lambda: derive_cycles(folder, aliases))
            audits: list[tuple[str, dict[str, Any]]] = []
            if "figure4" in fp.tables:
                f4 = tabs.figure4
                common = {"stages": f4.stages, "sources": f4.sources, "seed": f4.seed}
                audits += [("kinds", common), ("conditions", common),
                           ("coverage", {**common, "max_tasks": f4.coverage_max_tasks})]
            for tid, name in (("table3", "grounding"), ("table4", "preservation")):
                if tid in fp.tables:
                    t = getattr(tabs, tid)
                    audits.append((name, {"stages": t.stages, "sources": t.sources, "seed": t.seed,
                                          "sample": t.sample}))
            for name, opts in audits:
                self._guard(backend, bench, f"audit-{name}", lambda n=name, o=opts: self.audit(backend, folder, n, o))

    def _guard(self, backend: Backend, bench: BenchmarkEntry, step: str, fn) -> None:
        try:
            fn()
        except _NotRunnable as e:
            self._step(backend.id, bench.id, step, NOT_RUN, str(e))
        except SourceBenchError as e:
            self._step(backend.id, bench.id, step, FAILED, str(e))
        except Exception as e:  # noqa: BLE001 - recorded as failed (exit 1), the other steps go on
            self._step(backend.id, bench.id, step, FAILED, f"{type(e).__name__}: {e}")
        else:
            self._step(backend.id, bench.id, step, RAN)

    def audit(self, backend: Backend, folder: Path, name: str, opts: dict[str, Any]) -> None:
        """One SourceLearn audit (``sourcebench audit NAME``) on the folder's saved models, through the
        ``audit`` command the method registers (``Method.cli_commands``)."""
        from sourcebench.harness.commands import find_command
        from sourcebench.harness.method import NotApplicable

        command = find_command("audit")
        if command.run_analysis is None:
            raise _NotRunnable("the registered audit command runs from the command line only")
        try:
            command.run_analysis(folder, name, {**opts, "judge_model": backend.judge_model,
                                                "data_dir": Path(self.cfg.data_dir) if self.cfg.data_dir else None})
        except NotApplicable as e:
            raise _NotRunnable(str(e)) from None

    # -- everything ---------------------------------------------------------------------------------
    def run(self, render_only: bool = False) -> dict[str, Path]:
        self.root.mkdir(parents=True, exist_ok=True)
        if not render_only:
            for fp in plan(self.cfg, self.only):
                backend = self.cfg.backend(fp.backend)
                with backend_env(backend):
                    self.run_folder(fp)
                self.save_status()
        return write_reports(self.cfg, self.root)


def _recorded_configs(folder: Path) -> dict[str, dict[str, Any]]:
    """method name -> the config it last ran with in this run folder (from run.json)."""
    from sourcebench.harness.io import read_json

    path = folder / "run.json"
    run = read_json(path) if path.is_file() else {}
    return {m["name"]: m.get("config") or {} for m in run.get("methods") or [] if isinstance(m, dict) and "name" in m}


def _clash(recorded: dict[str, Any] | None, cls: Any, config: dict[str, Any]) -> str:
    """The settings that differ from those a folder's rows were produced with ("" when none)."""
    if recorded is None or cls is None:
        return ""
    try:
        now = cls.Config(**config).model_dump()
    except ValidationError:  # an invalid config is reported by the variant check
        return ""
    keys = sorted(k for k in set(now) | set(recorded) if k != "match_context_file" and now.get(k) != recorded.get(k))
    return ", ".join(f"{k}: {recorded.get(k)!r} there, {now.get(k)!r} here" for k in keys[:3])


class _NotRunnable(Exception):
    """A derived step whose inputs are absent (e.g. no SourceLearn model): 'not run', not an error."""


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)
