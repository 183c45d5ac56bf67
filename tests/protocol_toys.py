"""The toy world of the protocol tests: a one-source benchmark of coloured boxes, toy methods whose
behaviour makes the protocols' verdicts exact, and a real run folder over it (Runner, inspect test phase,
scripted model). Shared by tests/harness (the model-calling part of the protocols) and tests/reports
(their statistics and rendering).

One note makes every answer wrong (harmful), one is never shown (not evaluated), and the learners can only
answer a topic after having learned from a task about it (prequential: answered before learned from).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Score, Source, Split, Task
from sourcebench.harness.method import Context, LearnContext, Method
from sourcebench.harness.providers import scripted
from sourcebench.harness.registry import register_benchmark, register_method
from sourcebench.harness.runner import RunConfig, Runner

# ------------------------------------------------------------------------------------------ toy world

TOPICS = {"red": "crimson", "blue": "navy", "green": "olive"}
SOURCE = Source(id="boxes", kind="documents", description="a warehouse of coloured boxes", elements=[
    Element(id=f"{t}#about", title=f"{t.capitalize()} box", text=f"The {t} box is painted {c}.",
            metadata={"entity": t}) for t, c in TOPICS.items()
])


def _task(i: int, topic: str, keys: list[str], path: list[list[str]]) -> Task:
    """A toy task whose question names ``keys`` (the default Benchmark.task_keys reads metadata named_keys);
    its gold path ends elsewhere, so grouping by the gold path (or the answer) would give other groups."""
    return Task(id=f"q{i:02d}", source_id="boxes", question=f"Which paint is on the {topic} box (case {i})?",
                reference=TOPICS[topic], group=f"g{i}",
                metadata={"topic": topic, "named_keys": keys, "gold_path": path})


# Guidance tasks name keys A, B, C; test tasks name keys all / some / none of which a guidance task names.
GUIDANCE = [_task(0, "green", ["A", "B"], [["A"], ["B"]]), _task(1, "green", ["C"], [["C"], ["C"]])]
TEST = [
    _task(2, "red", ["A", "C"], [["Y"], ["Z"]]),      # all covered (its gold path: none)
    _task(3, "red", ["B", "Z"], [["B"], ["C"]]),      # some (gold path: both)
    _task(4, "blue", ["Y", "Z"], [["A"], ["B"]]),     # none (gold path: both, and it ends on a covered key)
    _task(5, "blue", ["A", "B", "C"], [["Q"], ["C"]]),  # all
    _task(6, "red", ["A", "Q"], [["A"], ["C"]]),      # some (Q never a guidance key)
    _task(7, "blue", ["C"], [["Z"]]),                 # one key, covered: all
]


class ToyBoxes(Benchmark):
    """One source, a fixed split (guidance q00-q01, test q02-q07), exact-match scoring."""

    name = "toyboxes"
    scorer_name = "exact"

    def source_ids(self) -> list[str]:
        return ["boxes"]

    def load_source(self, source_id: str) -> Source:
        return SOURCE

    def load_tasks(self, source_id: str) -> list[Task]:
        return GUIDANCE + TEST

    def make_splits(self, source: Source, tasks: list[Task], seeds: list[int]) -> list[Split]:
        return [Split(benchmark=self.name, source_id=source.id, seed=s, guidance_ids=[t.id for t in GUIDANCE],
                      test_ids=[t.id for t in TEST], mode="official",
                      item_hashes={t.id: t.item_hash for t in tasks}) for s in seeds]

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        ok = answer.text.strip().lower() == str(task.reference)
        return Score(value=float(ok), correct=ok, judge=self.scorer_name)


def topic_of(text: str) -> str:
    return next(t for t in TOPICS if f"the {t} box (case" in text)


NOTES = [  # (id, topic it is shown for, text); "*" = every task
    ("n-red", "red", "NOTE red boxes are stored on the left."),
    ("n-bad", "*", "NOTE-BAD every box is painted beige."),
    ("n-green", "green", "NOTE green boxes are stored upstairs."),  # no test task asks about green
]


class ToyNotes(Method):
    """A fixed artifact of three notes, shown to a task when their topic matches; entry hooks."""

    name = "toy_notes"
    uses_guidance = False

    async def learn(self, source, guidance, ctx: LearnContext) -> dict[str, Any]:
        (ctx.workdir / "notes.json").write_text(json.dumps(NOTES))
        return {"n_notes": len(NOTES)}

    def load(self, artifact_dir: Path, ctx: Context) -> list[tuple[str, str, str]]:
        return [tuple(n) for n in json.loads((artifact_dir / "notes.json").read_text())]

    async def answer(self, task: Task, state, ctx: Context) -> Answer:
        topic = task.metadata["topic"]
        notes = "\n".join(["Warehouse notes:"] + [text for _, t, text in state if t in ("*", topic)])
        return await ctx.solve(task, [], notes=notes)

    def entries(self, state) -> list[tuple[str, str]]:
        return [(i, text) for i, _, text in state]

    def without(self, state, entry_id: str):
        return [n for n in state if n[0] != entry_id]


class ToyReported(ToyNotes):
    """The same notes, with entry texts that never occur in a prompt: exposure comes from the answer's
    ``entries_used`` (as an agent method that reaches entries through tools reports it)."""

    name = "toy_reported"

    async def answer(self, task: Task, state, ctx: Context) -> Answer:
        ans = await super().answer(task, state, ctx)
        ans.metadata["entries_used"] = [i for i, t, _ in state if t in ("*", task.metadata["topic"])]
        return ans

    def entries(self, state) -> list[tuple[str, str]]:
        return [(i, f"<entry {i}>") for i, _, _ in state]


class ToyLearner(Method):
    """Learns each topic's paint from the tasks it is given (their references); stateless otherwise."""

    name = "toy_learner"
    uses_guidance = True
    learn_calls: ClassVar[list[list[str]]] = []

    async def learn(self, source, guidance, ctx: LearnContext) -> dict[str, Any]:
        ToyLearner.learn_calls.append([t.id for t in guidance])
        memo = {t.metadata["topic"]: str(t.reference) for t in guidance}
        (ctx.workdir / "memo.json").write_text(json.dumps(memo))
        return {"n_topics": len(memo)}

    def load(self, artifact_dir: Path, ctx: Context) -> dict[str, str]:
        return json.loads((artifact_dir / "memo.json").read_text())

    async def answer(self, task: Task, state, ctx: Context) -> Answer:
        topic = task.metadata["topic"]
        notes = f"MEMO {topic} = {state[topic]}" if topic in state else ""
        return await ctx.solve(task, [], notes=notes)


class ToyIncremental(ToyLearner):
    """The same learner with true incremental learning (``learn_more``)."""

    name = "toy_incremental"
    more_calls: ClassVar[list[list[str]]] = []

    async def learn_more(self, state, tasks, ctx: LearnContext):
        ToyIncremental.more_calls.append([t.id for t in tasks])
        return {**state, **{t.metadata["topic"]: str(t.reference) for t in tasks}}


class ToyCostly(ToyLearner):
    """A learner whose learning costs calls: a shared base summary (a sub-artifact built once per source, stage
    ``base_summary``, declared in ``shared_stages``) and one study call per task learned from; it also judges
    each task it learns from (the run's judge)."""

    name = "toy_costly"
    shared_stages: ClassVar[tuple[str, ...]] = ("base_",)

    async def learn(self, source, guidance, ctx: LearnContext) -> dict[str, Any]:
        async def base(folder: Path) -> dict[str, Any]:
            await ctx.llm.generate("TOY-LEARN summarise the warehouse", stage="base_summary")
            (folder / "base.txt").write_text("base")
            return {}

        await ctx.store.get_or_build("toy_costly/base", {"source": source.id}, base)
        for t in guidance:
            await ctx.llm.generate(f"TOY-LEARN study {t.id}", stage="study")
            await ctx.judge(t, Answer(text=str(t.reference)))  # type: ignore[misc]
        memo = {t.metadata["topic"]: str(t.reference) for t in guidance}
        (ctx.workdir / "memo.json").write_text(json.dumps(memo))
        return {"n_topics": len(memo)}


def reply(messages, schema) -> str:
    """The toy solver: beige when the bad note is shown, a memorised paint, else the note-free guess."""
    prompt = "\n".join(m["content"] for m in messages)
    if prompt.startswith(("TOY-LEARN", "JUDGE")):  # a toy learner's or the toy judge's own calls
        return "ok"
    if "NOTE-BAD" in prompt:
        return "beige"
    memo = re.search(r"MEMO \w+ = (\w+)", prompt)
    if memo:
        return memo.group(1)
    if "Warehouse notes" in prompt or "Source excerpts" in prompt:  # notes without the bad one, or evidence
        return TOPICS[topic_of(prompt)]
    return "unknown"


@contextmanager
def toys_registered() -> Iterator[None]:
    """Register the toy benchmarks and methods while a test module runs (a module-scoped autouse fixture
    enters it; not at import: collection of other modules must not see them)."""
    from sourcebench.harness import registry

    register_benchmark("toyboxes", ToyBoxes)
    register_benchmark("toynokeys", NoKeys)
    toys = (ToyNotes, ToyReported, ToyLearner, ToyIncremental, ToyCostly, ToyUntrained, ToyTrained)
    for cls in toys:
        register_method(cls.name, cls)
    try:
        yield
    finally:
        for group, names in ((registry.BENCHMARK_GROUP, ("toyboxes", "toynokeys")),
                             (registry.METHOD_GROUP, tuple(c.name for c in toys))):
            for n in names:
                registry._EXTRA[group].pop(n, None)


class NoKeys(ToyBoxes):
    """The toy benchmark with no gold paths in its tasks."""

    name = "toynokeys"

    def load_tasks(self, source_id):
        return [t.model_copy(update={"metadata": {"topic": t.metadata["topic"], "gold_path": t.metadata["gold_path"]}})
                for t in GUIDANCE + TEST]


def make_toy_run(out: Path) -> Path:
    """A real run folder (Runner, inspect test phase, scripted model) over the toy benchmark."""
    scripted.set_script(reply)
    try:
        cfg = RunConfig(benchmark="toyboxes", methods=["hybrid_rag", "toy_notes", "toy_reported", "toy_learner",
                                                       "toy_incremental", "toy_costly"],
                        model="scripted/unit", out=out, seeds=[0], embedder="hash")
        Runner(cfg).run()
    finally:
        scripted.set_script(None)
    return out


def _live(run: Path, phase: str | None = None) -> int:
    rows = [json.loads(x) for x in (run / "usage.jsonl").read_text().splitlines() if x.strip()]
    return sum(r["calls"] for r in rows if r["status"] == "live" and (phase is None or r["phase"] == phase))



class ToyUntrained(Method):
    """Only registered (for its class attributes): the zero-learning variant of ToyTrained."""

    name = "toy_untrained"
    shared_stages: ClassVar[tuple[str, ...]] = ("base_",)

    async def learn(self, source, guidance, ctx):
        return {}

    def load(self, artifact_dir, ctx):
        return None

    async def answer(self, task, state, ctx):
        return Answer(text="")


class ToyTrained(ToyUntrained):
    name = "toy_trained"
    uses_guidance = True
    zero_learning_variant = "toy_untrained"


