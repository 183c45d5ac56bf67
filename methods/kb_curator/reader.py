"""The fixed reader: search / read / answer on a store, one action per step, within an action budget.

The same reader makes the curator's forward attempt during training and answers test tasks on the
frozen store (the paper keeps the reader's tools identical in both). Like the paper's reader it
keeps only the question and its most recent action-result pairs in view. When it chooses
``answer`` (or runs out of budget), the answer is written by the shared answer prompt
(``ctx.solve``) from what it saw: the documents it read, then the search results it was shown, so
the answer wording is the same for every method.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sourcebench.harness.data import Answer, Evidence, Task
from sourcebench.harness.method import Context

from .tools import Finish, Observation, Read, ReaderStep, Search, ToolBox, describe_action

ExhaustedPolicy = Literal["answer", "abstain"]

READER_SYSTEM = """You answer a question by looking things up in a knowledge base of linked documents. Each turn, take exactly one action:
- search: up to {k} matching documents, each shown with its id, title, the start of its text and how many links it has;
- read: one document in full, with the documents it links to (reading an index document shows all of its members at once);
- answer: stop looking; the answer is then written from the documents you found.
Every action, the answer included, counts against a budget of {budget}. Answer as soon as what you have seen is enough."""


@dataclass
class Episode:
    """One run of an agent on one question: its steps and what it saw."""

    steps: list[tuple[str, Observation]] = field(default_factory=list)
    answered: bool = False
    exhausted: bool = False
    error: str = ""

    @property
    def actions(self) -> int:
        return len(self.steps)

    def reads(self) -> list[Evidence]:
        seen: dict[str, Evidence] = {}
        for _, obs in self.steps:
            if obs.read is not None and obs.read.element_id not in seen:
                seen[obs.read.element_id] = obs.read
        return list(seen.values())

    def evidence(self, max_items: int) -> list[Evidence]:
        """Documents read (all, in order), then unread search hits up to ``max_items`` in total."""
        out = self.reads()
        have = {e.element_id for e in out}
        for _, obs in self.steps:
            for h in obs.hits:
                if len(out) >= max_items:
                    return out
                if h.element_id not in have:
                    have.add(h.element_id)
                    out.append(h)
        return out

    def trajectory(self) -> str:
        """A compact account of the attempt, for the curator's backward prompt."""
        lines = []
        for i, (desc, obs) in enumerate(self.steps, 1):
            if obs.kind == "answer":
                lines.append(f"{i}. {desc}")
                continue
            if obs.kind == "search":
                res = ", ".join(f"[{h.element_id}]" for h in obs.hits) or "nothing"
            elif obs.kind == "read" and obs.read is not None:
                res = obs.text.splitlines()[0]
            else:
                res = obs.text.splitlines()[0] if obs.text else obs.kind
            lines.append(f"{i}. {desc} -> {res}")
        return "\n".join(lines) or "(no action)"

    def metadata(self) -> dict[str, Any]:
        entries = sorted({e for _, obs in self.steps for e in obs.entries})
        kinds = [obs.kind for _, obs in self.steps]
        stop = "error" if self.error else "answer" if self.answered else "budget"
        return {"actions": self.actions, "searches": kinds.count("search"), "reads": kinds.count("read"),
                "budget_exhausted": self.exhausted, "stop": stop, "trace": [d for d, _ in self.steps],
                "entries_used": entries, **({"agent_error": self.error} if self.error else {})}


def render_steps(steps: list[tuple[str, Observation]], *, label: str, first: int = 1,
                 budget_chars: int | None = None) -> list[str]:
    """Action-result records. Over ``budget_chars``, older results shrink to their first line (the
    newest stays whole), so long reads cannot push a prompt past a small context window."""
    texts = [o.text for _, o in steps]
    total = sum(len(t) for t in texts)
    for i in range(len(texts) - 1):
        if budget_chars is None or total <= budget_chars:
            break
        short = texts[i].split("\n", 1)[0] + " [shortened]"
        total -= len(texts[i]) - len(short)
        texts[i] = short
    return [f"{label} {i}: {d}\nResult: {t}" for i, ((d, _), t) in enumerate(zip(steps, texts), first)]


MESSAGE_OVERHEAD_TOKENS = 8  # chat-template tokens around each message


async def fit_history(ctx: Context, build: Callable[[int | None], list[dict[str, str]]], history_chars: int | None,
                      max_tokens: int) -> list[dict[str, str]]:
    """The step prompt ``build(history_chars)``, with a smaller history budget when the solver counts
    tokens exactly (local models) and the prompt would leave less than ``max_tokens`` of its window:
    chars / 4 sizes undercount a small model's tokenizer, and an overflowing step fails the episode.
    Prompts that fit are built exactly as before."""
    messages = build(history_chars)
    window = ctx.llm.spec.effective_context_window()
    count = getattr(ctx.llm, "count_tokens", None)
    if not window or count is None or history_chars is None:
        return messages
    limit = window - max_tokens
    for _ in range(4):
        used = [await count(m["content"]) for m in messages]
        if None in used:
            return messages
        total = sum(used) + MESSAGE_OVERHEAD_TOKENS * len(messages)  # type: ignore[arg-type]
        if total <= limit or history_chars <= 0:
            return messages
        # the history is part of the last message: cut its budget by the excess, in characters
        chars_per_token = sum(len(m["content"]) for m in messages) / max(1, total)
        excess_chars = int((total - limit) * chars_per_token * 1.1) + 1
        history_chars = max(0, min(history_chars, len(messages[-1]["content"])) - excess_chars)
        messages = build(history_chars)
    return messages


def reader_messages(question: str, episode: Episode, budget: int, window: int, search_k: int,
                    history_chars: int | None = None) -> list[dict[str, str]]:
    recent = episode.steps[-window:] if window > 0 else []
    omitted = episode.actions - len(recent)
    parts = [f"Question: {question.strip()}"]
    if recent:
        hist = [f"({omitted} earlier action(s) no longer shown)"] if omitted else []
        hist += render_steps(recent, label="Action", first=omitted + 1, budget_chars=history_chars)
        parts.append("Your recent actions:\n" + "\n\n".join(hist))
    left = budget - episode.actions
    parts.append(f"Actions used: {episode.actions} of {budget}"
                 + (" (last one: answer unless a single read is sure to help)." if left == 1 else ".")
                 + " Choose the next action.")
    return [{"role": "system", "content": READER_SYSTEM.format(k=search_k, budget=budget)},
            {"role": "user", "content": "\n\n".join(parts)}]


async def run_reader(question: str, tools: ToolBox, ctx: Context, *, budget: int, window: int, stage: str,
                     max_tokens: int, history_chars: int | None = None) -> Episode:
    """Let the reader act until it answers, its budget is spent, or a step call fails."""
    async def next_step(ep: Episode) -> Any:
        messages = await fit_history(ctx, lambda chars: reader_messages(question, ep, budget, window, tools.search_k,
                                                                        chars), history_chars, max_tokens)
        return await ctx.llm.structured(messages, ReaderStep, stage=stage, max_tokens=max_tokens)

    def act(action: Any) -> Observation:
        if isinstance(action, Search):
            return tools.search(action.query)
        assert isinstance(action, Read)
        return tools.read(action.doc_id)

    return await act_until_done(budget, next_step, act)


async def act_until_done(budget: int, next_step: Callable[[Episode], Awaitable[Any]],
                         act: Callable[[Any], Observation]) -> Episode:
    """The agent loop shared by the KB reader and the navigator: ask for a step, run its tool, stop
    on the answer action, a failed step call (the episode's error) or a spent budget (exhausted)."""
    ep = Episode()
    while ep.actions < budget:
        res = await next_step(ep)
        if res.value is None:
            ep.error = res.error or "no valid action"
            return ep
        action = res.value.action
        if isinstance(action, Finish):
            ep.steps.append((describe_action(action), Observation("", kind="answer")))
            ep.answered = True
            return ep
        ep.steps.append((describe_action(action), act(action)))
    ep.exhausted = True
    return ep


async def answer_from_episode(task: Task, ep: Episode, ctx: Context, *, on_exhausted: ExhaustedPolicy,
                              max_evidence: int, stage: str) -> Answer:
    """The final answer of an episode through the shared answer prompt (or none, see below).

    A failed step call is a failed answer. A spent budget is answered from what was seen, or with
    ``on_exhausted="abstain"`` left unanswered (the paper scores such a question F1 0)."""
    meta = ep.metadata()
    if ep.error:
        return Answer(text="", failed=True, failure_reason=f"reader step failed: {ep.error}", metadata=meta)
    evidence = ep.evidence(max_evidence)
    if ep.exhausted and on_exhausted == "abstain":
        return Answer(text="", evidence_ids=[e.element_id for e in evidence], metadata=meta)
    ans = await ctx.solve(task, evidence, stage=stage)
    ans.metadata.update(meta)
    return ans
