"""OpenAI's strict-mode limits (harness.schema_limits), and every schema the methods send, at the size
a large repository gives it.

The id sets the SourceLearn stages put into their schemas (``choices``) are captured by running each
stage against a recording model (it answers nothing, so the stage stops after its call) on a
synthetic source of the shape measured on the sphinx 8.1.3 sdist (``pip download --no-deps
--no-binary :all: sphinx==8.1.3``), loaded as SWE-QA loads a tree (``harness.elements.
source_from_tree``, kind ``code``): 11,976 elements (ids 52.3 characters on average), 2,156 SourceLearn
entities (keys 39.2), 217 regions once folders of more than 30 entities are split into blocks (ids
15.0), 232 elements in the largest entity. Units are not measured (that takes a model): the flask M0
build's 2.4 units per entity is assumed. The sdist is not needed here: ids are synthetic strings of
those counts and lengths, element texts are short (so prompt budgets take as many ids as they can),
and the largest entity is a document family, which the reading stage shows whole.

The stages run with no declared context window (the default for API models) and with GPT-4.1's
1,047,576 tokens, where prompt budgets stop binding; then every captured id set is replaced by the
whole pool it is drawn from (all element ids, all unit ids, ...), the most a source of that shape can
give. Schemas sent without ``choices`` are listed in ``static_schemas``; a guard counts the structured
calls in the code so that a new one is not missed.
"""

from __future__ import annotations

import asyncio
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sourcebench.harness.data import Element, Source, Task
from sourcebench.harness.llm import ModelSpec, StructuredResult
from sourcebench.harness.schema_limits import (
    LARGE_ENUM,
    MAX_LARGE_ENUM_CHARS,
    MAX_NESTING,
    MAX_PROPERTIES,
    MAX_TOTAL_CHARS,
    RELAXED_ARRAY,
    RELAXED_STRING,
    json_schema_model,
    schema_json,
    violations,
    with_choices,
    within_limits,
)

ROOT = Path(__file__).resolve().parents[2]


# -- unit tests of the limits ------------------------------------------------------------------
def obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def ids(n: int, chars: int, prefix: str = "id") -> list[str]:
    """``n`` distinct ids of exactly ``chars`` characters."""
    out = [f"{prefix}{i}" for i in range(n)]  # the digits end where the padding starts: distinct
    assert all(len(s) <= chars for s in out), "ids too short for their numbers"
    return [s + "x" * (chars - len(s)) for s in out]


def string_enum(values: list[str]) -> dict[str, Any]:
    return {"type": "string", "enum": values}


def test_properties_limit_at_the_boundary():
    at = obj({f"p{i}": {"type": "string"} for i in range(MAX_PROPERTIES)})
    assert violations(at) == []
    over = obj({f"p{i}": {"type": "string"} for i in range(MAX_PROPERTIES + 1)})
    assert violations(over) == ["5,001 object properties in all (at most 5,000)"]
    assert within_limits(over) is over  # not relaxable: the schema's own size


def test_properties_are_counted_in_nested_objects_and_array_items():
    inner = obj({f"q{i}": {"type": "string"} for i in range(2_500)})
    s = obj({"a": inner, "b": {"type": "array", "items": inner}})
    assert violations(s) == ["5,002 object properties in all (at most 5,000)"]


def nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = obj({"x": node})
    return node


def test_nesting_limit_counts_objects_and_arrays():
    assert violations(nested(MAX_NESTING)) == []
    assert violations(nested(MAX_NESTING + 1)) == [
        "11 levels of nesting at $.x.x.x.x.x.x.x.x.x.x (at most 10; objects and arrays count as levels)"]
    # 5 objects, each holding the next in an array: 10 levels
    node: dict[str, Any] = {"type": "string"}
    for _ in range(5):
        node = obj({"xs": {"type": "array", "items": node}})
    assert violations(node) == []
    assert violations(obj({"top": node}))[0].startswith("11 levels of nesting")
    assert within_limits(nested(MAX_NESTING + 1)) == nested(MAX_NESTING + 1)


def test_enum_values_limit_across_all_enums():
    at = obj({"a": string_enum(ids(600, 8)), "b": {"type": "array", "items": string_enum(ids(400, 8, "b"))}})
    assert violations(at) == []
    over = obj({"a": string_enum(ids(600, 8)), "b": {"type": "array", "items": string_enum(ids(401, 8, "b"))}})
    assert violations(over) == ["1,001 enum values in all (at most 1,000)"]


def test_large_string_enum_characters():
    # 251 values (more than 250) of 59 / 60 characters: 14,809 and 15,060 in all
    assert violations(obj({"a": string_enum(ids(251, 59))})) == []
    assert violations(obj({"a": string_enum(ids(251, 60))})) == [
        ("string enum at $.a has 251 values of 15,060 characters in all "
         "(an enum of more than 250 values may have at most 15,000)")]
    # exactly 250 values may be longer
    assert violations(obj({"a": string_enum(ids(LARGE_ENUM, 80))})) == []
    # exactly 15,000 characters is within
    assert violations(obj({"a": string_enum(ids(300, MAX_LARGE_ENUM_CHARS // 300))})) == []


def test_total_string_length():
    # 90 enums of 10 values of 134 characters (120,600) push past the total, no other limit
    props = {f"f{i:02d}": string_enum(ids(10, 134, f"e{i:02d}")) for i in range(90)}
    s = obj(props)
    chars = 90 * 10 * 134 + sum(len(n) for n in props)
    assert chars > MAX_TOTAL_CHARS
    assert violations(s) == [(f"{chars:,} characters of property names, definition names, enum and const "
                              "values (at most 120,000)")]
    # property names, definition names and const values count too
    names = obj({"n" * 60_000: {"type": "string", "const": "c" * 30_000}})
    names["$defs"] = {"d" * 30_001: {"type": "string"}}
    assert violations(names) == [("120,001 characters of property names, definition names, enum and const "
                                  "values (at most 120,000)")]


def test_within_limits_returns_a_schema_within_limits_unchanged():
    s = obj({"element_id": string_enum(ids(20, 52)), "kind": string_enum(["a", "b"])})
    assert within_limits(s) is s
    assert within_limits(s, fields=["element_id"]) is s


def test_within_limits_relaxes_the_largest_id_set_first_and_only_as_far_as_needed():
    big, mid = ids(700, 20, "big"), ids(350, 20, "mid")
    s = obj({
        "element_ids": {"type": "array", "items": string_enum(big), "description": "excerpt ids"},
        "unit_ids": {"type": "array", "items": string_enum(mid)},
        "region": string_enum(ids(10, 20, "reg")),
        "role": string_enum(["map", "rule"]),
    })
    before = repr(s)
    out = within_limits(s, fields=["element_ids", "unit_ids", "region"])
    assert repr(s) == before  # the input is never changed
    assert violations(out) == []
    p = out["properties"]
    assert p["element_ids"] == {"type": "array", "items": {"type": "string"},
                                "description": f"excerpt ids; {RELAXED_ARRAY}"}
    assert p["unit_ids"]["items"]["enum"] == mid  # 350 + 10 + 2 values are within
    assert p["region"] == s["properties"]["region"] and p["role"] == s["properties"]["role"]


def test_within_limits_relaxes_fields_of_one_name_together_and_never_other_enums():
    shown = ids(300, 30)
    item = obj({"element_id": string_enum(shown), "kind": string_enum(["x", "y"])})
    s = obj({"a": {"type": "array", "items": item}, "b": {"type": "array", "items": item},
             "kind": string_enum(ids(600, 5, "k"))})
    out = within_limits(s, fields={"element_id": shown})
    for slot in ("a", "b"):
        assert out["properties"][slot]["items"]["properties"]["element_id"] == {"type": "string",
                                                                               "description": RELAXED_STRING}
    assert out["properties"]["kind"] == s["properties"]["kind"]  # not an id set named in fields
    assert violations(out) == []
    # without ``fields`` every string enum is a candidate: the largest (kind, 600 values) goes first
    assert "enum" not in within_limits(s)["properties"]["kind"]


def test_within_limits_is_deterministic():
    s = obj({n: {"type": "array", "items": string_enum(ids(400, 12, n))} for n in ("c_ids", "a_ids", "b_ids")})
    outs = [within_limits(s) for _ in range(3)]
    assert outs[0] == outs[1] == outs[2]
    # equal sizes are taken by name: relaxing a_ids leaves 800 values, within the limit
    assert [n for n, sub in outs[0]["properties"].items() if "enum" in sub["items"]] == ["c_ids", "b_ids"]


def test_within_limits_cannot_fix_what_is_not_an_id_set():
    s = obj({f"p{i}": {"type": "string"} for i in range(MAX_PROPERTIES + 1)} | {"x": string_enum(ids(1_200, 9))})
    out = within_limits(s, fields=["x"])
    assert "enum" not in out["properties"]["x"]
    assert violations(out) == ["5,002 object properties in all (at most 5,000)"]
    assert violations(within_limits(s, fields=[])) == violations(s)  # nothing named: nothing relaxed


# -- every schema the methods send -----------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """The counts and id lengths of a source, as SourceLearn carves it."""

    elements: int
    element_id_chars: int
    entities: int
    entity_key_chars: int
    regions: int
    region_id_chars: int
    largest_entity: int  # elements of the largest entity
    units_per_entity: float
    largest_region: int = 30  # entities of the largest region (MAX_REGION_ENTITIES: bigger folders are split)


SPHINX = Shape(elements=11_976, element_id_chars=52, entities=2_156, entity_key_chars=39, regions=217,
               region_id_chars=15, largest_entity=232, units_per_entity=2.4)
SMALL = Shape(elements=40, element_id_chars=30, entities=8, entity_key_chars=20, regions=2, region_id_chars=10,
              largest_entity=6, units_per_entity=2.0, largest_region=4)
GPT41_WINDOW = 1_047_576


@dataclass
class Synthetic:
    source: Source
    model: Any  # SourceModel
    pools: dict[str, list[str]] = field(default_factory=dict)


def synthetic(shape: Shape) -> Synthetic:
    """A source and a source model of ``shape``: entity 0 is the largest (a document family, read
    whole), region 0 holds ``largest_region`` entities, the others are spread evenly."""
    from sourcebench.methods.sourcelearn.model import Anchor, Entity, Region, Scope, SourceModel, Unit

    el_ids = ids(shape.elements, shape.element_id_chars, "el")
    elements = [Element(id=i, title=f"section {n}", text=f"text of element {n}: " + "w " * 30, path=i[:8],
                        kind="section" if n < shape.largest_entity else "symbol") for n, i in enumerate(el_ids)]
    source = Source(id="synthetic", kind="code", elements=elements)
    keys = ids(shape.entities, shape.entity_key_chars, "ent")
    rest = shape.elements - shape.largest_entity
    bounds = [0, shape.largest_entity] + [shape.largest_entity + rest * (i + 1) // (shape.entities - 1)
                                          for i in range(shape.entities - 1)]
    region_ids = ids(shape.regions, shape.region_id_chars, "reg")
    others = shape.entities - shape.largest_region

    def region_of(i: int) -> str:
        if i < shape.largest_region:
            return region_ids[0]
        return region_ids[1 + (i - shape.largest_region) * (shape.regions - 1) // others]

    entities = [Entity(key=k, name=f"Name{i}", region=region_of(i), element_ids=el_ids[bounds[i]:bounds[i + 1]])
                for i, k in enumerate(keys)]
    regions = [Region(id=r, title=f"region {n}", element_ids=[], entity_keys=[e.key for e in entities if e.region == r])
               for n, r in enumerate(region_ids)]
    units = []
    for i, e in enumerate(entities):
        n = int(shape.units_per_entity * (i + 1)) - int(shape.units_per_entity * i)
        for j in range(n):
            el = source.element(e.element_ids[j % len(e.element_ids)])
            scope = Scope(kind="entity", keys=[e.key])
            statement = f"{e.name} rule {j}: holds when the flag is set"
            units.append(Unit(id=SourceModel.unit_id(statement, "mechanism", scope), statement=statement,
                              role="mechanism", scope=scope, anchors=[Anchor(element_id=el.id, fingerprint=el.fingerprint)]))
    sm = SourceModel(source_id=source.id, source_fingerprint=source.fingerprint, regions=regions, entities=entities,
                     units=units)
    pools = {"element": el_ids, "unit": [u.id for u in units], "entity": keys, "region": region_ids}
    return Synthetic(source, sm, pools)


@dataclass(frozen=True)
class Sent:
    stage: str
    schema: type
    choices: dict[str, list[str]]


class Recorder:
    """A BoundLLM stand-in that records each structured call and answers none (the stage then stops)."""

    def __init__(self, window: int | None):
        self.spec = ModelSpec(name="openai/recorder", context_window=window)
        self.chars_per_token = 4.0
        self.sent: list[Sent] = []

    async def count_tokens(self, text: str) -> int | None:
        return None

    async def structured(self, messages, schema, *, stage: str = "", max_tokens: int | None = None,
                         choices: dict[str, list[str]] | None = None) -> StructuredResult:
        self.sent.append(Sent(stage, schema, {k: list(v) for k, v in (choices or {}).items()}))
        return StructuredResult(None, "", failed=True, error="recorded, not sent")


class FakeIndex:
    def __init__(self, element_ids: list[str]):
        self.element_ids = element_ids

    def search(self, query: str, k: int, per_file_cap: int | None = None, **_: Any) -> list[Any]:
        return [SimpleNamespace(element_id=i) for i in self.element_ids[:k]]


async def _stages(syn: Synthetic, rec: Recorder) -> None:
    """One call of every stage that sends ``choices``, on its largest input in ``syn``."""
    from sourcebench.methods.sourcelearn.activation import route
    from sourcebench.methods.sourcelearn.config import SourceLearnConfig
    from sourcebench.methods.sourcelearn.construct import read_entity
    from sourcebench.methods.sourcelearn.grounding import (
        GateStats,
        gate_batch,
        ground_statements,
        units_entail,
    )
    from sourcebench.methods.sourcelearn.rewrite import (
        EVIDENCE_TOTAL,
        REWRITE_EVIDENCE_CHARS,
        Note,
        RewriteSpec,
        entity_units,
        evidence_shown,
        rewrite_region,
    )
    from sourcebench.methods.sourcelearn.selfstudy.observe import observe
    from sourcebench.methods.sourcelearn.selfstudy.plan import plan_round
    from sourcebench.methods.sourcelearn.taskguided.diagnose import Claim, TaskNeeds, diagnose
    from sourcebench.methods.sourcelearn.taskguided.lessons import claim_status

    cfg = SourceLearnConfig()
    src, sm = syn.source, syn.model
    ctx = SimpleNamespace(llm=rec)
    biggest, region0 = sm.entities[0], sm.regions[0]
    task = Task(id="t1", source_id=src.id, question="How is the flag handled?", reference="it is read")
    await read_entity(biggest, region0, "", src, ctx, cfg)  # type: ignore[arg-type]
    await route(sm, src, task, list(sm.units), ctx, budget_chars=10**9)  # type: ignore[arg-type]
    await plan_round(rec, sm, [], [], cfg.actions_per_round, stage="ms_plan")  # type: ignore[arg-type]
    await observe(rec, src, entity_units(sm, biggest.key, src), biggest.element_ids, (biggest.key,),  # type: ignore[arg-type]
                  mode="review", stage="ms_inspect", max_notes=cfg.read_budget, target=biggest.name, full_text=True)
    # every entity of the largest region noted read_budget times, each note citing 6 elements (the most)
    el = syn.pools["element"]
    notes = [Note(text=f"note {j} on {e.name}", evidence_ids=tuple(el[(97 * (6 * j + m) + i) % len(el)]
                                                                   for m in range(6)), entities=(e.key,))
             for i, e in enumerate(sm.entities) if e.region == region0.id for j in range(cfg.read_budget)]
    spec = RewriteSpec(mode="consolidate", origin="self-study", stage="ms_consolidate", ground_stage="ms_ground",
                       preserve_stage="ms_preserve")
    await rewrite_region(rec, sm, src, region0.id, notes, spec, GateStats())  # type: ignore[arg-type]
    # the rewrite's grounder: 20 statements against all the evidence the writer was shown (60,000 characters)
    evidence = [i for i, _ in evidence_shown(src, (i for n in notes for i in n.evidence_ids), REWRITE_EVIDENCE_CHARS,
                                             EVIDENCE_TOTAL)]
    await ground_statements(rec, [f"statement {n}" for n in range(20)], evidence, src, "ms_ground",  # type: ignore[arg-type]
                            REWRITE_EVIDENCE_CHARS)
    # refinement's novelty / supersession check: a statement against model units (the 12 + 4 shown, the most)
    await units_entail(rec, "statement", [u for u in sm.units if u.role != "card"][:16], "mt_ground")  # type: ignore[arg-type]
    claims = [(f"claim {n}", el[6 * n:6 * n + 6]) for n in range(8)]  # one batch: 8 claims of 6 ids
    await gate_batch(rec, claims, src, stage="construct_ground")  # type: ignore[arg-type]
    await diagnose(rec, FakeIndex(el), src, task, cfg, vocabulary=set(), stage="mt_diagnose")  # type: ignore[arg-type]
    # the claim-status check of a task whose needed claims cite the largest entity's elements (most candidates)
    needs = TaskNeeds(task_id="t1", question=task.question, support_ids=(), claims=tuple(
        Claim(f"claim {n} of {biggest.name}", tuple(biggest.element_ids[:6])) for n in range(cfg.needed_max)))
    await claim_status(rec, sm, src, needs, set(), stage="mt_status")  # type: ignore[arg-type]


CHOICE_STAGES = {"construct_read", "route", "ms_plan", "ms_inspect", "ms_consolidate", "construct_ground",
                 "mt_diagnose", "mt_status", "ms_ground", "mt_ground"}


@functools.lru_cache(maxsize=4)
def captured(shape: Shape, window: int | None) -> tuple[Synthetic, tuple[Sent, ...]]:
    syn = synthetic(shape)
    rec = Recorder(window)
    asyncio.run(_stages(syn, rec))
    return syn, tuple(rec.sent)


def sent_schema(schema: type, choices: dict[str, list[str]], portable: bool) -> tuple[dict, dict]:
    """(schema with every id set as an enum, the schema LLM.generate sends): with_choices, then within_limits."""
    full = with_choices(schema_json(schema, portable), choices)
    return full, within_limits(full, fields=choices)


def pool_of(values: list[str], pools: dict[str, list[str]]) -> str:
    kinds = [k for k, pool in pools.items() if set(values) <= set(pool)]
    assert len(kinds) == 1, f"ids drawn from {kinds or 'no pool'}: {values[:3]}"
    return kinds[0]


@pytest.mark.parametrize("window", [None, GPT41_WINDOW], ids=["no-window", "gpt-4.1-window"])
@pytest.mark.parametrize("portable", [True, False], ids=["openai", "openai-compatible"])
def test_every_choices_schema_is_sent_within_limits_at_sphinx_scale(window, portable):
    syn, sent = captured(SPHINX, window)
    assert {s.stage for s in sent} == CHOICE_STAGES
    for s in sent:
        assert s.choices and all(s.choices.values()), f"{s.stage}: no ids captured"
        for name, values in s.choices.items():
            pool_of(values, syn.pools)  # every id set is made of real ids of one kind
        _, out = sent_schema(s.schema, s.choices, portable)
        assert violations(out) == [], f"{s.stage} ({s.schema.__name__}): {violations(out)}"
        json_schema_model(out)  # what LLM.generate hands to inspect's ResponseSchema
        # an id set kept as an enum is exactly the ids chosen; a relaxed one says what to copy
        for name, values in s.choices.items():
            for node in _property_nodes(out, name):
                target = node.get("items", node) if node.get("type") == "array" else node
                if "enum" in target:
                    assert target["enum"] == list(dict.fromkeys(values))
                else:
                    assert RELAXED_STRING in node.get("description", "") or RELAXED_ARRAY in node.get("description", "")


def test_sphinx_scale_needs_the_relaxation():
    """On sphinx's shape the writer's region rewrite passes the limits whatever the window (1,136
    evidence ids of 30 entities' notes), and so does its grounder (the same ids), and the planner: its
    digest holds the entities that fit 60,000 characters (the official STUDY_DIGEST_CHARS; ~555 here) and
    names 80 more, each a key it may choose, whatever the window; all three are sent relaxed. The router's
    217 region ids (twice)
    stay within and are sent unchanged, enums and all."""
    for window in (None, GPT41_WINDOW):
        by_stage = {s.stage: s for s in captured(SPHINX, window)[1]}
        over = {st for st, s in by_stage.items() if violations(sent_schema(s.schema, s.choices, True)[0])}
        plan = len(by_stage["ms_plan"].choices["entities"])
        assert LARGE_ENUM < plan < SPHINX.entities
        assert over == {"ms_consolidate", "ms_ground", "ms_plan"}
        # the rewrite's grounder is offered exactly the excerpts its writer was shown
        assert by_stage["ms_ground"].choices["evidence_ids"] == by_stage["ms_consolidate"].choices["element_ids"]
        assert len(by_stage["route"].choices["required"]) == SPHINX.regions


@pytest.mark.parametrize("portable", [True, False], ids=["openai", "openai-compatible"])
def test_every_choices_schema_is_within_limits_with_whole_pools(portable):
    """The most a source of sphinx's shape can give a stage: each id set replaced by all ids of its kind."""
    syn, sent = captured(SPHINX, GPT41_WINDOW)
    for s in sent:
        whole = {name: syn.pools[pool_of(values, syn.pools)] for name, values in s.choices.items()}
        full, out = sent_schema(s.schema, whole, portable)
        if whole != s.choices:  # the router's are all region ids already
            assert violations(full), f"{s.stage}: thousands of ids should pass a limit"
        assert violations(out) == [], f"{s.stage} ({s.schema.__name__}): {violations(out)}"


@pytest.mark.parametrize("portable", [True, False], ids=["openai", "openai-compatible"])
def test_small_sources_send_their_id_sets_unchanged(portable):
    _, sent = captured(SMALL, None)
    assert {s.stage for s in sent} == CHOICE_STAGES
    for s in sent:
        full, out = sent_schema(s.schema, s.choices, portable)
        assert violations(full) == [] and out is full, s.stage


def _property_nodes(node: Any, name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(node, list):
        for x in node:
            out += _property_nodes(x, name)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k == "properties" and isinstance(v, dict):
                if isinstance(v.get(name), dict):
                    out.append(v[name])
                for sub in v.values():
                    out += _property_nodes(sub, name)
            else:
                out += _property_nodes(v, name)
    return out


def static_schemas() -> dict[str, type]:
    """Every schema sent without ``choices``, at the largest size its parameters take."""
    from sourcebench.adapters.phantomwiki.benchmark import AnswerSet
    from sourcebench.harness.backend import ProbeReply
    from sourcebench.judges.llm_judge import Verdict
    from sourcebench.methods.awm import WorkflowSet
    from sourcebench.methods.hipporag2.openie import NamedEntities, Triples
    from sourcebench.methods.hipporag2.retrieve import FactFilter
    from sourcebench.methods.kb_curator.tools import CuratorStep, DuplicateVerdict, KeyAnalysis, ReaderStep
    from sourcebench.methods.navigator import NavigatorStep
    from sourcebench.methods.rika.atomise import AtomReply
    from sourcebench.methods.rika.extract import FirstOrderReply, SecondOrderReply
    from sourcebench.methods.rika.relations import RelationReply
    from sourcebench.methods.rika.route import RouteReply
    from sourcebench.methods.sourcelearn.audit import (
        CoverageVerdicts,
        GroundingJudgement,
        PreservationJudgement,
        RequiredClaims,
    )
    from sourcebench.methods.sourcelearn.construct import Abstraction, ReadingBrief, RegionMap
    from sourcebench.methods.sourcelearn.grounding import GroundVerdict, LostMeanings, Narrowed
    from sourcebench.methods.sourcelearn.regions import ProposedBlocks
    from sourcebench.methods.sourcelearn.taskguided.lessons import LessonOut
    from sourcebench.methods.sourcelearn.taskguided.policy import PolicyDraft
    from sourcebench.methods.sourcelearn.taskguided.refine import Coverage

    classes = [AnswerSet, Verdict, WorkflowSet, NamedEntities, Triples, FactFilter, CuratorStep, DuplicateVerdict,
               KeyAnalysis, ReaderStep, NavigatorStep, AtomReply, FirstOrderReply, SecondOrderReply, RelationReply,
               RouteReply, CoverageVerdicts, GroundingJudgement, PreservationJudgement, RequiredClaims, Abstraction,
               ReadingBrief, RegionMap, GroundVerdict, LostMeanings, Narrowed, ProposedBlocks, LessonOut, PolicyDraft,
               Coverage, ProbeReply]
    return {c.__name__: c for c in classes}


@pytest.mark.parametrize("portable", [True, False], ids=["openai", "openai-compatible"])
def test_static_schemas_are_within_limits(portable):
    for name, cls in static_schemas().items():
        s = schema_json(cls, portable)
        assert violations(s) == [], f"{name}: {violations(s)}"
        assert within_limits(s) is s


# structured calls per file (``.structured(`` and ``choices=``): a new call must be added above,
# to static_schemas() or to _stages()
STRUCTURED_CALLS = {
    "harness/benchmark.py": (1, 0), "harness/backend.py": (1, 0), "judges/llm_judge.py": (1, 0), "methods/awm.py": (1, 0),
    "methods/hipporag2/openie.py": (2, 0), "methods/hipporag2/retrieve.py": (1, 0),
    "methods/kb_curator/curator.py": (2, 0), "methods/kb_curator/reader.py": (1, 0),
    "methods/kb_curator/tools.py": (1, 0), "methods/navigator.py": (1, 0), "methods/rika/atomise.py": (1, 0),
    "methods/rika/extract.py": (1, 0), "methods/rika/relations.py": (1, 0), "methods/rika/route.py": (1, 0),
    "methods/sourcelearn/activation.py": (1, 1), "methods/sourcelearn/audit.py": (4, 0),
    "methods/sourcelearn/construct.py": (4, 1), "methods/sourcelearn/grounding.py": (7, 3),
    "methods/sourcelearn/regions.py": (1, 0), "methods/sourcelearn/rewrite.py": (1, 1),
    "methods/sourcelearn/selfstudy/observe.py": (1, 1), "methods/sourcelearn/selfstudy/plan.py": (1, 1),
    "methods/sourcelearn/taskguided/diagnose.py": (1, 1), "methods/sourcelearn/taskguided/lessons.py": (2, 1),
    "methods/sourcelearn/taskguided/policy.py": (1, 0), "methods/sourcelearn/taskguided/refine.py": (1, 0),
    "harness/protocols/session.py": (1, 0),  # passes the methods' calls on (a BoundLLM that records prompts)
}


def test_every_structured_call_is_covered():
    found = {}
    for top in ("methods", "adapters", "judges", "harness", "reports"):
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            calls = len(re.findall(r"\.structured\(", text))
            if calls and not path.is_relative_to(ROOT / "harness" / "llm"):  # the model layer itself
                found[path.relative_to(ROOT).as_posix()] = (calls, len(re.findall(r"\bchoices=\{", text)))
    assert found == STRUCTURED_CALLS, "structured calls changed: cover the new schema in this test"
