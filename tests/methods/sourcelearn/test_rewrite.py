"""A region rewrite's evidence windows and capacity, as in the official code: the writer reads each element's
first 12,000 characters when refining or recalibrating (1,500 when consolidating self-study notes), 60,000
characters of evidence in all; one reply holds up to 60 units of up to 400 characters, and its reply bound
is large enough for them. On a declared context window both shrink to fit.
"""

from __future__ import annotations

import asyncio
import json
import re

from helpers import make_ctx

from sourcebench.harness.data import Element, Source
from sourcebench.harness.providers import scripted
from sourcebench.harness.schema_limits import full_schema
from sourcebench.methods.sourcelearn.grounding import GateStats
from sourcebench.methods.sourcelearn.model import Entity, Region, Scope, SourceModel, Unit
from sourcebench.methods.sourcelearn.rewrite import (
    EVIDENCE_TOTAL,
    MAX_REWRITE_UNITS,
    REWRITE_STATEMENT_CHARS,
    Note,
    RewriteSpec,
    rewrite_region,
    writer_capacity,
)

FILLER = "The scheduler keeps its queue in memory and logs every state change. "
WRITER = frozenset({"keep", "units"})
GATE = frozenset({"supported", "evidence_ids", "unsupported_parts"})
PRESERVE = frozenset({"lost"})


def marked(eid: str, marks: dict[int, str], length: int) -> Element:
    """An element of ``length`` characters with sentence ``marks[i]`` starting at character ``i``."""
    text = (FILLER * (length // len(FILLER) + 1))[:length]
    for at, mark in marks.items():
        text = text[:at] + mark + text[at + len(mark):]
    return Element(id=eid, title=eid, text=text, path=eid.split("#")[0], kind="section",
                   metadata={"entity": eid.split("#")[1]})


def model_of(source: Source) -> SourceModel:
    keys = [e.id.split("#")[1] for e in source.elements]
    entities = [Entity(key=k, name=k, region="sched", element_ids=[e.id]) for k, e in zip(keys, source.elements)]
    region = Region(id="sched", title="scheduler", element_ids=[e.id for e in source.elements], entity_keys=keys)
    scope = Scope(kind="entity", keys=[keys[0]])
    old = Unit(id=SourceModel.unit_id("The scheduler has a queue.", "detail", scope), statement="The scheduler has a queue.",
               role="detail", scope=scope, anchors=SourceModel.stamp([source.elements[0].id], source))
    sm = SourceModel(source_id=source.id, source_fingerprint=source.fingerprint, regions=[region], entities=entities,
                     units=[old])
    sm.record_stage("M0")
    return sm


def route(writer, gate=lambda prompt: True):
    def reply(messages, schema):
        props = frozenset((schema or {}).get("properties", {}))
        prompt = "\n".join(m["content"] for m in messages)
        if props == WRITER:
            return json.dumps(writer(prompt))
        if props == GATE:
            ids = re.findall(r"^\[([^\]\n]+)\]", prompt, re.MULTILINE)[:1]
            return json.dumps({"supported": gate(prompt), "evidence_ids": ids, "unsupported_parts": []})
        if props and all(re.fullmatch(r"claim_\d+", k) for k in props):  # batch grounding: every claim alike
            ids = re.findall(r"^\[([^\]\n]+)\]", prompt, re.MULTILINE)[:1]
            return json.dumps({k: {"supported": gate(prompt), "evidence_ids": ids} for k in props})
        if props == PRESERVE:
            return json.dumps({"lost": []})
        return None
    return reply


def spec(mode: str) -> RewriteSpec:
    return RewriteSpec(mode=mode, origin="self-study" if mode == "consolidate" else "task-refine",  # type: ignore[arg-type]
                       stage=f"{mode}_write", ground_stage=f"{mode}_ground", preserve_stage=f"{mode}_preserve")


def run_rewrite(tmp_path, source: Source, notes: list[Note], mode: str = "consolidate", window: int | None = None):
    ctx = make_ctx(tmp_path, source, window=window)
    return asyncio.run(rewrite_region(ctx.llm, model_of(source), source, "sched", notes, spec(mode), GateStats())), ctx


def writer_calls() -> list[dict]:
    return [c for c in scripted.CALLS if c["schema"] and frozenset(c["schema"].get("properties", {})) == WRITER]


def test_a_30_unit_rewrite_is_accepted_whole(tmp_path):
    """The former bound (16 units, 2,500 tokens, and at most twice the old units and notes) cut it to 16."""
    els = [marked(f"sched.md#part{i}", {}, 500) for i in range(3)]
    source = Source(id="sched", kind="documents", elements=els)
    units = [{"statement": f"Rule {n}: " + "a long statement about the scheduler's queue " * 7, "role": "mechanism",
              "scope_keys": [], "conditions": [], "element_ids": [els[n % 3].id], "absorbs": [], "notes": [1]}
             for n in range(30)]
    assert all(300 < len(u["statement"]) <= REWRITE_STATEMENT_CHARS for u in units)
    scripted.set_script(route(lambda prompt: {"keep": [], "units": units}))
    note = Note(text="the queue has rules", evidence_ids=(els[0].id,), entities=("part0",))
    res, _ = run_rewrite(tmp_path, source, [note])
    assert res.committed
    assert sum(u.origin == "self-study" for u in res.units) == 30
    call = writer_calls()[0]
    sent = full_schema(call["schema"])["properties"]["units"]  # the bounds a local decoder enforces
    assert sent["maxItems"] == MAX_REWRITE_UNITS
    assert sent["items"]["properties"]["statement"]["maxLength"] == REWRITE_STATEMENT_CHARS
    reply_chars = len(json.dumps({"keep": [], "units": units}))
    assert call["max_tokens"] * 4 >= 2 * reply_chars  # room for 60 such units


def test_the_reply_bound_holds_60_units_of_400_characters(tmp_path):
    ctx = make_ctx(tmp_path)
    cap = writer_capacity(ctx.llm, "consolidate")
    assert (cap.units, cap.statement_chars) == (60, 400)
    assert cap.reply_tokens >= 60 * 400 // 4 + 60 * 200 // 4  # statements plus their JSON fields
    assert writer_capacity(ctx.llm, "refine").statement_chars == 600  # the official refinement's STATEMENT_CHARS


def test_the_refining_writer_reads_past_1200_characters_of_an_element(tmp_path):
    el = marked("sched.md#retries", {5_000: "MARK-5000", 11_500: "MARK-11500", 12_500: "MARK-12500"}, 14_000)
    source = Source(id="sched", kind="documents", elements=[el])
    seen = []
    scripted.set_script(route(lambda prompt: seen.append(prompt) or {"keep": [], "units": []}))
    note = Note(text="retries are bounded", evidence_ids=(el.id,), entities=("retries",), origin="target")
    run_rewrite(tmp_path, source, [note], mode="refine")
    assert "MARK-5000" in seen[0] and "MARK-11500" in seen[0]  # the first 12,000 characters
    assert "MARK-12500" not in seen[0]


def test_consolidation_reads_the_official_1500_characters_per_element(tmp_path):
    el = marked("sched.md#retries", {1_300: "MARK-1300", 1_800: "MARK-1800"}, 3_000)
    source = Source(id="sched", kind="documents", elements=[el])
    seen = []
    scripted.set_script(route(lambda prompt: seen.append(prompt) or {"keep": [], "units": []}))
    run_rewrite(tmp_path, source, [Note(text="retries", evidence_ids=(el.id,), entities=("retries",))])
    assert "MARK-1300" in seen[0] and "MARK-1800" not in seen[0]


def test_evidence_stops_at_60000_characters_in_priority_order(tmp_path):
    els = [marked(f"sched.md#part{i}", {0: f"HEAD-{i}"}, 12_000) for i in range(7)]
    source = Source(id="sched", kind="documents", elements=els)
    seen = []
    scripted.set_script(route(lambda prompt: seen.append(prompt) or {"keep": [], "units": []}))
    note = Note(text="parts", evidence_ids=tuple(e.id for e in reversed(els)), entities=("part0",), origin="target")
    run_rewrite(tmp_path, source, [note], mode="refine")
    shown = [i for i in range(7) if f"HEAD-{i}" in seen[0]]
    assert shown == [2, 3, 4, 5, 6]  # the note's order: 6, 5, 4, 3, 2 fill 5 x 12,000 = EVIDENCE_TOTAL
    assert 5 * 12_000 <= EVIDENCE_TOTAL < 6 * 12_000


def test_on_a_small_window_the_rewrite_prompt_and_reply_fit(tmp_path):
    """SmolLM2's 8,192 tokens: the evidence shrinks to fit in the model's own tokens and the reply takes a third."""
    els = [marked(f"sched.md#part{i}", {0: f"HEAD-{i}"}, 12_000) for i in range(4)]
    source = Source(id="sched", kind="documents", elements=els)
    window, seen = 8_192, []

    def tokens(text: str) -> int:  # finer than chars / 4
        return len(text) // 3

    async def count(text: str) -> int:
        return tokens(text)

    scripted.set_script(route(lambda prompt: seen.append(tokens(prompt)) or {"keep": [], "units": []}))
    ctx = make_ctx(tmp_path, source, window=window)
    ctx.llm.count_tokens = count
    note = Note(text="parts", evidence_ids=tuple(e.id for e in els), entities=("part0",), origin="target")
    asyncio.run(rewrite_region(ctx.llm, model_of(source), source, "sched", [note], spec("refine"), GateStats()))
    call = writer_calls()[0]
    cap = writer_capacity(ctx.llm, "refine")
    assert call["max_tokens"] == cap.reply_tokens <= window // 3
    assert full_schema(call["schema"])["properties"]["units"]["maxItems"] == cap.units < MAX_REWRITE_UNITS
    assert seen[0] + cap.reply_tokens <= window
