"""PlanStudy: choose the next few study actions from the observations gathered so far.

An action is DEEPEN(entity, question) or CONNECT(entity_a, entity_b, question), each aimed at ONE
observation with ONE focused question (paper Eq. 10, C.3). The planner is an LLM call; code then
enforces what the prompt asks: entity keys must exist in the model, DEEPEN names one entity and
CONNECT two different ones, and an action (kind + entities) is never taken twice in a cycle. The
schema sent lists the entity keys shown as the only values an entity may take.

A round whose proposals were all refused is followed by one that shows them as refused, and
entities already studied are listed after the others: with greedy decoding an unchanged prompt
repeats its reply (from the cache, even), so without this the retry the stop rule allows could
never propose anything new (SmolLM2 proposed the same DEEPEN again and stopped after 1 of K = 5).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from sourcebench.harness.schema_limits import bounded_list

from ..model import Phrase, SourceModel
from ..rewrite import Note, fit, material_chars, resolve_entity

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

PLAN_MAX_TOKENS = 1_000


@dataclass(frozen=True)
class Action:
    kind: Literal["DEEPEN", "CONNECT"]
    entities: tuple[str, ...]
    question: str
    observation: int = 0  # number of the observation it resolves (1-based; 0 = unspecified)

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """What makes two actions the same: the kind and the (unordered) entities."""
        return (self.kind, tuple(sorted(self.entities)))

    def render(self) -> str:
        return f"{self.kind}({', '.join(self.entities)})"


class ProposedAction(BaseModel):
    kind: Literal["DEEPEN", "CONNECT"]
    entities: bounded_list(str, 2) = Field(description="one entity key for DEEPEN, two for CONNECT, copied exactly")
    observation: int = Field(description="number of the observation this action resolves")
    question: Phrase = Field(description="one focused question")


def _keys(n: int) -> Any:
    """Exactly ``n`` entity keys, said in the schema (for the decoder); parsing stays lenient and
    ``validate_actions`` drops a wrong arity."""
    return Annotated[list[str], Field(json_schema_extra={"minItems": n, "maxItems": n})]


class _Deepen(ProposedAction):
    kind: Literal["DEEPEN"]
    entities: _keys(1) = Field(description="the entity key, copied exactly")


class _Connect(ProposedAction):
    kind: Literal["CONNECT"]
    entities: _keys(2) = Field(description="the two entity keys, copied exactly")


class StudyPlan(BaseModel):
    actions: list[ProposedAction] = Field(default_factory=list)


@functools.lru_cache(maxsize=32)
def study_plan(n: int) -> type[StudyPlan]:
    """The reply schema for a round of 1 to ``n`` actions, each DEEPEN with one key or CONNECT with
    two. Without these bounds SmolLM2 listed actions until ``max_tokens`` cut the JSON, its only
    valid reply was three CONNECTs with one entity each, and once bounded it answered with no
    action at all; the loop still stops after ``empty_rounds_stop`` rounds without a valid new one."""
    bounds = {"minItems": 1, "maxItems": max(1, n)}  # a round plans at least one action (the cycle's budget is K)
    return create_model(f"StudyPlan{n}", __base__=StudyPlan,
                        actions=(Annotated[list[_Deepen | _Connect], Field(json_schema_extra=bounds)],
                                 Field(default_factory=list)))


PLAN_SYSTEM = (
    "You direct the self-study of an agent that keeps a compact SOURCE MODEL of a knowledge source. A "
    "reading of the source against the model produced the OBSERVATIONS below: temporary notes on what the "
    "source establishes that the model does not yet explain well. Before the model is rewritten, pick the "
    "{n} observations whose resolution matters most, one per action. Use DEEPEN on one entity when its "
    "observation leaves a mechanism, governing condition, order of steps or exception open. Use CONNECT on "
    "two entities when an observation points to a relation between them that the model does not express "
    "(one constrains, triggers or feeds the other; both follow one rule with different instances; a "
    "procedure or dependency spans both). For each action give the number of the observation it resolves "
    "and ONE focused question: the single thing that must be understood to resolve it (for example: under "
    "which condition does A switch to B, and what follows?). Never ask for everything about an entity and "
    "never bundle several aspects into one question. Prefer entities and pairs not studied yet; never "
    "repeat an action already taken. Copy entity keys exactly as listed."
)


def plan_messages(sm: SourceModel, notes: list[Note], taken: list[Action], n: int,
                  budget: int, refused: list[str] | None = None) -> tuple[list[dict[str, str]], list[str]]:
    """The planner's prompt and the entity keys it lists (as many as fit): noted entities not yet
    studied, other entities not yet studied, then the studied ones. ``refused``: the renderings of
    the previous round's proposals, all refused (repeats or unusable keys)."""
    mentioned = list(dict.fromkeys(k for note in notes for k in note.entities))
    ents = {e.key: e for e in sm.entities}
    studied = {k for a in taken for k in a.entities}
    order = list(dict.fromkeys([k for k in mentioned if k in ents] + [e.key for e in sm.entities]))
    order = [k for k in order if k not in studied] + [k for k in order if k in studied]
    ent_lines = fit([f"- {k} ({ents[k].name}; region {ents[k].region})" for k in order], budget // 4)
    shown = order[:len(ent_lines)]
    history = [f"- {a.render()}: {a.question}" for a in taken]
    obs = fit((note.render(i) for i, note in enumerate(notes, 1)), budget // 2)
    history = fit(history, budget // 8)
    parts = ["Entities (key, name, region):\n" + "\n".join(ent_lines),
             "Observations:\n" + "\n".join(obs),
             "Actions already taken:\n" + ("\n".join(history) or "(none)")]
    if refused:
        parts.append("Your previous proposals were refused (already taken, or not usable): "
                     + "; ".join(refused) + ". Propose different entities or pairs.")
    parts.append(f"Choose up to {n} new actions. Reply in JSON.")
    return [{"role": "system", "content": PLAN_SYSTEM.format(n=n)},
            {"role": "user", "content": "\n\n".join(parts)}], shown


def validate_actions(proposed: list[ProposedAction], sm: SourceModel, taken: set, n: int,
                     n_notes: int, refused: list[str] | None = None) -> list[Action]:
    """Keep well-formed, new actions (at most ``n``): known keys, right arity, one question, no repeat.
    ``refused`` (if given) collects the renderings of the proposals dropped."""
    out: list[Action] = []
    seen = set(taken)
    for p in proposed:
        keys = [resolve_entity(sm, k) for k in p.entities]
        want = 1 if p.kind == "DEEPEN" else 2
        question = " ".join(p.question.split())
        act = Action(p.kind, tuple(keys), question, p.observation if 1 <= p.observation <= n_notes else 0)  # type: ignore[arg-type]
        if any(k is None for k in keys) or len(keys) != want or len(set(keys)) != want or not question \
                or act.key in seen:
            if refused is not None:
                refused.append(f"{p.kind}({', '.join(p.entities)})")
            continue
        seen.add(act.key)
        out.append(act)
        if len(out) >= n:
            break
    return out


@dataclass
class PlanRound:
    actions: list[Action]
    refused: list[str]  # renderings of proposals that validation dropped (for the next round's prompt)


async def plan_round(llm: BoundLLM, sm: SourceModel, notes: list[Note], taken: list[Action], n: int,
                     stage: str, refused: list[str] | None = None) -> PlanRound:
    """One planning round: up to ``n`` new actions (none if none survive, or if the call failed)."""
    budget = material_chars(llm, PLAN_MAX_TOKENS)
    messages, shown = plan_messages(sm, notes, taken, n, budget, refused)
    # entity keys limited to those listed: a constrained decoder cannot invent one (SmolLM2 wrote
    # numbers such as "1.203985674" for every key without it, so no action survived validation)
    res = await llm.structured(messages, study_plan(n), stage=stage, max_tokens=PLAN_MAX_TOKENS,
                               choices={"entities": shown})
    if res.failed or res.value is None:
        return PlanRound([], [])
    dropped: list[str] = []
    actions = validate_actions(res.value.actions, sm, {a.key for a in taken}, n, len(notes), dropped)  # type: ignore[union-attr]
    return PlanRound(actions, list(dict.fromkeys(dropped)))
