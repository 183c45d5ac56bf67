"""Shared fixtures for SourceLearn tests: a tiny two-folder source, tasks, a fake QA benchmark,
contexts wired to the scripted model, and a reply dispatcher keyed on prompt markers.

Every reference answer contains ``REFSECRET`` so tests can assert it never leaks into a prompt
outside diagnosis, nor into a saved model. Import it as ``from helpers import ...`` (pytest puts
this folder on sys.path; the tests folder is not a package).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Score, Source, Task
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, LearnContext


def _el(path: str, section: str, text: str) -> Element:
    name = path.rsplit("/", 1)[-1].removesuffix(".md").capitalize()
    return Element(id=f"{path}#{section}", title=f"{name} / {section.capitalize()}", text=text, path=path,
                   kind="section", metadata={"entity": name})


# Two folders (regions "people" and "places"); six entities (one per file).
SOURCE = Source(id="toytown", kind="documents", description="articles about the people and places of a toy town",
                elements=[
    _el("people/alice.md", "family", "The mother of Alice is Carol. Alice has a dog named Rex."),
    _el("people/alice.md", "work", "The job of Alice is pilot. Alice works for Nordair. Alice was born in Oslo."),
    _el("people/bob.md", "family", "The father of Bob is Dave. Bob has no siblings."),
    _el("people/bob.md", "work", "The job of Bob is pilot. Bob works for Nordair. Bob was born in Lyon."),
    _el("people/carol.md", "work", "The job of Carol is pilot. Carol works for Nordair. Carol retired in 2020."),
    _el("people/dave.md", "work", "The job of Dave is baker. Dave works at the Oslo market. Dave likes chess."),
    _el("places/oslo.md", "overview", "Oslo is a city on the fjord. The mayor of Oslo is Erin. Oslo has a port."),
    _el("places/lyon.md", "overview", "Lyon is a city on two rivers. The mayor of Lyon is Frank. Lyon has no port."),
])

GUIDANCE = [
    Task(id="g1", source_id=SOURCE.id, group="job_of_parent", question="What is the job of the mother of Alice?",
         reference="REFSECRET pilot"),
    Task(id="g2", source_id=SOURCE.id, group="job_of_parent", question="What is the job of the father of Bob?",
         reference="REFSECRET baker"),
    Task(id="g3", source_id=SOURCE.id, group="mayor", question="Who is the mayor of the city where Bob was born?",
         reference="REFSECRET Frank"),
]
TEST = [
    Task(id="t1", source_id=SOURCE.id, group="port", question="Does the city where Alice was born have a port?",
         reference="REFSECRET yes"),
    Task(id="t2", source_id=SOURCE.id, group="employer", question="Who employs Carol?",
         reference="REFSECRET Nordair"),
]


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", str(s).lower().replace("refsecret", "")).strip()


class ToyQABench(Benchmark):
    """A QA benchmark over one in-memory source; scoring is a containment match on the reference."""

    name = "toyqa"
    scorer_name = "contains"

    def __init__(self, source: Source = SOURCE, tasks: list[Task] | None = None):
        super().__init__()
        self.source = source
        self.tasks = list(tasks) if tasks is not None else GUIDANCE + TEST

    def source_ids(self) -> list[str]:
        return [self.source.id]

    def load_source(self, source_id: str) -> Source:
        return self.source

    def load_tasks(self, source_id: str) -> list[Task]:
        return list(self.tasks)

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        ok = bool(_norm(task.reference)) and _norm(task.reference) in _norm(answer.text)
        return Score(value=float(ok), correct=ok, judge="contains")


Judge = Callable[[Task, Answer], Awaitable[Score]]


def make_llm(tmp_path: Path, window: int | None = None, max_tokens: int = 256) -> LLM:
    return LLM(ModelSpec(name="scripted/unit", max_tokens=max_tokens, context_window=window),
               CallCache(Path(tmp_path) / "c.sqlite"), UsageLedger())


def make_ctx(tmp_path: Path, source: Source = SOURCE, benchmark: Benchmark | None = None,
             judge: Judge | None = None, *, llm: LLM | None = None, window: int | None = None,
             method: str = "sourcelearn", workdir: str = "artifact", seed: int = 0) -> LearnContext:
    """A learning context: scripted LLM (cache in tmp_path), HashEmbedder, store in tmp_path/store.

    Pass the same ``llm`` to several contexts to share one ledger; ``workdir`` names the artifact
    folder under tmp_path so two variants can learn side by side.
    """
    tmp_path = Path(tmp_path)
    llm = llm or make_llm(tmp_path, window)
    bench = benchmark or ToyQABench(source)
    if judge is None:
        async def judge(task: Task, answer: Answer) -> Score:
            return await bench.score(task, answer)
    wd = tmp_path / workdir
    wd.mkdir(parents=True, exist_ok=True)
    return LearnContext(source=source, benchmark=bench, llm=llm.bind(method, "learn"), embedder=HashEmbedder(),
                        store=ArtifactStore(tmp_path / "store"), seed=seed, judge=judge, workdir=wd)


def answer_ctx(learn_ctx: LearnContext, method: str | None = None) -> Context:
    """The answer-phase context matching a learning context (same LLM, ledger, store, embedder)."""
    return Context(source=learn_ctx.source, benchmark=learn_ctx.benchmark,
                   llm=learn_ctx.llm.llm.bind(method or learn_ctx.llm.method, "answer"),
                   embedder=learn_ctx.embedder, store=learn_ctx.store, seed=learn_ctx.seed)


def stage_calls(ctx: Context, status: str | None = None) -> dict[str, int]:
    """Calls per stage in the context's ledger (all statuses unless one is named)."""
    out: dict[str, int] = {}
    for row in ctx.llm.llm.ledger.snapshot():
        if status is None or row["status"] == status:
            out[row["stage"]] = out.get(row["stage"], 0) + row["calls"]
    return out


Reply = str | Callable[[list[dict[str, str]], dict[str, Any] | None], str | None] | None


def dispatch(*rules: tuple[str, Reply]):
    """A ``scripted.set_script`` hook: the first rule whose marker occurs in the prompt answers.

    A reply is a string, a function ``(messages, schema) -> str | None``, or None (default policy).
    """
    def reply(messages: list[dict[str, str]], schema: dict[str, Any] | None) -> str | None:
        prompt = "\n".join(m["content"] for m in messages)
        for marker, r in rules:
            if marker in prompt:
                return r(messages, schema) if callable(r) else r
        return None
    return reply
