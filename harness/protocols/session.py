"""Re-entering a run folder to make protocol calls on exactly the run's backend.

Protocols that need new answers (harmful-entry leave-one-out, prequential) must use the run's
model settings, judge, embedder, splits and artifacts, or their numbers would not be comparable
with the leaderboard. ``RunSession`` rebuilds a ``Runner`` from ``run.json`` (so the call cache
and artifact store are the run's own: calls the test phase already made are free), recomputes the
split plans and checks them against the manifests, and hands out contexts whose every call is
counted in ``usage.jsonl`` under phase ``protocol`` with a ``<protocol>.<stage>`` stage name.
"""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from sourcebench.harness.artifacts import MANIFEST, ArtifactStore
from sourcebench.harness.config import BackendConfig, DataConfig, ExecutionConfig, RunConfig
from sourcebench.harness.data import Answer, Score, Task
from sourcebench.harness.embeddings import get_embedder
from sourcebench.harness.errors import DataError, ModelUnavailableError
from sourcebench.harness.io import read_json
from sourcebench.harness.llm import LLM, BoundLLM, Message, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, Method, answering
from sourcebench.harness.planner import Plan, limit_tasks
from sourcebench.harness.runner import Runner
from sourcebench.harness.splits import load_manifest, manifest_path

PHASE = "protocol"
C = TypeVar("C", bound=Context)


class ProtocolLLM(BoundLLM):
    """A BoundLLM on phase ``protocol`` whose stages are prefixed with the protocol's name.

    With ``recorder`` it also keeps the text of every prompt it sends, which is how the harmful-entry
    protocol tells which entries a task's answer was actually shown.
    """

    def __init__(self, llm: LLM, method: str, prefix: str, recorder: list[str] | None = None):
        super().__init__(llm, method, PHASE)
        self.prefix = prefix
        self.recorder = recorder

    def _stage(self, stage: str) -> str:
        return f"{self.prefix}.{stage}" if stage else self.prefix

    def _record(self, messages: str | list[Message]) -> None:
        if self.recorder is not None:
            self.recorder.append(messages if isinstance(messages, str)
                                 else "\n".join(m["content"] for m in messages))

    async def generate(self, messages: str | list[Message], *, stage: str = "", **kw: Any):
        self._record(messages)
        return await self.llm.generate(messages, method=self.method, phase=PHASE, stage=self._stage(stage), **kw)

    async def structured(self, messages: str | list[Message], schema: Any, *, stage: str = "", **kw: Any):
        self._record(messages)
        return await self.llm.structured(messages, schema, method=self.method, phase=PHASE,
                                         stage=self._stage(stage), **kw)


def run_config(run_dir: Path, methods: list[str] | None = None, data_dir: Path | None = None) -> RunConfig:
    """The RunConfig of the run's test phase, as ``run.json`` records it (validated; a bad file is a
    one-line error naming it), for ``methods`` (default: the run's) and shown nowhere."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise DataError(f"{path}: file not found (not a run folder?)")
    run = read_json(path)
    if not isinstance(run, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(run).__name__}")
    if "config" in run:  # the whole configuration of the test phase, as it ran
        cfg = RunConfig.load(path)
        names = methods or list(cfg.methods)
        return cfg.evolve(out=Path(run_dir), methods=names, display="none", data_dir=data_dir or cfg.data_dir,
                          method_configs={n: c for n, c in cfg.method_configs.items() if n in names},
                          executor="local", ray_address=None, test_processes=1, task_shard=None)
    return _recorded_config(path, run, methods, data_dir)


def _recorded_config(path: Path, run: dict[str, Any], methods: list[str] | None,
                     data_dir: Path | None) -> RunConfig:
    """A folder written before run.json held the configuration: what its other entries say. Its data
    folder is ``data_dir`` (the command line it recorded is not parsed for one)."""
    bench = run.get("benchmark") or {}
    bench_name = bench.get("name") if isinstance(bench, dict) else bench
    model = run.get("model") or {}
    judge = run.get("judge_model") or {}
    configs = {m["name"]: m.get("config") or {} for m in run.get("methods") or [] if isinstance(m, dict)}
    if not bench_name or not model.get("name"):
        raise DataError(f"{path}: no benchmark or model recorded")
    names = methods or list(configs)
    execution = run.get("execution") or {}
    retries = {k: execution[k] for k in ("max_retries", "timeout", "attempt_timeout") if k in execution}
    data = DataConfig(benchmark=str(bench_name), methods=names, seeds=[int(s) for s in run.get("seeds") or [0]],
                      limit=run.get("limit"), guidance_limit=run.get("guidance_limit"),
                      sources=[s["id"] for s in run.get("sources") or [] if isinstance(s, dict)] or None,
                      data_dir=data_dir, options=dict(bench.get("options") or {}) if isinstance(bench, dict) else {},
                      method_configs={n: configs[n] for n in names if n in configs})
    backend = BackendConfig(model=str(model["name"]), judge_model=judge.get("name"),
                            embedder=str(run.get("embedder") or "auto"), max_tokens=int(model.get("max_tokens") or 512),
                            temperature=float(model.get("temperature") or 0.0),
                            context_window=model.get("context_window"), **retries)
    try:
        return RunConfig(out=Path(path.parent), data=data, backend=backend,
                         execution=ExecutionConfig(max_connections=execution.get("max_connections")))
    except ValidationError as e:
        err = e.errors()[0]
        raise DataError(f"{path}: {'.'.join(str(x) for x in err.get('loc', ()))}: {err.get('msg')}") from None


class RunSession:
    """The run's runner, plans and artifacts, plus contexts that count calls as protocol calls."""

    def __init__(self, run_dir: Path, methods: list[str] | None = None, data_dir: Path | None = None):
        self.run_dir = Path(run_dir)
        self.cfg = run_config(self.run_dir, methods, data_dir)
        self.runner = Runner(self.cfg)
        self.runner.run_id = str(read_json(self.run_dir / "run.json").get("run_id") or "")
        self.runner.embedder = get_embedder(self.cfg.embedder, self.run_dir / "cache")
        self.ledger = UsageLedger()
        self._llms: dict[ModelSpec, LLM] = {}
        self._plans: list[Plan] | None = None
        self.protocol_store = ArtifactStore(self.run_dir / "protocols" / "artifacts")

    @property
    def methods(self) -> list[Method]:
        return self.runner.methods

    @property
    def bench(self) -> Any:
        return self.runner.bench

    def llm(self, spec: ModelSpec) -> LLM:
        """One LLM per model spec (a local model is loaded once), all on the session's ledger."""
        if spec not in self._llms:
            self._llms[spec] = LLM(spec, self.runner.cache, self.ledger)
        return self._llms[spec]

    # -- plans and artifacts -------------------------------------------------------------------------
    def plans(self) -> list[Plan]:
        """The run's cells, recomputed as the runner did and checked against the split manifests."""
        if self._plans is None:
            out: list[Plan] = []
            for sid in self.cfg.sources or self.bench.source_ids():
                source = self.bench.load_source(sid)
                tasks = self.bench.load_tasks(sid)
                by_id = {t.id: t for t in tasks}
                for split in self.bench.make_splits(source, tasks, self.cfg.seeds):
                    mpath = manifest_path(self.run_dir, split)
                    if mpath.exists() and load_manifest(mpath).split_id != split.split_id:
                        raise DataError(f"{mpath}: the split computed now differs from the run's (data changed)")
                    guidance = limit_tasks([by_id[i] for i in split.guidance_ids], self.cfg.guidance_limit,
                                           split.seed)
                    tests = limit_tasks(self.bench.select_test([by_id[i] for i in split.test_ids]),
                                        self.cfg.limit, split.seed)
                    out.append(Plan(source, split, guidance, tests))
            self._plans = out
        return self._plans

    def artifact_inputs(self, method: Method, plan: Plan, guidance: list[Task] | None = None) -> dict[str, Any]:
        return self.runner.artifact_inputs(method, plan.source, plan.split,
                                           plan.guidance if guidance is None else guidance)

    def run_artifact(self, method: Method, plan: Plan) -> Path | None:
        """The frozen artifact the run's test phase used for this cell, or None if it was never learned."""
        folder = self.runner.store.path(f"method/{method.name}", self.artifact_inputs(method, plan))
        return folder if (folder / MANIFEST).exists() else None

    def load_state(self, method: Method, folder: Path, plan: Plan) -> Any:
        self.runner.store.verify(folder)  # the content check needs no store root: any artifact folder
        return method.load(folder, self.context(Context, method, plan, "load"))

    # -- contexts and answers ------------------------------------------------------------------------
    def context(self, cls: type[C], method: Method, plan: Plan, protocol: str, *,
                recorder: list[str] | None = None, model_seed: int | None = None, **kw: Any) -> C:
        """A context like the runner's, with calls on phase ``protocol`` (the judge's too).

        ``model_seed`` replaces the solver's sampling seed (paired evaluation repeats); the cache
        keys include it, so each repeat is a separate, cached call.
        """
        spec = self.runner.spec if model_seed is None else replace(self.runner.spec, seed=model_seed)
        judge_llm = (ProtocolLLM(self.llm(self.runner.judge_spec), method.name, f"{protocol}.judge")
                     if self.runner.judge_spec else None)

        async def judge(task: Task, answer: Answer) -> Score:
            return await self.bench.score(task, answer, judge_llm)

        return cls(source=plan.source, benchmark=self.bench,
                   llm=ProtocolLLM(self.llm(spec), method.name, protocol, recorder),
                   embedder=self.runner.embedder, store=self.runner.store, seed=plan.seed, split=plan.split,
                   judge=judge, **kw)

    def flush(self, plan: Plan | None) -> None:
        """Append the calls counted so far to the run's usage.jsonl / failures.jsonl."""
        self.runner.flush_usage(self.ledger, plan.source.id if plan else "", plan.seed if plan else None)

    @property
    def live_calls(self) -> int:
        return self.runner.live_calls


async def answer_and_score(method: Method, task: Task, state: Any, ctx: Context) -> tuple[Answer, float]:
    """Answer one task as the test phase does (a method error is a scored failure) and score it."""
    try:
        answer = await method.answer(task, state, answering(ctx, method, state))
    except (ModelUnavailableError, asyncio.CancelledError):
        raise
    except Exception as e:  # noqa: BLE001  (a method bug is a scored failure, as in the test phase)
        answer = Answer(text="", failed=True, failure_reason=f"method error: {type(e).__name__}: {e}",
                        metadata={"traceback": traceback.format_exc(limit=3)[-2000:]})
    score = await ctx.judge(task, answer)  # type: ignore[misc]
    value = 0.0 if (answer.failed or score.failed) else float(score.value)
    return answer, value


async def gather_limited(coros: list[Any], limit: int = 8) -> list[Any]:
    """``asyncio.gather`` with at most ``limit`` coroutines running at once, results in order."""
    gate = asyncio.Semaphore(max(1, limit))

    async def one(c: Any) -> Any:
        async with gate:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))
