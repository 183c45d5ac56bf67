"""The Method protocol: learn from a source (and guidance tasks) into an artifact, then answer.

A method never sees test tasks while learning, and never sees a test task's reference at all.
Everything a method needs from the harness (model access, embeddings, the shared answer prompt,
the run's judge, shared sub-artifacts) comes through the context objects below, so that all
methods run on the same backend and differ only in how they learn and use the source.

Reports and protocols read artifacts only through this interface (``harness/`` and ``reports/``
never import ``methods/``): the optional hooks of ``Method`` (entries, regions, artifact stats,
analysis commands) have defaults that say "not provided", so a third-party method takes part in
every protocol with the same code paths as the built-ins.
"""

from __future__ import annotations

import abc
import argparse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from .data import Answer, Evidence, Score, Source, Split, Task, normalise_ws

if TYPE_CHECKING:
    from sourcebench.harness.benchmark import Benchmark

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
    # Set in the test phase (``answering``): asks the method answering this task for its own source
    # context on a query of the benchmark's, e.g. AppWorld's documentation lookups.
    lookup: ContextLookup | None = None
    # Set only while a lookup runs: receives the evidence and notes instead of the shared prompt.
    capture: Callable[[list[Evidence], str], None] | None = None

    async def solve(self, task: Task, evidence: list[Evidence], notes: str = "", stage: str = "answer") -> Answer:
        """The shared answer prompt: same wording for every method, only the context differs. An
        interactive benchmark also gets ``lookup``, to ask the method back during the episode."""
        if self.capture is not None:
            self.capture(list(evidence), notes or "")
            return Answer(text="", evidence_ids=[e.element_id for e in evidence])
        if self.benchmark.interactive:
            return await self.benchmark.solve(task, evidence, notes, self.llm, stage=stage, lookup=self.lookup)
        return await self.benchmark.solve(task, evidence, notes, self.llm, stage=stage)


# A method's own context (evidence, notes) for a lookup task, or None when it built none.
ContextLookup = Callable[[Task], Awaitable["tuple[list[Evidence], str] | None"]]


def answering(ctx: Context, method: Method, state: Any) -> Context:
    """The context ``method`` answers one test task with: ``ctx`` whose ``lookup`` runs the same method,
    on the same loaded state, on a lookup task and hands back the context it built for it (its shared
    prompt is captured, not sent), so that methods differ only in how they represent the source."""

    async def lookup(probe: Task) -> tuple[list[Evidence], str] | None:
        captured: list[tuple[list[Evidence], str]] = []
        inner = replace(ctx, lookup=None, capture=lambda ev, notes: captured.append((ev, notes)))
        await method.answer(probe, state, inner)
        return captured[-1] if captured else None

    return replace(ctx, lookup=lookup, capture=None)


@dataclass
class LearnContext(Context):
    """Learning context. ``workdir`` is where the artifact is written; it is frozen afterwards."""

    workdir: Path = Path(".")


@dataclass(frozen=True)
class Entry:
    """One removable piece of a learned artifact (a claim, unit, workflow, link); ``text`` is what a
    prompt contains when the entry is shown (the harmful-entry protocol's exposure test)."""

    id: str
    text: str

    def shown_in(self, prompt: str) -> bool:
        """Whether the (whitespace-normalised) entry text occurs in a prompt; empty text: always."""
        text = normalise_ws(self.text)
        return not text or text in normalise_ws(prompt)


@dataclass(frozen=True)
class Command:
    """A ``sourcebench`` subcommand a method adds (``Method.cli_commands``), e.g. SourceLearn's ``audit``.

    ``add_parser(subparsers)`` adds the subcommand to the CLI's subparsers and returns its parser;
    ``run(args)`` executes it and returns the exit status. ``run_analysis(run_dir, analysis,
    options)``, when given, runs one named analysis without a command line (``sourcebench
    reproduce`` does) and raises ``NotApplicable`` when the folder has nothing it can analyse.
    ``columns`` names the category labels of the tables it writes, keyed by table, for reports
    that lay its output out.
    """

    name: str
    add_parser: Callable[[Any], argparse.ArgumentParser]
    run: Callable[[argparse.Namespace], int]
    run_analysis: Callable[[Path, str, dict[str, Any]], None] | None = None
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class NotApplicable(Exception):
    """An analysis finds nothing to analyse in a run folder: reported as not run, not as a failure."""


REPORT_NOTES = "report_notes"  # key of learn()'s stats: sentences reports show beside the cell's numbers


def learn_notes(artifact_dir: Path) -> list[str]:
    """The notes ``learn`` returned under ``REPORT_NOTES`` for one artifact (its manifest's stats), such as
    a stage the method did not build and what is scored in its place; [] when there are none."""
    from .artifacts import MANIFEST
    from .io import read_json

    path = Path(artifact_dir) / MANIFEST
    stats = read_json(path).get("stats") if path.is_file() else None
    notes = stats.get(REPORT_NOTES) if isinstance(stats, dict) else None
    return [str(n) for n in notes] if isinstance(notes, list) else []


class Method(abc.ABC):
    """Subclass, set ``name``/``version``/``Config``, implement ``learn``, ``load`` and ``answer``.

    ``uses_guidance``: whether the artifact depends on the guidance tasks of a split (then one
    artifact per split), or only on the source (one per source and backend, shared by all seeds).
    ``deviations``: where the implementation departs from the published method; shown in reports.

    ``learn`` may return, under ``REPORT_NOTES``, a list of short sentences about that artifact which the
    leaderboard prints per method, source and seed (e.g. a stage not built and what is scored instead).

    Optional hooks, read by reports and protocols (the defaults mean "not provided"):

    * ``entries(state)`` / ``without(state, entry_id)``: an artifact made of removable entries
      (the harmful-entry protocol); override both, and set ``entry_kind``;
    * ``source_regions(run_dir)``: a partition of each source's elements into regions (Table 5);
    * ``artifact_stats(artifact_dir)``: numbers derived tables read from one artifact;
    * ``cli_commands()``: analysis subcommands of ``sourcebench`` that come with the method.
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
    # The registered method whose artifact is this one's learned from no task, answered by the same reader
    # (break-even's reference, and what prequential's stateless run equals); None: no such method. Its
    # artifact is what this method's learning starts from, so shared stages they both declare cancel out.
    zero_learning_variant: ClassVar[str | None] = None

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

    # -- optional hooks for reports and protocols ------------------------------------------------
    entry_kind: ClassVar[str] = "entry"  # what one entry is, in reports: "workflow", "unit", "claim", ...

    @classmethod
    def has_entries(cls) -> bool:
        """Whether the artifact is made of removable entries: the class overrides ``entries`` and ``without``."""
        return cls.entries is not Method.entries and cls.without is not Method.without

    def entries(self, state: Any) -> Sequence[Entry | tuple[str, str]]:
        """The entries of a loaded state, as ``Entry`` or ``(id, text)``; ids unique within the state."""
        return []

    def without(self, state: Any, entry_id: str) -> Any:
        """A new loaded state with one entry removed and the rest unchanged; ``state`` itself is not changed.
        The method answers from it exactly as from a loaded artifact."""
        raise NotImplementedError(f"{self.name}: its artifact is not made of removable entries")

    @classmethod
    def source_regions(cls, run_dir: Path) -> dict[str, dict[str, str]]:
        """Source id -> {element id: region id}, from this method's artifacts in a run folder; an element
        in no region is absent. {} (default): the method defines no regions."""
        return {}

    @classmethod
    def artifact_stats(cls, artifact_dir: Path) -> dict[str, Any] | None:
        """Numbers derived tables read from one artifact folder; None when it holds no artifact of this
        method. Default: the stats ``learn`` returned (the manifest's)."""
        from .artifacts import MANIFEST
        from .io import read_json

        path = Path(artifact_dir) / MANIFEST
        return dict(read_json(path).get("stats") or {}) if path.is_file() else None

    @classmethod
    def cli_commands(cls) -> list[Command]:
        """Subcommands this method adds to ``sourcebench`` (found through the method registry)."""
        return []
