"""Closed-book lower bound: the same answer prompt with no source context at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sourcebench.harness.data import Answer, Source, Task
from sourcebench.harness.method import Context, LearnContext, Method


class NoSource(Method):
    name = "no_source"
    version = "1"
    uses_guidance = False
    description = "closed book: the model answers from its parameters only"

    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        return {}

    def load(self, artifact_dir: Path, ctx: Context) -> Any:
        return None

    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        return await ctx.solve(task, [])
