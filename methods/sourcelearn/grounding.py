"""The two gates every SourceLearn write passes: grounding and preservation.

Grounding: a proposed statement is kept only if the source excerpts it cites entail it. A negative
claim ("X is not supported") additionally needs an excerpt that states a denial: absence from the
excerpts is not evidence of absence from the source. An unsupported statement gets one narrowing
retry (rewrite it down to what the excerpts establish), then is rejected.

Preservation: after a region is rewritten, the old meanings the new region no longer represents
are listed; those old units are kept, so learning never silently loses supported knowledge.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, create_model

from harness.data import Source
from harness.llm import bounded_list

from .model import Few, Ids, Phrase, Statement, Unit

if TYPE_CHECKING:
    from harness.llm import BoundLLM

EXCERPT_CHARS = 1200
_NEG = re.compile(r"\b(not|no|never|cannot|can't|doesn't|don't|isn't|aren't|won't|without|neither|nor|none|"
                  r"unsupported|impossible|disallowed|forbidden|prohibited)\b", re.IGNORECASE)


def is_negative(statement: str) -> bool:
    return bool(_NEG.search(statement))


def states_denial(texts: list[str]) -> bool:
    return any(_NEG.search(t) for t in texts)


def excerpts_block(source: Source, element_ids: list[str], max_chars: int = EXCERPT_CHARS) -> str:
    out = []
    for eid in element_ids:
        el = source.element(eid)
        if el is not None:
            out.append(f"[{el.id}] {el.title}\n{el.excerpt(max_chars)}")
    return "\n\n".join(out)


class GroundVerdict(BaseModel):
    supported: bool
    evidence_ids: Ids = Field(default_factory=list, description="ids of the excerpts that establish it")
    unsupported_parts: bounded_list(Phrase, Few) = Field(default_factory=list)


class ClaimVerdict(BaseModel):
    supported: bool
    evidence_ids: Ids = Field(default_factory=list)


@functools.lru_cache(maxsize=64)
def batch_verdicts(n: int) -> type[BaseModel]:
    """The batch reply for n claims: one required key per claim (``claim_1`` .. ``claim_n``), so the
    schema itself asks for every verdict and a model cannot skip one (a list of numbered verdicts
    let weak models stop after two, and an unanswered claim counts as unsupported)."""
    return create_model(f"BatchVerdicts{n}", **{f"claim_{i}": (ClaimVerdict, ...) for i in range(1, n + 1)})


class Narrowed(BaseModel):
    statement: Statement = Field(description="the claim reduced to what the excerpts establish; empty if nothing")


GATE_SYSTEM = (
    "You check claims against source excerpts. A claim is SUPPORTED only if the excerpts entail it; being "
    "merely consistent with them is not enough. Negative claims (something does not exist, is not supported, "
    "cannot be done) are supported only when an excerpt explicitly states that denial; something missing "
    "from the excerpts is not evidence that it is missing from the source. Cite excerpts by their bracketed ids."
)


@dataclass
class GateResult:
    unit: Unit | None  # the accepted (possibly narrowed) unit, or None if rejected
    verdict: GroundVerdict | None
    narrowed: bool = False
    reason: str = ""


@dataclass
class GateStats:
    checked: int = 0
    accepted: int = 0
    narrowed: int = 0
    rejected: int = 0
    negative_rejected: int = 0
    failed_calls: int = 0
    rejected_statements: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = self.__dict__.copy()
        d["rejected_statements"] = self.rejected_statements[:20]
        return d


async def check(llm: BoundLLM, statement: str, element_ids: list[str], source: Source,
                stage: str) -> GroundVerdict | None:
    """One grounding call for one statement; None if the call failed."""
    block = excerpts_block(source, element_ids)
    if not block:
        return GroundVerdict(supported=False, unsupported_parts=["cites no existing source element"])
    msgs = [{"role": "system", "content": GATE_SYSTEM},
            {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaim:\n{statement}\n\n"
                                        "Is the claim supported? Reply in JSON."}]
    res = await llm.structured(msgs, GroundVerdict, stage=stage, max_tokens=300)
    return res.value if not res.failed else None  # type: ignore[return-value]


def _apply_negative_rule(statement: str, verdict: GroundVerdict, source: Source, cited: list[str]) -> GroundVerdict:
    """Code-side enforcement of the negative-claim rule: the cited excerpts must contain a denial."""
    if verdict.supported and is_negative(statement):
        ids = [i for i in (verdict.evidence_ids or cited) if source.element(i) is not None]
        texts = [source.element(i).text for i in ids]  # type: ignore[union-attr]
        if not states_denial(texts):
            return GroundVerdict(supported=False, evidence_ids=verdict.evidence_ids,
                                 unsupported_parts=["negative claim without an explicit denial in the source"])
    return verdict


async def gate_unit(llm: BoundLLM, unit: Unit, source: Source, stage: str, stats: GateStats | None = None,
                    narrow: bool = True) -> GateResult:
    """Ground one unit against its anchors; one narrowing retry; re-stamp anchors to the cited evidence."""
    stats = stats if stats is not None else GateStats()
    stats.checked += 1
    cited = unit.element_ids()
    v = await check(llm, unit.statement, cited, source, stage)
    if v is None:
        stats.failed_calls += 1
        stats.rejected += 1
        return GateResult(None, None, reason="grounding call failed")
    v = _apply_negative_rule(unit.statement, v, source, cited)
    if v.supported:
        stats.accepted += 1
        return GateResult(_restamp(unit, v, source), v)
    if is_negative(unit.statement) and v.unsupported_parts and "negative claim" in v.unsupported_parts[0]:
        stats.negative_rejected += 1
    if narrow:
        block = excerpts_block(source, cited)
        msgs = [{"role": "system", "content": GATE_SYSTEM},
                {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaim:\n{unit.statement}\n\nParts not "
                 f"established: {'; '.join(v.unsupported_parts) or 'unspecified'}\n\nRewrite the claim so that it "
                 "states only what the excerpts establish (keep its conditions if they are established). Reply "
                 'in JSON; use an empty statement if nothing remains.'}]
        res = await llm.structured(msgs, Narrowed, stage=stage, max_tokens=300)
        new = (res.value.statement.strip() if res.value is not None else "")  # type: ignore[union-attr]
        if new and new != unit.statement:
            v2 = await check(llm, new, cited, source, stage)
            if v2 is not None:
                v2 = _apply_negative_rule(new, v2, source, cited)
                if v2.supported:
                    stats.accepted += 1
                    stats.narrowed += 1
                    return GateResult(_restamp(unit.model_copy(update={"statement": new}), v2, source), v2,
                                      narrowed=True)
    stats.rejected += 1
    stats.rejected_statements.append(unit.statement[:200])
    return GateResult(None, v, reason="; ".join(v.unsupported_parts) or "not supported")


def _restamp(unit: Unit, v: GroundVerdict, source: Source) -> Unit:
    from .model import SourceModel

    ids = [i for i in v.evidence_ids if source.element(i) is not None] or unit.element_ids()
    return unit.model_copy(update={"anchors": SourceModel.stamp(ids, source)})


async def gate_batch(llm: BoundLLM, claims: list[tuple[str, list[str]]], source: Source, stage: str,
                     batch_size: int = 8) -> list[bool]:
    """Batched check used at construction: many short claims per call, each with its cited ids.

    A failed call rejects its whole batch (nothing unverified enters the model).
    """
    out: list[bool] = []
    for start in range(0, len(claims), batch_size):
        chunk = claims[start:start + batch_size]
        ids = list(dict.fromkeys(i for _, cited in chunk for i in cited))
        block = excerpts_block(source, ids)
        listing = "\n".join(f"{n}. {s} [cites: {', '.join(c)}]" for n, (s, c) in enumerate(chunk, 1))
        msgs = [{"role": "system", "content": GATE_SYSTEM},
                {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaims:\n{listing}\n\nFor every claim "
                 "say whether the excerpts it cites support it (claim_1 for claim 1, and so on). Reply in JSON."}]
        res = await llm.structured(msgs, batch_verdicts(len(chunk)), stage=stage, max_tokens=60 * len(chunk) + 50,
                                   choices={"evidence_ids": ids})
        verdicts = {n: getattr(res.value, f"claim_{n}") for n in range(1, len(chunk) + 1)} if res.value is not None \
            else {}
        for n, (statement, cited) in enumerate(chunk, 1):
            v = verdicts.get(n)
            ok = bool(v and v.supported)
            if ok and is_negative(statement):
                ok = states_denial([source.element(i).text for i in cited if source.element(i) is not None])
            out.append(ok)
    return out


class LostMeanings(BaseModel):
    lost: bounded_list(int, 32) = Field(default_factory=list, description="numbers of old meanings no longer represented")


async def preservation_check(llm: BoundLLM, old: list[Unit], new: list[Unit], stage: str) -> list[Unit] | None:
    """Old units whose meaning the new region no longer represents (None if the call failed)."""
    if not old:
        return []
    old_block = "\n".join(f"{i}. {u.render()}" for i, u in enumerate(old, 1))
    new_block = "\n".join(f"- {u.render()}" for u in new) or "(empty)"
    msgs = [{"role": "system", "content": "You compare two versions of part of a source model."},
            {"role": "user", "content": f"OLD meanings:\n{old_block}\n\nNEW region:\n{new_block}\n\nWhich old "
             "meanings does the new region no longer represent? A meaning is represented if the new region states "
             "it, entails it, or covers it with a broader rule, procedure or abstraction; a lost condition, "
             "exception, value, entity or step is not represented. Reply in JSON with their numbers."}]
    res = await llm.structured(msgs, LostMeanings, stage=stage, max_tokens=200)
    if res.failed or res.value is None:
        return None
    return [old[i - 1] for i in sorted(set(res.value.lost)) if 1 <= i <= len(old)]  # type: ignore[union-attr]
