"""The Benchmark protocol and the shared answer prompt.

Every method answers through ``Benchmark.solve`` so the answer prompt is identical across methods;
only the evidence and the method's notes (a source model, workflows) differ.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from sourcebench.harness.data import Answer, Evidence, Score, Source, Split, Task, estimate_tokens
from sourcebench.harness.errors import DataError
from sourcebench.harness.splits import grouped_split

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM


DATA_ENV = "SOURCEBENCH_DATA_DIR"


def default_data_dirs() -> list[Path]:
    """Where benchmark data is looked for, in order."""
    dirs = []
    if os.environ.get(DATA_ENV):
        dirs.append(Path(os.environ[DATA_ENV]))
    dirs.append(Path.cwd() / "data")
    dirs.append(Path.cwd().parent / "shared" / "data")
    checkout = Path(__file__).resolve().parents[1]
    dirs.append(checkout.parent / "shared" / "data")
    seen, out = set(), []
    for d in dirs:
        r = d.resolve()
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


@dataclass
class DataStatus:
    benchmark: str
    present: bool
    location: str
    detail: str
    how_to_get: str


class Benchmark(abc.ABC):
    """Subclass per benchmark. ``options`` are ``--opt key=value`` pairs from the command line."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1-A"  # inspect_evals style: N bumps when results stop being comparable
    subdir: ClassVar[str] = ""  # folder under a data dir
    # An interactive benchmark's ``solve`` also takes ``lookup`` (``harness.method.Context.lookup``): it asks
    # the method answering the task for its source context on queries of its own during the episode.
    interactive: ClassVar[bool] = False
    scorer_name: ClassVar[str] = ""
    needs_judge_model: ClassVar[bool] = False
    answer_instructions: ClassVar[str] = "Answer the question concisely, in a sentence or two."
    known_options: ClassVar[dict[str, str]] = {}
    answer_max_tokens: ClassVar[int | None] = None  # None: the run's --max-tokens
    # A pydantic model for schema-constrained answers (keeps small models to the answer format), with
    # ``answer_text(value) -> str`` turning the parsed reply into the scored text.
    answer_schema: ClassVar[type[BaseModel] | None] = None
    # What the benchmark's protocol does differently from the official setting, each with its reason;
    # recorded in run.json through ``describe()`` and shown in the leaderboard's caption.
    deviations: ClassVar[list[str]] = []

    def __init__(self, data_dir: Path | None = None, options: dict[str, str] | None = None):
        self.options = dict(options or {})
        unknown = set(self.options) - set(self.known_options)
        if unknown:
            from sourcebench.harness.errors import ConfigError

            known = ", ".join(f"{k} ({v})" for k, v in self.known_options.items()) or "none"
            raise ConfigError(f"{self.name}: unknown option(s) {', '.join(sorted(unknown))}; known: {known}")
        self._data_dir = Path(data_dir) if data_dir else None

    # -- data ------------------------------------------------------------------------------------
    def data_root(self) -> Path:
        """The folder holding this benchmark's files (first candidate that exists)."""
        cands = [self._data_dir] if self._data_dir else [d / self.subdir for d in default_data_dirs()]
        if self._data_dir and (self._data_dir / self.subdir).is_dir():
            cands = [self._data_dir / self.subdir]
        for c in cands:
            if c is not None and c.is_dir():
                return c
        raise DataError(
            f"{self.name}: data folder not found (looked in {', '.join(str(c) for c in cands)}); "
            f"pass --data-dir or set {DATA_ENV}. {self.how_to_get()}"
        )

    def how_to_get(self) -> str:
        return ""

    def fetch_command(self) -> str:
        """The command that gets this benchmark's data ('' if none), shown by ``sourcebench data``."""
        return ""

    def fetch(self, dest: Path, settings: dict[str, str] | None = None, log=print) -> Any:
        """Download (or generate) the data into ``dest/<subdir>``, each step resumable and checked, and
        return what was done. The built-ins get theirs from ``sourcebench.adapters.fetch``; a benchmark
        without a fetcher says how to get its data instead."""
        from sourcebench.harness.errors import ConfigError

        raise ConfigError(f"data fetch {self.name}: no fetcher; {self.how_to_get()}")

    def data_status(self) -> DataStatus:
        try:
            root = self.data_root()
            ids = self.source_ids()
            return DataStatus(self.name, True, str(root), f"{len(ids)} source(s): {', '.join(ids)}", self.how_to_get())
        except DataError as e:
            return DataStatus(self.name, False, "", str(e), self.how_to_get())

    @abc.abstractmethod
    def source_ids(self) -> list[str]: ...

    @abc.abstractmethod
    def load_source(self, source_id: str) -> Source: ...

    @abc.abstractmethod
    def load_tasks(self, source_id: str) -> list[Task]: ...

    def make_splits(self, source: Source, tasks: list[Task], seeds: list[int]) -> list[Split]:
        return [grouped_split(self.name, source.id, tasks, s, source_fingerprint=source.fingerprint) for s in seeds]

    def select_test(self, tasks: list[Task]) -> list[Task]:
        """Filter test tasks (e.g. by difficulty) after splitting; the split itself never changes."""
        return tasks

    def task_keys(self, task: Task) -> list[str] | None:
        """The keys a task's question names (seed 002's key-overlap groups): what a reader's search would
        look up, such as the entities and relations the question mentions; never taken from the answer.

        Default: ``task.metadata["named_keys"]`` when the adapter stored a list of strings there, else
        None (the benchmark names no keys: the key-overlap protocol reports it as unavailable)."""
        keys = task.metadata.get("named_keys")
        if isinstance(keys, (list, tuple)) and all(isinstance(k, str) for k in keys):
            return list(dict.fromkeys(keys))
        return None

    # -- answering -------------------------------------------------------------------------------
    def render_evidence(self, evidence: list[Evidence]) -> str:
        return "\n\n".join(f"[{i}] {e.title} ({e.element_id})\n{e.text}" for i, e in enumerate(evidence, 1))

    def build_prompt(self, task: Task, evidence: list[Evidence], notes: str = "") -> list[dict[str, str]]:
        system = (
            "You answer questions about a source using the material provided. Base the answer on the "
            "source context; if it is not enough, give your best answer. " + self.answer_instructions
        )
        parts = []
        if notes:
            parts.append("Knowledge about the source:\n" + notes)
        if evidence:
            parts.append("Source excerpts:\n" + self.render_evidence(evidence))
        parts.append(f"Question: {task.question.strip()}")
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]

    async def solve(self, task: Task, evidence: list[Evidence], notes: str, llm: BoundLLM, stage: str = "answer") -> Answer:
        messages = self.build_prompt(task, evidence, notes)
        ctx_tokens = estimate_tokens("".join(m["content"] for m in messages))
        if self.answer_schema is not None:
            sres = await llm.structured(messages, self.answer_schema, stage=stage, max_tokens=self.answer_max_tokens)
            text = self.answer_text(sres.value) if sres.value is not None else ""
            return Answer(text=text, evidence_ids=[e.element_id for e in evidence], context_tokens=ctx_tokens,
                          failed=sres.failed, failure_reason=sres.error, metadata={"raw": sres.text[:2000]})
        res = await llm.generate(messages, stage=stage, max_tokens=self.answer_max_tokens)
        return Answer(
            text=res.text.strip(),
            evidence_ids=[e.element_id for e in evidence],
            context_tokens=ctx_tokens,
            failed=res.failed,
            failure_reason=res.error,
        )

    def answer_text(self, value: BaseModel) -> str:
        return str(getattr(value, "answer", value))

    # -- scoring ---------------------------------------------------------------------------------
    @abc.abstractmethod
    async def score(self, task: Task, answer: Answer, judge: BoundLLM | None) -> Score: ...

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "scorer": self.scorer_name, "options": self.options,
                "deviations": list(self.deviations)}
