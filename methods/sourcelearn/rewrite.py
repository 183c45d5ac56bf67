"""Grounded region reconstruction: the single write path of every SourceLearn learning stage.

Consolidation (self-study), failure-guided refinement and recalibration all change the source
model the same way (paper Eq. 5): one writer call revises the units of one region from its current
units, temporary notes and the source excerpts they rest on; then code decides what is committed:

* anchors are stamped by code from the cited element ids (unknown ids are dropped; a proposal
  citing no real element is rejected without a call);
* every new or changed unit passes the grounding gate (negative-claim rule, one narrowing retry);
* the preservation check lists old meanings the new region no longer represents: those old units
  are restored unchanged, and so is every protected (task-learned) unit that no accepted unit
  absorbed, so learning never silently loses supported knowledge;
* entity cards are never rewritten (shown as context only);
* if the writer call or the preservation call fails, the region stays exactly as it was.

Lineage is kept: a new unit lists the old unit ids it absorbed, and inherits their protection.
The module also holds the small helpers every stage needs to fit material into a context window
deterministically (chars / 4 tokens, blocks taken in order until the budget is spent).
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, create_model

from sourcebench.harness.data import Source
from sourcebench.harness.schema_limits import bounded_list, bounded_text
from sourcebench.harness.token_budget import fit_to_window

from .grounding import GROUND_CHARS, GateStats, gate_unit, preservation_check
from .model import Cited, Few, Origin, Phrase, Scope, SourceModel, Statement, Unit

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

EXCERPT_CHARS = 1200  # default excerpt of the other stages' helpers (the retrieval excerpt's length)
DEFAULT_WINDOW = 32_000  # tokens assumed when the backend declares no context window
PROMPT_OVERHEAD_TOKENS = 900  # instructions and JSON framing around the material

# Evidence and capacity of one region rewrite, as in the official code (reconstruction/defaults.py;
# self_learning/run.py for consolidation). Each element is cut to its first N characters and elements are
# taken in priority order (what the notes rest on, then what the old units rest on) until the total is spent.
EVIDENCE_PER_ELEMENT = 12_000  # refinement and recalibration (defaults EVIDENCE_PER_ELEMENT)
REWRITE_EVIDENCE_CHARS = 1_500  # self-study consolidation: the writer and its grounder (run.py REWRITE_EVIDENCE_CHARS)
EVIDENCE_TOTAL = 60_000  # evidence characters per rewrite (defaults EVIDENCE_TOTAL)
MAX_REWRITE_UNITS = 60  # units one rewrite reply may hold (defaults MAX_REWRITE_UNITS)
REWRITE_STATEMENT_CHARS = 400  # a consolidated or recalibrated statement (defaults REWRITE_STATEMENT_CHARS)
REFINE_STATEMENT_CHARS = 600  # a refined statement (defaults STATEMENT_CHARS, used by the official refinement)
STATEMENT_CHARS = REWRITE_STATEMENT_CHARS
# The reply bound: a unit's JSON is its statement plus ~250 characters (role, scope keys, conditions, cited
# ids, absorbed ids, note numbers), at 4 characters a token; the keep list is at most 64 ids (~250 tokens).
# 60 units of 400 characters: 60 x 650 / 4 + 250 = 10,000 tokens. A reasoning backend gets its reasoning
# allowance on top (harness.llm ModelSpec.output_cap).
UNIT_OVERHEAD_CHARS = 250
KEEP_TOKENS = 250
WRITER_WINDOW_SHARE = 3  # on a declared window the reply takes at most a third of it ...
MIN_REWRITE_UNITS = 8  # ... and still holds this many units
EVIDENCE_CHARS = {"consolidate": REWRITE_EVIDENCE_CHARS, "refine": EVIDENCE_PER_ELEMENT,
                  "recalibrate": EVIDENCE_PER_ELEMENT}
# the grounder's first check per element: consolidation grounds on its 1,500-character evidence, refinement
# on GROUND_CHARS (official ``ground``), recalibration on the whole 12,000 (official ``ground_batch`` pages it)
GATE_CHARS = {"consolidate": REWRITE_EVIDENCE_CHARS, "refine": GROUND_CHARS, "recalibrate": EVIDENCE_PER_ELEMENT}
REWRITE_STATEMENTS = {"consolidate": REWRITE_STATEMENT_CHARS, "refine": REFINE_STATEMENT_CHARS,
                      "recalibrate": REWRITE_STATEMENT_CHARS}

WriterRole = Literal["map", "pattern", "mechanism", "distinction", "procedure", "exception", "relation", "detail"]


# -- material that fits -----------------------------------------------------------------------
def material_chars(llm: BoundLLM, reserve_tokens: int) -> int:
    """Characters of material a prompt may carry: window minus reply and instructions, at the
    source's measured characters per token (4 unless measured, see harness.token_budget)."""
    window = llm.spec.effective_context_window() or DEFAULT_WINDOW
    return max(2_000, int((window - reserve_tokens - PROMPT_OVERHEAD_TOKENS) * llm.chars_per_token * 0.9))


def fit(blocks: Iterable[str], max_chars: int) -> list[str]:
    """Blocks in order while they fit; the first block alone is cut rather than dropped."""
    out: list[str] = []
    used = 0
    for b in blocks:
        if used + len(b) + 2 > max_chars:
            if not out and max_chars > 200:
                out.append(b[: max_chars - 6] + " ...")
            break
        out.append(b)
        used += len(b) + 2
    return out


def excerpt_blocks(source: Source, element_ids: Iterable[str], max_chars: int = EXCERPT_CHARS) -> list[str]:
    out = []
    for eid in dict.fromkeys(element_ids):
        el = source.element(eid)
        if el is not None:
            text = el.text if max_chars <= 0 else el.excerpt(max_chars)
            out.append(f"[{el.id}] {el.title}\n{text}")
    return out


def unit_line(u: Unit) -> str:
    keys = ", ".join(u.scope.keys) or "-"
    tag = " [protected]" if u.protected else ""
    return f"[{u.id}]{tag} ({u.scope.kind}: {keys}) {u.render()}"


# -- model views ------------------------------------------------------------------------------
def primary_region(sm: SourceModel, unit: Unit) -> str | None:
    """The one region a unit is rewritten with (a pair spanning two regions belongs to the first)."""
    known = sm.layout().region_ids
    regs = [r for r in sm.unit_regions(unit) if r in known]
    return regs[0] if regs else None


def entity_units(sm: SourceModel, key: str, source: Source) -> list[Unit]:
    """Live units about one entity (its own, and relations it takes part in)."""
    return [u for u in sm.units if u.scope.kind in ("entity", "pair") and key in u.scope.keys
            and not sm.is_stale(u, source)]


def units_by_entity(sm: SourceModel, source: Source) -> dict[str, list[Unit]]:
    """``entity_units`` of every entity in one pass over the model (not one pass per entity)."""
    out: dict[str, list[Unit]] = defaultdict(list)
    for u in sm.units:
        if u.scope.kind in ("entity", "pair") and not sm.is_stale(u, source):
            for k in dict.fromkeys(u.scope.keys):
                out[k].append(u)
    return out


@dataclass
class RegionViews:
    """Live units by primary region, and every unit id, of one model snapshot: what each region's
    rewrite looks up, computed once for all the regions rewritten against that snapshot (a pass
    over the model per region made consolidating every region cost regions x units)."""

    live: dict[str, list[Unit]]
    unit_ids: set[str]

    @classmethod
    def of(cls, sm: SourceModel, source: Source) -> RegionViews:
        live: dict[str, list[Unit]] = defaultdict(list)
        for u in sm.units:
            reg = primary_region(sm, u)
            if reg is not None and not sm.is_stale(u, source):
                live[reg].append(u)
        return cls(live, {u.id for u in sm.units})


def element_entity(sm: SourceModel) -> dict[str, str]:
    """Element id -> key of the entity whose text it is (first entity wins)."""
    out: dict[str, str] = {}
    for e in sm.entities:
        for eid in e.element_ids:
            out.setdefault(eid, e.key)
    return out


def entity_region(sm: SourceModel, key: str) -> str | None:
    lay = sm.layout()
    reg = lay.region_of.get(key)
    return reg if reg is not None and reg in lay.region_ids else None


def resolve_entity(sm: SourceModel, name: str) -> str | None:
    """An entity key as written by the model: exact, else a unique case-insensitive match."""
    name = name.strip()
    lay = sm.layout()
    if name in lay.keys:
        return name
    low = lay.keys_by_lower.get(name.lower(), [])
    return low[0] if len(low) == 1 else None


# -- notes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Note:
    """A temporary observation (or learning target): never written into the model itself."""

    text: str
    evidence_ids: tuple[str, ...]
    implication: str = ""
    unit_ids: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    origin: str = "inspect"  # inspect | study | target | policy

    def render(self, n: int) -> str:
        ent = f" [{', '.join(self.entities)}]" if self.entities else ""
        imp = f" -> {self.implication}" if self.implication else ""
        units = f" (units: {', '.join(self.unit_ids)})" if self.unit_ids else ""
        return f"{n}.{ent} {self.text}{imp}{units} (evidence: {', '.join(self.evidence_ids)})"


# -- the writer -------------------------------------------------------------------------------
class ProposedUnit(BaseModel):
    statement: Statement
    role: WriterRole
    scope_keys: bounded_list(str, 2) = Field(default_factory=list, description="one entity key, two for a relation, none = region")
    conditions: bounded_list(Phrase, Few) = Field(default_factory=list)
    element_ids: Cited = Field(default_factory=list, description="bracketed excerpt ids, copied exactly")
    absorbs: bounded_list(str, 8) = Field(default_factory=list, description="ids of current units this unit replaces")
    notes: bounded_list(int, 8) = Field(default_factory=list)


class RegionRewrite(BaseModel):
    # list bounds are for the decoder (a small model repeats an item until max_tokens cuts the JSON)
    keep: bounded_list(str, 64) = Field(default_factory=list, description="ids of current units kept exactly as they are")
    units: bounded_list(ProposedUnit, MAX_REWRITE_UNITS) = Field(default_factory=list, description="new or revised units")


@dataclass(frozen=True)
class WriterCapacity:
    """What one rewrite reply may hold: units, characters per statement, and the reply bound for them."""

    units: int
    statement_chars: int
    reply_tokens: int


def writer_capacity(llm: BoundLLM, mode: str) -> WriterCapacity:
    """The official 60 units of up to 400 characters (600 when refining) and the reply bound they need;
    on a declared context window the reply takes at most a third of it and the unit bound follows (8,192
    tokens: 15 units), so the evidence keeps room."""
    chars = REWRITE_STATEMENTS[mode]
    per_unit = (chars + UNIT_OVERHEAD_CHARS) / 4
    units = MAX_REWRITE_UNITS
    window = llm.spec.effective_context_window()
    if window:
        fit_units = int((window // WRITER_WINDOW_SHARE - KEEP_TOKENS) / per_unit)
        units = max(MIN_REWRITE_UNITS, min(units, fit_units))
    return WriterCapacity(units, chars, math.ceil(units * per_unit) + KEEP_TOKENS)


@functools.lru_cache(maxsize=16)
def rewrite_schema(units: int, statement_chars: int) -> type[RegionRewrite]:
    """The writer's reply schema at one capacity (same fields and names; only the decoder's bounds differ)."""
    unit = create_model("ProposedUnit", __base__=ProposedUnit, statement=(bounded_text(statement_chars), ...))
    return create_model("RegionRewrite", __base__=RegionRewrite,  # type: ignore[return-value]
                        units=(bounded_list(unit, units), Field(default_factory=list, description="new or revised units")))


WRITER_SYSTEM = (
    "You maintain a SOURCE MODEL of a knowledge source: a compact set of reusable statements about the "
    "source, each tied to the source elements that establish it. You revise the part of the model that "
    "covers one region. You receive the region's current units, numbered notes gathered by rereading the "
    "source against the model, and the source excerpts those notes rest on.\n"
    "Aim: the same compact model, at the same level of abstraction, now also carrying what the notes "
    "establish. It is not a fuller summary of the source.\n"
    "- The excerpts are for checking and citing, not for summarising: do not walk through them passage by "
    "passage, do not copy or closely paraphrase their sentences, do not address a reader.\n"
    "- Each unit is one reusable commitment about the source: a rule together with the condition under "
    "which it holds, a mechanism and what it leads to, a procedure with the order of its steps, a "
    "distinction, an exception to a shared rule, or a dependency between entities.\n"
    "- Every meaning of the current units that the source supports must survive unless a stronger unit you "
    "write covers it; name the current units a new unit replaces in `absorbs`. Merge fragments that are "
    "parts of one procedure or instances of one rule; split a unit that mixes unrelated things.\n"
    "- List in `keep` the current units that stay exactly as they are; put only new or revised units in "
    "`units`. A current unit that is neither kept nor absorbed is checked and restored if its meaning is lost.\n"
    "- State a negative (something is absent, unsupported, impossible) only when an excerpt says so in so "
    "many words.\n"
    "- Leave out plain look-up values that retrieval will find anyway; do not keep an isolated detail just "
    "for completeness.\n"
    "- Entity cards are shown for context only and are never rewritten.\n"
    "- For each unit give: role; scope_keys (one entity key for a unit about one entity, two for a relation "
    "between two entities, none for the whole region), copied exactly from the keys listed; conditions "
    "under which it holds, written out explicitly; element_ids of the excerpts that establish it, copied "
    "exactly from the [bracketed] ids; absorbs; and the numbers of the notes it draws on.\n"
    "- Names, identifiers, numbers and conditions exactly as the source gives them; declarative statements "
    "of at most {statement_chars} characters."
)

MODE_NOTES = {
    "consolidate": "",
    "refine": (
        "This revision repairs a gap that showed when the model was used. The notes are TARGETS: pieces of "
        "source knowledge that were needed and that the model does not make available. For each target "
        "decide whether the current units already cover it (then change nothing for it), whether a unit "
        "must be added, or whether a current unit must be replaced by a completed or corrected one. Change at "
        "most {max_changed} units in all; a current unit you neither replace (absorb) nor mention stays as it is. "
        "Write a target only as far as the excerpts establish it, as reusable knowledge about the source, never "
        "as the answer to a particular question."
    ),
    "recalibrate": (
        "This revision applies the REPRESENTATION POLICY below, learned from earlier use of the model: where "
        "the excerpts support structure the policy asks for and the region lacks it or holds it at the wrong "
        "granularity, represent it. Units marked [protected] were learned from tasks: keep their meaning."
    ),
}


def gate_summary(stats: GateStats) -> dict[str, int]:
    """Gate counters for the model's history (rejected statements stay out of the saved model)."""
    return {k: v for k, v in stats.as_dict().items() if k != "rejected_statements"}


def policy_note(policy: list[str]) -> str:
    """The representation policy as the writer and the observer read it: the generic Pi0 (construction's
    modelling instruction) and, numbered, Pi1's task-derived items (official ``Policy.render``)."""
    if not policy:
        return ""
    from .construct import MODELING_INSTRUCTION  # lazy: construct is the only home of Pi0's text

    items = "\n".join(f"{i}. {p}" for i, p in enumerate(policy, 1))
    return ("Representation policy:\n" + MODELING_INSTRUCTION
            + "\nTask-derived preferences (learned from use of this model; numbered):\n" + items)


@dataclass
class RewriteSpec:
    """How one stage writes: its mode, the origin it stamps, its stage names, its limits."""

    mode: Literal["consolidate", "refine", "recalibrate"]
    origin: Origin
    stage: str
    ground_stage: str
    preserve_stage: str
    policy: list[str] = field(default_factory=list)
    max_changed: int | None = None
    delta: bool = False  # True: units the writer neither keeps nor absorbs stay (refinement)
    protect_new: bool = False  # units written by this stage become protected (task-learned)
    concurrency: int = 4

    def evidence_chars(self) -> int:
        """The writer's window per evidence element (its first characters)."""
        return EVIDENCE_CHARS[self.mode]

    def gate_chars(self) -> int:
        """The grounder's window per cited element on the first check."""
        return GATE_CHARS[self.mode]


@dataclass
class RewriteStats:
    regions: int = 0
    committed: int = 0
    aborted: int = 0
    proposed: int = 0
    unchanged: int = 0
    over_cap: int = 0
    no_evidence: int = 0
    accepted: int = 0
    kept: int = 0
    restored: int = 0
    protected_kept: int = 0
    dropped: int = 0
    unimproved: int = 0  # committed rewrites consolidation did not apply (no structural gain, no note used)

    def add(self, other: RewriteStats) -> None:
        for k, v in other.__dict__.items():
            setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class RewriteResult:
    region_id: str
    committed: bool
    old_ids: list[str]  # units this rewrite replaces (its editable old set)
    units: list[Unit]  # what stands in their place
    reason: str = ""
    stats: RewriteStats = field(default_factory=RewriteStats)
    dropped_ids: list[str] = field(default_factory=list)  # old units subsumed by new ones
    notes_used: int = 0  # proposed units that cite a note (consolidation's structure gate reads it)


def select_old_units(sm: SourceModel, source: Source, region_id: str, notes: list[Note],
                     max_chars: int, views: RegionViews | None = None) -> list[Unit]:
    """The editable part of a region: units the notes cite, units of the entities they touch, then
    region-wide units; cards and stale units are never editable; whatever does not fit stays as is.
    ``views``: the model's ``RegionViews``, when several regions of one snapshot are rewritten."""
    views = views or RegionViews.of(sm, source)
    touched = {k for n in notes for k in n.entities}
    cited = {u for n in notes for u in n.unit_ids}
    mine = [u for u in views.live.get(region_id, []) if u.role != "card"]
    ranked = ([u for u in mine if u.id in cited]
              + [u for u in mine if u.id not in cited and set(u.scope.keys) & touched]
              + [u for u in mine if u.id not in cited and not set(u.scope.keys) & touched
                 and u.scope.kind == "region"])
    if not touched and not cited:
        ranked = mine
    chosen, used = [], 0
    for u in ranked:
        line = len(unit_line(u)) + 1
        if used + line > max_chars:
            break
        chosen.append(u)
        used += line
    return chosen


def region_cards(sm: SourceModel, source: Source, region_id: str, notes: list[Note],
                 views: RegionViews | None = None) -> list[Unit]:
    views = views or RegionViews.of(sm, source)
    touched = {k for n in notes for k in n.entities}
    return [u for u in views.live.get(region_id, []) if u.role == "card" and set(u.scope.keys) & touched]


def evidence_blocks(source: Source, element_ids: Iterable[str], per_element: int, total: int) -> list[str]:
    """Elements in priority order, each its first ``per_element`` characters, until ``total`` characters of
    their text are spent (official ``bounded_evidence``); on a window too small for the first one, it is cut."""
    out, spent = [], 0
    for eid in dict.fromkeys(element_ids):
        el = source.element(eid)
        if el is None:
            continue
        n = min(len(el.text), per_element)
        if spent + n > total:
            if not out and total > 200:
                out.append(f"[{el.id}] {el.title}\n{el.excerpt(total)}")
            break
        out.append(f"[{el.id}] {el.title}\n{el.excerpt(per_element)}")
        spent += n
    return out


def evidence_room(left: int, windowed: bool) -> int:
    """Evidence characters of one rewrite: EVIDENCE_TOTAL, or what the window leaves when it is smaller."""
    return min(EVIDENCE_TOTAL, left) if windowed else EVIDENCE_TOTAL


def writer_messages(sm: SourceModel, source: Source, region_id: str, old: list[Unit], cards: list[Unit],
                    notes: list[Note], evidence_ids: list[str], spec: RewriteSpec, budget: int,
                    scope_keys: list[str], windowed: bool = False) -> list[dict[str, str]]:
    """The writer's prompt; ``budget``: material characters beside the reply (the evidence takes
    EVIDENCE_TOTAL with no declared window, what the window leaves otherwise)."""
    region = sm.layout().region_by_id.get(region_id)
    system = WRITER_SYSTEM.format(statement_chars=REWRITE_STATEMENTS[spec.mode])
    mode_note = MODE_NOTES[spec.mode].format(max_changed=spec.max_changed or "a few")
    if mode_note:
        system += "\n\n" + mode_note
    if spec.policy:
        system += "\n\n" + policy_note(spec.policy)
    head = f"Region: {region.title if region else region_id}"
    if region is not None and region.description:
        head += f" — {region.description}"
    card_lines = fit((unit_line(u) for u in cards), budget // 8)
    note_lines = fit((n.render(i) for i, n in enumerate(notes, 1)), budget // 4)
    ev = evidence_blocks(source, evidence_ids, spec.evidence_chars(),
                         evidence_room(budget - sum(len(x) for x in card_lines + note_lines)
                                       - sum(len(unit_line(u)) for u in old), windowed))
    parts = [head, "Entity keys you may use in scope_keys: " + (", ".join(scope_keys) or "(none)")]
    parts.append("Current units:\n" + ("\n".join(unit_line(u) for u in old) or "(none yet)"))
    if card_lines:
        parts.append("Entity cards (context only, do not rewrite):\n" + "\n".join(card_lines))
    parts.append("Notes:\n" + ("\n".join(note_lines) or "(none)"))
    parts.append("Source excerpts:\n" + ("\n\n".join(ev) or "(none)"))
    parts.append("Write the revised region. Reply in JSON.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def _scope(keys: list[str], sm: SourceModel, allowed: set[str], region_id: str) -> Scope:
    valid = list(dict.fromkeys(k for k in (resolve_entity(sm, x) for x in keys) if k is not None and k in allowed))
    if len(valid) == 1:
        return Scope(kind="entity", keys=valid)
    if len(valid) == 2:
        return Scope(kind="pair", keys=sorted(valid))
    return Scope(kind="region", keys=[region_id])


def _same(u: Unit, statement: str, role: str, scope: Scope, conditions: list[str]) -> bool:
    return (u.statement.strip() == statement and u.role == role and u.scope == scope
            and [c.strip() for c in u.conditions] == conditions)


@dataclass
class _Draft:
    """The writer's reply turned into candidates: what it keeps, and new units awaiting the gate."""

    kept_ids: list[str]
    candidates: list[Unit]
    notes_used: int = 0  # proposals that cite one of the notes (official ``from_notes``)


def _draft(out: RegionRewrite, sm: SourceModel, source: Source, region_id: str, old: list[Unit], notes: list[Note],
           allowed: set[str], spec: RewriteSpec, stats: RewriteStats, gate_stats: GateStats,
           unit_ids: set[str]) -> _Draft:
    """Proposals -> candidate units. A re-emitted old unit counts as kept (no gate call); a unit the
    model already holds elsewhere is skipped; a proposal citing no real element is rejected in code;
    beyond ``max_changed`` proposals are ignored; anchors are stamped from the source."""
    by_id = {u.id: u for u in old}
    kept_ids = [i for i in dict.fromkeys(k.strip() for k in out.keep) if i in by_id]
    elsewhere = unit_ids - set(by_id)
    candidates: list[Unit] = []
    for p in out.units[:MAX_REWRITE_UNITS]:
        stats.proposed += 1
        statement = " ".join(p.statement.split())
        if not statement:
            continue
        conditions = [c.strip() for c in p.conditions if c.strip()]
        scope = _scope(p.scope_keys, sm, allowed, region_id)
        twin = next((u for u in old if _same(u, statement, p.role, scope, conditions)), None)
        uid = SourceModel.unit_id(statement, p.role, scope, salt="|".join(conditions))
        if twin is not None or uid in elsewhere:
            stats.unchanged += 1
            if twin is not None and twin.id not in kept_ids:
                kept_ids.append(twin.id)
            continue
        if spec.max_changed is not None and len(candidates) >= spec.max_changed:
            stats.over_cap += 1
            continue
        anchors = SourceModel.stamp(p.element_ids, source)
        if not anchors:
            stats.no_evidence += 1
            gate_stats.checked += 1
            gate_stats.rejected += 1
            gate_stats.rejected_statements.append(statement[:200])
            continue
        absorbed = [i for i in dict.fromkeys(a.strip() for a in p.absorbs) if i in by_id]
        candidates.append(Unit(id=uid, statement=statement, role=p.role, scope=scope, conditions=conditions,
                               anchors=anchors, origin=spec.origin, absorbed=absorbed,
                               protected=spec.protect_new or any(by_id[i].protected for i in absorbed)))
    notes_used = sum(1 for p in out.units[:MAX_REWRITE_UNITS] if any(1 <= n <= len(notes) for n in p.notes))
    return _Draft(kept_ids, candidates, notes_used)


async def _gate_all(llm: BoundLLM, candidates: list[Unit], source: Source, spec: RewriteSpec,
                    gate_stats: GateStats, kept_ids: list[str], old_ids: set[str]) -> list[Unit]:
    """Grounding gate over the candidates, concurrently, in order; narrowed units get their own id."""
    sem = asyncio.Semaphore(max(1, spec.concurrency))

    async def gate(u: Unit) -> Unit | None:
        async with sem:
            return (await gate_unit(llm, u, source, spec.ground_stage, gate_stats, narrow=True,
                                    chars=spec.gate_chars())).unit

    accepted: list[Unit] = []
    for cand, u in zip(candidates, await asyncio.gather(*(gate(u) for u in candidates))):
        if u is None:
            continue
        update: dict = {"absorbed": [i for i in u.absorbed if i not in kept_ids]}
        if u.statement != cand.statement:
            update["id"] = SourceModel.unit_id(u.statement, u.role, u.scope, salt="|".join(u.conditions))
        u = u.model_copy(update=update)
        if all(a.id != u.id for a in accepted) and u.id not in old_ids:
            accepted.append(u)
    return accepted


async def rewrite_region(llm: BoundLLM, sm: SourceModel, source: Source, region_id: str, notes: list[Note],
                         spec: RewriteSpec, gate_stats: GateStats, extra_evidence: Iterable[str] = (),
                         views: RegionViews | None = None) -> RewriteResult:
    """Revise one region from its units + notes + evidence; return what to commit (not applied).

    ``views``: ``RegionViews.of(sm, source)``, passed when several regions of ``sm`` are rewritten."""
    stats = RewriteStats(regions=1)
    views = views or RegionViews.of(sm, source)
    cap = writer_capacity(llm, spec.mode)
    budget = material_chars(llm, cap.reply_tokens)
    old = select_old_units(sm, source, region_id, notes, budget // 3, views)
    old_ids = [u.id for u in old]
    cards = region_cards(sm, source, region_id, notes, views)
    evidence_ids = list(dict.fromkeys([i for n in notes for i in n.evidence_ids] + list(extra_evidence)
                                      + [i for u in old for i in u.element_ids()]))
    allowed = ({e.key for e in sm.layout().entities_by_region.get(region_id, [])}
               | {k for n in notes for k in n.entities})
    allowed |= {k for u in old for k in u.scope.keys if u.scope.kind in ("entity", "pair")}
    windowed = bool(llm.spec.effective_context_window())

    def build(b: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        msgs = writer_messages(sm, source, region_id, old, cards, notes, evidence_ids, spec, b, sorted(allowed),
                               windowed)
        return msgs, msgs

    msgs = await fit_to_window(llm, build, budget, cap.reply_tokens)
    res = await llm.structured(msgs, rewrite_schema(cap.units, cap.statement_chars), stage=spec.stage,
                               max_tokens=cap.reply_tokens,
                               choices={"element_ids": evidence_ids, "keep": old_ids, "absorbs": old_ids,
                                        "scope_keys": sorted(allowed)})
    if res.failed or res.value is None:
        stats.aborted += 1
        return RewriteResult(region_id, False, old_ids, list(old), "writer call failed", stats)

    draft = _draft(res.value, sm, source, region_id, old, notes, allowed, spec, stats, gate_stats,  # type: ignore[arg-type]
                   views.unit_ids)
    accepted = await _gate_all(llm, draft.candidates, source, spec, gate_stats, draft.kept_ids, set(old_ids))
    stats.accepted += len(accepted)
    replaced = {i for a in accepted for i in a.absorbed}
    kept_ids = list(draft.kept_ids)
    if spec.delta:  # known / add / replace: what no accepted unit absorbs stays as it is
        kept_ids += [i for i in old_ids if i not in replaced and i not in kept_ids]
    kept = [u for u in old if u.id in kept_ids]
    stats.kept += len(kept)

    # preservation: old meanings neither kept nor represented come back unchanged; so does every
    # protected unit that no accepted unit absorbed (its absorber inherited the protection)
    checked = [u for u in old if u.id not in kept_ids]
    lost = await preservation_check(llm, checked, kept + accepted, spec.preserve_stage) if checked else []
    if lost is None:
        stats.aborted += 1
        return RewriteResult(region_id, False, old_ids, list(old), "preservation check failed", stats)
    restored = {u.id for u in lost}
    stats.restored += len(restored)
    for u in checked:
        if u.protected and u.id not in replaced and u.id not in restored:
            restored.add(u.id)
            stats.protected_kept += 1
    dropped = [u.id for u in checked if u.id not in restored]
    stats.dropped += len(dropped)
    stats.committed += 1
    final = [u for u in old if u.id in kept_ids or u.id in restored] + accepted
    return RewriteResult(region_id, True, old_ids, final, "", stats, dropped, draft.notes_used)


def apply_rewrite(sm: SourceModel, result: RewriteResult) -> None:
    """Put a committed rewrite into the model in place of its old set (first position, deduplicated)."""
    if not result.committed:
        return
    old = set(result.old_ids)
    positions = [i for i, u in enumerate(sm.units) if u.id in old]
    at = positions[0] if positions else len(sm.units)
    before = [u for u in sm.units[:at] if u.id not in old]
    after = [u for u in sm.units[at:] if u.id not in old]
    others = {u.id for u in before + after}
    new = [u for u in {u.id: u for u in result.units}.values() if u.id not in others]
    sm.units = before + new + after
