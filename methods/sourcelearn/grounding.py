"""The two gates every SourceLearn write passes: grounding and preservation.

Grounding of a rewrite (official ``reconstruction/update.py`` ``ground_batch`` / ``ground``): the writer
decides what to say, the grounder decides where the evidence is. Every proposed statement is judged
against ALL of the rewrite's evidence (each element shown up to the rewrite's window), many statements
per call, and a supported statement is anchored in the excerpts the grounder names (none named: not
supported). A statement that fails gets one narrowing retry against the same evidence, judged alone.
Negative claims are held to the prompt's rule (an excerpt must state the denial), as in the official
grounder. Construction's gate (``gate_unit``, ``gate_batch``) checks claims against their cited ids and
adds a code-side denial check.

Preservation: after a rewrite, the old meanings the new units no longer represent are listed, 25 per
call with no cap (official ``preservation_check``); those old units are kept.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, create_model

from sourcebench.harness.data import Source
from sourcebench.harness.schema_limits import bounded_list
from sourcebench.harness.token_budget import fit_to_window

from .model import Few, Ids, Phrase, Statement, Unit

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

# The grounder's evidence window (official reconstruction/defaults.py GROUND_CHARS and update.py
# ``ground``): the first 6,000 characters of each cited element, so a claim about the later part of a
# class, an API specification or a long scene is judged on the text that states it. A rewrite whose
# evidence is cut shorter passes its own window (``chars``). With no declared context window a prompt
# carries at most GROUND_TOTAL characters of evidence (official EVIDENCE_TOTAL, the most a rewrite's
# grounder is given); on a declared window the elements share what fits (``fit_to_window``).
GROUND_CHARS = 6_000
GROUND_TOTAL = 60_000
GATE_MAX_TOKENS = 300
_NEG = re.compile(r"\b(not|no|never|cannot|can't|doesn't|don't|isn't|aren't|won't|without|neither|nor|none|"
                  r"unsupported|impossible|disallowed|forbidden|prohibited)\b", re.IGNORECASE)


def is_negative(statement: str) -> bool:
    return bool(_NEG.search(statement))


def states_denial(texts: list[str]) -> bool:
    return any(_NEG.search(t) for t in texts)


def shares(lengths: list[int], budget: int | None, cap: int) -> list[int]:
    """Characters shown of each element: its first ``cap``, or, when those overflow ``budget``, equal
    shares in which a shorter element keeps its whole text and leaves the rest to the others. Every
    cited element stays in the prompt (dropping one would turn a supported claim into an unsupported one)."""
    want = [min(n, cap) for n in lengths]
    if budget is None or sum(want) <= budget:
        return want
    out, left = [0] * len(want), max(0, budget)
    order = sorted(range(len(want)), key=lambda i: (want[i], i))
    for k, i in enumerate(order):
        out[i] = min(want[i], left // (len(order) - k))
        left -= out[i]
    return out


def excerpts_block(source: Source, element_ids: list[str], max_chars: int = GROUND_CHARS,
                   budget: int | None = None) -> str:
    """The cited elements, each its first ``max_chars`` characters, all within ``budget`` characters."""
    els = [el for el in (source.element(i) for i in element_ids) if el is not None]
    heads = [f"[{el.id}] {el.title}\n" for el in els]
    room = None if budget is None else budget - sum(len(h) + 6 for h in heads)
    cuts = shares([len(el.text) for el in els], room, max_chars)
    return "\n\n".join(h + el.excerpt(n) for h, el, n in zip(heads, els, cuts))


def evidence_budget(llm: BoundLLM, reserve_tokens: int, total: int = GROUND_TOTAL) -> int:
    """Evidence characters one prompt may carry: ``total`` with no declared context window (hosted
    models); on a declared window what is left beside the reply and the instructions, at the source's
    characters per token (``fit_to_window`` then checks the prompt in the model's own tokens)."""
    window = llm.spec.effective_context_window()
    if not window:
        return total
    return max(1_000, min(total, int((window - reserve_tokens) * llm.chars_per_token * 0.9)))


async def fitted_prompt(llm: BoundLLM, source: Source, element_ids: list[str], chars: int, reply_tokens: int,
                        messages: Callable[[str], list[dict[str, str]]]) -> list[dict[str, str]]:
    """``messages(excerpts)`` with the cited elements' windows shrunk until the prompt fits the window."""
    probe = "\n".join(m["content"] for m in messages(""))
    reserve = reply_tokens + int(len(probe) / llm.chars_per_token) + 100

    def build(budget: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        msgs = messages(excerpts_block(source, element_ids, chars, budget))
        return msgs, msgs

    return await fit_to_window(llm, build, evidence_budget(llm, reserve), reply_tokens)


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

    def add(self, other: GateStats) -> None:
        """Fold in another gate's counts (concurrent rewrites gate apart and are folded in job order)."""
        for k, v in other.__dict__.items():
            setattr(self, k, getattr(self, k) + v)


async def check(llm: BoundLLM, statement: str, element_ids: list[str], source: Source,
                stage: str, chars: int = GROUND_CHARS) -> GroundVerdict | None:
    """One grounding call for one statement, each cited element shown up to ``chars``; None if the call failed."""
    if not any(source.element(i) is not None for i in element_ids):
        return GroundVerdict(supported=False, unsupported_parts=["cites no existing source element"])

    def messages(block: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": GATE_SYSTEM},
                {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaim:\n{statement}\n\n"
                                            "Is the claim supported? Reply in JSON."}]

    msgs = await fitted_prompt(llm, source, element_ids, chars, GATE_MAX_TOKENS, messages)
    res = await llm.structured(msgs, GroundVerdict, stage=stage, max_tokens=GATE_MAX_TOKENS)
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
                    narrow: bool = True, chars: int = GROUND_CHARS) -> GateResult:
    """Ground one unit against its anchors; one narrowing retry; re-stamp anchors to the cited evidence.

    ``chars``: the first check's window per element; the narrowing and its re-check see at most
    GROUND_CHARS of it (official ``narrow_to_evidence`` and ``ground``)."""
    stats = stats if stats is not None else GateStats()
    stats.checked += 1
    cited = unit.element_ids()
    retry_chars = min(chars, GROUND_CHARS)
    v = await check(llm, unit.statement, cited, source, stage, chars)
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
        parts = "; ".join(v.unsupported_parts) or "unspecified"

        def messages(block: str) -> list[dict[str, str]]:
            return [{"role": "system", "content": GATE_SYSTEM},
                    {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaim:\n{unit.statement}\n\nParts "
                     f"not established: {parts}\n\nRewrite the claim so that it states only what the excerpts "
                     "establish (keep its conditions if they are established). Reply in JSON; use an empty "
                     "statement if nothing remains."}]

        msgs = await fitted_prompt(llm, source, cited, retry_chars, GATE_MAX_TOKENS, messages)
        res = await llm.structured(msgs, Narrowed, stage=stage, max_tokens=GATE_MAX_TOKENS)
        new = (res.value.statement.strip() if res.value is not None else "")  # type: ignore[union-attr]
        if new and new != unit.statement:
            v2 = await check(llm, new, cited, source, stage, retry_chars)
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
                     batch_size: int = 8, chars: int = GROUND_CHARS) -> list[bool]:
    """Batched check used at construction: many short claims per call, each with its cited ids, the cited
    elements shown once each (their first ``chars``, as the official compiler's gate shows 6,000).

    A failed call rejects its whole batch (nothing unverified enters the model).
    """
    out: list[bool] = []
    for start in range(0, len(claims), batch_size):
        chunk = claims[start:start + batch_size]
        ids = list(dict.fromkeys(i for _, cited in chunk for i in cited))
        listing = "\n".join(f"{n}. {s} [cites: {', '.join(c)}]" for n, (s, c) in enumerate(chunk, 1))
        reply = 60 * len(chunk) + 50

        def messages(block: str, listing: str = listing) -> list[dict[str, str]]:
            return [{"role": "system", "content": GATE_SYSTEM},
                    {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaims:\n{listing}\n\nFor every "
                     "claim say whether the excerpts it cites support it (claim_1 for claim 1, and so on). Reply "
                     "in JSON."}]

        msgs = await fitted_prompt(llm, source, ids, chars, reply, messages)
        res = await llm.structured(msgs, batch_verdicts(len(chunk)), stage=stage, max_tokens=reply,
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


GROUND_BATCH = 20  # statements per grounding call of a rewrite (official ``ground_batch`` batch)
CLAIM_REPLY_TOKENS = 80  # a verdict with a few excerpt ids


def supported_ids(v: GroundVerdict | ClaimVerdict | None, allowed: list[str], source: Source) -> list[str]:
    """The excerpts a verdict names that are in the rewrite's evidence; a verdict naming none is not
    a grounding (official ``ground``: supported needs at least one resolvable excerpt id)."""
    if v is None or not v.supported:
        return []
    ok = set(allowed)
    return [i for i in dict.fromkeys(x.strip().strip("[]") for x in v.evidence_ids)
            if i in ok and source.element(i) is not None]


async def ground_statements(llm: BoundLLM, statements: list[str], evidence_ids: list[str], source: Source,
                            stage: str, chars: int = GROUND_CHARS, batch: int = GROUND_BATCH) -> list[list[str] | None]:
    """Each statement judged against all of ``evidence_ids`` (each element its first ``chars``), ``batch``
    statements a call. Per statement: the anchors the grounder chose ([] = not supported), or None when
    its call failed. Batches are independent calls and are issued together; the result is in statement order."""
    ids = [i for i in dict.fromkeys(evidence_ids) if source.element(i) is not None]
    if not statements:
        return []
    if not ids:
        return [[] for _ in statements]

    async def one(chunk: list[str]) -> list[list[str] | None]:
        listing = "\n".join(f"{n}. {s}" for n, s in enumerate(chunk, 1))
        reply = CLAIM_REPLY_TOKENS * len(chunk) + 50

        def messages(block: str) -> list[dict[str, str]]:
            return [{"role": "system", "content": GATE_SYSTEM},
                    {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaims:\n{listing}\n\nJudge every claim "
                     "on its own against all the excerpts: claim_1 for claim 1, and so on. For a supported claim give "
                     "the ids of the excerpts that establish it; a claim with any part not established is not "
                     "supported. Reply in JSON."}]

        msgs = await fitted_prompt(llm, source, ids, chars, reply, messages)
        res = await llm.structured(msgs, batch_verdicts(len(chunk)), stage=stage, max_tokens=reply,
                                   choices={"evidence_ids": ids})
        if res.failed or res.value is None:
            return [None] * len(chunk)
        return [supported_ids(getattr(res.value, f"claim_{n}"), ids, source) for n in range(1, len(chunk) + 1)]

    chunks = [statements[i:i + batch] for i in range(0, len(statements), batch)]
    return [r for part in await asyncio.gather(*(one(c) for c in chunks)) for r in part]


async def narrow(llm: BoundLLM, statement: str, evidence_ids: list[str], source: Source, stage: str,
                 chars: int = GROUND_CHARS, parts: str = "") -> str:
    """The statement cut down to what the excerpts establish ('' when nothing survives or the call failed)."""
    note = f"\n\nParts not established: {parts}" if parts else ""

    def messages(block: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": GATE_SYSTEM},
                {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaim:\n{statement}{note}\n\nRewrite the "
                 "claim so that it states only what the excerpts establish (keep its conditions if they are "
                 "established). Reply in JSON; use an empty statement if nothing remains."}]

    msgs = await fitted_prompt(llm, source, evidence_ids, chars, GATE_MAX_TOKENS, messages)
    res = await llm.structured(msgs, Narrowed, stage=stage, max_tokens=GATE_MAX_TOKENS)
    return res.value.statement.strip() if res.value is not None else ""  # type: ignore[union-attr]


@dataclass
class Grounded:
    """One statement after the rewrite's grounding: what stands (narrowed or not) and where it rests."""

    statement: str  # '' = rejected
    anchors: list[str]
    narrowed: bool = False
    failed_call: bool = False


async def ground_rewrite(llm: BoundLLM, statements: list[str], evidence_ids: list[str], source: Source,
                         stage: str, stats: GateStats, chars: int = GROUND_CHARS,
                         concurrency: int = 256, batch: int = GROUND_BATCH) -> list[Grounded]:
    """The rewrite's grounding gate (official ``prepare_rewrite``): batched judgement of every statement
    against all the evidence, then for each failure one narrowing and a single re-judgement, both on the
    same evidence (at most GROUND_CHARS an element, official ``narrow_to_evidence`` / ``ground``)."""
    ids = [i for i in dict.fromkeys(evidence_ids) if source.element(i) is not None]
    first = await ground_statements(llm, statements, ids, source, stage, chars, batch)
    retry_chars = min(chars, GROUND_CHARS)
    sem = asyncio.Semaphore(max(1, concurrency))

    async def settle(statement: str, anchors: list[str] | None) -> Grounded:
        if anchors:
            return Grounded(statement, anchors)
        if ids:
            async with sem:
                new = await narrow(llm, statement, ids, source, stage, retry_chars)
                if new and new != statement:
                    got = supported_ids(await check(llm, new, ids, source, stage, retry_chars), ids, source)
                    if got:
                        return Grounded(new, got, narrowed=True, failed_call=anchors is None)
        return Grounded("", [], failed_call=anchors is None)

    out = list(await asyncio.gather(*(settle(s, a) for s, a in zip(statements, first))))
    for statement, g in zip(statements, out):  # counted in statement order, whatever finished first
        stats.checked += 1
        stats.failed_calls += g.failed_call
        if g.statement:
            stats.accepted += 1
            stats.narrowed += g.narrowed
        else:
            stats.rejected += 1
            stats.rejected_statements.append(statement[:200])
    return out


async def units_entail(llm: BoundLLM, statement: str, units: list[Unit], stage: str) -> bool:
    """Whether model units (shown as the excerpts) entail a statement: the official novelty check's
    confirmation (``verify_known``) and the supersession test (``_may_supersede``). A failed call says no."""
    if not units:
        return False
    block = "\n\n".join(f"[{u.id}] (model unit)\n{u.render()}" for u in units)
    msgs = [{"role": "system", "content": GATE_SYSTEM},
            {"role": "user", "content": f"Source excerpts:\n{block}\n\nClaim:\n{statement}\n\n"
                                        "Is the claim supported? Reply in JSON."}]
    res = await llm.structured(msgs, GroundVerdict, stage=stage, max_tokens=GATE_MAX_TOKENS,
                               choices={"evidence_ids": [u.id for u in units]})
    return bool(not res.failed and res.value is not None and res.value.supported)  # type: ignore[union-attr]


PRESERVE_BATCH = 25  # old meanings per preservation call (official ``preservation_check`` batch)


class LostMeanings(BaseModel):
    lost: bounded_list(int, PRESERVE_BATCH) = Field(default_factory=list,
                                                    description="numbers of old meanings no longer represented")


async def preservation_check(llm: BoundLLM, old: list[Unit], new: list[Unit], stage: str,
                             batch: int = PRESERVE_BATCH) -> list[Unit] | None:
    """Old units whose meaning the new units no longer represent, ``batch`` old meanings a call and
    every old unit checked (None if a call failed: the caller then keeps the region as it was)."""
    if not old:
        return []
    new_block = "\n".join(f"- {u.render()}" for u in new) or "(empty)"
    lost: list[Unit] = []
    for start in range(0, len(old), batch):
        chunk = old[start:start + batch]
        old_block = "\n".join(f"{i}. {u.render()}" for i, u in enumerate(chunk, 1))
        msgs = [{"role": "system", "content": "You compare two versions of part of a source model."},
                {"role": "user", "content": f"OLD meanings:\n{old_block}\n\nNEW region:\n{new_block}\n\nWhich old "
                 "meanings does the new region no longer represent? A meaning is represented if the new region "
                 "states it, entails it, or covers it with a broader rule, procedure or abstraction; a lost "
                 "condition, exception, value, entity or step is not represented. Reply in JSON with their numbers."}]
        res = await llm.structured(msgs, LostMeanings, stage=stage, max_tokens=200)
        if res.failed or res.value is None:
            return None
        lost += [chunk[i - 1] for i in sorted(set(res.value.lost)) if 1 <= i <= len(chunk)]  # type: ignore[union-attr]
    return lost
