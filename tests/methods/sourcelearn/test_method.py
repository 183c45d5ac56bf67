"""The registered SourceLearn variants: artifacts (model.json + stats.json), shared M0/MS artifacts
reused across variants without new calls, answering with evidence + activated notes, stale units
hidden at answer time, and no guidance reference in anything saved."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from helpers import GUIDANCE, SOURCE, TEST, answer_ctx, dispatch, make_ctx, stage_calls

from sourcebench.harness import registry
from sourcebench.harness.data import Source
from sourcebench.harness.providers import scripted
from sourcebench.methods.sourcelearn import method as M
from sourcebench.methods.sourcelearn.model import SourceModel

VARIANTS = {"sourcelearn": M.SourceLearn, "sourcelearn-m0": M.SourceLearnM0, "sourcelearn-ms": M.SourceLearnMS,
            "sourcelearn-wo-self": M.SourceLearnWithoutSelf, "sourcelearn-wo-cross": M.SourceLearnLocal,
            "sourcelearn-wo-failure": M.SourceLearnWithoutFailure}


def run(coro):
    return asyncio.run(coro)


def reading(messages, schema):
    entity = re.search(r"^Entity: (.+)$", messages[-1]["content"], re.MULTILINE).group(1)
    ids = re.findall(r"^\[([^\]]+)\]", messages[-1]["content"], re.MULTILINE)
    return json.dumps({"attributes": [{"name": "nickname", "value": entity.lower(), "element_id": ids[0]}],
                       "mechanisms": [], "distinctions": [],
                       "decisive_details": [{"statement": f"{entity} is described in the toy town", "element_id": ids[-1]}]})


def batch_gate(messages, schema):
    n = len(re.findall(r"^\d+\. ", messages[-1]["content"], re.MULTILINE))
    return json.dumps({f"claim_{i}": {"supported": True, "evidence_ids": []} for i in range(1, n + 1)})


SCRIPT = dispatch(("For every claim say whether", batch_gate), ("profile of ONE entity", reading))


def learn(method, tmp_path, workdir, guidance=(), source=SOURCE):
    ctx = make_ctx(tmp_path, source, workdir=workdir, method=method.name)
    stats = run(method.learn(source, list(guidance), ctx))
    return ctx, stats


def construct_stages(ctx) -> dict[str, int]:
    return {k: v for k, v in stage_calls(ctx).items() if k.startswith("construct")}


def need_task_learning():
    from sourcebench.methods.sourcelearn import taskguided

    if not hasattr(taskguided, "task_learn"):
        pytest.skip("task-guided learning (Engineer B) not available yet")


def test_variants_are_registered_with_their_stage_plan():
    for name, cls in VARIANTS.items():
        assert registry._resolve(registry._BUILTIN_METHODS[name]) is cls and cls.name == name
        assert issubclass(cls, M.SourceLearnBase) and cls.deviations
    assert not M.SourceLearnM0.uses_guidance and not M.SourceLearnMS.uses_guidance
    assert all(VARIANTS[n].uses_guidance for n in ("sourcelearn", "sourcelearn-wo-self", "sourcelearn-wo-cross",
                                                   "sourcelearn-wo-failure"))
    assert (M.SourceLearnWithoutSelf.start, M.SourceLearn.start) == ("M0", "MS")
    assert (M.SourceLearnLocal.local, M.SourceLearnLocal.cross) == (True, False)
    assert (M.SourceLearnWithoutFailure.local, M.SourceLearnWithoutFailure.cross) == (False, True)
    assert M.SourceLearnConfig().budget_tokens == 24000 and M.SourceLearnConfig().study_actions == 20


def test_m0_variant_saves_model_and_stats_and_answers_with_evidence_and_notes(tmp_path):
    scripted.set_script(SCRIPT)
    method = M.SourceLearnM0()
    ctx, stats = learn(method, tmp_path, "m0")
    assert json.loads((ctx.workdir / "stats.json").read_text()) == stats
    sm = method.load(ctx.workdir, ctx)
    assert isinstance(sm, SourceModel) and sm.stage == "M0" and len(sm.units) == stats["model"]["n_units"]
    assert stats["model"]["units_by_role"]["card"] == 6 and stats["model"]["history"] == [
        {"stage": "M0", "n_units": len(sm.units)}]
    assert "reused" not in stats["shared"]["m0"]  # which cell built it is the schedule's, not the artifact's
    assert stats["usage_by_stage"]["construct_read"]["calls"] == 6
    n = len(scripted.CALLS)
    actx = answer_ctx(ctx)
    ans = run(method.answer(TEST[0], sm, actx))
    assert len(scripted.CALLS) == n + 1  # the model fits the budget: no router call, just the answer
    user = scripted.CALLS[-1]["messages"][-1]["content"]
    assert "Knowledge about the source" in user and "Source excerpts:" in user
    assert "Alice is described in the toy town" in user
    assert ans.metadata["activation"]["mode"] == "all" and ans.evidence_ids
    assert stage_calls(actx).get("answer") == 1


def test_the_answer_prompt_shows_the_model_without_the_reading_brief_or_policy(tmp_path):
    """The official answerer builds its context from the retrieved excerpts and the activated model only."""
    scripted.set_script(SCRIPT)
    method = M.SourceLearnM0()
    ctx, _ = learn(method, tmp_path, "m0")
    sm = method.load(ctx.workdir, ctx)
    sm.brief, sm.policy = "BRIEFSECRET reading brief", ["POLICYSECRET prefer rules"]
    run(method.answer(TEST[0], sm, answer_ctx(ctx)))
    user = scripted.CALLS[-1]["messages"][-1]["content"]
    assert "Alice is described in the toy town" in user and "Source excerpts:" in user
    assert "BRIEFSECRET" not in user and "POLICYSECRET" not in user


def test_second_variant_reuses_m0_without_construct_calls(tmp_path):
    pytest.importorskip("sourcebench.methods.sourcelearn.selfstudy")
    scripted.set_script(SCRIPT)
    first, s1 = learn(M.SourceLearnM0(), tmp_path, "m0")
    assert construct_stages(first)["construct_read"] == 6
    n_before = len(scripted.CALLS)
    second, s2 = learn(M.SourceLearnMS(), tmp_path, "ms")  # fresh LLM and ledger, same store
    assert construct_stages(second) == {}
    assert not any("profile of ONE entity" in c["messages"][0]["content"] for c in scripted.CALLS[n_before:])
    assert s2["shared"]["m0"]["key"] == s1["shared"]["m0"]["key"]  # the same shared model, not built again
    assert s2["shared"]["m0"] == s1["shared"]["m0"]  # the finder's stats are the builder's, byte for byte
    # the shared build's costs travel with the variant's stats
    assert s2["usage_by_stage"]["construct_read"]["calls"] == 6
    ms = SourceModel.load(second.workdir / "model.json")
    assert ms.stage == "MS" and [h.stage for h in ms.history][:1] == ["M0"]
    # and a third variant asking for MS rebuilds nothing
    third, s3 = learn(M.SourceLearnMS(), tmp_path, "ms2")
    assert stage_calls(third) == {} and s3["shared"]["ms"] == s2["shared"]["ms"]


def test_changed_m0_settings_build_a_new_shared_model(tmp_path):
    scripted.set_script(SCRIPT)
    _, s1 = learn(M.SourceLearnM0(), tmp_path, "a")
    ctx, s2 = learn(M.SourceLearnM0({"read_budget": 3}), tmp_path, "b")
    assert s1["shared"]["m0"]["key"] != s2["shared"]["m0"]["key"] and construct_stages(ctx)
    _, s3 = learn(M.SourceLearnM0({"budget_tokens": 1000, "concurrency": 1}), tmp_path, "c")
    assert s3["shared"]["m0"]["key"] == s1["shared"]["m0"]["key"]  # answer-time settings do not matter


def test_stale_anchors_hide_units_when_the_source_changes(tmp_path):
    scripted.set_script(SCRIPT)
    method = M.SourceLearnM0()
    ctx, _ = learn(method, tmp_path, "m0")
    sm = method.load(ctx.workdir, ctx)
    changed = Source(id=SOURCE.id, kind=SOURCE.kind, description=SOURCE.description, elements=[
        e.model_copy(update={"text": e.text + " Alice moved to Lyon.", "fingerprint": ""})
        if e.id == "people/alice.md#work" else e for e in SOURCE.elements])
    changed = Source.model_validate(json.loads(changed.model_dump_json()))  # recompute fingerprints
    actx = answer_ctx(make_ctx(tmp_path, changed, workdir="later"))
    ans = run(method.answer(TEST[0], sm, actx))
    act = ans.metadata["activation"]
    assert act["n_stale"] >= 1 and act["n_live"] == act["n_units"] - act["n_stale"]
    stale = [u for u in sm.units if SourceModel.is_stale(u, changed)]
    assert stale and all("people/alice.md#work" in u.element_ids() for u in stale)
    user = scripted.CALLS[-1]["messages"][-1]["content"]
    assert all(u.render() not in user for u in stale if u.role != "map")


def test_task_variants_share_ms_and_never_save_the_reference(tmp_path):
    pytest.importorskip("sourcebench.methods.sourcelearn.selfstudy")
    need_task_learning()
    scripted.set_script(SCRIPT)
    a, sa = learn(M.SourceLearn(), tmp_path, "mt", GUIDANCE)
    b, sb = learn(M.SourceLearnLocal(), tmp_path, "local", GUIDANCE)
    assert not any(k.startswith(("construct", "ms_")) for k in stage_calls(b))
    assert sb["shared"]["ms"]["key"] == sa["shared"]["ms"]["key"]
    assert SourceModel.load(a.workdir / "model.json").stage == "MT"
    assert SourceModel.load(b.workdir / "model.json").stage == "M_local"
    c, sc = learn(M.SourceLearnWithoutSelf(), tmp_path, "woself", GUIDANCE)
    assert "ms" not in sc["shared"] and construct_stages(c) == {}
    for f in list(tmp_path.rglob("*.json")):
        assert "REFSECRET" not in f.read_text(), f


def test_gold_removed_evidence_keeps_the_learned_model(tmp_path):
    """Figure 5b: the Hybrid RAG evidence leaves out the gold elements; the notes come from the same model."""
    scripted.set_script(SCRIPT)
    ctx, _ = learn(M.SourceLearnM0(), tmp_path, "m0")
    sm = M.SourceLearnM0().load(ctx.workdir, ctx)
    actx = answer_ctx(ctx)
    gold = ["people/alice.md#family", "places/oslo.md#overview"]
    task = TEST[0].model_copy(update={"metadata": {"gold_element_ids": gold}})
    native = run(M.SourceLearnM0({"top_k": 3}).answer(task, sm, actx))
    assert set(gold) & set(native.evidence_ids)  # natively the gold elements are retrieved
    removed = run(M.SourceLearnM0({"top_k": 3, "exclude_gold": True}).answer(task, sm, actx))
    assert len(removed.evidence_ids) == 3 and not set(gold) & set(removed.evidence_ids)
    user = scripted.CALLS[-1]["messages"][-1]["content"]
    assert "Alice is described in the toy town" in user  # the activated model is unchanged
    assert removed.metadata["activation"]["mode"] == native.metadata["activation"]["mode"] == "all"
    # Figure 5a's k = 0 still answers from the model alone, with or without gold removal
    alone = run(M.SourceLearnM0({"top_k": 0, "exclude_gold": True}).answer(task, sm, actx))
    assert alone.evidence_ids == [] and not alone.failed
    n = len(scripted.CALLS)
    unlabelled = run(M.SourceLearnM0({"exclude_gold": True}).answer(TEST[0], sm, actx))
    assert unlabelled.failed and unlabelled.failure_reason.startswith("exclude_gold")
    assert len(scripted.CALLS) == n  # decided before any model call


def test_exclude_gold_at_its_default_is_not_in_the_dumped_config():
    """The artifact key hashes the dumped config: adding the option must not change earlier keys."""
    assert "exclude_gold" not in M.SourceLearnConfig().model_dump()
    assert M.SourceLearnConfig(exclude_gold=True).model_dump()["exclude_gold"] is True


def learning_script():
    """Construction as in SCRIPT; self-study finds one note per entity, plans one DEEPEN on Oslo and writes
    every note into a unit (so what a study retrieved shows in MS); task learning gets default replies."""
    from test_selfstudy import gate_if, observe_all, route
    from test_taskguided import echo_writer

    plans = iter([{"actions": [{"kind": "DEEPEN", "entities": ["Oslo"], "observation": 1,
                                "question": "Which port does Oslo have?"}]}])
    learned = route({frozenset({"learned", "observations"}): observe_all,
                     frozenset({"actions"}): lambda p, _: next(plans, {"actions": []}),
                     frozenset({"keep", "units"}): echo_writer,
                     frozenset({"supported", "evidence_ids", "unsupported_parts"}): gate_if(lambda c: True),
                     frozenset({"lost"}): lambda p, _: {"lost": []}})

    def reply(messages, schema):
        return SCRIPT(messages, schema) or learned(messages, schema)
    return reply


@pytest.mark.parametrize("variant", [M.SourceLearnMS, M.SourceLearn])
def test_learning_is_the_same_whatever_the_task_time_k(tmp_path, variant):
    """Figure 5a's k (8 down to 0) is a task-time setting: the MS key and every learned model are identical
    (separate stores and caches, so nothing is reused), and in one store the k = 0 variant rebuilds no MS."""
    pytest.importorskip("sourcebench.methods.sourcelearn.selfstudy")
    need_task_learning()
    guidance = GUIDANCE if variant.uses_guidance else ()
    keys, models = {}, {}
    for k in (8, 0):
        scripted.reset()
        scripted.set_script(learning_script())
        ctx, stats = learn(variant({"top_k": k}), tmp_path / f"k{k}", "artifact", guidance)
        keys[k], models[k] = stats["shared"]["ms"]["key"], (ctx.workdir / "model.json").read_text()
    assert keys[8] == keys[0] and models[8] == models[0]
    ms = SourceModel.load(tmp_path / "k0" / "artifact" / "model.json")
    studied = [u for u in ms.units if u.origin == "self-study" and "places/oslo.md#overview" in u.element_ids()]
    assert studied  # the DEEPEN on Oslo retrieved and its note was written, with k = 0 as with k = 8
    assert ms.history[[h.stage for h in ms.history].index("MS")].stats["actions"] == 1
    # reproduce's k variants learn in one store: the k = 0 one reuses the MS the k = 8 one built
    scripted.reset()
    scripted.set_script(learning_script())
    learn(variant({"top_k": 8}), tmp_path / "one", "a", guidance)
    n = len(scripted.CALLS)
    second, stats = learn(variant({"top_k": 0}), tmp_path / "one", "b", guidance)
    assert not any(k.startswith(("construct", "ms_")) for k in stage_calls(second))
    assert all(not c["messages"][0]["content"].startswith("You direct the self-study") for c in scripted.CALLS[n:])
