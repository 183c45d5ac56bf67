"""SourceLearn audits: pure tables on hand-built models, judged audits with the scripted model,
and ``sourcebench audit all`` on a hand-built run folder."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path

import pytest
from helpers import SOURCE, TEST, ToyQABench, dispatch, make_llm

from sourcebench.harness import registry
from sourcebench.harness.data import Element, Source
from sourcebench.harness.io import read_jsonl
from sourcebench.harness.providers import scripted
from sourcebench.methods.sourcelearn import audit as A
from sourcebench.methods.sourcelearn import audit_cli
from sourcebench.methods.sourcelearn.model import Attribute, Entity, Region, Scope, SourceModel, Unit

PEOPLE = [e.id for e in SOURCE.elements if e.path.startswith("people/")]
PLACES = [e.id for e in SOURCE.elements if e.path.startswith("places/")]


def run(coro):
    return asyncio.run(coro)


def unit(statement: str, role: str = "detail", keys: tuple[str, ...] = ("alice",), eids: tuple[str, ...] = (),
         conditions: tuple[str, ...] = (), absorbed: tuple[str, ...] = (), kind: str = "entity") -> Unit:
    scope = Scope(kind=kind, keys=list(keys))  # type: ignore[arg-type]
    return Unit(id=SourceModel.unit_id(statement, role, scope), statement=statement, role=role, scope=scope,
                conditions=list(conditions), anchors=SourceModel.stamp(eids, SOURCE), absorbed=list(absorbed))


def card(name: str, attr: str, value: str, eid: str) -> Unit:
    scope = Scope(kind="entity", keys=[name.lower()])
    anchor = SourceModel.stamp([eid], SOURCE)[0]
    return Unit(id=SourceModel.unit_id(name, "card", scope), statement=name, role="card", scope=scope,
                attributes=[Attribute(name=attr, value=value, anchor=anchor)])


def model(units: list[Unit], stage: str = "M0") -> SourceModel:
    sm = SourceModel(source_id=SOURCE.id, source_fingerprint=SOURCE.fingerprint, brief="A toy town.",
                     regions=[Region(id="people", title="people", element_ids=PEOPLE,
                                     entity_keys=["alice", "bob", "carol", "dave"]),
                              Region(id="places", title="places", element_ids=PLACES, entity_keys=["oslo", "lyon"])],
                     entities=[Entity(key=k, name=k.capitalize(), region="people",
                                      element_ids=[e for e in PEOPLE if f"/{k}.md" in e])
                               for k in ("alice", "bob", "carol", "dave")]
                     + [Entity(key=k, name=k.capitalize(), region="places",
                               element_ids=[e for e in PLACES if f"/{k}.md" in e]) for k in ("oslo", "lyon")],
                     units=units)
    sm.record_stage(stage)
    return sm


BORN = unit("Alice was born in Oslo.", eids=("people/alice.md#work",))
PORT = unit("Oslo has a port.", keys=("oslo",), eids=("places/oslo.md#overview",))
EMPLOYER = unit("Carol works for Nordair.", keys=("carol",), eids=("people/carol.md#work",))
RULE = unit("Pilots of the town work for Nordair.", "pattern", ("people",), ("people/alice.md#work", "people/bob.md#work"),
            conditions=("when the person's job is pilot",), kind="region")
RELATION = unit("Dave is the father of Bob.", "relation", ("dave", "bob"), ("people/bob.md#family",),
                conditions=("family relations",), kind="pair")
STEPS = unit("To find a mayor, look up the birth city, then its mayor.", "procedure", ("places",),
             ("places/oslo.md#overview",), kind="region")
MAP = unit("The people region describes residents and their jobs.", "map", ("people",), ("people/alice.md#work",),
           kind="region")
ALICE_CARD = card("Alice", "job", "pilot", "people/alice.md#work")

M0 = model([MAP, ALICE_CARD, BORN, EMPLOYER, RULE])
MS = model([MAP, ALICE_CARD, BORN, EMPLOYER, RULE, RELATION], "MS")
MT0 = model([MAP, ALICE_CARD, BORN, PORT, EMPLOYER, RULE, RELATION, STEPS], "MT")
MT1 = model([MAP, ALICE_CARD, BORN, RULE, RELATION, STEPS], "MT")


# ---------------------------------------------------------------------------------------- pure tables

def test_unit_kind_table_counts_shares_and_averages_splits():
    t = A.unit_kind_table({"M0": M0, "MT": [MT0, MT1]})
    assert t["M0"]["counts"] == {"overview": 1, "facts and attributes": 3, "rules": 1,
                                 "relations and constraints": 0, "procedures": 0}
    assert t["M0"]["shares"]["facts and attributes"] == pytest.approx(0.6)
    # MT: split 0 has 8 units (4 facts), split 1 has 6 (2 facts): counts and shares are split means
    assert t["MT"]["n_models"] == 2 and t["MT"]["n_units"] == 7
    assert t["MT"]["counts"]["facts and attributes"] == 3
    assert t["MT"]["shares"]["facts and attributes"] == pytest.approx((4 / 8 + 2 / 6) / 2)
    assert t["MT"]["shares"]["procedures"] == pytest.approx((1 / 8 + 1 / 6) / 2)
    assert sum(t["MT"]["shares"].values()) == pytest.approx(1.0)


def test_condition_share_over_all_units_and_without_cards():
    t = A.condition_share({"M0": [M0], "MS": [MS]})
    assert t["M0"]["with_conditions"] == 1 and t["M0"]["share"] == pytest.approx(1 / 5)
    assert t["M0"]["share_non_card"] == pytest.approx(1 / 4)
    assert t["MS"]["share"] == pytest.approx(2 / 6)
    blank = model([unit("x", conditions=("  ",))])
    assert A.condition_share({"M0": blank})["M0"]["share"] == 0.0  # whitespace is not a condition


def test_point_biserial_and_bins():
    assert A.point_biserial([0, 0.5, 1, 1], [False, False, True, True]) == pytest.approx(0.9045, abs=1e-3)
    assert A.point_biserial([1, 1], [True, False]) is None  # no variance in coverage
    assert [A.coverage_bin(c) for c in (0.0, 0.3, 1.0)] == ["none", "partial", "all"]


def test_sample_is_seeded_and_independent_of_input_order():
    items = [f"u{i:02d}" for i in range(30)]
    a = A.sample_items(items, 5, seed=0, salt="s")
    assert a == A.sample_items(list(reversed(items)), 5, seed=0, salt="s") and len(a) == 5
    assert a != A.sample_items(items, 5, seed=1, salt="s")
    assert A.sample_items(items, 50, seed=0, salt="s") == items  # fewer than n: all, in order
    assert A.sample_items(items, 0, seed=0, salt="s") == items  # 0 means all


def test_select_units_keeps_all_when_it_fits_else_the_most_relevant():
    units = [BORN, PORT, EMPLOYER, RULE]
    assert A.select_units(units, "anything", 10_000) == (units, False)
    kept, cut = A.select_units(units, "Does Oslo have a port?", 12)
    assert cut and kept == [PORT]


# ------------------------------------------------------------------------------------ judged audits

def _ground_reply(messages, schema):
    unit_text = messages[-1]["content"].split("\nUnit:\n", 1)[1].split("\n\nLabel", 1)[0]
    label = ("contradicted" if "Lyon" in unit_text else "partial" if "Pilots" in unit_text
             else "unsupported" if "father" in unit_text else "supported")
    return json.dumps({"label": label, "reason": "scripted"})


def _sm(stage: str, m: SourceModel, seed: int | None = None) -> A.StageModel:
    return A.StageModel(stage, SOURCE.id, seed, m, Path("."))


def test_grounding_audit_labels_counts_and_invented_anchor(tmp_path):
    scripted.set_script(dispatch(("Cited source elements:", _ground_reply)))
    wrong = unit("Alice was born in Lyon.", eids=("people/alice.md#work",))
    invented = unit("Erin is the mayor of Oslo.", keys=("oslo",)).model_copy(
        update={"anchors": [SourceModel.stamp(["places/oslo.md#overview"], SOURCE)[0].model_copy(
            update={"element_id": "places/atlantis.md#x"})]})
    m = model([BORN, RULE, RELATION, wrong, invented])
    llm = make_llm(tmp_path).bind("audit", "judge")
    items = run(A.grounding_audit(llm, SOURCE, {"MS": [_sm("MS", m)]}, sample=50, seed=0))
    labels = {it.unit_id: it.label for it in items}
    assert labels == {BORN.id: "supported", RULE.id: "partial", RELATION.id: "unsupported",
                      wrong.id: "contradicted", invented.id: "unsupported"}
    assert len(scripted.CALLS) == 4  # the unit citing a non-existent element is not sent to the judge
    assert next(it for it in items if it.unit_id == invented.id).reason == "cites no existing source element"
    row = A.label_table(items, A.GROUND_LABELS)[f"{SOURCE.id}|MS"]
    assert (row["n"], row["supported"], row["partial"], row["unsupported"], row["contradicted"]) == (5, 1, 1, 2, 1)
    assert row["unsupported_pct"] == 40.0 and row["failed"] == 0
    rows = llm.llm.ledger.snapshot()
    assert {r["stage"] for r in rows} == {"audit_grounding"} and {r["method"] for r in rows} == {"audit"}


def test_grounding_sample_is_seeded_pooled_over_splits_and_failures_are_kept_out_of_shares(tmp_path):
    many = model([unit(f"Alice fact {i}.", eids=("people/alice.md#work",)) for i in range(12)], "MT")
    other = model(many.units[:6] + [unit("Bob fact.", keys=("bob",), eids=("people/bob.md#work",))], "MT")
    stage_models = {"MT": [_sm("MT", many, 0), _sm("MT", other, 1)]}
    llm = make_llm(tmp_path).bind("audit", "judge")
    a = run(A.grounding_audit(llm, SOURCE, stage_models, sample=5, seed=3))
    b = run(A.grounding_audit(llm, SOURCE, stage_models, sample=5, seed=3))
    c = run(A.grounding_audit(llm, SOURCE, stage_models, sample=5, seed=4))
    assert [i.unit_id for i in a] == [i.unit_id for i in b] and len(a) == 5
    assert [i.unit_id for i in a] != [i.unit_id for i in c]
    everything = run(A.grounding_audit(llm, SOURCE, stage_models, sample=0, seed=3))
    assert len(everything) == 13  # 12 + 1 distinct units, the shared ones judged once
    scripted.set_script(lambda m, s: "not json")  # judge replies garbage: recorded as failed, not counted
    failed = run(A.grounding_audit(make_llm(tmp_path / "f").bind("audit", "judge"), SOURCE, stage_models,
                                   sample=2, seed=3))
    row = A.label_table(failed, A.GROUND_LABELS)[f"{SOURCE.id}|MT"]
    assert row["failed"] == 2 and row["supported_pct"] is None


def test_grounding_flags_stale_units(tmp_path):
    changed = Source(id=SOURCE.id, kind="documents", elements=[
        e if e.id != "people/alice.md#work" else Element(id=e.id, title=e.title, text="Alice is a chef.", path=e.path)
        for e in SOURCE.elements])
    items = run(A.grounding_audit(make_llm(tmp_path).bind("audit", "judge"), changed,
                                  {"M0": [_sm("M0", model([BORN, EMPLOYER]))]}))
    assert {i.unit_id: i.stale for i in items} == {BORN.id: True, EMPLOYER.id: False}
    text, _ = A.model_view(model([BORN, EMPLOYER]), changed, "q")
    assert "Carol works" in text and "Alice was born" not in text  # stale units are not shown


def test_dropped_units_include_absorbed_ones():
    merged = unit("Alice and Carol work for Nordair.", "pattern", ("people",), ("people/alice.md#work",),
                  absorbed=(EMPLOYER.id,), kind="region")
    later = model([MAP, ALICE_CARD, RULE, merged], "MS")
    dropped = {d.unit.id: d.absorbed_by for d in A.dropped_units(M0, later)}
    assert dropped == {BORN.id: [], EMPLOYER.id: [merged.id]}
    ctx = A.related_units(later, M0, A.Dropped(EMPLOYER, [merged.id]))
    assert merged in ctx and ALICE_CARD not in ctx  # absorbers and same-subject units, not everything


def test_preservation_audit_labels_and_steps(tmp_path):
    def reply(messages, schema):
        removed = messages[-1]["content"].split("Removed unit:\n", 1)[1].split("\n", 1)[0]
        label = "lost" if "born" in removed else "contradicted" if "Carol" in removed else "preserved"
        return json.dumps({"label": label})

    scripted.set_script(dispatch(("Removed unit:", reply)))
    merged = unit("The town's pilots all work for Nordair.", "pattern", ("people",), ("people/alice.md#work",),
                  absorbed=(RULE.id,), kind="region")
    ms = model([MAP, ALICE_CARD, EMPLOYER, merged], "MS")  # drops BORN (lost), RULE (absorbed: preserved)
    mt = model([MAP, ALICE_CARD, merged], "MT")  # drops EMPLOYER (contradicted)
    stage_models = {"M0": [_sm("M0", M0)], "MS": [_sm("MS", ms)], "MT": [_sm("MT", mt, 0)]}
    items = run(A.preservation_audit(make_llm(tmp_path).bind("audit", "judge"), SOURCE.id, stage_models))
    got = {(i.stage, i.unit_id): i.label for i in items}
    assert got == {("M0->MS", BORN.id): "lost", ("M0->MS", RULE.id): "preserved",
                   ("MS->MT", EMPLOYER.id): "contradicted"}
    assert next(i for i in items if i.unit_id == RULE.id).absorbed_by == [merged.id]
    assert next(i for i in items if i.unit_id == EMPLOYER.id).seed == 0
    t = A.label_table(items, A.PRESERVE_LABELS)
    assert t[f"{SOURCE.id}|M0->MS"]["preserved_pct"] == 50.0 and t[f"{SOURCE.id}|MS->MT"]["contradicted"] == 1
    # the absorbing unit is what the judge compares the absorbed one against
    prompt = next(c["messages"][-1]["content"] for c in scripted.CALLS if RULE.statement in c["messages"][-1]["content"])
    assert merged.statement in prompt


# ----------------------------------------------------------------------------------------- coverage

CLAIMS = {"Does the city where Alice was born have a port?": ["Alice was born in Oslo.", "Oslo has a port."],
          "Who employs Carol?": ["Carol works for Nordair."]}


def _claims_reply(messages, schema):
    q = re.search(r"Question: (.*)\n", messages[-1]["content"]).group(1)
    return json.dumps({"claims": CLAIMS[q]})


def _cover_reply(messages, schema):
    body = messages[-1]["content"]
    text = body.split("Source model:\n", 1)[1].split("\n\nClaims:\n", 1)[0].lower()
    claims = re.findall(r"^(\d+)\. (.*)$", body.split("\n\nClaims:\n", 1)[1].split("\n\n", 1)[0], re.MULTILINE)
    return json.dumps({"verdicts": [{"number": int(n), "represented": c.lower().rstrip(".") in text}
                                    for n, c in claims]})


COVER_SCRIPT = dispatch(("Reference answer:", _claims_reply), ("\n\nClaims:\n", _cover_reply),
                        ("Cited source elements:", _ground_reply))


def _result(method: str, task: str, correct: bool, seed: int = 0, artifact: str = "") -> dict:
    return {"benchmark": "toyqa", "source": SOURCE.id, "method": method, "seed": seed, "task_id": task,
            "correct": correct, "score": float(correct), "artifact": artifact}


def test_coverage_audit_and_its_association_with_accuracy(tmp_path):
    scripted.set_script(COVER_SCRIPT)
    m0 = model([BORN, RULE])  # t1: 1 of 2 claims, t2: none
    mt = model([BORN, PORT, EMPLOYER])  # both tasks fully covered
    rm = A.RunModels(tmp_path, {"benchmark": {"name": "toyqa"}},
                     [_sm("M0", m0), _sm("MS", m0), _sm("MT", mt, 0)],
                     [_result("sourcelearn", "t1", True), _result("sourcelearn", "t2", True),
                      _result("sourcelearn-m0", "t1", False), _result("sourcelearn-m0", "t2", False),
                      _result("hybrid_rag", "t2", True)])
    llm = make_llm(tmp_path).bind("audit", "judge")
    recs = run(A.coverage_audit(llm, rm, SOURCE, {t.id: t for t in TEST}, ["M0", "MS", "MT"]))
    cov = {(r.stage, r.task_id): r.coverage for r in recs}
    assert cov == {("M0", "t1"): 0.5, ("M0", "t2"): 0.0, ("MS", "t1"): 0.5, ("MS", "t2"): 0.0,
                   ("MT", "t1"): 1.0, ("MT", "t2"): 1.0}
    calls: dict[str, int] = {}
    for r in llm.llm.ledger.snapshot():  # M0 and MS are identical here, so some calls are cache hits
        calls[r["stage"]] = calls.get(r["stage"], 0) + r["calls"]
    assert calls == {"audit_claims": 2, "audit_coverage": 6}  # claims once per task, coverage per (task, stage)
    table = A.coverage_table(recs)
    assert table[f"{SOURCE.id}|M0"]["claim_share"] == pytest.approx(1 / 3)
    assert table[f"{SOURCE.id}|M0"]["task_mean"] == pytest.approx(0.25)
    assert table[f"{SOURCE.id}|MT"]["claim_share"] == 1.0 and table[f"{SOURCE.id}|MT"]["n_tasks"] == 2
    assert not any(k.startswith("ALL|") for k in table)  # pooled rows only across several sources
    assoc = A.coverage_accuracy(recs)
    assert "MS" not in assoc  # sourcelearn-ms was not scored: nothing to pair with
    assert assoc["ALL"]["n"] == 4
    assert assoc["ALL"]["bins"] == {"none": {"n": 1, "accuracy": 0.0}, "partial": {"n": 1, "accuracy": 0.0},
                                    "all": {"n": 2, "accuracy": 1.0}}
    assert assoc["ALL"]["point_biserial_r"] == pytest.approx(0.9045, abs=1e-3)
    # the claim lists come from the test references, but only in the audit's own diagnosis calls
    assert all("REFSECRET" not in c["messages"][-1]["content"] for c in scripted.CALLS
               if "Reference answer:" not in c["messages"][-1]["content"])


# ---------------------------------------------------------------------------- run folder and the CLI

class AuditBench(ToyQABench):
    """The toy benchmark with the adapter constructor the registry calls."""

    def __init__(self, data_dir=None, options=None):
        super().__init__()


def _artifact(run_dir: Path, kind: str, key: str, m: SourceModel, inputs: dict, created: str = "2025-01-01") -> None:
    folder = run_dir / "artifacts" / kind / key
    folder.mkdir(parents=True)
    m.save(folder / "model.json")
    (folder / "artifact.json").write_text(json.dumps({"kind": kind, "key": key, "inputs": inputs, "created": created}))


@pytest.fixture
def run_dir(tmp_path):
    registry.register_benchmark("toyqa", AuditBench)
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({
        "benchmark": {"name": "toyqa", "options": {}}, "model": {"name": "scripted/unit", "max_tokens": 256},
        "judge_model": None, "command": "sourcebench run --benchmark toyqa"}))
    m0 = model([MAP, ALICE_CARD, BORN, RULE])
    ms = model([MAP, ALICE_CARD, BORN, RULE, EMPLOYER, RELATION], "MS")
    mt = model([MAP, ALICE_CARD, BORN, PORT, RULE, RELATION, STEPS], "MT")
    stale_mt = model([MAP], "MT")  # an older configuration's artifact, not the scored one
    _artifact(d, "sourcelearn_m0", "k0", m0, {"version": "1"})
    _artifact(d, "sourcelearn_ms", "k1", ms, {"version": "1"})
    _artifact(d, "method_sourcelearn-m0", "k2", m0, {"method": "sourcelearn-m0", "source": SOURCE.id})
    _artifact(d, "method_sourcelearn", "k3", mt, {"method": "sourcelearn", "source": SOURCE.id, "seed": 0})
    _artifact(d, "method_sourcelearn", "k9", stale_mt, {"method": "sourcelearn", "source": SOURCE.id, "seed": 0},
              created="2030-01-01")
    _artifact(d, "method_sourcelearn-wo-cross", "k4", mt, {"method": "sourcelearn-wo-cross", "seed": 0})
    (d / "artifacts" / "hybrid_index" / "k5").mkdir(parents=True)  # other artifacts are ignored
    rows = [_result("sourcelearn", "t1", True, artifact="k3"), _result("sourcelearn", "t2", False, artifact="k3"),
            _result("sourcelearn-m0", "t1", False, artifact="k2"), _result("sourcelearn-m0", "t2", False, artifact="k2")]
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    yield d
    registry._EXTRA[registry.BENCHMARK_GROUP].pop("toyqa", None)


def test_load_run_labels_stages_and_prefers_the_scored_artifact(run_dir):
    rm = A.load_run(run_dir)
    slots = {(m.stage, m.seed): m.path.parent.name for m in rm.models}
    assert slots == {("M0", None): "k2", ("MS", None): "k1", ("MT", 0): "k3", ("M_local", 0): "k4"}
    assert rm.test_ids(SOURCE.id) == {0: ["t1", "t2"]}
    assert rm.correct("sourcelearn", SOURCE.id, 0) == {"t1": True, "t2": False}
    rows = A.per_source_rows(rm, A.condition_share, ["M0", "MS", "MT"])
    assert [(r["source"], r["stage"]) for r in rows] == [(SOURCE.id, "M0"), (SOURCE.id, "MS"), (SOURCE.id, "MT")]


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sourcebench")
    audit_cli.add_parser(parser.add_subparsers(dest="cmd"))
    return parser.parse_args(argv)


def test_cli_all_writes_every_table_and_counts_usage(run_dir, capsys):
    scripted.set_script(COVER_SCRIPT)
    assert audit_cli.run(_cli(["audit", "all", str(run_dir), "--sample", "3"])) == 0
    out = run_dir / "audit"
    for name in audit_cli.ANALYSES:
        assert (out / f"{name}.json").exists() and (out / f"{name}.csv").exists(), name
    kinds = json.loads((out / "kinds.json").read_text())["rows"]
    assert {r["stage"] for r in kinds} == {"M0", "MS", "MT"}  # M_local only with --stages
    mt = next(r for r in kinds if r["stage"] == "MT")
    assert mt["n_units"] == 7 and mt["shares:procedures"] == pytest.approx(1 / 7)
    cov = {r["stage"]: r for r in json.loads((out / "coverage.json").read_text())["rows"]}
    assert cov["M0"]["claim_share"] == pytest.approx(1 / 3) and cov["MT"]["claim_share"] == pytest.approx(2 / 3)
    ground = read_jsonl(out / "grounding_items.jsonl")
    assert len(ground) == 9 and {g["stage"] for g in ground} == {"M0", "MS", "MT"}  # 3 sampled per stage
    pres = json.loads((out / "preservation.json").read_text())["rows"]
    assert {r["stage"]: r["n"] for r in pres} == {"MS->MT": 1}  # MT dropped EMPLOYER; M0->MS dropped nothing
    usage = read_jsonl(run_dir / "usage.jsonl")
    live = {r["stage"] for r in usage if r["method"] == "audit" and r["status"] == "live"}
    assert live == {"audit_claims", "audit_coverage", "audit_grounding", "audit_preservation"}
    assert all(r["benchmark"] == "toyqa" and r["phase"] == "judge" for r in usage)
    printed = capsys.readouterr().out
    assert "Figure 4a" in printed and "Table 3" in printed and "Table 4" in printed
    # a re-run is served from the run's call cache
    n_calls = len(scripted.CALLS)
    assert audit_cli.run(_cli(["audit", "all", str(run_dir), "--sample", "3"])) == 0
    assert len(scripted.CALLS) == n_calls
    again = read_jsonl(run_dir / "usage.jsonl")[len(usage):]
    assert again and all(r["status"] == "cached" for r in again)


def test_cli_pure_analyses_need_no_model_or_data(run_dir):
    registry._EXTRA[registry.BENCHMARK_GROUP].pop("toyqa", None)  # the benchmark is not even loadable
    assert audit_cli.run(_cli(["audit", "conditions", str(run_dir), "--stages", "all"])) == 0
    rows = json.loads((run_dir / "audit" / "conditions.json").read_text())["rows"]
    assert [r["stage"] for r in rows] == ["M0", "MS", "MT", "M_local"]
    assert not scripted.CALLS


def test_cli_rejects_unknown_stage_and_empty_run(run_dir, tmp_path):
    from sourcebench.harness.errors import ConfigError, DataError

    with pytest.raises(ConfigError, match="unknown stage"):
        audit_cli.run(_cli(["audit", "kinds", str(run_dir), "--stages", "M9"]))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "run.json").write_text("{}")
    with pytest.raises(DataError, match="no SourceLearn source models"):
        audit_cli.run(_cli(["audit", "kinds", str(empty)]))


def test_coverage_table_pools_sources_and_skips_failed_diagnoses():
    def rec(src, stage, task, rep, correct=None, failed=False):
        return A.CoverageRecord(source=src, stage=stage, seed=0, task_id=task, claims=["a", "b"][:len(rep) or 2],
                                represented=rep, correct=correct, failed=failed)

    recs = [rec("s1", "M0", "t1", [True, False]), rec("s2", "M0", "t1", [False, False]),
            rec("s2", "M0", "t2", [], failed=True)]
    t = A.coverage_table(recs)
    assert t["s1|M0"]["claim_share"] == 0.5 and t["s2|M0"]["claim_share"] == 0.0 and t["s2|M0"]["failed"] == 1
    assert t["ALL|M0"]["n_tasks"] == 2 and t["ALL|M0"]["claim_share"] == 0.25 and t["ALL|M0"]["failed"] == 1
    assert A.coverage_accuracy(recs) == {}  # no verdicts to pair with


class _CountingJudge:
    """A judge whose provider counts its own tokens: two per character-quad of the budget's estimate
    (code under a small model's tokenizer), with a 1,000-token window."""

    class spec:  # stands in for a ModelSpec
        @staticmethod
        def effective_context_window() -> int:
            return 1000

    async def count_tokens(self, text: str) -> int:
        return len(text) // 2


def test_judge_context_is_cut_to_the_judges_own_tokens():
    units = [unit(f"Setting number {i} of the app config object is read at start-up time.", keys=("alice",))
             for i in range(60)]
    d = A.Dropped(unit("Alice's config is read once."), [])
    judge = _CountingJudge()

    def prompt(us):
        return A.preservation_messages(d, us)

    by_estimate, _ = A.select_units(units, d.unit.render(), 6000)
    assert len(by_estimate) == 60  # chars / 4 says everything fits ...
    assert run(judge.count_tokens(A._prompt_text(prompt(by_estimate)))) > 1000  # ... the judge's window disagrees
    kept, cut = run(A.fit_units(judge, units, d.unit.render(), 6000, prompt, A.JUDGE_REPLY_TOKENS))
    assert cut and 0 < len(kept) < 60
    used = run(judge.count_tokens(A._prompt_text(prompt(kept))))
    assert used <= 1000 - A.JUDGE_REPLY_TOKENS - A.JUDGE_TEMPLATE_TOKENS
    assert kept == [u for u in units if u in kept]  # the source model's order is kept
    # a judge that cannot count (API models) keeps the chars / 4 selection
    judge.count_tokens = lambda text: asyncio.sleep(0, result=None)  # type: ignore[method-assign]
    assert run(A.fit_units(judge, units, d.unit.render(), 6000, prompt, A.JUDGE_REPLY_TOKENS)) == (units, False)
