"""AWM (Agent Workflow Memory, Wang et al., ICML 2025), offline induction, as a QA baseline.

Learning turns every guidance task of a split into an *experience* with the normal task-time
interface (Hybrid RAG top-8 evidence, the shared answer prompt), lets the run's judge decide
whether it succeeded, and induces, in ONE model call over the successful experiences, a set of
reusable workflows: named sub-routines with a one-line description and at least two steps whose
specific values are replaced by ``{variables}``. At test time the whole workflow set is given to
the shared answer prompt as notes, next to the same Hybrid RAG evidence, so AWM and Hybrid RAG see
identical source evidence and differ only in the retained workflows.

The method never reads a task's reference (nor fields derived from it, such as a benchmark's task
group): success comes only from ``ctx.judge``. Where experiences must be truncated to fit the
context window they are taken in a seeded hash order of task ids, so the same split and seed
always induce from the same prompt and a truncated prompt is an unbiased sample of the successes.

Deviations from the official pipeline (also in ``AWM.deviations``): QA experiences (question +
evidence + answer) replace web-action trajectories; induction is a schema-constrained JSON call
validated in code instead of free text; the one-shot format example is our own; experiences are
truncated to the context window when needed; workflows reach the solver as notes of the shared
answer prompt, not an agent's system prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from sourcebench.harness.data import Answer, Evidence, Source, Task, normalise_ws, stable_hash
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.method import Context, Entry, LearnContext, Method, MethodConfig
from sourcebench.harness.schema_limits import bounded_list, bounded_text

from .evidence import TOP_K, load_index, retrieve, shared_index_deviations

WORKFLOWS_FILE = "workflows.json"
WORKFLOWS_MD = "workflows.md"
EXPERIENCES_FILE = "experiences.json"
MIN_STEPS = 2


# -- structures ------------------------------------------------------------------------------------


class Workflow(BaseModel):
    """One induced sub-routine; steps use ``{variables}`` for the values that change between tasks."""

    name: bounded_text(120)
    description: bounded_text(300)
    steps: bounded_list(bounded_text(300), 12)


class WorkflowSet(BaseModel):
    """The schema of the induction call (no minimum lengths: short workflows are dropped afterwards,
    so one bad workflow does not make the whole reply invalid)."""

    workflows: bounded_list(Workflow, 12)


class AWMConfig(MethodConfig):
    top_k: int = TOP_K  # Hybrid RAG evidence per task, as in the reference baseline
    excerpt_chars: int = 300  # per evidence item inside an experience (the solver saw ~1,200)
    induce_max_tokens: int = 2048  # output budget of the induction call (official webarena setting)
    concurrency: int | None = None  # guidance tasks answered and judged at once; None: all (--max-connections bounds)


@dataclass(frozen=True)
class Experience:
    """A guidance task as it was solved: what was asked, what was consulted, what was answered."""

    task_id: str
    question: str
    evidence: list[Evidence]
    answer: str
    correct: bool

    def render(self, index: int, excerpt_chars: int) -> str:
        lines = [f"### Question {index}: {normalise_ws(self.question)}", "Consulted excerpts:"]
        for ev in self.evidence:
            text = normalise_ws(ev.text)
            if len(text) > excerpt_chars:
                text = text[:excerpt_chars].rstrip() + " ..."
            lines.append(f"- [{ev.element_id}] {ev.title}: {text}")
        lines.append(f"Answer: {normalise_ws(self.answer)}")
        return "\n".join(lines)

    def record(self, used: bool) -> dict[str, Any]:
        return {"task_id": self.task_id, "question": self.question,
                "evidence_ids": [e.element_id for e in self.evidence], "answer": self.answer,
                "correct": self.correct, "used_in_induction": used}


@dataclass(frozen=True)
class AWMState:
    workflows: list[Workflow]
    notes: str


# -- the induction prompt -------------------------------------------------------------------------

_SYSTEM = ("You study records of questions that were answered correctly from one source and distil "
           "the reusable procedures behind them.")

# A format example from an unrelated source (software documentation); workflows that merely copy
# it are dropped, as the official pipeline filters out its one-shot website.
EXAMPLE_NAME = "look_up_option_default"
_EXAMPLE = f"""Format example (from a different source, a library manual; do not reuse it):
{{"name": "{EXAMPLE_NAME}",
 "description": "Finds the default value of a configuration option named in the question.",
 "steps": ["Locate the excerpt whose heading mentions {{option_name}} or the component that owns it.",
           "Read the sentence that states the default of {{option_name}}, noting any condition attached.",
           "Answer with {{default_value}}, adding the condition only when the question asks for it."]}}"""


def _instructions(source: Source) -> str:
    what = f'"{source.id}"' + (f" ({source.description})" if source.description else "")
    return (
        f"Below are questions about the source {what} that were answered correctly, each with the "
        "source excerpts that were consulted and the answer given.\n\n"
        "Extract the common workflows behind these solutions: sub-routines that recur across several "
        "questions and would help answer new questions of the same kinds.\n"
        "- Give each workflow a short snake_case name and a one-line description of when it applies.\n"
        "- Write the steps as general instructions. Replace every value that changes from question to "
        "question (names, attributes, numbers, identifiers) by a descriptive variable in curly braces, "
        "such as {person} or {relation}; do not copy specific values from the examples.\n"
        "- Every workflow has at least two steps.\n"
        "- Do not produce similar or overlapping workflows; each covers a distinct sub-routine.\n\n"
        + _EXAMPLE
    )


def induction_messages(source: Source, blocks: list[str]) -> list[dict[str, str]]:
    body = "\n\n".join([_instructions(source), "## Solved questions", *blocks,
                        '## Workflows\nReply with a JSON object {"workflows": [...]} listing the extracted workflows.'])
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": body}]


def induction_order(experiences: list[Experience], seed: int) -> list[Experience]:
    """A seeded, process-independent shuffle by task id: deterministic, and when the prompt must be
    truncated the kept prefix is a random sample rather than the first question kinds in id order."""
    return sorted(experiences, key=lambda e: stable_hash("awm-order", seed, e.task_id))


def fit_count(source: Source, blocks: list[str], window: int | None, reserve: int) -> int:
    """How many leading blocks fit in ``window`` tokens (chars/4) leaving ``reserve`` for the reply."""
    if window is None:
        return len(blocks)
    budget = window - reserve
    used = sum(len(m["content"]) for m in induction_messages(source, []))
    n = 0
    for b in blocks:
        used += len(b) + 2  # the blank line joining it to its neighbours
        if (used + 3) // 4 > budget:  # chars/4, as estimate_tokens
            break
        n += 1
    return n


# -- validation and rendering ---------------------------------------------------------------------

_NAME_JUNK = re.compile(r"[^a-z0-9]+")


def _name_key(name: str) -> str:
    return _NAME_JUNK.sub("_", name.lower()).strip("_")


def clean_workflows(raw: list[Workflow]) -> tuple[list[Workflow], dict[str, int]]:
    """Drop workflows with fewer than two steps, unnamed ones, copies of the format example, and
    repeated names (first kept); whitespace is normalised."""
    kept: list[Workflow] = []
    seen: set[str] = set()
    dropped = {"short": 0, "duplicate": 0, "unnamed": 0, "example": 0}
    for w in raw:
        steps = [normalise_ws(s) for s in w.steps if normalise_ws(s)]
        key = _name_key(w.name)
        if not key:
            dropped["unnamed"] += 1
        elif key == EXAMPLE_NAME:
            dropped["example"] += 1
        elif len(steps) < MIN_STEPS:
            dropped["short"] += 1
        elif key in seen:
            dropped["duplicate"] += 1
        else:
            seen.add(key)
            kept.append(Workflow(name=normalise_ws(w.name), description=normalise_ws(w.description), steps=steps))
    return kept, dropped


def render_workflows(workflows: list[Workflow]) -> str:
    """The text given to the solver (and written to workflows.md); empty when nothing was induced."""
    if not workflows:
        return ""
    parts = [("Workflows distilled from solved questions about this source ({variables} stand for the "
              "values of the question at hand):")]
    for w in workflows:
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(w.steps, 1))
        parts.append(f"## {w.name}\n{w.description}\n{steps}")
    return "\n\n".join(parts)


# -- the method -----------------------------------------------------------------------------------


class AWM(Method):
    """Agent Workflow Memory, offline induction over judged guidance experiences.

    Parallel stages and chains (learning): every guidance task is answered and judged at once (each a
    chain of an answer then its judgement; ``concurrency`` None, the default, leaves the bound to the
    run's connection budget), then one induction call over the successes: a critical path of three
    calls."""

    name = "awm"
    version = "2"  # 2: the shared index is name + excerpt over section and symbol elements
    Config = AWMConfig
    uses_guidance = True
    zero_learning_variant = "hybrid_rag"  # no workflow renders no notes: Hybrid RAG's prompt
    description = ("workflows induced in one call from the successful guidance experiences, given to the "
                   "solver next to the Hybrid RAG top-8")
    deviations: ClassVar[list[str]] = [
        ("QA sources: an experience is question + retrieved Hybrid RAG evidence (ids, titles, short excerpts) "
         "+ answer, in place of a web-action trajectory; success is the run judge's verdict."),
        ("Induction is a schema-constrained JSON call (workflows with name, description, steps) instead of free "
         "text; workflows with < 2 steps, repeated names or copies of the format example are dropped in code."),
        "The one-shot example is our own (a library-manual workflow), not the official Mind2Web/WebArena one.",
        ("If all successful experiences do not fit the model's context window (chars/4), only as many as fit are "
         "used, in a seeded hash order of task ids; the number used is recorded in the artifact stats."),
        "The workflow set enters the shared answer prompt as notes (no agent loop or action space).",
        ("The induction reply's schema bounds what a constrained decoder may write (12 workflows of at most 12 "
         "steps, 300 characters each) so a small model cannot loop to max_tokens; the official has none."),
        *shared_index_deviations(),  # its evidence is the shared index's top 8
    ]

    # -- learn ----------------------------------------------------------------------------------
    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        if ctx.judge is None:
            raise ConfigError("awm: learning needs the run's judge to decide which guidance answers succeeded")
        experiences = await self._experiences(guidance, ctx)
        successful = induction_order([e for e in experiences if e.correct], ctx.seed)
        blocks = [e.render(i, self.config.excerpt_chars) for i, e in enumerate(successful, 1)]
        n_used = fit_count(source, blocks, ctx.llm.spec.effective_context_window(), self.config.induce_max_tokens)
        stats: dict[str, Any] = {
            "n_guidance": len(guidance), "n_successful": len(successful), "n_experiences_used": n_used,
            "n_truncated": len(successful) - n_used, "induce_failed": False, "induce_error": "",
        }
        raw: list[Workflow] = []
        if n_used:
            ctx.progress(f"awm: inducing workflows from {n_used} successful experience(s)")
            res = await ctx.llm.structured(induction_messages(source, blocks[:n_used]), WorkflowSet,
                                           stage="induce", max_tokens=self.config.induce_max_tokens)
            if res.value is None:
                stats.update(induce_failed=True, induce_error=res.error)
            else:
                raw = res.value.workflows
        workflows, dropped = clean_workflows(raw)
        stats.update(n_induced=len(raw), n_workflows=len(workflows),
                     **{f"n_dropped_{k}": v for k, v in dropped.items()})
        self._save(ctx.workdir, workflows, stats, successful[:n_used], experiences)
        return stats

    async def _experiences(self, guidance: list[Task], ctx: LearnContext) -> list[Experience]:
        """Solve and judge every guidance task exactly as a test task would be solved."""
        index = await load_index(ctx)
        limit = self.config.concurrency
        gate = asyncio.Semaphore(max(1, limit)) if limit else contextlib.nullcontext()

        async def one(task: Task) -> Experience:
            async with gate:
                evidence = retrieve(index, ctx.source, task.question, k=self.config.top_k)
                answer = await ctx.solve(task, evidence, stage="guidance_answer")
                score = await ctx.judge(task, answer)  # type: ignore[misc]
            return Experience(task.id, task.question, evidence, answer.text,
                              bool(score.correct) and not answer.failed)

        ctx.progress(f"awm: answering {len(guidance)} guidance task(s)")
        return list(await asyncio.gather(*(one(t) for t in guidance)))

    @staticmethod
    def _save(folder: Path, workflows: list[Workflow], stats: dict[str, Any], used: list[Experience],
              experiences: list[Experience]) -> None:
        used_ids = {e.task_id for e in used}
        (folder / WORKFLOWS_FILE).write_text(json.dumps(
            {"stats": stats, "workflows": [w.model_dump() for w in workflows]}, indent=1, ensure_ascii=False))
        (folder / WORKFLOWS_MD).write_text((render_workflows(workflows) or "(no workflows induced)") + "\n")
        (folder / EXPERIENCES_FILE).write_text(json.dumps(
            [e.record(e.task_id in used_ids) for e in experiences], indent=1, ensure_ascii=False))

    # -- test time ------------------------------------------------------------------------------
    def load(self, artifact_dir: Path, ctx: Context) -> AWMState:
        data = json.loads((artifact_dir / WORKFLOWS_FILE).read_text())
        workflows = [Workflow.model_validate(w) for w in data["workflows"]]
        return AWMState(workflows=workflows, notes=render_workflows(workflows))

    async def answer(self, task: Task, state: AWMState, ctx: Context) -> Answer:
        index = await load_index(ctx)
        evidence = retrieve(index, ctx.source, task.question, k=self.config.top_k)
        ans = await ctx.solve(task, evidence, notes=state.notes)
        ans.metadata["n_workflows"] = len(state.workflows)
        return ans

    # -- entries (harness.method hooks): one per induced workflow ---------------------------------
    entry_kind: ClassVar[str] = "workflow"

    def entries(self, state: AWMState) -> list[Entry]:
        # the workflow's own block as render_workflows lays it out (after the shared header)
        return [Entry(_workflow_id(i, w), render_workflows([w]).split("\n\n", 1)[1])
                for i, w in enumerate(state.workflows)]

    def without(self, state: AWMState, entry_id: str) -> AWMState:
        keep = [w for i, w in enumerate(state.workflows) if _workflow_id(i, w) != entry_id]
        return AWMState(workflows=keep, notes=render_workflows(keep))


def _workflow_id(i: int, w: Workflow) -> str:
    return f"workflow-{i}:{w.name}"
