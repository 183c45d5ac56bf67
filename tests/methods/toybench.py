"""A one-source benchmark over fixed tasks, for method tests that judge through ``ctx.judge``."""

from __future__ import annotations

from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Score, Source, Task


def toy_bench(source: Source, tasks: list[Task], method: str) -> Benchmark:
    """A benchmark serving ``source`` and ``tasks`` whose own scorer must never be used: methods
    that learn from judged guidance experience go through the run's judge."""

    class ToyBench(Benchmark):
        name = "toy"

        def source_ids(self) -> list[str]:
            return [source.id]

        def load_source(self, source_id: str) -> Source:
            return source

        def load_tasks(self, source_id: str) -> list[Task]:
            return list(tasks)

        async def score(self, task: Task, answer: Answer, judge=None) -> Score:
            raise AssertionError(f"{method} must use ctx.judge, not score references itself")

    return ToyBench()
