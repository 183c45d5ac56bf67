"""The backend's replies are valid for every schema the methods declare and are drawn from the prompt."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections import Counter

import pytest
from pydantic import BaseModel, ValidationError

from sourcebench import judges, methods
from tests.backends.content import PromptView, instance, plain_reply

PROMPT = [{"role": "system", "content": "You read sources and answer in JSON."},
          {"role": "user", "content": "Excerpts:\n[e1] Alice Smith\nAlice Smith is the mother of Bob Jones. "
                                      "Alice Smith lives in Paris.\n[e2] Bob Jones\nThe friend of Bob Jones is "
                                      "Carol White. Bob Jones works as a baker.\n1. first note\n2. second note\n"
                                      "Question: Who is the friend of Bob Jones?"}]


def _declared_models() -> list[type[BaseModel]]:
    found = []
    for pkg in (methods, judges):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            found += [c for c in vars(mod).values() if inspect.isclass(c) and issubclass(c, BaseModel)
                      and c.__module__ == mod.__name__]
    return found


def test_every_declared_model_gets_a_valid_instance():
    models = _declared_models()
    assert len(models) > 50
    failures = []
    for m in models:
        schema = m.model_json_schema()  # pydantic's own form: $defs, $ref, anyOf, defaults
        try:
            m.model_validate(instance(schema, PROMPT, "0123456789abcdef"))
        except ValidationError as e:
            failures.append(f"{m.__module__}.{m.__name__}: {e.errors()[0]}")
    assert failures == []


def test_values_come_from_the_prompt():
    schema = {"type": "object", "properties": {
        "evidence_spans": {"type": "array", "items": {"type": "string"}},
        "subject": {"type": "string"}, "relation": {"type": "string"}, "object": {"type": "string"},
        "element_ids": {"type": "array", "items": {"type": "string"}, "maxItems": 1},
        "notes": {"type": "array", "items": {"type": "integer"}},
        "answer": {"type": "string"}, "statement": {"type": "string", "maxLength": 20}}}
    v = instance(schema, PROMPT, "feed")
    text = PROMPT[1]["content"]
    assert v["evidence_spans"] and all(s in text for s in v["evidence_spans"])
    assert v["subject"] != v["object"] and v["subject"] in text and v["object"] in text
    assert v["relation"] in text
    assert len(v["element_ids"]) == 1 and v["element_ids"][0] in ("e1", "e2")
    assert set(v["notes"]) <= {1, 2}
    assert v["answer"] == "Carol White"
    assert len(v["statement"]) <= 20 and v["statement"] in text


def test_enums_and_verdicts_vary_with_the_request_but_not_between_repeats():
    schema = {"type": "object", "properties": {"kind": {"type": "string", "enum": ["a", "b", "c", "d"]},
                                               "correct": {"type": "boolean"}}}
    picks = [instance(schema, PROMPT, f"{i:08x}") for i in range(200)]
    kinds = Counter(p["kind"] for p in picks)
    assert set(kinds) == {"a", "b", "c", "d"}
    share_true = sum(p["correct"] for p in picks) / len(picks)
    assert 0.7 <= share_true <= 0.9
    assert instance(schema, PROMPT, "00000007") == picks[7]


def test_plain_replies():
    assert plain_reply(PROMPT) == "Carol White"
    assert plain_reply([{"role": "user", "content": "Reply with the word OK."}]) == "OK"
    summary = plain_reply([{"role": "user", "content": "Summarize the following.\nAlice Smith lives in Paris. "
                                                       "She bakes bread every day."}])
    assert "Alice Smith lives in Paris." in summary


def test_prompt_view_finds_names_ids_and_numbers():
    v = PromptView.of(PROMPT)
    assert v.ids == ["e1", "e2"] and v.numbers == [1, 2]
    assert {"Alice Smith", "Bob Jones", "Carol White"} <= set(v.names)
    assert v.sentences[0] == "The friend of Bob Jones is Carol White."


@pytest.mark.parametrize("schema", [{"type": "object", "properties": {"x": {"anyOf": [{"type": "null"}]}}},
                                    {"type": "object", "properties": {"t": {"type": "string", "format": "date"}}}])
def test_edge_shapes(schema):
    json.dumps(instance(schema, PROMPT, "ab"))


def test_ids_are_taken_from_the_kind_the_field_names():
    msgs = [{"role": "user", "content": "### Trajectory T1\nQuestion: a?\n- [doc-7] Alice: text\n### Trajectory T2\n"
                                        "Question: b?\nread [doc-9] Bob (2 links)"}]
    schema = {"type": "object", "properties": {"source_trajectories": {"type": "array", "items": {"type": "string"}},
                                               "doc_id": {"type": "string"}}}
    for key in ("a", "b", "c", "d"):
        v = instance(schema, msgs, key)
        assert set(v["source_trajectories"]) <= {"T1", "T2"} and v["source_trajectories"]
        assert v["doc_id"] in ("doc-7", "doc-9")


def test_an_object_citing_a_record_quotes_that_record():
    msgs = [{"role": "user", "content": "### Trajectory T1\nObservations:\n[e1] Alice: Alice Smith lives in Paris.\n"
                                        "### Trajectory T2\nObservations:\n[e2] Bob: Bob Jones works as a baker."}]
    item = {"type": "object", "properties": {"claim": {"type": "string"},
                                             "source_trajectories": {"type": "array", "items": {"type": "string"}},
                                             "evidence_spans": {"type": "array", "items": {"type": "string"}}}}
    schema = {"type": "object", "properties": {"claims": {"type": "array", "items": item}}}
    seen = set()
    for key in "abcdefgh":
        for c in instance(schema, msgs, key)["claims"]:
            (label,) = c["source_trajectories"]
            seen.add(label)
            record = msgs[0]["content"].split(f"Trajectory {label}")[1].split("###")[0]
            assert c["evidence_spans"] and all(sp in record for sp in c["evidence_spans"])
    assert seen == {"T1", "T2"}
