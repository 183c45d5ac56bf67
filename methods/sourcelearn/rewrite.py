"""Grounded reconstruction: the single write path of every SourceLearn learning stage.

Consolidation (self-study), failure-guided refinement and recalibration all change the source
model the same way (paper Eq. 5): one writer call revises a set of current units (one entity's, a
region's cross-entity units, none for an entity pair, the units nearest a task's needs) from
temporary notes and the source excerpts they rest on; then code decides what is committed:

* every new or changed statement is grounded against ALL of the rewrite's evidence, batched, and
  anchored where the grounder finds it (``grounding.ground_rewrite``; one narrowing retry);
* consolidation and recalibration: the preservation check lists old meanings the new units no
  longer represent (25 a call, no cap): those old units are restored unchanged, and so is every
  protected (task-learned) unit that no accepted unit absorbed;
* refinement (known / add / replace): a pure addition the model already states is dropped (a word
  overlap, confirmed by entailment), at most ``MAX_REPLACE`` old units are replaced, a replacement
  is refused unless every new unit grounds, and each replaced unit goes only if the new units entail
  it or its own evidence no longer supports it;
* entity cards and context units are never rewritten (shown as context only);
* if the writer call or the preservation call fails, the units stay exactly as they were.

Lineage is kept: a new unit lists the old unit ids it absorbed, and inherits their protection.
The module also holds the small helpers every stage needs to fit material into a context window
deterministically (chars / 4 tokens, blocks taken in order until the budget is spent).
"""

from __future__ import annotations

import dataclasses
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

from .grounding import (
    GROUND_CHARS,
    GateStats,
    check,
    ground_rewrite,
    preservation_check,
    supported_ids,
    units_entail,
)
from .model import Cited, Few, Origin, Phrase, Scope, SourceModel, Statement, Unit
from .words import content_words

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
# grounding calls: consolidation and recalibration judge 20 statements a call (official ``ground_batch``);
# refinement judges each new unit alone (official ``ground_or_narrow`` in ``ground_and_apply``)
GROUND_BATCHES = {"consolidate": 20, "refine": 1, "recalibrate": 20}
MAX_REPLACE = 4  # refinement: old units one task's refinement may supersede (official MAX_REPLACE)
KNOWN_OVERLAP = 0.6  # a unit holding this share of a proposal's content words already states it (official)

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
    element_ids: Cited = Field(default_factory=list, description="bracketed excerpt ids it rests on, copied exactly")
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


@functools.lru_cache(maxsize=64)
def rewrite_schema(units: int, statement_chars: int, keep: int = 64) -> type[RegionRewrite]:
    """The writer's reply schema at one capacity (same fields and names; only the decoder's bounds differ).
    ``keep``: the number of current units shown, so every one of them can be listed as kept."""
    unit = create_model("ProposedUnit", __base__=ProposedUnit, statement=(bounded_text(statement_chars), ...))
    return create_model("RegionRewrite", __base__=RegionRewrite,  # type: ignore[return-value]
                        keep=(bounded_list(str, max(1, keep)),
                              Field(default_factory=list, description="ids of current units kept exactly as they are")),
                        units=(bounded_list(unit, units), Field(default_factory=list, description="new or revised units")))


WRITER_SYSTEM = (
    "You maintain a SOURCE MODEL of a knowledge source: a compact set of reusable statements about the "
    "source, each tied to the source elements that establish it. You revise one part of the model (one "
    "entity, the cross-entity structure of a region, or the units a task needed). You receive that part's "
    "current units, numbered notes gathered by rereading the source against the model, and the source "
    "excerpts those notes rest on.\n"
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
    "under which it holds, written out explicitly; element_ids of the excerpts it rests on, copied exactly "
    "from the [bracketed] ids (every unit is checked against all the excerpts shown); absorbs; and the "
    "numbers of the notes it draws on.\n"
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
        "as the answer to a particular question: the task's question is shown to say what the knowledge is for, "
        "and must not be copied into a unit. Replace (absorb) at most {max_replace} current units."
    ),
    "recalibrate": (
        "This revision applies the REPRESENTATION POLICY below, learned from earlier use of the model: where "
        "the excerpts support structure the policy asks for and the region lacks it or holds it at the wrong "
        "granularity, represent it. Context units marked [protected] were learned from tasks: they stay as they "
        "are; do not restate them."
    ),
}


RELATION_NOTE = (
    "This is a CROSS-ENTITY pass: the notes connect several entities (one constraining, triggering or feeding "
    "another, a shared rule with its instances and exceptions, a dependency between them). Write only such "
    "cross-entity units (mechanism, relation, pattern, distinction, exception), each scoped to the two "
    "entities it connects or to the region; do not restate one entity's own facts, which its own units hold."
)


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
    concurrency: int = 256  # as SourceLearnConfig.concurrency

    def evidence_chars(self) -> int:
        """The writer's window per evidence element (its first characters)."""
        return EVIDENCE_CHARS[self.mode]

    def gate_chars(self) -> int:
        """The grounder's window per cited element on the first check."""
        return GATE_CHARS[self.mode]


@dataclass
class RewriteStats:
    regions: int = 0  # rewrites attempted (writer calls), whatever their scope
    entity_passes: int = 0
    relation_passes: int = 0  # cross-entity passes of a region
    pair_passes: int = 0  # relation-only passes of a CONNECT pair
    committed: int = 0
    aborted: int = 0
    proposed: int = 0
    unchanged: int = 0
    over_cap: int = 0
    no_evidence: int = 0  # proposals made when the rewrite had no evidence to ground them on
    accepted: int = 0
    known: int = 0  # refinement: proposals the model already states (dropped)
    over_replace: int = 0  # refinement: absorbed ids beyond MAX_REPLACE (those units stay)
    replace_refused: int = 0  # refinement: a replacement whose new units did not all ground
    not_superseded: int = 0  # refinement: replaced units kept (their meaning is neither carried nor wrong)
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
    region_id: str  # the rewrite's name: an entity key, "<region>:relations", "<a><-><b>", a region id
    committed: bool
    old_ids: list[str]  # units this rewrite replaces (its editable old set)
    units: list[Unit]  # what stands in their place
    reason: str = ""
    stats: RewriteStats = field(default_factory=RewriteStats)
    dropped_ids: list[str] = field(default_factory=list)  # old units subsumed by new ones
    notes_used: int = 0  # proposed units that cite a note (consolidation's structure gate reads it)


@dataclass
class RewriteJob:
    """What one writer call revises and sees.

    ``old``: the editable units; ``context``: units shown and never rewritten (entity cards, a block's
    regional units beside an entity pass, protected units under recalibration); ``allowed``: entity keys
    the writer may scope to; ``default_keys``: the scope of a unit that names none ([] = the region);
    ``kind``: entity | relations | pair | region | refine; ``question``: the task a refinement serves."""

    name: str
    region_id: str
    old: list[Unit]
    notes: list[Note]
    evidence_ids: list[str]
    allowed: list[str]
    context: list[Unit] = field(default_factory=list)
    default_keys: list[str] = field(default_factory=list)
    kind: str = "region"
    question: str = ""


def select_old_units(sm: SourceModel, source: Source, region_id: str, notes: list[Note],
                     max_chars: int, views: RegionViews | None = None) -> list[Unit]:
    """The editable part of a region (a region-wide rewrite): units the notes cite, units of the entities
    they touch, then region-wide units; cards and stale units are never editable; whatever does not fit
    stays as is. ``views``: the model's ``RegionViews``, when several regions of one snapshot are rewritten."""
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
    return fit_units(ranked, max_chars)


def fit_units(units: list[Unit], max_chars: int) -> list[Unit]:
    """Units in order while their lines fit ``max_chars`` (the rest stays as it is, unseen)."""
    chosen, used = [], 0
    for u in units:
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
    return [b for _, b in evidence_shown(source, element_ids, per_element, total)]


def evidence_shown(source: Source, element_ids: Iterable[str], per_element: int, total: int) -> list[tuple[str, str]]:
    """``evidence_blocks`` with each block's element id: what the writer saw is what the grounder judges on."""
    out, spent = [], 0
    for eid in dict.fromkeys(element_ids):
        el = source.element(eid)
        if el is None:
            continue
        n = min(len(el.text), per_element)
        if spent + n > total:
            if not out and total > 200:
                out.append((el.id, f"[{el.id}] {el.title}\n{el.excerpt(total)}"))
            break
        out.append((el.id, f"[{el.id}] {el.title}\n{el.excerpt(per_element)}"))
        spent += n
    return out


def evidence_room(left: int, windowed: bool) -> int:
    """Evidence characters of one rewrite: EVIDENCE_TOTAL, or what the window leaves when it is smaller."""
    return min(EVIDENCE_TOTAL, left) if windowed else EVIDENCE_TOTAL


def job_head(sm: SourceModel, job: RewriteJob) -> str:
    region = sm.layout().region_by_id.get(job.region_id)
    title = region.title if region else job.region_id
    if job.kind == "entity":
        return f"Entity: {job.name} (of region {title})"
    if job.kind == "relations":
        return f"Cross-entity structure of region: {title}"
    if job.kind == "pair":
        return f"Relation between entities: {' and '.join(job.default_keys)} (region {title})"
    head = f"Region: {title}"
    if region is not None and region.description:
        head += f" — {region.description}"
    return head


def writer_messages(sm: SourceModel, source: Source, job: RewriteJob, spec: RewriteSpec, budget: int,
                    windowed: bool = False) -> tuple[list[dict[str, str]], list[str]]:
    """The writer's prompt and the evidence ids it shows; ``budget``: material characters beside the reply
    (the evidence takes EVIDENCE_TOTAL with no declared window, what the window leaves otherwise)."""
    system = WRITER_SYSTEM.format(statement_chars=REWRITE_STATEMENTS[spec.mode])
    mode_note = MODE_NOTES[spec.mode].format(max_changed=spec.max_changed or "a few", max_replace=MAX_REPLACE)
    if mode_note:
        system += "\n\n" + mode_note
    if job.kind in ("relations", "pair"):
        system += "\n\n" + RELATION_NOTE
    if spec.policy:
        system += "\n\n" + policy_note(spec.policy)
    old_lines = [unit_line(u) for u in job.old]
    ctx_lines = fit((unit_line(u) for u in job.context), budget // 8)
    note_lines = fit((n.render(i) for i, n in enumerate(job.notes, 1)), budget // 4)
    shown = evidence_shown(source, job.evidence_ids, spec.evidence_chars(),
                           evidence_room(budget - sum(len(x) for x in ctx_lines + note_lines + old_lines), windowed))
    parts = [job_head(sm, job)]
    if job.question:
        parts.append("Task question (what the knowledge was needed for; never copy it into a unit):\n" + job.question)
    parts.append("Entity keys you may use in scope_keys: " + (", ".join(job.allowed) or "(none)"))
    parts.append("Current units:\n" + ("\n".join(old_lines) or "(none yet)"))
    if ctx_lines:
        parts.append("Context units and entity cards (shown only, do not rewrite):\n" + "\n".join(ctx_lines))
    parts.append("Notes:\n" + ("\n".join(note_lines) or "(none)"))
    parts.append("Source excerpts:\n" + ("\n\n".join(b for _, b in shown) or "(none)"))
    parts.append("Write the revised units. Reply in JSON.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}], \
        [i for i, _ in shown]


def _scope(keys: list[str], sm: SourceModel, allowed: set[str], region_id: str, default: list[str]) -> Scope:
    valid = list(dict.fromkeys(k for k in (resolve_entity(sm, x) for x in keys) if k is not None and k in allowed))
    if not valid:
        valid = list(default)
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
    required: list[bool] = field(default_factory=list)  # per candidate: absorbs a unit or draws on a note


def _draft(out: RegionRewrite, sm: SourceModel, source: Source, job: RewriteJob, spec: RewriteSpec,
           stats: RewriteStats, unit_ids: set[str]) -> _Draft:
    """Proposals -> candidate units. A re-emitted old unit counts as kept (no gate call); a unit the
    model already holds elsewhere is skipped; beyond ``max_changed`` proposals are ignored; in
    refinement at most MAX_REPLACE old units are absorbed, the rest stay. Anchors come from grounding."""
    by_id = {u.id: u for u in job.old}
    kept_ids = [i for i in dict.fromkeys(k.strip() for k in out.keep) if i in by_id]
    elsewhere = unit_ids - set(by_id)
    allowed = set(job.allowed)
    replaced: list[str] = []
    candidates: list[Unit] = []
    required: list[bool] = []
    for p in out.units[:MAX_REWRITE_UNITS]:
        stats.proposed += 1
        statement = " ".join(p.statement.split())
        if not statement:
            continue
        conditions = [c.strip() for c in p.conditions if c.strip()]
        scope = _scope(p.scope_keys, sm, allowed, job.region_id, job.default_keys)
        twin = next((u for u in job.old if _same(u, statement, p.role, scope, conditions)), None)
        uid = SourceModel.unit_id(statement, p.role, scope, salt="|".join(conditions))
        if twin is not None or uid in elsewhere:
            stats.unchanged += 1
            if twin is not None and twin.id not in kept_ids:
                kept_ids.append(twin.id)
            continue
        if spec.max_changed is not None and len(candidates) >= spec.max_changed:
            stats.over_cap += 1
            continue
        absorbed = [i for i in dict.fromkeys(a.strip() for a in p.absorbs) if i in by_id]
        if spec.mode == "refine":
            room = []
            for i in absorbed:
                if i not in replaced and len(replaced) >= MAX_REPLACE:
                    stats.over_replace += 1
                    continue
                room.append(i)
                if i not in replaced:
                    replaced.append(i)
            absorbed = room
        candidates.append(Unit(id=uid, statement=statement, role=p.role, scope=scope, conditions=conditions,
                               anchors=SourceModel.stamp(p.element_ids, source), origin=spec.origin,
                               absorbed=absorbed,
                               protected=spec.protect_new or any(by_id[i].protected for i in absorbed)))
        required.append(bool(absorbed) or any(1 <= n <= len(job.notes) for n in p.notes))
    notes_used = sum(1 for p in out.units[:MAX_REWRITE_UNITS] if any(1 <= n <= len(job.notes) for n in p.notes))
    return _Draft(kept_ids, candidates, notes_used, required)


async def _gate_all(llm: BoundLLM, candidates: list[Unit], source: Source, spec: RewriteSpec, gate_stats: GateStats,
                    evidence_ids: list[str], stats: RewriteStats) -> list[Unit | None]:
    """Grounding over the candidates against all the rewrite's evidence; per candidate the grounded unit
    (anchored where the grounder found it; a narrowed one gets its own id) or None."""
    if not candidates:
        return []
    if not evidence_ids:
        stats.no_evidence += len(candidates)
    got = await ground_rewrite(llm, [u.statement for u in candidates], evidence_ids, source, spec.ground_stage,
                               gate_stats, spec.gate_chars(), spec.concurrency, GROUND_BATCHES[spec.mode])
    out: list[Unit | None] = []
    for cand, g in zip(candidates, got):
        if not g.statement:
            out.append(None)
            continue
        update: dict = {"anchors": SourceModel.stamp(g.anchors, source)}
        if g.statement != cand.statement:
            update.update(statement=g.statement,
                          id=SourceModel.unit_id(g.statement, cand.role, cand.scope, salt="|".join(cand.conditions)))
        out.append(cand.model_copy(update=update))
    return out


def known_unit(statement: str, scope: Scope, units: list[Unit]) -> Unit | None:
    """A unit that already states ``statement`` by word overlap (official ``m_has_it``): one holding at
    least KNOWN_OVERLAP of its content words (units of 3+ content words), or a card of one of its entities
    with an attribute whose name (2+ content words) it contains and whose name and value cover half of it."""
    st = content_words(statement)
    if not st:
        return None
    ents = set(scope.keys) if scope.kind in ("entity", "pair") else set()
    best, best_u = 0.0, None
    for u in units:
        pt = content_words(u.statement)
        if len(pt) >= 3:
            o = len(st & pt) / len(st)
            if o > best:
                best, best_u = o, u
        if u.role == "card" and set(u.scope.keys) & ents:
            for a in u.attributes:
                key = content_words(a.name)
                if len(key) >= 2 and key <= st and len(st & content_words(f"{a.name} {a.value}")) / len(st) >= 0.5:
                    return u
    return best_u if best >= KNOWN_OVERLAP else None


async def _refine_gates(llm: BoundLLM, sm: SourceModel, source: Source, job: RewriteJob, spec: RewriteSpec,
                        draft: _Draft, gated: list[Unit | None], evidence_ids: list[str],
                        stats: RewriteStats) -> tuple[list[Unit], list[str]] | None:
    """Refinement's gates after grounding (official ``ground_and_apply``): a replacement is refused unless
    every new unit grounded (None); a pure addition the model already states is dropped (word overlap
    confirmed by entailment, ``verify_known``); each replaced unit goes only if the new units entail it or
    its own evidence no longer supports it (``_may_supersede``). Returns (accepted, replaced ids)."""
    replacing = any(c.absorbed for c in draft.candidates)
    if replacing and any(g is None for g in gated):
        stats.replace_refused += 1
        return None
    accepted: list[Unit] = []
    old_ids = {u.id for u in job.old}
    others = [u for u in sm.units if u.role != "map" and not sm.is_stale(u, source)]
    for u in gated:
        if u is None or any(a.id == u.id for a in accepted) or u.id in old_ids:
            continue
        if not replacing:
            hit = known_unit(u.statement, u.scope, [o for o in others if o.id != u.id])
            if hit is not None and await units_entail(llm, u.statement, [hit], spec.ground_stage):
                stats.known += 1
                continue
        accepted.append(u)
    replaced: list[str] = []
    by_id = {u.id: u for u in job.old}
    for rid in dict.fromkeys(i for a in accepted for i in a.absorbed):
        old = by_id[rid]
        if old.role != "card" and await may_supersede(llm, old, accepted, evidence_ids, source, spec):
            replaced.append(rid)
        else:
            stats.not_superseded += 1
    keep = set(replaced)
    accepted = [a.model_copy(update={"absorbed": [i for i in a.absorbed if i in keep]}) for a in accepted]
    return accepted, replaced


async def may_supersede(llm: BoundLLM, old: Unit, new: list[Unit], evidence_ids: list[str], source: Source,
                        spec: RewriteSpec) -> bool:
    """One old unit may be replaced when the new units entail it, or when its own anchors lie in the
    evidence and the evidence does not support it (a wrong unit); otherwise it stays (official ``_may_supersede``)."""
    if await units_entail(llm, old.render(), new, spec.ground_stage):
        return True
    covered = set(old.element_ids()) & set(evidence_ids)
    if not covered:
        return False
    v = await check(llm, old.render(), evidence_ids, source, spec.ground_stage, min(spec.gate_chars(), GROUND_CHARS))
    return v is not None and not supported_ids(v, evidence_ids, source)


async def rewrite_job(llm: BoundLLM, sm: SourceModel, source: Source, job: RewriteJob, spec: RewriteSpec,
                      gate_stats: GateStats, unit_ids: set[str] | None = None) -> RewriteResult:
    """Revise one job's units from its notes and evidence; return what to commit (not applied).
    ``unit_ids``: every unit id of ``sm``, passed when many jobs of one snapshot are rewritten."""
    stats = RewriteStats(regions=1)
    if job.kind == "entity":
        stats.entity_passes = 1
    elif job.kind == "relations":
        stats.relation_passes = 1
    elif job.kind == "pair":
        stats.pair_passes = 1
    unit_ids = unit_ids if unit_ids is not None else {u.id for u in sm.units}
    cap = writer_capacity(llm, spec.mode)
    budget = material_chars(llm, cap.reply_tokens)
    job = dataclasses.replace(job, old=fit_units(job.old, budget // 3))
    old, old_ids = job.old, [u.id for u in job.old]
    windowed = bool(llm.spec.effective_context_window())

    def build(b: int) -> tuple[tuple[list[dict[str, str]], list[str]], list[dict[str, str]]]:
        msgs, shown = writer_messages(sm, source, job, spec, b, windowed)
        return (msgs, shown), msgs

    msgs, shown = await fit_to_window(llm, build, budget, cap.reply_tokens)
    res = await llm.structured(msgs, rewrite_schema(cap.units, cap.statement_chars, len(old)), stage=spec.stage,
                               max_tokens=cap.reply_tokens,
                               choices={"element_ids": shown, "keep": old_ids, "absorbs": old_ids,
                                        "scope_keys": list(job.allowed)})
    if res.failed or res.value is None:
        stats.aborted += 1
        return RewriteResult(job.name, False, old_ids, list(old), "writer call failed", stats)

    draft = _draft(res.value, sm, source, job, spec, stats, unit_ids)  # type: ignore[arg-type]
    gated = await _gate_all(llm, draft.candidates, source, spec, gate_stats, shown, stats)
    kept_ids = list(draft.kept_ids)
    if spec.mode == "refine":
        done = await _refine_gates(llm, sm, source, job, spec, draft, gated, shown, stats)
        if done is None:
            return RewriteResult(job.name, False, old_ids, list(old), "replacement refused: a new unit did not ground",
                                 stats)
        accepted, replaced = done
        if not accepted:
            return RewriteResult(job.name, False, old_ids, list(old), "nothing new to write", stats)
        stats.accepted += len(accepted)
        stats.committed += 1
        stats.kept += len(old) - len(replaced)
        stats.dropped += len(replaced)
        final = [u for u in old if u.id not in replaced] + accepted
        return RewriteResult(job.name, True, old_ids, final, "", stats, replaced, draft.notes_used)

    # official ``prepare_rewrite``: an empty proposal, a proposal of which nothing grounded, or one whose
    # required units (absorbing an old unit or drawing on a note) all failed, leaves the units as they were
    if not res.value.units:  # type: ignore[union-attr]
        return RewriteResult(job.name, False, old_ids, list(old), "empty proposal", stats)
    grounded = [g is not None for g in gated]
    if draft.candidates and (not any(grounded) or (any(draft.required) and not any(
            ok and req for ok, req in zip(grounded, draft.required)))):
        return RewriteResult(job.name, False, old_ids, list(old), "refused: the units it rests on did not ground",
                             stats)
    accepted = []
    for u in gated:
        if u is not None and all(a.id != u.id for a in accepted) and u.id not in old_ids:
            accepted.append(u.model_copy(update={"absorbed": [i for i in u.absorbed if i not in kept_ids]}))
    stats.accepted += len(accepted)
    replaced_ids = {i for a in accepted for i in a.absorbed}
    if spec.delta:  # known / add / replace: what no accepted unit absorbs stays as it is
        kept_ids += [i for i in old_ids if i not in replaced_ids and i not in kept_ids]
    kept = [u for u in old if u.id in kept_ids]
    stats.kept += len(kept)

    # preservation: old meanings neither kept nor represented come back unchanged; so does every
    # protected unit that no accepted unit absorbed (its absorber inherited the protection)
    checked = [u for u in old if u.id not in kept_ids]
    lost = await preservation_check(llm, checked, kept + accepted, spec.preserve_stage) if checked else []
    if lost is None:
        stats.aborted += 1
        return RewriteResult(job.name, False, old_ids, list(old), "preservation check failed", stats)
    restored = {u.id for u in lost}
    stats.restored += len(restored)
    for u in checked:
        if u.protected and u.id not in replaced_ids and u.id not in restored:
            restored.add(u.id)
            stats.protected_kept += 1
    dropped = [u.id for u in checked if u.id not in restored]
    stats.dropped += len(dropped)
    stats.committed += 1
    final = [u for u in old if u.id in kept_ids or u.id in restored] + accepted
    return RewriteResult(job.name, True, old_ids, final, "", stats, dropped, draft.notes_used)


async def rewrite_region(llm: BoundLLM, sm: SourceModel, source: Source, region_id: str, notes: list[Note],
                         spec: RewriteSpec, gate_stats: GateStats, extra_evidence: Iterable[str] = (),
                         views: RegionViews | None = None) -> RewriteResult:
    """A region-wide rewrite: the region's units (those the notes touch first) + notes + evidence.

    The learning stages rewrite per entity (``selfstudy.consolidate``); this whole-region form serves
    callers that revise a region at once. ``views``: ``RegionViews.of(sm, source)`` for many regions."""
    views = views or RegionViews.of(sm, source)
    cap = writer_capacity(llm, spec.mode)
    budget = material_chars(llm, cap.reply_tokens)
    old = select_old_units(sm, source, region_id, notes, budget // 3, views)
    cards = region_cards(sm, source, region_id, notes, views)
    evidence_ids = list(dict.fromkeys([i for n in notes for i in n.evidence_ids] + list(extra_evidence)
                                      + [i for u in old for i in u.element_ids()]))
    allowed = ({e.key for e in sm.layout().entities_by_region.get(region_id, [])}
               | {k for n in notes for k in n.entities})
    allowed |= {k for u in old for k in u.scope.keys if u.scope.kind in ("entity", "pair")}
    job = RewriteJob(name=region_id, region_id=region_id, old=old, notes=notes, evidence_ids=evidence_ids,
                     allowed=sorted(allowed), context=cards)
    return await rewrite_job(llm, sm, source, job, spec, gate_stats, views.unit_ids)


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
