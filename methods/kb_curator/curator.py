"""Supervised curation: one training iteration per guidance question, over one or more epochs.

An iteration follows the paper's two phases. Forward: the reader attempts the question on the
current store (search / read / answer, within the reader budget) and the run's judge scores the
answer. Backward: the curator is shown its attempt, the gold answer, the F1 and one coarse outcome,
names the keys the question uses and the indexes it missed, then edits the store (search, read,
add, link_many, edit, delete, unlink, done) within the curator budget. Leftover forward budget is
forfeited; a forward attempt that runs out of actions or fails still gets its gold for the update.
The store carries forward to the next iteration; only validated edits are kept, as a trace.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from sourcebench.harness.data import Answer, Task, normalise_ws, stable_hash
from sourcebench.harness.method import Context, MethodConfig

from .reader import Episode, answer_from_episode, fit_history, render_steps, run_reader
from .tools import (
    LINK_MAX,
    Add,
    CuratorStep,
    DedupGuard,
    Delete,
    Done,
    EditDoc,
    GoldGuard,
    KeyAnalysis,
    LinkMany,
    Observation,
    Read,
    Search,
    ToolBox,
    Unlink,
    describe_action,
    render_reference,
)


class KBCuratorConfig(MethodConfig):
    epochs: int = Field(2, ge=1)  # the paper's main run: two passes over the training questions
    reader_budget: int = Field(15, ge=2)  # actions per question, the answer included (forward and test)
    curator_budget: int = Field(15, ge=1)  # actions per backward phase, 'done' included
    memory_window: int = Field(6, ge=1)  # recent action-result pairs an agent keeps in view
    history_chars: int = Field(16000, ge=1000)  # beyond this, older results in view shrink to one line
    search_k: int = Field(5, ge=1)  # results per search
    snippet_chars: int = Field(160, ge=20)  # text shown per search hit and per link target
    read_chars: int = Field(4000, ge=200)  # a read shows at most this much of a document
    link_max: int = Field(LINK_MAX, ge=1)  # link_many targets per call (paper: 40)
    dedup_threshold: float = Field(0.90, gt=0, le=1)  # cosine above which the duplicate judge is asked
    dedup_neighbours: int = Field(3, ge=1)
    dedup_max_tokens: int = Field(500, ge=16)
    step_max_tokens: int = Field(512, ge=32)  # output budget of one action
    max_evidence: int = Field(8, ge=1)  # documents given to the answer prompt (all reads are kept)
    on_exhausted: Literal["answer", "abstain"] = "answer"


CURATOR_SYSTEM = """You maintain a knowledge base of linked documents. A reader with search, read and answer actions uses it to answer questions; your changes should let later readers reach answers in fewer actions and more reliably.
You have just attempted a question as the reader and now see the correct answer. Find the documents that state it, compare them with where you searched, and improve the store's structure:
- Work on one key at a time: an entity, relation or attribute value the question names (for example "people whose hobby is X" or "the friends of Y").
- An index document names its key in its title and text; attach the documents that state the key's members with link_many (at most {link_max} ids per call). Link documents rather than copying their content into the text.
- Precision before completeness: link only documents you have checked belong to the key.
- Never write the answer itself into a document (such writes are refused), and do not write near copies of existing documents (also refused).
- Use edit, delete or unlink only to repair something wrong.
Actions, one per turn: search(query), read(doc_id), add(title, text) which returns the new id, link_many(from_id, to_ids), edit(doc_id, text), delete(doc_id), unlink(from_id, to_id), done. You have {budget} actions; choose done once the store holds what this question needed."""

KEYS_MAX_TOKENS = 256  # two short texts

KEYS_SYSTEM = ("You maintain a knowledge base of linked documents that a reader searches to answer questions. "
               "Given a question, the reader's attempt and the correct answer, list the keys the question names "
               "(entities, relations or attribute values a lookup starts from) and those keys for which an index "
               "document linking all of the key's documents would have saved the reader actions.")


@dataclass
class Feedback:
    """What the backward phase is shown about the forward attempt (the paper's uniform feedback)."""

    question: str
    trajectory: str
    answer: str
    gold: str
    f1: float
    outcome: str

    def render(self) -> str:
        return (f"Question: {normalise_ws(self.question)}\n\nYour attempt as the reader:\n{self.trajectory}\n\n"
                f"Your answer: {normalise_ws(self.answer) or '(none)'}\nCorrect answer: {self.gold}\n"
                f"F1 of your answer: {self.f1:.2f} (outcome: {self.outcome})")


def outcome_of(ep: Episode, answer: Answer, f1: float, correct: bool) -> str:
    if ep.error or answer.failed:
        return "failed"
    if ep.exhausted and not answer.text:
        return "ran out of actions without answering"
    if correct:
        return "correct"
    return "partly correct" if f1 > 0 else "wrong"


def training_order(guidance: list[Task], seed: int, epoch: int) -> list[Task]:
    """A seeded, process-independent order of the guidance questions for one epoch."""
    return sorted(guidance, key=lambda t: stable_hash("kb-curator", seed, epoch, t.id))


def curator_messages(feedback: Feedback, keys: KeyAnalysis | None, steps: list[tuple[str, Observation]],
                     cfg: KBCuratorConfig, history_chars: int | None = None) -> list[dict[str, str]]:
    parts = [feedback.render()]
    if keys is not None:
        parts.append(f"Keys the question names: {normalise_ws(keys.keys) or '(none)'}\n"
                     f"Indexes that were missing: {normalise_ws(keys.missing_indexes) or '(none)'}")
    recent = steps[-cfg.memory_window:]
    omitted = len(steps) - len(recent)
    if recent:
        hist = [f"({omitted} earlier action(s) no longer shown)"] if omitted else []
        hist += render_steps(recent, label="Action", first=omitted + 1,
                             budget_chars=cfg.history_chars if history_chars is None else history_chars)
        parts.append("Your curation actions so far:\n" + "\n\n".join(hist))
    parts.append(f"Actions used: {len(steps)} of {cfg.curator_budget}. Choose the next action.")
    return [{"role": "system", "content": CURATOR_SYSTEM.format(link_max=cfg.link_max, budget=cfg.curator_budget)},
            {"role": "user", "content": "\n\n".join(parts)}]


async def forward(task: Task, tools: ToolBox, ctx: Context, cfg: KBCuratorConfig, stage: str) -> tuple[Episode, Answer]:
    """The reader's attempt on the current store, answered through the shared prompt."""
    ep = await run_reader(task.question, tools, ctx, budget=cfg.reader_budget, window=cfg.memory_window,
                          stage=f"{stage}_step", max_tokens=cfg.step_max_tokens, history_chars=cfg.history_chars)
    ans = await answer_from_episode(task, ep, ctx, on_exhausted=cfg.on_exhausted, max_evidence=cfg.max_evidence,
                                    stage=f"{stage}_answer")
    return ep, ans


async def backward(task: Task, feedback: Feedback, tools: ToolBox, dedup: DedupGuard, ctx: Context,
                   cfg: KBCuratorConfig) -> dict[str, Any]:
    """Key analysis, then up to ``curator_budget`` curation actions; returns what happened."""
    kres = await ctx.llm.structured([{"role": "system", "content": KEYS_SYSTEM},
                                     {"role": "user", "content": feedback.render()}], KeyAnalysis,
                                    stage="curate_keys", max_tokens=KEYS_MAX_TOKENS)
    gold = GoldGuard(task.reference, task.question)
    steps: list[tuple[str, Observation]] = []
    stop, error = "budget", ""
    while len(steps) < cfg.curator_budget:
        messages = await fit_history(ctx, lambda chars: curator_messages(feedback, kres.value, steps, cfg, chars),
                                     cfg.history_chars, cfg.step_max_tokens)
        res = await ctx.llm.structured(messages, CuratorStep, stage="curate_step", max_tokens=cfg.step_max_tokens)
        if res.value is None:
            stop, error = "error", res.error or "no valid action"
            break
        action = res.value.action
        if isinstance(action, Done):
            steps.append((describe_action(action), Observation("", kind="done")))
            stop = "done"
            break
        steps.append((describe_action(action), await execute(action, task.id, tools, gold, dedup)))
    kinds = Counter(o.kind for _, o in steps)
    return {"backward_actions": len(steps), "backward_stop": stop, "backward_rejected": kinds["reject"],
            "backward_edits": kinds["edit"], "keys_failed": kres.value is None,
            **({"backward_error": error[:200]} if error else {})}


async def execute(action: Any, task_id: str, tools: ToolBox, gold: GoldGuard, dedup: DedupGuard) -> Observation:
    if isinstance(action, Search):
        return tools.search(action.query)
    if isinstance(action, Read):
        return tools.read(action.doc_id)
    if isinstance(action, Add):
        return await tools.add(action, task_id, gold, dedup)
    if isinstance(action, LinkMany):
        return tools.link_many(action, task_id)
    if isinstance(action, EditDoc):
        return await tools.edit(action, task_id, gold, dedup)
    if isinstance(action, Delete):
        return tools.delete(action, task_id)
    if isinstance(action, Unlink):
        return tools.unlink(action, task_id)
    raise TypeError(f"not a curator action: {action!r}")


async def train_iteration(task: Task, epoch: int, tools: ToolBox, dedup: DedupGuard, ctx: Context,
                          cfg: KBCuratorConfig) -> dict[str, Any]:
    """Forward attempt, judge, gold revealed, backward edits. The record holds no answer text."""
    assert ctx.judge is not None
    n_trace = len(tools.trace)
    ep, ans = await forward(task, tools, ctx, cfg, stage="train_forward")
    score = await ctx.judge(task, ans)
    f1 = 0.0 if (ans.failed or score.failed) else float(score.value)
    correct = bool(score.correct) and not ans.failed and not score.failed
    feedback = Feedback(task.question, ep.trajectory(), ans.text, render_reference(task.reference), f1,
                        outcome_of(ep, ans, f1, correct))
    back = await backward(task, feedback, tools, dedup, ctx, cfg)
    new = tools.trace[n_trace:]
    return {"epoch": epoch, "task_id": task.id, "forward_actions": ep.actions, "forward_f1": round(f1, 4),
            "forward_correct": correct, "forward_exhausted": ep.exhausted, "outcome": feedback.outcome,
            **back, "edits": dict(Counter(e.op for e in new))}
