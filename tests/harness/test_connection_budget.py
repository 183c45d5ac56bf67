"""The run's connection budget (``--max-connections C``): C calls in flight across every cell and stage,
cells learned at once for a served model, and the same results and artifacts at C = 1 and C = 32."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sourcebench.harness import registry
from sourcebench.harness.budget import DEFAULT_API_CONNECTIONS, CallGate
from sourcebench.harness.data import Answer, Task
from sourcebench.harness.method import Context, LearnContext, Method
from sourcebench.harness.providers import scripted
from sourcebench.harness.registry import register_method
from sourcebench.harness.runner import RunConfig, Runner
from tests.conftest import SHARED_DATA, need_data

pytestmark = pytest.mark.slow


class Backend:
    """Wraps the scripted model's generate: counts the calls in flight at the backend, and which cell
    (the seed written in the prompt) each came from, with a short wait so that calls can overlap."""

    now = 0
    peak = 0
    seeds_at_once: ClassVar[set[frozenset]] = set()
    live: ClassVar[list[str]] = []

    @classmethod
    def reset(cls) -> None:
        cls.now = cls.peak = 0
        cls.seeds_at_once = set()
        cls.live = []


@pytest.fixture
def backend(monkeypatch):
    cls = next(c.cell_contents for c in scripted.ScriptedModel.__closure__ if isinstance(c.cell_contents, type))
    original = cls.generate

    async def generate(self, input, tools, tool_choice, config):  # type: ignore[no-untyped-def]
        tag = next((m.text.split("cell ", 1)[1].split(":", 1)[0] for m in input if "cell " in m.text), "")
        Backend.now += 1
        Backend.peak = max(Backend.peak, Backend.now)
        Backend.live.append(tag)
        Backend.seeds_at_once.add(frozenset(Backend.live))
        try:
            await asyncio.sleep(0.02)
            return await original(self, input, tools, tool_choice, config)
        finally:
            Backend.now -= 1
            Backend.live.remove(tag)

    monkeypatch.setattr(cls, "generate", generate)
    Backend.reset()
    yield Backend


class FanOut(Method):
    """One stage of 40 independent calls, all started at once (the budget decides how many run)."""

    name = "toy_fanout"
    uses_guidance = True  # one artifact per seed: cells of two seeds learn at the same time
    CALLS: ClassVar[int] = 40

    async def learn(self, source, guidance, ctx: LearnContext) -> dict[str, Any]:
        async def one(i: int) -> str:
            res = await ctx.llm.generate(f"cell {ctx.seed}: say something about item {i}", stage="fan", max_tokens=8)
            return res.text

        texts = await asyncio.gather(*(one(i) for i in range(self.CALLS)))
        (ctx.workdir / "texts.json").write_text(json.dumps(texts))
        return {}

    def load(self, artifact_dir: Path, ctx: Context) -> Any:
        return None

    async def answer(self, task: Task, state, ctx: Context) -> Answer:
        return Answer(text="x")


@pytest.fixture(autouse=True)
def _toy():
    register_method(FanOut.name, FanOut)
    yield
    registry._EXTRA[registry.METHOD_GROUP].pop(FanOut.name, None)


def _runner(out: Path, methods: list[str], seeds: list[int], **kw: Any) -> Runner:
    cfg = RunConfig(benchmark="phantomwiki", methods=methods, model="scripted/extractive", out=out, seeds=seeds,
                    limit=2, embedder="hash", data_dir=SHARED_DATA, **kw)
    return Runner(cfg)


def test_a_stage_of_40_independent_calls_keeps_c_calls_in_flight(tmp_path, backend):
    need_data("phantomwiki")
    r = _runner(tmp_path / "run", ["toy_fanout"], [0], max_connections=8)
    r.run()
    assert backend.peak == 8  # the backend saw 8 calls at once, never more
    assert r.gate.peak == 8 and r.gate.in_flight == 0


def test_two_cells_share_one_budget_and_their_calls_overlap(tmp_path, backend):
    need_data("phantomwiki")
    r = _runner(tmp_path / "run", ["toy_fanout"], [0, 1], max_connections=8)
    r.run()
    assert backend.peak == 8  # 80 calls of two cells: 8 in flight in all, not 8 per cell
    assert any(len({s for s in at_once if s}) == 2 for at_once in backend.seeds_at_once)  # both cells at once
    assert json.loads((tmp_path / "run" / "run.json").read_text())["execution"]["connections"] == 8


def test_a_served_model_gets_the_default_budget_a_local_one_its_pool(tmp_path, backend):
    need_data("phantomwiki")
    r = _runner(tmp_path / "run", ["toy_fanout"], [0])
    assert r.connections == DEFAULT_API_CONNECTIONS and r.learn_concurrency(5) == 5
    r.run()
    assert backend.peak == DEFAULT_API_CONNECTIONS  # not the provider's own 8
    local = Runner(RunConfig(benchmark="phantomwiki", methods=["toy_fanout"], model="local/smollm2",
                             out=tmp_path / "local", seeds=[0], limit=2, embedder="hash", data_dir=SHARED_DATA))
    assert local.connections is None and local.learn_concurrency(5) == 1


def test_the_gate_bounds_calls_across_event_loops():
    gate = CallGate(3)

    async def burst() -> None:
        async def one() -> None:
            async with gate.slot():
                await asyncio.sleep(0.01)

        await asyncio.gather(*(one() for _ in range(10)))

    asyncio.run(burst())
    asyncio.run(burst())  # a second loop: a fresh semaphore, the same bound
    assert gate.peak == 3 and gate.done == 20 and gate.in_flight == 0


def test_twin_calls_in_flight_make_one_live_call(tmp_path):
    """Two cells asking the same call at the same time: one live call, the other answered from the cache."""
    from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger

    gate, cache = CallGate(8), CallCache(tmp_path / "calls.sqlite")
    ledgers = [UsageLedger(), UsageLedger()]

    async def both() -> list[str]:
        llms = [LLM(ModelSpec("scripted/extractive"), cache, lg, gate=gate) for lg in ledgers]
        res = await asyncio.gather(*(llm.generate("the same question", method="m", phase="learn") for llm in llms))
        return [r.text for r in res]

    texts = asyncio.run(both())
    assert texts[0] == texts[1]
    assert sorted(lg.calls("live") for lg in ledgers) == [0, 1] and sum(lg.calls("cached") for lg in ledgers) == 1
    assert gate.done == 1


def _results(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("run_id")
    return sorted(rows, key=lambda r: (r["method"], r["seed"], r["task_id"]))


def _timeless(x: Any) -> Any:
    """``x`` without its timings (keys ending in ``seconds``)."""
    if isinstance(x, dict):
        return {k: _timeless(v) for k, v in x.items() if not k.endswith("seconds")}
    return [_timeless(v) for v in x] if isinstance(x, list) else x


def _paid_once(usage: list[dict]) -> dict[str, dict[str, float]]:
    """Usage per stage with live and cached calls together: of two cells asking the same call at once,
    either may be the one that pays (the other is answered from the cache); the calls are the same."""
    out: dict[str, dict[str, float]] = {}
    for u in usage:
        key = f"{u['phase']}/{u['stage']}/{'failed' if u['status'] == 'failed' else 'answered'}"
        row = out.setdefault(key, {})
        for k in ("calls", "input_tokens", "output_tokens", "reasoning_tokens"):
            row[k] = row.get(k, 0) + u[k]
    return out


def _artifacts(out: Path) -> dict[str, bytes]:
    """Every artifact file, byte for byte; of the manifest, the counters of the process apart: timings,
    date, which cell paid for a call two cells asked (``_paid_once``), and the embedder's counters (one embedder serves the run: a cell's share of them
    is a difference of its totals, which cells learning at once blur; they say nothing about what was
    learned)."""
    files = {}
    for p in sorted((out / "artifacts").rglob("*")):
        if not p.is_file() or p.name == ".lock":
            continue
        rel = p.relative_to(out / "artifacts").as_posix()
        if p.name == "artifact.json":
            man = json.loads(p.read_text())
            man.pop("created"), man["stats"].pop("embedding", None)
            man["stats"]["usage"] = _paid_once(man["stats"].get("usage", []))
            files[rel] = json.dumps(_timeless(man), sort_keys=True).encode()
        else:
            files[rel] = p.read_bytes()
    return files


@pytest.mark.parametrize("methods", [
    ["hybrid_rag", "hipporag2", "raptor", "awm", "rika"],
    ["sourcelearn"],
])
def test_concurrency_never_changes_what_is_learned(tmp_path, methods):
    """Byte-identical artifacts and results at C = 1 (one call at a time, one cell at a time) and C = 32
    (every cell at once), on the deterministic scripted backend."""
    need_data("phantomwiki")
    one = _runner(tmp_path / "c1", methods, [0, 1], max_connections=1, learn_concurrency=1, guidance_limit=3)
    one.run()
    many = _runner(tmp_path / "c32", methods, [0, 1], max_connections=32, guidance_limit=3)
    many.run()
    assert one.gate.peak == 1 and many.gate.peak > 1
    assert _results(tmp_path / "c1") == _results(tmp_path / "c32")
    a, b = _artifacts(tmp_path / "c1"), _artifacts(tmp_path / "c32")
    assert a.keys() == b.keys() and len(a) > len(methods)
    assert [k for k in a if a[k] != b[k]] == []


def test_sourcelearn_never_has_two_guidance_tasks_of_one_cell_in_flight(tmp_path, monkeypatch):
    """The task-guided chain answers guidance tasks one after another (each against the model its
    predecessors left), even with every cell learning at once and 32 connections."""
    need_data("phantomwiki")
    from sourcebench.harness.llm import LLM

    original = LLM.generate
    answering: dict[int, int] = {}  # per cell (its ledger): guidance answers in flight now
    most: dict[int, int] = {}
    calls: dict[int, int] = {}

    async def generate(self, messages, *, method, phase, stage="", **kw):  # type: ignore[no-untyped-def]
        if stage != "mt_answer":
            return await original(self, messages, method=method, phase=phase, stage=stage, **kw)
        cell = id(self.ledger)
        answering[cell] = answering.get(cell, 0) + 1
        most[cell] = max(most.get(cell, 0), answering[cell])
        calls[cell] = calls.get(cell, 0) + 1
        try:
            await asyncio.sleep(0.01)  # room for a second task's answer to start, were the chain not a chain
            return await original(self, messages, method=method, phase=phase, stage=stage, **kw)
        finally:
            answering[cell] -= 1

    monkeypatch.setattr(LLM, "generate", generate)
    r = _runner(tmp_path / "run", ["sourcelearn"], [0, 1], max_connections=32, guidance_limit=4)
    r.run()
    assert len(calls) == 2 and all(n >= 2 for n in calls.values())  # two cells, several tasks each
    assert set(most.values()) == {1}
    assert r.gate.peak > 1  # other calls did run at once
