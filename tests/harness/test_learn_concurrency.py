"""Cells learned at the same time (``--learn-concurrency``): overlap, one build of a shared
sub-artifact, the same artifacts as one at a time, and a failing cell that stops the others."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sourcebench.harness import registry
from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.data import Answer, Task
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.method import Context, LearnContext, Method
from sourcebench.harness.registry import register_method
from sourcebench.harness.runner import RunConfig, Runner
from tests.conftest import SHARED_DATA, need_data

pytestmark = pytest.mark.slow


class SlowLearner(Method):
    """Learning is a chain of waits (as a curator agent's calls are); the shared part is built once per source."""

    name = "toy_slow"
    uses_guidance = True
    active: ClassVar[list[int]] = [0, 0]  # [now, most at once]
    shared_builds: ClassVar[list[str]] = []
    fail_seed: ClassVar[int | None] = None

    async def learn(self, source, guidance, ctx: LearnContext) -> dict[str, Any]:
        SlowLearner.active[0] += 1
        SlowLearner.active[1] = max(SlowLearner.active)
        try:
            async def shared(folder: Path) -> dict[str, Any]:
                SlowLearner.shared_builds.append(source.id)
                await asyncio.sleep(0.2)
                (folder / "words.txt").write_text(str(len(source.elements)))
                return {}

            base = await ctx.store.get_or_build("toy_slow/shared", {"source": source.id}, shared)
            if ctx.seed == SlowLearner.fail_seed:
                raise ConfigError("toy_slow: this seed fails")
            await asyncio.sleep(0.2)
            (ctx.workdir / "memo.json").write_text(json.dumps(
                {"seed": ctx.seed, "guidance": sorted(t.id for t in guidance),
                 "elements": (base / "words.txt").read_text()}))
            return {"n": len(guidance)}
        finally:
            SlowLearner.active[0] -= 1

    def load(self, artifact_dir: Path, ctx: Context) -> dict[str, Any]:
        return json.loads((artifact_dir / "memo.json").read_text())

    async def answer(self, task: Task, state, ctx: Context) -> Answer:
        return Answer(text=f"seed {state['seed']}")


@pytest.fixture(autouse=True)
def _toy():
    register_method(SlowLearner.name, SlowLearner)
    SlowLearner.active[:] = [0, 0]
    SlowLearner.shared_builds.clear()
    SlowLearner.fail_seed = None
    yield
    registry._EXTRA[registry.METHOD_GROUP].pop(SlowLearner.name, None)


def _run(out: Path, concurrency: int) -> Runner:
    cfg = RunConfig(benchmark="phantomwiki", methods=["toy_slow"], model="scripted/extractive", out=out,
                    seeds=[0, 1, 2], limit=2, embedder="hash", data_dir=SHARED_DATA,
                    learn_concurrency=concurrency)
    runner = Runner(cfg)
    runner.run()
    return runner


def _memos(out: Path) -> list[str]:
    return sorted(p.read_text() for p in (out / "artifacts").rglob("memo.json"))


def test_cells_overlap_share_one_build_and_learn_the_same_artifacts(tmp_path):
    need_data("phantomwiki")
    _run(tmp_path / "one", 1)
    assert SlowLearner.active[1] == 1 and len(SlowLearner.shared_builds) == 1
    SlowLearner.active[:] = [0, 0]
    SlowLearner.shared_builds.clear()
    _run(tmp_path / "three", 3)
    assert SlowLearner.active[1] == 3  # the three seeds' cells learned at the same time ...
    assert len(SlowLearner.shared_builds) == 1  # ... and waited for one build of what they share
    assert _memos(tmp_path / "three") == _memos(tmp_path / "one") and len(_memos(tmp_path / "one")) == 3
    run_json = json.loads((tmp_path / "three" / "run.json").read_text())
    assert run_json["execution"]["learn_concurrency"] == 3


def test_a_failing_cell_stops_the_others_and_leaves_no_partial_artifact(tmp_path):
    need_data("phantomwiki")
    SlowLearner.fail_seed = 1
    with pytest.raises(ConfigError, match="this seed fails"):  # the error itself, not an exception group
        _run(tmp_path / "run", 3)
    assert SlowLearner.active[0] == 0  # no cell left running
    leftovers = [p for p in (tmp_path / "run" / "artifacts").rglob("*") if p.name.startswith(".")]
    assert leftovers == [] and _memos(tmp_path / "run") == []  # the others were stopped mid-build: removed
    SlowLearner.fail_seed = None
    _run(tmp_path / "run", 3)  # the same command again completes
    assert len(_memos(tmp_path / "run")) == 3


def test_one_build_per_key_in_the_store(tmp_path):
    store, builds = ArtifactStore(tmp_path), []

    async def build(folder: Path) -> dict[str, Any]:
        builds.append(folder)
        await asyncio.sleep(0.05)
        (folder / "x").write_text("1")
        return {}

    async def many() -> list[Path]:
        return list(await asyncio.gather(*(store.get_or_build("k", {"a": 1}, build) for _ in range(4))))

    paths = asyncio.run(many())
    assert len(builds) == 1 and len(set(paths)) == 1
    assert asyncio.run(many()) == paths and len(builds) == 1  # a second event loop: no lock from the first
