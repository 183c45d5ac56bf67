"""A template for a new method. Copy this file into your own package, rename, and register it:

    [project.entry-points."sourcebench.methods"]
    my_method = "my_pkg.my_method:MyMethod"

Then ``sourcebench run --methods hybrid_rag,my_method ...`` compares it with the baselines, and
``tests/methods/test_conformance.py`` shows the checks every registered method must pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sourcebench import Answer, Context, LearnContext, Method, MethodConfig, Source, Task
from sourcebench.methods.evidence import load_index


class TemplateConfig(MethodConfig):
    max_notes: int = 20  # every setting is typed; unknown keys are rejected


class TemplateMethod(Method):
    """Keeps the titles of the elements the guidance questions retrieve, as 'notes' for test time."""

    name = "template"
    version = "1"
    Config = TemplateConfig
    uses_guidance = True  # one artifact per split, since it reads the guidance tasks

    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        index = await load_index(ctx)
        notes: list[str] = []
        for t in guidance:  # never use t.reference here unless the method is meant to learn from it
            for ev in index.search(t.question, k=1):
                if ev.title not in notes:
                    notes.append(ev.title)
        notes = notes[: self.config.max_notes]
        (ctx.workdir / "notes.json").write_text(json.dumps(notes, indent=1))
        return {"n_notes": len(notes)}

    def load(self, artifact_dir: Path, ctx: Context) -> Any:
        return json.loads((artifact_dir / "notes.json").read_text())

    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        index = await load_index(ctx)
        notes = "Often useful sections: " + "; ".join(state) if state else ""
        return await ctx.solve(task, index.search(task.question, k=8), notes=notes)
