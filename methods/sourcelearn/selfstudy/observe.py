"""Observe: reread source text next to the current model and note what the model fails to explain.

One prompt serves every rereading (paper C.2): full-entity inspection, a study action's focused
question, and recalibration under a representation policy; a short mode note tells them apart.
Observations are temporary notes for planning and consolidation and are never written to the
model. Code keeps only notes that cite evidence actually shown, and unit ids actually shown.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, create_model

from sourcebench.harness.data import Source
from sourcebench.harness.llm import Message
from sourcebench.harness.schema_limits import bounded_list
from sourcebench.harness.token_budget import fit_to_window

from ..model import Cited, Ids, Statement, Unit
from ..rewrite import Note, excerpt_blocks, fit, material_chars, policy_note, unit_line

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

Mode = Literal["review", "study", "policy"]
OBSERVE_MAX_TOKENS = 1_200


class ObservationItem(BaseModel):
    note: Statement = Field(description="one thing the evidence establishes that the model does not yet explain well")
    evidence_ids: Cited = Field(default_factory=list, description="bracketed ids of the excerpts it rests on")
    implication: Statement = Field(default="", description="what it means for the model")
    unit_ids: Ids = Field(default_factory=list, description="ids of the model units it concerns")


class Observations(BaseModel):
    learned: bool
    observations: list[ObservationItem] = Field(default_factory=list)


@functools.lru_cache(maxsize=16)
def observations_schema(max_notes: int) -> type[Observations]:
    """The reply schema with at most ``max_notes`` observations: under a grammar a small model
    otherwise repeats one note until ``max_tokens`` cuts the JSON (47 of 79 SmolLM2 inspection
    replies on PhantomWiki did), which fails the call."""
    return create_model(f"Observations{max_notes}", __base__=Observations,
                        observations=(bounded_list(ObservationItem, max(1, max_notes)), Field(default_factory=list)))


OBSERVE_SYSTEM = (
    "You study a knowledge source in order to improve a compact SOURCE MODEL of it. You are shown the part "
    "of the current model that concerns a learning target and the raw source text for it. Write down, as "
    "STUDY NOTES, what the source establishes that the model does not yet explain well. These notes are "
    "temporary: they will later feed one rewrite of this part of the model, so do not draft model units "
    "here. Each note is one observation the source text establishes (a rule, a condition, a dependency, the "
    "order of procedure steps, an exception, a distinction, or how two things are connected), the "
    "[bracketed] ids of the excerpts it rests on, what it implies for the model (for example 'these facts "
    "are stages of one procedure' or 'unit X lacks its governing condition'), and the ids of the model "
    "units it concerns. Do not note plain look-up values that the source answers by itself. When the model "
    "already explains the target, reply learned=false with no observations. At most {max_notes} notes."
)

MODE_NOTES = {
    "review": (
        "REVIEW mode: the complete source text of one entity is shown. Judge the model's portion about it as a "
        "whole: is every rule, condition, procedure step, exception and cross-reference the text establishes "
        "represented, scoped correctly and not broken into fragments? Note only what a reader of the model "
        "would otherwise get wrong; look-up values stay in the source."
    ),
    "study": (
        "STUDY mode: a focused study question names one gap found earlier. Note what the excerpts establish "
        "that resolves it, and nothing unrelated."
    ),
    "policy": (
        "POLICY mode: the complete source text of one entity is shown together with a representation policy "
        "learned from using the model. Note source-supported structure the policy asks for that the model's "
        "portion lacks or holds at the wrong granularity."
    ),
}


def observe_messages(units: list[Unit], blocks: list[str], mode: Mode, target: str, max_notes: int,
                     question: str = "", policy: list[str] | None = None) -> list[dict[str, str]]:
    system = OBSERVE_SYSTEM.format(max_notes=max_notes) + "\n\n" + MODE_NOTES[mode]
    if mode == "policy" and policy:
        system += "\n\n" + policy_note(policy)
    parts = [f"Learning target: {target}"]
    if question:
        parts.append(f"Study question: {question}")
    parts.append("Current model units:\n" + ("\n".join(unit_line(u) for u in units) or "(none yet)"))
    parts.append("Source text:\n" + "\n\n".join(blocks))
    parts.append("Reply in JSON.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


async def observe(llm: BoundLLM, source: Source, units: list[Unit], element_ids: list[str],
                  entities: tuple[str, ...], *, mode: Mode, stage: str, max_notes: int, target: str,
                  question: str = "", policy: list[str] | None = None, full_text: bool = False,
                  origin: str = "inspect", shown_text: dict[str, str] | None = None) -> list[Note] | None:
    """Notes on what the shown text establishes beyond the shown units (None if the call failed).

    ``full_text`` shows whole elements (inspection), otherwise capped excerpts; ``shown_text`` gives
    the text retrieval returned for an element (a study's code windows); either way the material is
    cut deterministically to the context window.
    """
    present = [i for i in dict.fromkeys(element_ids) if source.element(i) is not None]
    if shown_text:
        excerpts = [f"[{i}] {source.element(i).title}\n{shown_text[i]}" if i in shown_text  # type: ignore[union-attr]
                    else excerpt_blocks(source, [i], max_chars=0 if full_text else 1200)[0] for i in present]
    else:
        excerpts = excerpt_blocks(source, present, max_chars=0 if full_text else 1200)

    def build(budget: int) -> tuple[tuple[list[Unit], list[str], list[Message]], list[Message]]:
        unit_lines = fit((unit_line(u) for u in units), budget // 3)
        shown_units = units[: len(unit_lines)]
        blocks = fit(excerpts, budget - sum(len(x) + 1 for x in unit_lines))
        msgs = observe_messages(shown_units, blocks, mode, target, max_notes, question, policy)
        return (shown_units, blocks, msgs), msgs

    shown_units, blocks, msgs = await fit_to_window(llm, build, material_chars(llm, OBSERVE_MAX_TOKENS),
                                                    OBSERVE_MAX_TOKENS)
    if not blocks:
        return []
    shown_ids = set(present[: len(blocks)])
    res = await llm.structured(msgs, observations_schema(max_notes), stage=stage, max_tokens=OBSERVE_MAX_TOKENS,
                               choices={"evidence_ids": sorted(shown_ids), "unit_ids": [u.id for u in shown_units]})
    if res.failed or res.value is None:
        return None
    out: Observations = res.value  # type: ignore[assignment]
    # ``learned`` is advisory, as in the official observer: a reply that says false but lists
    # observations keeps them (models set it false while still listing what they found)
    known_units = {u.id for u in shown_units}
    notes: list[Note] = []
    for o in out.observations:
        ev = tuple(dict.fromkeys(i.strip() for i in o.evidence_ids if i.strip() in shown_ids))
        text = " ".join(o.note.split())
        if not text or not ev:
            continue
        notes.append(Note(text=text, evidence_ids=ev, implication=" ".join(o.implication.split()),
                          unit_ids=tuple(dict.fromkeys(u.strip() for u in o.unit_ids if u.strip() in known_units)),
                          entities=entities, origin=origin))
        if len(notes) >= max_notes:
            break
    return notes
