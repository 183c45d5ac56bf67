"""The Method protocol: learn from a source (and guidance tasks) into an artifact, then answer.

A method never sees test tasks while learning, and never sees a test task's reference at all.
Everything a method needs from the harness (model access, embeddings, the shared answer prompt,
the run's judge, shared sub-artifacts) comes through the context objects below, so that all
methods run on the same backend and differ only in how they learn and use the source.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from .data import Answer, Evidence, Score, Source, Split, Task

if TYPE_CHECKING:
    from adapters.base import Benchmark

    from .artifacts import ArtifactStore
    from .embeddings import Embedder
    from .llm import BoundLLM


class MethodConfig(BaseModel):
    """Base for typed method configs; unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class Context:
    """What the harness lends a method in either phase."""

    source: Source
    benchmark: Benchmark
    llm: BoundLLM
    embedder: Embedder
    store: ArtifactStore
    seed: int = 0
    split: Split | None = None
    judge: Callable[[Task, Answer], Awaitable[Score]] | None = None
    progress: Callable[[str], None] = lambda msg: None
    extra: dict[str, Any] = field(default_factory=dict)

    async def solve(self, task: Task, evidence: list[Evidence], notes: str = "", stage: str = "answer") -> Answer:
        """The shared answer prompt: same wording for every method, only the context differs."""
        return await self.benchmark.solve(task, evidence, notes, self.llm, stage=stage)


@dataclass
class LearnContext(Context):
    """Learning context. ``workdir`` is where the artifact is written; it is frozen afterwards."""

    workdir: Path = Path(".")


class Method(abc.ABC):
    """Subclass, set ``name``/``version``/``Config``, implement ``learn``, ``load`` and ``answer``.

    ``uses_guidance``: whether the artifact depends on the guidance tasks of a split (then one
    artifact per split), or only on the source (one per source and backend, shared by all seeds).
    ``deviations``: where the implementation departs from the published method; shown in reports.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    uses_guidance: ClassVar[bool] = False
    deviations: ClassVar[list[str]] = []
    # learn-stage name prefixes whose sub-artifacts are keyed by their own versions and outlive a change
    # of this method's version (their usage rows stay when its older result rows are set aside)
    shared_stages: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

    def __init__(self, config: MethodConfig | dict[str, Any] | None = None):
        if config is None:
            config = self.Config()
        elif isinstance(config, dict):
            config = self.Config(**config)
        self.config = config

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "config": self.config.model_dump(),
            "uses_guidance": self.uses_guidance,
            "deviations": list(self.deviations),
        }

    @abc.abstractmethod
    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        """Build the artifact into ``ctx.workdir``; return small summary stats for the manifest."""

    @abc.abstractmethod
    def load(self, artifact_dir: Path, ctx: Context) -> Any:
        """Load the frozen artifact (read-only) into whatever state ``answer`` needs."""

    @abc.abstractmethod
    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        """Answer one test task from the loaded artifact."""


@dataclass
class ActiveAnswer:
    """The method, its loaded state and the context answering the current test task.

    Interactive benchmarks (AppWorld) read it from ``ACTIVE_ANSWER`` to ask the same method for its
    source context on queries of their own (the agent's documentation lookups), so methods differ
    only in how they represent and access the source.
    """

    method: Method
    state: Any
    ctx: Context


# Set by the test phase around each ``Method.answer`` call (one value per inspect sample).
ACTIVE_ANSWER: ContextVar[ActiveAnswer | None] = ContextVar("sourcebench_active_answer", default=None)
