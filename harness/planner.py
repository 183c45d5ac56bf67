"""The run's plan: its sources, their seeded splits, and the cells that still have tasks to score.

Everything here is a pure function of the benchmark's data, the seeds and the limits, so every
process of a run (the driver, ``--test-processes`` workers, Ray tasks) and every protocol run on the
folder later computes the same plan and the same pending cells.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .benchmark import Benchmark
from .data import Source, Split, Task
from .errors import BenchmarkUnavailable, ConfigError, DataError, SourceBenchError
from .method import Method
from .splits import write_manifest

_UNSAFE_ID = re.compile(r"[\x00-\x1f\x7f]")


def check_element_ids(source: Source) -> None:
    """Element ids become file names in artifacts and links in reports: refuse ids that are
    absolute, climb out with ``..`` or hold control characters (one line naming the source file)."""
    for e in source.elements:
        path = e.id.split("#", 1)[0]
        parts = re.split(r"[/\\]", path)
        if (not e.id.strip() or path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path) or ".." in parts
                or _UNSAFE_ID.search(e.id)):
            raise DataError(f"{source.origin or source.id}: element id {e.id[:80]!r} is not a safe relative id "
                            "(empty, absolute, '..' or a control character)")


def limit_tasks(tasks: list[Task], limit: int | None, seed: int) -> list[Task]:
    """A seeded subset shared by all methods, so comparisons stay paired."""
    tasks = sorted(tasks, key=lambda t: t.id)
    if limit is None or limit >= len(tasks):
        return tasks
    order = np.random.default_rng(seed).permutation(len(tasks))[:limit]
    return [tasks[i] for i in sorted(order)]


def shard_of(task_id: str, n: int) -> int:
    """The shard (0..n-1) a test task belongs to: a stable hash, the same in every process."""
    return int.from_bytes(hashlib.blake2b(task_id.encode(), digest_size=8).digest(), "big") % n


@dataclass(frozen=True, eq=False)
class Plan:
    """One (source, split seed) of the run, with the guidance and test tasks it uses."""

    source: Source
    split: Split
    guidance: list[Task]
    tests: list[Task]

    @property
    def seed(self) -> int:
        return self.split.seed


@dataclass(frozen=True, eq=False)
class Cell:
    """One (method, source, seed) of the run, before it is learned."""

    method: Method
    plan: Plan

    @property
    def source(self) -> Source:
        return self.plan.source

    @property
    def split(self) -> Split:
        return self.plan.split

    @property
    def seed(self) -> int:
        return self.plan.split.seed

    @property
    def guidance(self) -> list[Task]:
        return self.plan.guidance

    @property
    def tests(self) -> list[Task]:
        return self.plan.tests

    def key(self, benchmark: str, task: Task) -> tuple:
        """The result-row key of ``task`` in this cell (``runfolder.row_key``)."""
        return (benchmark, self.source.id, self.method.name, self.seed, task.id)

    def todo(self, benchmark: str, done: set) -> list[Task]:
        """The cell's test tasks without a row yet."""
        return [t for t in self.tests if self.key(benchmark, t) not in done]


class Planner:
    """Sources, splits and pending cells of one benchmark, at the run's seeds and limits."""

    def __init__(self, bench: Benchmark, seeds: Sequence[int], sources: Sequence[str] | None = None,
                 limit: int | None = None, guidance_limit: int | None = None):
        self.bench = bench
        self.seeds = list(seeds)
        self.sources = list(sources) if sources else None
        self.limit = limit
        self.guidance_limit = guidance_limit
        self.unavailable: list[dict[str, str]] = []  # sources whose tasks cannot be had (with the reason)

    def source_ids(self) -> list[str]:
        source_ids = self.sources or self.bench.source_ids()
        unknown = set(source_ids) - set(self.bench.source_ids())
        if unknown:
            raise ConfigError(f"--sources: unknown source(s) {', '.join(sorted(unknown))} for {self.bench.name}; "
                              f"known: {', '.join(self.bench.source_ids())}")
        return list(source_ids)

    def plan(self, out: Path | None = None, log: Callable[[str], None] = lambda _: None) -> tuple[list[Source],
                                                                                                    list[Plan]]:
        """Sources, splits and the guidance and test tasks of every (source, seed), all seeded; the split
        manifests are written under ``out`` when given. A source whose tasks are unavailable is listed in
        ``self.unavailable`` (recorded in run.json and shown by the report, never scored)."""
        plans: list[Plan] = []
        sources: list[Source] = []
        self.unavailable = []
        for sid in self.source_ids():
            source = self.loaded(sid, "source", self.bench.load_source)
            if note := (source.metadata.get("provenance") or {}).get("note"):  # e.g. not the pinned tree
                log("[yellow]" + note.replace("[", "\\[") + "[/]")  # brackets in a path are not markup
            check_element_ids(source)
            sources.append(source)
            try:
                tasks = self.loaded(sid, "tasks", self.bench.load_tasks)
            except BenchmarkUnavailable as e:
                self.unavailable.append({"source": sid, "reason": str(e)})
                continue
            by_id = {t.id: t for t in tasks}
            empty = next((t for t in tasks if isinstance(t.reference, list)
                          and not any(str(x).strip() for x in t.reference)), None)
            if empty is not None:  # scored against nothing, it would be 0 for every method
                raise DataError(f"{self.bench.name}/{sid}: task {empty.id} has an empty reference list; fix or "
                                "remove it in the benchmark's data files")
            for split in self.bench.make_splits(source, tasks, self.seeds):
                if out is not None:
                    write_manifest(out, split)
                guidance = limit_tasks([by_id[i] for i in split.guidance_ids], self.guidance_limit, split.seed)
                # a field of the wrong type (a difficulty given as text): one line naming the source
                candidates = [by_id[i] for i in split.test_ids]
                chosen = self.loaded(sid, "test tasks", lambda _, c=candidates: self.bench.select_test(c))
                tests = limit_tasks(chosen, self.limit, split.seed)
                if not tests:
                    raise ConfigError(f"{self.bench.name}/{sid}: the split of seed {split.seed} has 0 test tasks "
                                      f"({len(tasks)} task(s) in all); nothing could be scored")
                plans.append(Plan(source, split, guidance, tests))
        return sources, plans

    def pending(self, methods: Sequence[Method], plans: Sequence[Plan], done: set) -> list[Cell]:
        """The cells with at least one test task not scored yet, method by method."""
        cells = [Cell(m, p) for m in methods for p in plans]
        return [c for c in cells if c.todo(self.bench.name, done)]

    def loaded(self, sid: str, what: str, load: Any) -> Any:
        """An adapter's loader, with an unexpected exception on malformed data (a field of the wrong
        type, say) turned into a one-line error naming the source instead of a traceback."""
        try:
            return load(sid)
        except SourceBenchError:
            raise
        except Exception as e:
            msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            raise DataError(f"{self.bench.name}/{sid}: cannot load the {what} from its data files "
                            f"({type(e).__name__}: {msg})") from None
