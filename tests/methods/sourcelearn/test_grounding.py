"""The grounding gate's evidence window: each cited element's first 6,000 characters (official
GROUND_CHARS), shrunk to fit a declared context window, never dropped.

The scripted judge says "supported" only when the sentence that supports the claim is in the prompt,
so each test shows what the gate let the judge read.
"""

from __future__ import annotations

import asyncio
import json

from helpers import make_ctx

from sourcebench.harness.data import Element, Source
from sourcebench.harness.providers import scripted
from sourcebench.methods.sourcelearn.grounding import (
    GROUND_CHARS,
    GateStats,
    excerpts_block,
    gate_batch,
    gate_unit,
    shares,
)
from sourcebench.methods.sourcelearn.model import Scope, SourceModel, Unit

FACT = "The scheduler retries a failed job exactly seven times before it gives up."
CLAIM = "A failed job is retried seven times."
FILLER = "The scheduler keeps its queue in memory and logs every state change. "


def long_element(eid: str, fact_at: int, length: int = 9_000) -> Element:
    """An element of ``length`` characters whose only supporting sentence starts at ``fact_at``."""
    head = (FILLER * (fact_at // len(FILLER) + 1))[:fact_at]
    text = head + FACT + " " + FILLER * ((length - fact_at) // len(FILLER))
    return Element(id=eid, title=eid, text=text[:length], path="sched.md", kind="section")


def judge(messages, schema) -> str | None:
    """Supported iff the supporting sentence was shown (the narrowing retry narrows to nothing)."""
    props = set((schema or {}).get("properties", {}))
    prompt = "\n".join(m["content"] for m in messages)
    if props == {"supported", "evidence_ids", "unsupported_parts"}:
        ok = FACT in prompt
        return json.dumps({"supported": ok, "evidence_ids": [], "unsupported_parts": [] if ok else ["all"]})
    if props == {"statement"}:
        return json.dumps({"statement": ""})
    if any(p.startswith("claim_") for p in props):
        return json.dumps({p: {"supported": FACT in prompt, "evidence_ids": []} for p in props})
    return None


def claim_unit(source: Source, ids: list[str]) -> Unit:
    scope = Scope(kind="region", keys=["sched"])
    return Unit(id=SourceModel.unit_id(CLAIM, "mechanism", scope), statement=CLAIM, role="mechanism", scope=scope,
                anchors=SourceModel.stamp(ids, source))


def gate(tmp_path, source: Source, ids: list[str], **kw) -> tuple[bool, GateStats]:
    scripted.set_script(judge)
    stats = GateStats()
    ctx = make_ctx(tmp_path, source)
    res = asyncio.run(gate_unit(ctx.llm, claim_unit(source, ids), source, "mt_ground", stats, **kw))
    return res.unit is not None, stats


def test_a_claim_supported_only_after_character_1200_passes_the_gate(tmp_path):
    el = long_element("sched.md#retries", fact_at=4_000)
    source = Source(id="sched", kind="documents", elements=[el])
    ok, stats = gate(tmp_path / "default", source, [el.id])
    assert ok and stats.accepted == 1
    # the former 1,200-character window hid the sentence: the same claim was rejected
    ok, stats = gate(tmp_path / "old", source, [el.id], chars=1_200)
    assert not ok and stats.rejected == 1


def test_the_gate_reads_the_first_6000_characters_of_an_element(tmp_path):
    """Official ``ground``: ``excerpt[:GROUND_CHARS]``; a sentence past it is not shown."""
    el = long_element("sched.md#retries", fact_at=GROUND_CHARS + 500)
    source = Source(id="sched", kind="documents", elements=[el])
    assert not gate(tmp_path, source, [el.id])[0]


def test_the_batched_construction_gate_sees_past_1200_characters(tmp_path):
    el = long_element("sched.md#retries", fact_at=3_000)
    source = Source(id="sched", kind="documents", elements=[el])
    scripted.set_script(judge)
    ctx = make_ctx(tmp_path, source)
    assert asyncio.run(gate_batch(ctx.llm, [(CLAIM, [el.id])], source, stage="construct_ground")) == [True]


def test_on_a_small_window_every_cited_element_shares_what_fits(tmp_path):
    """Eight 9,000-character elements at 6,000 each overflow 8,192 tokens: they shrink, none is dropped,
    and the prompt fits in the model's own tokens."""
    els = [long_element(f"sched.md#part{i}", fact_at=100) for i in range(8)]
    source = Source(id="sched", kind="documents", elements=els)
    window, seen = 8_192, []

    def tokens(text: str) -> int:  # a tokenizer finer than chars / 4
        return len(text) // 3

    async def count(text: str) -> int:
        return tokens(text)

    def record(messages, schema):
        prompt = "\n".join(m["content"] for m in messages)
        seen.append((tokens(prompt), prompt))
        return judge(messages, schema)

    scripted.set_script(record)
    ctx = make_ctx(tmp_path, source, window=window)
    ctx.llm.count_tokens = count
    asyncio.run(gate_batch(ctx.llm, [(CLAIM, [e.id for e in els])], source, stage="construct_ground"))
    n, prompt = seen[0]
    assert n + 60 + 50 <= window  # prompt + the batch reply fit
    assert all(f"[{e.id}]" in prompt for e in els)
    assert len(prompt) < 8 * GROUND_CHARS


def test_shares_keep_short_elements_whole_and_split_the_rest():
    assert shares([100, 8_000, 500], None, 6_000) == [100, 6_000, 500]
    assert shares([100, 8_000, 9_000], 4_100, 6_000) == [100, 2_000, 2_000]
    assert sum(shares([10_000] * 7, 7_000, 6_000)) == 7_000


def test_excerpts_block_cuts_each_element_to_its_window():
    el = long_element("sched.md#retries", fact_at=100)
    source = Source(id="sched", kind="documents", elements=[el])
    block = excerpts_block(source, [el.id, "missing#id"])
    assert block.startswith(f"[{el.id}] {el.title}\n") and "missing" not in block
    assert len(block) == len(f"[{el.id}] {el.title}\n") + GROUND_CHARS + len(" ...")
