"""The response schema every structured call sends: strict (all keys required, no extras)."""

from pydantic import BaseModel, Field

from sourcebench.harness.schema_limits import (
    bounded_list,
    bounded_text,
    full_schema,
    inspect_schema,
    schema_json,
    strict_schema,
)


class Item(BaseModel):
    name: str = Field(max_length=40, description="short name")
    tags: list[str] = Field(default_factory=list)


class Reply(BaseModel):
    items: list[Item] = Field(default_factory=list)
    note: str | None = None
    score: int = Field(default=0, ge=0, le=10)


def _objects(node):
    if isinstance(node, dict):
        if "properties" in node:
            yield node
        for v in node.values():
            yield from _objects(v)
    elif isinstance(node, list):
        for v in node:
            yield from _objects(v)


def test_every_object_requires_all_its_keys_and_forbids_others():
    s = schema_json(Reply)
    objs = list(_objects(s))
    assert len(objs) == 2  # Reply and the inlined Item
    for o in objs:
        assert o["required"] == list(o["properties"]) and o["additionalProperties"] is False
    assert "default" not in str(s) and "$defs" not in s
    item = s["properties"]["items"]["items"]
    assert item["properties"]["name"]["maxLength"] == 40  # kept for constrained decoders
    # a reply that writes every key still validates; one that omits defaults too (pydantic side)
    assert Reply.model_validate_json('{"items": [], "note": null, "score": 0}').items == []
    assert Reply.model_validate_json("{}").score == 0


def test_portable_form_moves_limits_into_descriptions():
    s = schema_json(Reply, True)
    name = s["properties"]["items"]["items"]["properties"]["name"]
    assert "maxLength" not in name and name["description"] == "short name; at most 40 characters"
    assert "minimum" not in str(s) and "maximum" not in str(s)
    assert "at least 0" in s["properties"]["score"]["description"]


def test_a_property_called_default_is_a_property_not_a_keyword():
    node = {"type": "object", "properties": {"default": {"type": "string", "default": "x"}}}
    out = strict_schema(node)
    assert out["properties"] == {"default": {"type": "string"}} and out["required"] == ["default"]


class Cite(BaseModel):
    statement: str
    element_id: str
    element_ids: list[str] = Field(default_factory=list)
    other: list[int] = Field(default_factory=list)


class Cites(BaseModel):
    items: list[Cite]


def test_choices_put_a_closed_id_set_into_the_schema_sent_and_into_the_cache_key(tmp_path):
    import asyncio

    from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
    from sourcebench.harness.providers import scripted

    llm = LLM(ModelSpec(name="scripted/unit"), CallCache(tmp_path / "c.sqlite"), UsageLedger())
    scripted.set_script(lambda msgs, schema: '{"items": [{"statement": "s", "element_id": "a#1", "element_ids": [], '
                                             '"other": []}]}')
    ids = ["a#1", "b#2", "a#1"]
    res = asyncio.run(llm.structured("cite", Cites, method="m", phase="learn",
                                     choices={"element_id": ids, "element_ids": ids, "other": ids, "nothing": []}))
    assert res.value is not None and res.value.items[0].element_id == "a#1"
    sent = scripted.CALLS[-1]["schema"]
    item = sent["properties"]["items"]["items"]["properties"]
    assert item["element_id"]["enum"] == ["a#1", "b#2"]  # de-duplicated, in order
    assert item["element_ids"]["items"]["enum"] == ["a#1", "b#2"]
    assert "enum" not in item["other"]["items"] and "enum" not in item["statement"]  # only string fields named
    # another id set is another request (no stale cache hit); the same set is a cache hit
    asyncio.run(llm.structured("cite", Cites, method="m", phase="learn", choices={"element_id": ["z"]}))
    assert len(scripted.CALLS) == 2
    again = asyncio.run(llm.structured("cite", Cites, method="m", phase="learn",
                                       choices={"element_id": ids, "element_ids": ids, "other": ids}))
    assert len(scripted.CALLS) == 2 and again.value is not None


class Bounded(BaseModel):
    statement: bounded_text(300)
    conditions: list[bounded_text(120)] = Field(default_factory=list, description="when it holds")


def test_bounded_text_bounds_the_decoder_but_not_validation():
    sent = schema_json(Bounded)
    assert sent["properties"]["statement"]["maxLength"] == 300
    assert sent["properties"]["conditions"]["items"]["maxLength"] == 120
    assert sent["properties"]["conditions"]["description"] == "when it holds"
    portable = schema_json(Bounded, True)  # OpenAI's strict mode: the bound becomes words
    assert "maxLength" not in portable["properties"]["statement"]
    assert portable["properties"]["statement"]["description"] == "at most 300 characters"
    long = Bounded.model_validate({"statement": "x" * 400, "conditions": ["y" * 200]})
    assert len(long.statement) == 400 and len(long.conditions[0]) == 200


class Listed(BaseModel):
    names: bounded_list(bounded_text(20), 3) = Field(default_factory=list, description="who")
    scores: list[int] = Field(default_factory=list, max_length=2)


def test_array_bounds_survive_inspects_schema_type_for_in_process_decoders():
    sent = schema_json(Listed)
    assert sent["properties"]["names"]["maxItems"] == 3 and sent["properties"]["scores"]["maxItems"] == 2
    assert sent["properties"]["names"]["items"]["maxLength"] == 20
    reduced = inspect_schema(Listed).model_dump(exclude_none=True)  # what reaches a provider through inspect
    assert "maxItems" not in reduced["properties"]["names"]
    assert full_schema(reduced) == sent  # what the local provider's grammar is built from
    unknown = {"type": "object", "properties": {"x": {"type": "string"}}}
    assert full_schema(unknown) is unknown
    portable = schema_json(Listed, True)
    assert portable["properties"]["names"]["description"] == "who; at most 3 items"
    assert Listed.model_validate({"names": ["a", "b", "c", "d"]}).names[3] == "d"  # the bound is not validation
