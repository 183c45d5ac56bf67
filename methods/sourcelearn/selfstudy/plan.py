"""PlanStudy: choose the next few study actions from the observations gathered so far.

An action is DEEPEN(entity, question) or CONNECT(entity_a, entity_b, question), each aimed at ONE
observation with ONE focused question (paper Eq. 10, C.3). The planner is an LLM call; code then
enforces what the prompt asks: entity keys must exist in the model, DEEPEN names one entity and
CONNECT two different ones, and an action (kind + entities) is never taken twice in a cycle. The
schema sent lists the entity keys shown as the only values an entity may take.

The planner sees the official observation digest: every entity with its region, units, source size
and first three observations, entities with the most observations first, and the model's existing
cross-entity units.

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

from sourcebench.harness.data import Source
from sourcebench.harness.schema_limits import bounded_list

from ..model import Phrase, SourceModel, Unit
from ..rewrite import Note, element_entity, fit, material_chars, resolve_entity

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
    action at all; the loop still stops after ``empty_rounds_stop`` consecutive rounds without a valid new one."""
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


DIGEST_CHARS = 60_000  # STUDY_DIGEST_CHARS: the observation digest shown to the planner
DIGEST_NOTES = 3  # observations shown per entity in the digest (official STUDY_DIGEST_OBS)
CROSS_UNITS = 60  # existing cross-entity units shown to the planner (official)
NAMED_REST = 80  # entities beyond the digest's size named by key (official)
CROSS_ROLES = frozenset(("relation", "pattern", "mechanism", "distinction", "exception"))


@dataclass(frozen=True)
class DigestEntry:
    key: str
    region: str
    units: int
    chars: int
    notes: list[tuple[int, Note]]  # (number, note) of the notes about it, in order


def entity_sizes(sm: SourceModel, source: Source) -> dict[str, int]:
    """Characters of source text per entity (what the digest calls its source size)."""
    out: dict[str, int] = {}
    for e in sm.entities:
        out[e.key] = sum(len(el.text) for el in (source.element(i) for i in e.element_ids) if el is not None)
    return out


def entity_unit_counts(sm: SourceModel) -> dict[str, int]:
    """Units about each entity (its own and the relations it takes part in; maps and cards aside)."""
    counts: dict[str, int] = {}
    for u in sm.units:
        if u.scope.kind in ("entity", "pair") and u.role not in ("map", "card"):
            for k in dict.fromkeys(u.scope.keys):
                counts[k] = counts.get(k, 0) + 1
    return counts


def digest_entries(sm: SourceModel, notes: list[Note], sizes: dict[str, int],
                   unit_counts: dict[str, int]) -> list[DigestEntry]:
    """One entry per entity of the model or of a note, busiest first (most observations, then key)."""
    region = {e.key: e.region for e in sm.entities}
    by_ent: dict[str, list[tuple[int, Note]]] = {}
    for i, n in enumerate(notes, 1):
        for k in dict.fromkeys(n.entities):
            by_ent.setdefault(k, []).append((i, n))
    n_notes = {k: len(v) for k, v in by_ent.items()}
    keys = sorted(set(region) | set(by_ent), key=lambda k: (-n_notes.get(k, 0), k))
    return [DigestEntry(k, region.get(k, "?"), unit_counts.get(k, 0), sizes.get(k, 0), by_ent.get(k, []))
            for k in keys]


def digest_line(e: DigestEntry, per_entity: int = DIGEST_NOTES) -> str:
    head = f"- {e.key}  [region {e.region}; {e.units} units; {e.chars:,} source chars; {len(e.notes)} observations]"
    rows = []
    for i, n in e.notes[:per_entity]:
        imp = f" (=> {n.implication[:120]})" if n.implication else ""
        pair = " [connect]" if len(n.entities) > 1 else ""
        rows.append(f"\n    * {i}. {n.text[:220]}{imp}{pair}")
    return head + "".join(rows)


def cross_entity_units(sm: SourceModel) -> list[Unit]:
    """Units above one entity that relate several (official ``_cross_entity_units``): a relational role,
    not scoped to one entity, anchored in the text of more than one entity."""
    owner = element_entity(sm)
    return [u for u in sm.units if u.role in CROSS_ROLES and u.scope.kind != "entity"
            and len({owner[i] for i in u.element_ids() if i in owner}) > 1]


def plan_messages(sm: SourceModel, notes: list[Note], taken: list[Action], n: int,
                  budget: int, refused: list[str] | None = None, sizes: dict[str, int] | None = None,
                  unit_counts: dict[str, int] | None = None) -> tuple[list[dict[str, str]], list[str]]:
    """The planner's prompt and the entity keys it lists (as many as fit). The prompt is the official
    digest: per entity its region, units, source size and first ``DIGEST_NOTES`` observations (numbered),
    busiest entities first, within ``DIGEST_CHARS``; the entities left out are named. Then the model's
    cross-entity units and the actions taken. ``refused``: the renderings of the previous round's
    proposals, all refused; that round's prompt also lists the studied entities after the others.
    ``sizes``: ``entity_sizes`` (0 when not given); ``unit_counts``: ``entity_unit_counts``, computed once per
    cycle by the caller (the model does not change while it plans)."""
    entries = digest_entries(sm, notes, sizes or {}, entity_unit_counts(sm) if unit_counts is None else unit_counts)
    if refused:
        studied = {k for a in taken for k in a.entities}
        entries = [e for e in entries if e.key not in studied] + [e for e in entries if e.key in studied]
    cap = min(DIGEST_CHARS, budget * 3 // 4)
    lines, shown, rest, spent = [], [], [], 0
    for e in entries:
        line = digest_line(e)
        if spent + len(line) > cap:
            rest.append(e.key)
            continue
        lines.append(line)
        shown.append(e.key)
        spent += len(line)
    if rest:  # named so that the planner knows they exist, and may choose one
        lines.append(f"- ({len(rest)} more entities not shown: " + ", ".join(rest[:NAMED_REST])
                     + (", ..." if len(rest) > NAMED_REST else "") + ")")
        shown += rest[:NAMED_REST]
    cross = fit((f"- ({u.scope.kind}: {', '.join(u.scope.keys)}) {u.statement[:160]}"
                 for u in cross_entity_units(sm)[:CROSS_UNITS]), budget // 8)
    history = fit([f"- {a.render()}: {a.question}" for a in taken], budget // 8)
    parts = ["Entities with their observations (key [region; units; source size; observations]):\n"
             + "\n".join(lines),
             "Existing cross-entity units:\n" + ("\n".join(cross) or "(none yet)"),
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
                     stage: str, refused: list[str] | None = None, sizes: dict[str, int] | None = None,
                     unit_counts: dict[str, int] | None = None) -> PlanRound:
    """One planning round: up to ``n`` new actions (none if none survive, or if the call failed)."""
    budget = material_chars(llm, PLAN_MAX_TOKENS)
    messages, shown = plan_messages(sm, notes, taken, n, budget, refused, sizes, unit_counts)
    # entity keys limited to those listed: a constrained decoder cannot invent one (SmolLM2 wrote
    # numbers such as "1.203985674" for every key without it, so no action survived validation)
    res = await llm.structured(messages, study_plan(n), stage=stage, max_tokens=PLAN_MAX_TOKENS,
                               choices={"entities": shown})
    if res.failed or res.value is None:
        return PlanRound([], [])
    dropped: list[str] = []
    actions = validate_actions(res.value.actions, sm, {a.key for a in taken}, n, len(notes), dropped)  # type: ignore[union-attr]
    return PlanRound(actions, list(dict.fromkeys(dropped)))
