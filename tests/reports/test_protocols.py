"""The evaluation protocols (key-overlap, break-even, prequential, harmful entries) as report options.

Pure parts are checked on hand-built inputs with hand-computed numbers; the model-calling protocols
run on a real run folder made by the Runner over a toy benchmark with the scripted model, with toy
methods whose behaviour makes the expected verdicts exact: one note that makes every answer wrong
(harmful), one note never shown (not evaluated), and learners that can only answer a topic after
having learned from a task about it (prequential: answered before learned from).
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from sourcebench.adapters.phantomwiki.benchmark import gold_path
from sourcebench.harness.cli import main
from sourcebench.harness.data import Split, Task
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.method import Context
from sourcebench.harness.planner import Plan
from sourcebench.harness.protocols.entries import Entry, entry_access
from sourcebench.harness.providers import scripted
from sourcebench.harness.registry import register_benchmark
from sourcebench.harness.runner import RunConfig, Runner
from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.protocols import breakeven, default_protocols, keyoverlap, parse_protocols
from sourcebench.reports.protocols import compute as compute_protocol
from sourcebench.reports.protocols.harmful import (
    HarmfulSettings,
    judge_entry,
    min_detectable_tasks,
    sample_entries,
)
from sourcebench.reports.protocols.prequential import (
    PrequentialSettings,
    block_bounds,
    cumulative,
    stream_order,
)
from sourcebench.reports.protocols.render import break_even_tables, sparkline
from sourcebench.reports.rundata import load_run
from tests.protocol_toys import (
    GUIDANCE,
    SOURCE,
    TEST,
    NoKeys,
    ToyBoxes,
    ToyIncremental,
    ToyLearner,
    ToyNotes,
    _live,
    make_toy_run,
    reply,
    toys_registered,
)


@pytest.fixture(scope="module", autouse=True)
def _toys():
    with toys_registered():
        yield


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory, _toys) -> Path:
    return make_toy_run(tmp_path_factory.mktemp("toyrun"))


# ------------------------------------------------------------------------------------------ PhantomWiki keys


def test_gold_path_walks_the_prolog_chain_from_start_to_end():
    people = {"Ann Lee", "Bo Kim", "Cy Ray", "Di Fox"}
    named = {"prolog": {"query": ['friend(Y_4, Y_2)', 'mother("Ann Lee", Y_4)'], "answer": "Y_2"},
             "solution_traces": json.dumps([{"Y_4": "Bo Kim", "Y_2": "Cy Ray"}, {"Y_4": "Bo Kim", "Y_2": "Di Fox"}])}
    assert gold_path(named, people) == [["Ann Lee"], ["Bo Kim"], ["Cy Ray", "Di Fox"]]
    # attribute start ("the person whose job is pilot") and an attribute answer (a date, not a person)
    attr = {"prolog": {"query": ['dob(Y_3, Y_2)', 'son(Y_5, Y_3)', 'job(Y_5, "pilot")'], "answer": "Y_2"},
            "solution_traces": [{"Y_5": "Di Fox", "Y_3": "Bo Kim", "Y_2": "0901-01-18"}]}
    assert gold_path(attr, people) == [["Di Fox"], ["Bo Kim"]]
    count = {"prolog": {"query": ['aggregate_all(count, distinct(sibling(Y_3, Y_1)), Count_1)',
                                  'friend("Cy Ray", Y_3)'], "answer": "Count_1"},
             "solution_traces": '[{"Y_3": "Ann Lee", "Count_1": 2}]'}
    assert gold_path(count, people) == [["Cy Ray"], ["Ann Lee"]]
    assert gold_path({"prolog": None, "solution_traces": "not json"}, people) == []


def test_phantomwiki_tasks_carry_their_gold_path(shared_data):
    from sourcebench.adapters.phantomwiki.benchmark import PhantomWiki

    b = PhantomWiki(data_dir=shared_data)
    tasks = b.load_tasks(b.source_ids()[0])
    assert all(isinstance(t.metadata["gold_path"], list) for t in tasks)
    one = next(t for t in tasks if t.question == "Who is the daughter-in-law of Lannie Smock?")
    assert one.metadata["gold_path"] == [["Lannie Smock"], ["Dominique Smock"]]
    assert one.metadata["gold_path"][-1] == one.reference  # the path ends on the answer


# ------------------------------------------------------------------------------------------ key-overlap


def test_key_groups_by_the_named_keys():
    groups = keyoverlap.split_groups(ToyBoxes(), GUIDANCE, TEST)
    assert groups == {"q02": "all", "q03": "some", "q04": "none", "q05": "all", "q06": "some", "q07": "all"}
    assert keyoverlap.group_of([], {"A"}) == keyoverlap.NO_KEYS
    unknown = Task(id="u", source_id="s", question="?", metadata={"gold_path": [["A"]]})
    assert keyoverlap.task_keys(ToyBoxes(), unknown) is None  # no named keys: unknown, whatever its gold path


def test_phantomwiki_keys_are_what_the_question_names():
    from sourcebench.adapters.phantomwiki.benchmark import named_keys

    people = {"Ann Lee", "Bo Kim", "Cy Ray", "Ann Leeds"}
    assert named_keys("Who is the daughter-in-law of Ann Lee?", people) == ["person: Ann Lee",
                                                                          "relation: daughter-in-law"]
    assert named_keys("What is the date of birth of the friend of the person whose hobby is shogi?", people) == [
        "hobby = shogi", "attribute: date of birth", "relation: friend"]
    assert named_keys("How many sons-in-law does the mother of Ann Leeds have?", people) == [
        "person: Ann Leeds", "relation: son-in-law", "relation: mother"]  # Ann Leeds, not Ann Lee
    assert named_keys("Who is the person whose occupation is theatre manager?", people) == [
        "occupation = theatre manager"]
    assert named_keys("How many male first cousins once removed does Cy Ray have?", people) == [
        "person: Cy Ray", "relation: male first cousin once removed"]


def test_key_groups_never_come_from_the_answer():
    """The guidance task names Bo Kim; the test task's answer (and the end of its gold path) is Bo Kim, but its
    question names Ann Lee and 'mother': no key covered. The old gold-path keys put it in 'one'."""
    from sourcebench.adapters.phantomwiki.benchmark import PhantomWiki, gold_path

    people = {"Ann Lee", "Bo Kim"}

    class Wiki(PhantomWiki):
        def _people(self, source_id):
            return people

    q = {"prolog": {"query": ['mother("Ann Lee", Y_2)'], "answer": "Y_2"}, "solution_traces": [{"Y_2": "Bo Kim"}]}
    test = Task(id="t", source_id="w", question="Who is the mother of Ann Lee?", reference=["Bo Kim"],
                metadata={"gold_path": gold_path(q, people)})
    guide = Task(id="g", source_id="w", question="Who is the friend of Bo Kim?", reference=["Ann Lee"],
                 metadata={"gold_path": [["Bo Kim"], ["Ann Lee"]]})
    assert test.metadata["gold_path"][-1] == ["Bo Kim"]
    assert keyoverlap.split_groups(Wiki(), [guide], [test]) == {"t": "none"}
    also = Task(id="u", source_id="w", question="Who is the mother of Bo Kim?", reference=["Ann Lee"])
    assert keyoverlap.split_groups(Wiki(), [guide], [also]) == {"u": "some"}  # Bo Kim named: covered


def test_phantomwiki_named_keys_on_the_shipped_universe(shared_data):
    """On the shipped 500 questions every question names exactly one anchor (a person or an attribute
    value) and never its answer set; nearly every test task lands in one group, which the report says."""
    from sourcebench.adapters.phantomwiki.benchmark import PhantomWiki

    b = PhantomWiki(data_dir=shared_data)
    sid = b.source_ids()[0]
    tasks = b.load_tasks(sid)
    for t in tasks:
        keys = b.task_keys(t)
        assert sum(1 for k in keys if k.startswith("person: ") or " = " in k) == 1
        assert not any(k == f"person: {a}" for a in t.reference for k in keys if a not in t.question)
    split = b.make_splits(b.load_source(sid), tasks, [0])[0]
    by = {t.id: t for t in tasks}
    groups = keyoverlap.split_groups(b, [by[i] for i in split.guidance_ids], [by[i] for i in split.test_ids])
    sizes = {g: list(groups.values()).count(g) for g in set(groups.values())}
    assert sum(sizes.values()) == 350 and sizes.get("all", 0) > 0.9 * 350
    assert "Too small for the key-coverage gradient" in keyoverlap.gradient_note(sizes)
    assert keyoverlap.gradient_note({"all": 40, "some": 30, "none": 10}) == ""


def test_key_overlap_cells_below_the_minimum_are_not_compared():
    rows = [{"source": "s", "seed": 0, "task_id": f"t{i}", "score": 0.0} for i in range(6)]
    base = {("s", 0, f"t{i}"): {"source": "s", "seed": 0, "task_id": f"t{i}", "score": 1.0} for i in range(6)}
    cell = keyoverlap._cell(rows, base)
    assert not cell["too_small"] and cell["delta_pp"] == pytest.approx(-100.0)
    assert cell["p_value"] == pytest.approx(2 / 64) and cell["n_pairs"] == 6
    # 0 of 6: the Wilson interval [0, 39.0], never the zero-width [0, 0]
    assert cell["ci_lo"] == 0.0 and cell["ci_hi"] == pytest.approx(0.390, abs=1e-3)
    small = keyoverlap._cell(rows[: keyoverlap.MIN_GROUP_TASKS - 1], base)
    assert small["too_small"] and not {"delta_pp", "p_value", "ci_lo"} & set(small)


def test_key_overlap_on_a_run(toy_run):
    res = keyoverlap.compute(load_run(toy_run), baseline="hybrid_rag")
    b = res["benchmarks"][0]
    assert b["status"] == "ok" and b["tasks_by_group"] == {"all": 3, "some": 2, "none": 1}
    assert "Too small for the key-coverage gradient" in b["note"]  # 3 / 2 / 1 tasks: no group reaches 5
    notes = next(m for m in b["methods"] if m["method"] == "toy_notes")
    # the bad note is shown to every task: every answer is wrong, Hybrid RAG's are right
    assert {g: (c["n"], c["accuracy"]) for g, c in notes["groups"].items()} == \
        {"all": (3, 0.0), "some": (2, 0.0), "none": (1, 0.0)}
    assert all(c["too_small"] and "delta_pp" not in c for c in notes["groups"].values())
    base = next(m for m in b["methods"] if m["method"] == "hybrid_rag")
    assert base["groups"]["all"]["accuracy"] == 1.0 and "delta_pp" not in base["groups"]["all"]


def test_key_overlap_without_keys_is_unavailable(tmp_path):
    run = tmp_path / "run"
    (run / "splits" / "toynokeys" / "boxes").mkdir(parents=True)
    split = NoKeys().make_splits(SOURCE, GUIDANCE + TEST, [0])[0]
    (run / "splits" / "toynokeys" / "boxes" / "seed0.json").write_text(split.model_dump_json())
    (run / "run.json").write_text(json.dumps({"benchmark": {"name": "toynokeys"}, "methods": [], "seeds": [0]}))
    (run / "results.jsonl").write_text(json.dumps({"benchmark": "toynokeys", "source": "boxes", "method": "m",
                                                   "seed": 0, "task_id": "q02", "score": 1.0}) + "\n")
    res = keyoverlap.compute(load_run(run))
    assert res["benchmarks"][0]["status"] == "unavailable"
    assert "name no keys" in res["benchmarks"][0]["reason"]


# ------------------------------------------------------------------------------------------ break-even


def _usage(method, phase, calls, inp, out, source="s", seed=0, status="live"):
    return {"benchmark": "b", "source": source, "seed": seed, "method": method, "phase": phase, "stage": "x",
            "status": status, "calls": calls, "input_tokens": inp, "output_tokens": out, "seconds": 0.0}


def test_break_even_in_calls_and_tokens(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"benchmark": "b", "methods": [{"name": n} for n in
                                                                            ("hybrid_rag", "fast", "slow")]}))
    rows = [{"benchmark": "b", "source": "s", "method": m, "seed": sd, "task_id": f"t{i}", "score": 1.0}
            for m in ("hybrid_rag", "fast", "slow") for sd in (0, 1) for i in range(5)]  # 10 rows each
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    usage = [
        _usage("hybrid_rag", "answer", 20, 18000, 2000),              # 2 calls, 2,000 tokens a task
        # fast: two artifacts (seeds 0, 1) of 60 live + 40 cached calls each, 1 call / 1,000 tokens a task
        _usage("fast", "learn", 60, 50000, 10000, seed=0), _usage("fast", "learn", 40, 30000, 10000, seed=0,
                                                                   status="cached"),
        _usage("fast", "learn", 100, 80000, 20000, seed=1), _usage("fast", "learn", 5, 0, 0, seed=1, status="failed"),
        _usage("fast", "answer", 10, 9000, 1000), _usage("fast", "protocol", 999, 1, 1),
        _usage("slow", "learn", 10, 1000, 0, seed=None), _usage("slow", "answer", 30, 30000, 0),  # no saving
    ]
    (run / "usage.jsonl").write_text("".join(json.dumps(u) + "\n" for u in usage))
    res = breakeven.compute(load_run(run))
    by = {m["method"]: m for m in res["benchmarks"][0]["methods"]}
    fast = by["fast"]
    assert fast["n_artifacts"] == 2 and fast["build_calls"] == 100 and fast["build_tokens"] == 100000
    assert fast["saving_calls_per_task"] == 1.0 and fast["saving_tokens_per_task"] == 1000.0
    assert fast["break_even_calls"] == 100.0 and fast["break_even_tokens"] == 100.0
    assert by["slow"]["break_even_calls"] == breakeven.NEVER and by["slow"]["n_artifacts"] == 1
    # no build: free from the first task if a task costs no more, never if it costs more (an agent)
    assert breakeven.break_even(0.0, 0.0) == 0.0 and breakeven.break_even(0.0, -1.0) == breakeven.NEVER
    assert breakeven.break_even(5.0, 0.0) == breakeven.NEVER and breakeven.fmt_tasks(99.2) == "100"


def test_break_even_against_the_zero_learning_variant(tmp_path):
    """toy_trained's untrained artifact is toy_untrained (same reader): its learning costs 40 own calls + 10
    judge calls per artifact (the shared base_ stages, charged to toy_untrained, cancel out) and saves 1 call a
    task (3 -> 2): 50 tasks. Against Hybrid RAG (1 call a task) it would never pay off. Cell (s, 1) has a failed
    toy_trained row, so it is left out of both sides (there toy_trained spent 10 calls a task)."""
    run = tmp_path / "run"
    run.mkdir()
    names = ("hybrid_rag", "toy_untrained", "toy_trained")
    (run / "run.json").write_text(json.dumps({"benchmark": "b", "methods": [{"name": n} for n in names]}))
    rows = [{"benchmark": "b", "source": "s", "method": m, "seed": sd, "task_id": f"t{i}", "score": 1.0,
             "failed": m == "toy_trained" and sd == 1 and i == 0} for m in names for sd in (0, 1) for i in range(5)]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stage = lambda u, st: {**u, "stage": st}
    usage = [
        _usage("hybrid_rag", "answer", 5, 5000, 500), _usage("hybrid_rag", "answer", 5, 5000, 500, seed=1),
        stage(_usage("toy_untrained", "learn", 300, 90000, 10000, seed=None), "base_build"),
        _usage("toy_untrained", "answer", 15, 13500, 1500), _usage("toy_untrained", "answer", 15, 13500, 1500, seed=1),
        stage(_usage("toy_trained", "learn", 40, 4000, 1000, seed=0), "train"),
        stage(_usage("toy_trained", "learn", 40, 4000, 1000, seed=1), "train"),
        stage(_usage("toy_trained", "learn_judge", 10, 1000, 0, seed=0), "judge"),
        stage(_usage("toy_trained", "learn_judge", 10, 1000, 0, seed=1), "judge"),
        stage(_usage("toy_trained", "learn", 999, 1, 1, seed=0), "base_build"),  # a rebuilt shared stage
        _usage("toy_trained", "answer", 10, 9000, 1000), _usage("toy_trained", "answer", 50, 45000, 5000, seed=1),
    ]
    (run / "usage.jsonl").write_text("".join(json.dumps(u) + "\n" for u in usage))
    res = breakeven.compute(load_run(run))
    by = {m["method"]: m for m in res["benchmarks"][0]["methods"]}
    t = by["toy_trained"]
    assert (t["reference"], t["reference_kind"], t["status"]) == ("toy_untrained", "zero-learning variant", "ok")
    assert t["shared_stages_left_out"] == ["base_"] and t["n_artifacts"] == 2
    assert t["build_calls"] == 50.0 and t["build_judge_calls"] == 10.0 and t["build_tokens"] == 6000.0
    assert (t["cells"], t["cells_compared"], t["failed_rows"], t["reference_failed_rows"]) == (2, 1, 1, 0)
    assert t["answer_calls_per_task"] == 2.0 and t["reference_costs"]["answer_calls_per_task"] == 3.0
    assert t["reference_costs"]["build_calls"] == 0.0  # its base_ stages are shared: left out of both sides
    assert t["break_even_calls"] == 50.0 and t["saving_tokens_per_task"] == 1000.0 and t["break_even_tokens"] == 6.0
    # the variant itself declares none: it is compared with the baseline, and says so
    u = by["toy_untrained"]
    assert u["reference_kind"] == "baseline" and u["break_even_calls"] == breakeven.NEVER
    assert u["build_calls"] == 300.0  # nothing shared with Hybrid RAG: its whole learning counts
    against_rag = breakeven.compare(load_run(run), "b", "toy_trained", "hybrid_rag", "baseline")
    assert against_rag["break_even_calls"] == breakeven.NEVER
    # a declared variant the run did not run: the baseline, labelled with the variant it lacks and the fix
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["method"] != "toy_untrained"))
    t = {m["method"]: m for m in breakeven.compute(load_run(run))["benchmarks"][0]["methods"]}["toy_trained"]
    assert (t["reference"], t["reference_kind"], t["break_even_calls"]) == ("hybrid_rag", "baseline", breakeven.NEVER)
    assert "toy_untrained was not run (add it to --methods)" in t["missing_variant"]
    table = break_even_tables(breakeven.compute(load_run(run)))[0]
    row = next(r for r in table.rows if r[0] == "toy_trained")
    assert "hybrid_rag (baseline; its zero-learning variant toy_untrained was not run" in row[1]
    assert "zero-learning variant" in table.note and "failed row" in table.note


# ------------------------------------------------------------------------------------------ harmful


def test_entry_matching_and_verdicts():
    assert Entry("a", "Workflow  one:\nstep").shown_in("Notes: workflow one? no. Workflow one: step 2")
    assert not Entry("a", "absent").shown_in("something else")
    assert Entry("a", "").shown_in("anything")
    # removal fixes 6 of 6 binary pairs: exact McNemar p = 2 / 64 < 0.05
    v = judge_entry([0.0] * 6, [1.0] * 6, 0.05)
    assert v["harmful"] and v["mean_diff"] == 1.0 and v["p_value"] == pytest.approx(2 / 64)
    assert v["verdict"] == "harmful" and v["n_tasks"] == 6
    assert not judge_entry([0.0] * 4, [1.0] * 4, 0.05)["harmful"]  # p = 1/8: within noise
    assert not judge_entry([1.0] * 6, [0.0] * 6, 0.05)["harmful"]  # removal hurts: a helpful entry
    graded = judge_entry([0.2, 0.4, 0.1, 0.3, 0.2, 0.5, 0.1], [0.9, 0.8, 0.7, 0.9, 0.6, 0.9, 0.8], 0.05)
    assert graded["test"] == "paired_permutation" and graded["harmful"]


def test_repeats_do_not_shrink_p():
    """Two tasks, five repeats each, removal fixes all ten pairs: still two tasks, p = 2/4 (pairs counted as
    independent gave 2/1024); six tasks with three repeats give the six-task p, whatever the repeats."""
    pairs = [(f"t{t}", r) for t in range(2) for r in range(5)]
    v = judge_entry([0.0] * 10, [1.0] * 10, 0.05, pairs=pairs)
    assert (v["n_pairs"], v["n_tasks"], v["p_value"], v["harmful"]) == (10, 2, pytest.approx(0.5), False)
    pairs = [(f"t{t}", r) for t in range(6) for r in range(3)]
    with_ = [0.0 if r < 2 else 1.0 for t in range(6) for r in range(3)]  # removal fixes 2 of 3 repeats
    v = judge_entry(with_, [1.0] * 18, 0.05, pairs=pairs)
    assert v["p_value"] == pytest.approx(2 / 64) and v["mean_diff"] == pytest.approx(2 / 3) and v["harmful"]


def test_fewest_tasks_that_can_be_flagged():
    # the exact sign-flip test on n tasks never goes below 2 / 2**n: 2/32 = 0.0625, 2/64 = 0.031
    assert min_detectable_tasks(0.05) == 6 and min_detectable_tasks(0.01) == 8 and min_detectable_tasks(0.1) == 5
    assert not judge_entry([0.0] * 5, [1.0] * 5, 0.05)["harmful"]  # 5 tasks: p = 0.0625 at best
    with pytest.raises(ValueError):
        min_detectable_tasks(0.0)


def test_entry_sample_is_seeded():
    plan = Plan(SOURCE, Split(benchmark="b", source_id="boxes", seed=0, guidance_ids=[], test_ids=[]), [], [])
    es = [Entry(f"e{i}", f"text {i}") for i in range(50)]
    a = sample_entries(es, HarmfulSettings(max_entries=10), plan)
    assert len(a) == 10 and a == sample_entries(es, HarmfulSettings(max_entries=10), plan)
    assert a != sample_entries(es, HarmfulSettings(max_entries=10, seed=1), plan)
    assert sample_entries(es, HarmfulSettings(max_entries=0), plan) == es


def test_awm_and_sourcelearn_entry_adapters():
    from sourcebench.methods.awm import AWM, AWMState, Workflow, render_workflows
    from sourcebench.methods.sourcelearn.method import SourceLearn
    from sourcebench.methods.sourcelearn.model import Scope, SourceModel, Unit

    wfs = [Workflow(name="find_parent", description="Finds a parent.", steps=["Read {person}.", "Answer."]),
           Workflow(name="count_kids", description="Counts children.", steps=["List {person}'s kids.", "Count."])]
    acc = entry_access(AWM())
    state = AWMState(workflows=wfs, notes=render_workflows(wfs))
    es = acc.entries(state)
    assert [e.id for e in es] == ["workflow-0:find_parent", "workflow-1:count_kids"]
    assert all(e.shown_in(state.notes) for e in es)
    reduced = acc.without(state, es[0].id)
    assert not es[0].shown_in(reduced.notes) and es[1].shown_in(reduced.notes)

    units = [Unit(id=f"u{i}", statement=f"Fact {i}.", role="detail", scope=Scope(kind="source")) for i in range(3)]
    sm = SourceModel(source_id="s", source_fingerprint="f", units=units)
    acc = entry_access(SourceLearn())
    assert [e.id for e in acc.entries(sm)] == ["u0", "u1", "u2"]
    smaller = acc.without(sm, "u1")
    assert [u.id for u in smaller.units] == ["u0", "u2"] and len(sm.units) == 3  # the loaded state is untouched
    assert entry_access(ToyNotes()).kind == "entry" and entry_access(ToyLearner()) is None


def test_harmful_entries_on_a_run(toy_run):
    scripted.set_script(reply)
    assert HarmfulSettings().repeats == 3  # the default: one repeat cannot tell an entry from noise
    # one repeat here, so the live-call count below is the reduced states' alone
    live_before = _live(toy_run)
    res = compute_protocol("harmful", toy_run, methods=["toy_notes", "hybrid_rag"], settings={"max_entries": 0, "repeats": 1})
    notes = next(m for m in res["methods"] if m["method"] == "toy_notes")
    art = notes["artifacts"][0]
    # n-green is never shown (no green test task): left out; n-red is shown to the 3 red tasks only, too few
    # for p < 0.05 (2 / 2^3 = 0.25): undetectable, not evaluated, not in the rate; n-bad (6 tasks) is harmful
    assert (art["n_entries"], art["n_exposed"], art["n_undetectable"], art["n_detectable"], art["n_evaluated"],
            art["n_harmful"]) == (3, 2, 1, 1, 1, 1)
    verdicts = {e["id"]: e for e in art["entries"]}
    assert verdicts["n-bad"]["harmful"] and verdicts["n-bad"]["n_tasks"] == 6
    assert verdicts["n-bad"]["with_mean"] == 0.0 and verdicts["n-bad"]["without_mean"] == 1.0
    assert verdicts["n-red"]["verdict"] == "undetectable" and verdicts["n-red"]["n_tasks"] == 3
    assert not verdicts["n-red"]["harmful"] and "p_value" not in verdicts["n-red"]
    assert notes["rate"] == 1.0 and res["min_detectable_tasks"] == 6
    assert next(m for m in res["methods"] if m["method"] == "hybrid_rag")["status"] == "no entries"
    # full-artifact answers were cached by the test phase; only n-bad's reduced state costs live calls (6)
    assert _live(toy_run) - live_before == 6
    assert json.loads((toy_run / "protocols" / "harmful.json").read_text())["methods"][0]["rate"] == 1.0
    # exposure reported by the answers themselves gives the same verdicts (their texts are never in a prompt)
    res = compute_protocol("harmful", toy_run, methods=["toy_reported"], settings={"max_entries": 0, "repeats": 1})
    rep = next(m for m in res["methods"] if m["method"] == "toy_reported")
    assert (rep["n_exposed"], rep["n_undetectable"], rep["n_evaluated"], rep["n_harmful"], rep["rate"]) == \
        (2, 1, 1, 1, 1.0)
    # the file keeps the methods of the earlier invocation with the same settings
    assert {m["method"] for m in res["methods"]} == {"toy_notes", "hybrid_rag", "toy_reported"}
    # re-running is free: every call is in the run's cache
    before = _live(toy_run)
    compute_protocol("harmful", toy_run, methods=["toy_notes"], settings={"max_entries": 0, "repeats": 1})
    assert _live(toy_run) == before


def test_harmful_repeats_on_a_run_leave_p_unchanged(toy_run):
    """Three repeats of every (task, entry) pair: n-bad has 18 pairs but still 6 tasks, and the same p."""
    scripted.set_script(reply)
    res = compute_protocol("harmful", toy_run, methods=["toy_notes"], settings={"max_entries": 0, "repeats": 3})
    art = next(m for m in res["methods"] if m["method"] == "toy_notes")["artifacts"][0]
    bad = next(e for e in art["entries"] if e["id"] == "n-bad")
    assert (bad["n_pairs"], bad["n_tasks"], bad["p_value"]) == (18, 6, pytest.approx(2 / 64)) and bad["harmful"]
    assert next(e for e in art["entries"] if e["id"] == "n-red")["verdict"] == "undetectable"  # 3 tasks, 9 pairs


# ------------------------------------------------------------------------------------------ prequential


def test_stream_and_blocks():
    assert block_bounds(6, PrequentialSettings(blocks=4)) == [(0, 2), (2, 4), (4, 6)]
    assert block_bounds(5, PrequentialSettings(block_size=5)) == [(0, 5)]
    assert block_bounds(0, PrequentialSettings()) == []
    order = stream_order(TEST, 0, 0)
    assert sorted(t.id for t in order) == sorted(t.id for t in TEST) and order == stream_order(TEST, 0, 0)
    assert [t.id for t in order] != [t.id for t in stream_order(TEST, 1, 0)]
    assert cumulative([1.0, 0.0, 1.0, 1.0]) == [1.0, 0.5, pytest.approx(2 / 3), 0.75]
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"


def _expected_online(block: int) -> list[float]:
    """A task is right only if a task of its topic came before its block (it was answered before learned)."""
    stream = stream_order(TEST, 0, 0)
    out = []
    for i, t in enumerate(stream):
        start = (i // block) * block
        out.append(float(t.metadata["topic"] in {s.metadata["topic"] for s in stream[:start]}))
    return out


def test_prequential_on_a_run(toy_run):
    scripted.set_script(reply)
    ToyLearner.learn_calls.clear()
    ToyIncremental.more_calls.clear()
    res = compute_protocol("prequential", toy_run, methods=["toy_learner", "toy_incremental", "hybrid_rag"],
                           settings={"block_size": 2})
    by = {m["method"]: m for m in res["methods"]}
    stream = [t.id for t in stream_order(TEST, 0, 0)]
    expected = _expected_online(2)
    for name in ("toy_learner", "toy_incremental"):
        cell = by[name]["cells"][0]
        assert [t["task_id"] for t in cell["tasks"]] == stream
        assert [t["online"] for t in cell["tasks"]] == expected
        assert all(t["stateless"] == 0.0 for t in cell["tasks"])
        assert by[name]["gain_pp"] == pytest.approx(100.0 * sum(expected) / len(expected))
        assert by[name]["curve"][-1]["online"] == pytest.approx(sum(expected) / len(expected))
    assert by["toy_learner"]["mode"] == "re-learn on prefix" and by["toy_incremental"]["mode"] == "incremental"
    # re-learned on the empty prefix and on each growing prefix, never on a task not yet answered; the
    # incremental learner (a subclass) learns once, from nothing, and then only through learn_more
    assert ToyLearner.learn_calls == [[], stream[:2], stream[:4], []]
    assert ToyIncremental.more_calls == [stream[0:2], stream[2:4]]
    assert by["hybrid_rag"]["mode"] == "stateless" and by["hybrid_rag"]["gain_pp"] == 0.0
    assert by["hybrid_rag"]["online"] == 1.0
    protocol_rows = [json.loads(x) for x in (toy_run / "usage.jsonl").read_text().splitlines()
                     if json.loads(x)["phase"] == "protocol"]
    assert {r["stage"] for r in protocol_rows} >= {"prequential.answer"}
    # the stateless reference is stated per method; toy learning makes no model calls
    assert by["toy_learner"]["reference"] == "toy_learner learned from no task (no zero-learning variant registered)"
    assert by["hybrid_rag"]["reference"].startswith("hybrid_rag's run artifact")
    assert by["toy_learner"]["reference_cost"] == {"calls": 0.0, "tokens": 0.0}


def test_prequential_counts_the_learning_the_reference_contains(toy_run, tmp_path):
    """toy_costly learned from no task still holds the shared base summary the run built (1 call): the
    reference is not free. Online learning on the prefixes of 2 and 4 tasks makes 2 + 4 study calls."""
    scripted.set_script(reply)
    res = compute_protocol("prequential", toy_run, methods=["toy_costly"], settings={"block_size": 2})
    m = next(x for x in res["methods"] if x["method"] == "toy_costly")
    assert m["reference_cost"]["calls"] == 1.0 and m["reference_cost"]["tokens"] > 0
    assert m["online_learning_cost"]["calls"] == 6.0
    md = write_report(toy_run, out_dir=tmp_path / "rep", protocols=["prequential"])["md"].read_text()
    section = md.split("**Prequential (online) evaluation**", 1)[1]
    row = next(ln for ln in section.splitlines() if ln.startswith("| toy_costly |"))
    assert "toy_costly learned from no task" in row and "| 1.0 / " in row and "| 6.0 / " in row
    assert "stateless reference" in md


def test_learn_time_judge_calls_are_their_own_phase(tmp_path, _toys):
    """The judge a method calls while learning is billed under learn_judge (break-even counts it as learning);
    scoring test answers stays under judge."""

    class Judged(ToyBoxes):
        name = "toyjudged"
        needs_judge_model = True

        async def score(self, task, answer, judge=None):
            await judge.generate(f"JUDGE {answer.text}", stage="verdict")
            return await super().score(task, answer)

    register_benchmark("toyjudged", Judged)
    try:
        scripted.set_script(reply)
        out = tmp_path / "run"
        Runner(RunConfig(benchmark="toyjudged", methods=["toy_costly"], model="scripted/unit", out=out, seeds=[0],
                         embedder="hash")).run()
    finally:
        scripted.set_script(None)
        from sourcebench.harness import registry

        registry._EXTRA[registry.BENCHMARK_GROUP].pop("toyjudged", None)
    usage = [json.loads(x) for x in (out / "usage.jsonl").read_text().splitlines() if x.strip()]
    calls = {ph: sum(u["calls"] for u in usage if u["phase"] == ph and u["method"] == "toy_costly")
             for ph in ("learn_judge", "judge")}
    assert calls == {"learn_judge": len(GUIDANCE), "judge": len(TEST)}
    assert breakeven.method_costs(load_run(out), "toyjudged", "toy_costly")["build_judge_calls"] == len(GUIDANCE)


# ------------------------------------------------------------------------------------------ report and CLI


def test_parse_protocols():
    assert parse_protocols("break_even,key-overlap,break-even") == ["break-even", "key-overlap"]
    assert parse_protocols("all") == ["key-overlap", "break-even", "prequential", "harmful"]
    assert parse_protocols("none") == []
    with pytest.raises(ConfigError, match="unknown protocol"):
        parse_protocols("key-overlap,nope")


def test_report_sections(toy_run, tmp_path):
    scripted.set_script(reply)
    compute_protocol("prequential", toy_run, methods=["toy_learner", "hybrid_rag"], settings={"block_size": 2})
    compute_protocol("harmful", toy_run, methods=["toy_notes"], settings={"max_entries": 0})  # not another test's
    paths = write_report(toy_run, out_dir=tmp_path / "rep", protocols=["key-overlap", "break-even", "prequential",
                                                                        "harmful"])
    md = paths["md"].read_text()
    for title in ("Protocol: key-overlap groups", "Protocol: break-even", "Prequential curve", "Harmful entries"):
        assert title in md
    assert "| toy_notes | none | 1 (1) | 0.0 (too small) | — | too small | — | too small |" in md
    assert "after n tasks" in md and "toy_learner online / stateless %" in md
    html = paths["html"].read_text()
    assert "Protocol: prequential evaluation" in html and "Prequential curve" in html
    png = paths["prequential_curve.png"].read_bytes()  # the curve as a figure: a PNG next to the report ...
    assert png.startswith(b"\x89PNG") and "![Prequential curve](prequential_curve.png)" in md
    assert base64.b64encode(png).decode() in html  # ... embedded in the self-contained HTML
    # a protocol that needs model calls and was never run says so instead of showing nothing
    (toy_run / "protocols" / "harmful.json").rename(tmp_path / "h.json")
    try:
        md = write_report(toy_run, out_dir=tmp_path / "rep2", protocols=["harmful"])["md"].read_text()
        assert "not computed" in md and "sourcebench protocol harmful" in md
    finally:
        (tmp_path / "h.json").rename(toy_run / "protocols" / "harmful.json")


def test_report_protocol_defaults(toy_run, tmp_path):
    """Without --protocols: the model-free protocols for a run whose methods learn from guidance,
    plus what `sourcebench protocol` already computed; `none` shows no protocol section."""
    scripted.set_script(reply)
    compute_protocol("prequential", toy_run, methods=["toy_learner", "hybrid_rag"], settings={"block_size": 2})
    data = load_run(toy_run)
    assert default_protocols(data) == ["key-overlap", "break-even", "prequential"] + (
        ["harmful"] if (toy_run / "protocols" / "harmful.json").exists() else [])
    md = write_report(toy_run, out_dir=tmp_path / "default")["md"].read_text()
    assert "Protocol: key-overlap groups" in md and "Protocol: break-even" in md and "Prequential curve" in md
    md = write_report(toy_run, out_dir=tmp_path / "none", protocols=parse_protocols("none"))["md"].read_text()
    assert "Protocol:" not in md
    data.run["methods"] = [{**m, "uses_guidance": False} for m in data.run["methods"]]
    (toy_run / "protocols" / "prequential.json").rename(tmp_path / "p.json")
    try:
        stored = ["harmful"] if (toy_run / "protocols" / "harmful.json").exists() else []
        assert default_protocols(data) == stored  # stateless methods only: nothing to say by default
    finally:
        (tmp_path / "p.json").rename(toy_run / "protocols" / "prequential.json")


def test_protocol_and_report_commands(toy_run, tmp_path, capsys):
    scripted.set_script(reply)
    assert main(["protocol", "break-even", str(toy_run)]) == 0
    out = capsys.readouterr().out
    assert "break-even vs each method's zero-learning variant" in out
    assert (toy_run / "protocols" / "break-even.json").exists()
    assert main(["report", str(toy_run), "--out", str(tmp_path / "r"), "--protocols", "key-overlap"]) == 0
    assert "key-overlap groups" in (tmp_path / "r" / "leaderboard.md").read_text()
    assert main(["protocol", "harmful", str(toy_run), "--methods", "no_such_method"]) == 2


def test_answers_are_scored_failures_when_a_method_breaks(toy_run):
    from sourcebench.harness.protocols.session import RunSession, answer_and_score

    class Broken(ToyNotes):
        async def answer(self, task, state, ctx):
            raise RuntimeError("boom")

    session = RunSession(toy_run, methods=["toy_notes"])
    plan = session.plans()[0]
    ctx = session.context(Context, Broken(), plan, "check")
    answer, score = asyncio.run(answer_and_score(Broken(), plan.tests[0], [], ctx))
    assert answer.failed and "boom" in answer.failure_reason and score == 0.0
    assert [t.id for t in plan.tests] == [t.id for t in TEST] and [t.id for t in plan.guidance] == ["q00", "q01"]


def test_prequential_figure_scales_low_curves_and_keeps_100_for_high_ones():
    from sourcebench.reports.protocols.curve import y_top

    assert y_top([0.0, 2.9, 13.9]) == 20.0  # SmolLM2's few per cent fill the plot instead of its bottom tenth
    assert y_top([0.0, 1.0]) == 10.0 and y_top([]) == 10.0
    assert y_top([40.0, 45.0]) == 55.0 and y_top([51.0]) == 100.0 and y_top([100.0]) == 100.0


def _row_with_usage(method, source, seed, i, tokens, calls=1, score=1.0, failed=False, epochs=None):
    r = {"benchmark": "b", "source": source, "method": method, "seed": seed, "task_id": f"t{i}", "group": f"g{i // 2}",
         "score": score, "failed": failed,
         "usage": {"answer": {"calls": calls, "input_tokens": tokens - 10, "output_tokens": 10, "reasoning_tokens": 0,
                              "failed_calls": 0},
                   "judge": {"calls": 7, "input_tokens": 999, "output_tokens": 1, "reasoning_tokens": 0,
                             "failed_calls": 0}}}
    if epochs:
        r["epochs"] = [{"epoch": e + 1, "score": score} for e in range(epochs)]
    return r


def test_break_even_saving_has_a_per_task_interval_and_the_accuracy_change(tmp_path):
    """Each result row carries its task's answer usage: the saving is the paired, source-stratified mean of
    per-task differences (hand-computed below) with a cluster-bootstrap interval, the break-even point gets
    the build divided by each end of it, the accuracy change on the same pairs sits beside it, and a failed
    pair leaves out only that task (the per-cell fallback dropped its whole cell)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"benchmark": "b", "methods": [{"name": n} for n in
                                                                            ("hybrid_rag", "lean")]}))
    rows = []
    for src, base_cost in (("s1", 2000), ("s2", 3000)):
        for i in range(10):
            rows.append(_row_with_usage("hybrid_rag", src, 0, i, base_cost))
            # lean saves 400 + 100 i tokens on s1's task i (mean 850) and 1,000 + 100 i on s2's (mean 1,450)
            saving = (400 if src == "s1" else 1000) + 100 * i
            rows.append(_row_with_usage("lean", src, 0, i, base_cost - saving, score=float(i % 3 != 0),
                                        failed=src == "s2" and i == 9))
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    usage = [_usage("lean", "learn", 10, 90000, 10000, source="s1"), _usage("lean", "learn", 10, 90000, 10000,
                                                                              source="s2")]
    (run / "usage.jsonl").write_text("".join(json.dumps(u) + "\n" for u in usage))
    m = next(x for x in breakeven.compute(load_run(run))["benchmarks"][0]["methods"] if x["method"] == "lean")
    assert m["per_task"] and (m["pairs"], m["pairs_compared"]) == (20, 19)  # s2/t9 failed: that task only
    # s1: mean of 400..1,300 = 850; s2 without t9: mean of 1,000..1,800 = 1,400; sources weigh the same
    assert m["saving_tokens_per_task"] == pytest.approx((850 + 1400) / 2)
    assert m["saving_calls_per_task"] == 0.0 and m["break_even_calls"] == breakeven.NEVER
    lo, hi = m["saving_tokens_lo"], m["saving_tokens_hi"]
    assert lo < m["saving_tokens_per_task"] < hi and 700 < lo and hi < 1500
    assert m["extra_build_tokens"] == 100000.0
    assert m["break_even_tokens"] == pytest.approx(100000 / 1125)
    assert (m["break_even_tokens_lo"], m["break_even_tokens_hi"]) == (pytest.approx(100000 / hi),
                                                                      pytest.approx(100000 / lo))
    # accuracy on the same 19 pairs: lean is wrong on tasks 0, 3, 6, 9 of s1 (-40.0 pp) and 0, 3, 6 of the 9
    # s2 tasks left (-33.3 pp)
    assert m["accuracy_pairs"] == 19 and m["accuracy_delta_pp"] == pytest.approx(-(40.0 + 100 / 3) / 2)
    assert m["accuracy_lo_pp"] is not None and m["accuracy_lo_pp"] <= m["accuracy_delta_pp"] <= m["accuracy_hi_pp"]
    table = break_even_tables(breakeven.compute(load_run(run)))[0]
    cells = dict(zip(table.header, next(r for r in table.rows if r[0] == "lean")))
    assert cells["saving tokens / task"].startswith("+1,125 [") and cells["compared"] == "19 of 20 tasks, 10 groups"
    assert cells["break-even tasks (calls / tokens) [95% CI, tokens]"].startswith("never / 89 [")
    assert cells["Δ accuracy vs ref. (pp) [95% CI]"].startswith("-36.7 [")
    # degenerate: 3 paired tasks give a point but no interval ("—"), never a number from nothing
    few = [r for r in rows if r["source"] == "s1" and r["task_id"] in ("t0", "t1", "t2")]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in few))
    m = next(x for x in breakeven.compute(load_run(run))["benchmarks"][0]["methods"] if x["method"] == "lean")
    assert m["saving_tokens_per_task"] == 500.0 and m["saving_tokens_lo"] is None
    assert "fewer than 5" in m["saving_tokens_untested"] and m["break_even_tokens_lo"] is None
    row = next(r for r in break_even_tables(breakeven.compute(load_run(run)))[0].rows if r[0] == "lean")
    assert "+500 [—]" in row and any(c.endswith(" [—]") and c.startswith("never / ") for c in row)


def test_break_even_counts_one_answer_per_epoch():
    """A row answered over 3 epochs carries the usage of all three: break-even costs one answer."""
    r = _row_with_usage("m", "s", 0, 0, 3000, calls=3, epochs=3)
    assert breakeven._answer_cost("tokens")(r) == 1000.0 and breakeven._answer_cost("calls")(r) == 1.0


def test_each_result_row_carries_its_own_answer_usage(toy_run):
    """The calls counted into a task's row are that task's own (its sample's context), not its cell's: per
    (method, source, seed) cell, the rows' answer and judge calls add up to the cell's counts in
    usage.jsonl, with tasks answered concurrently."""
    rows = [json.loads(x) for x in (toy_run / "results.jsonl").read_text().splitlines() if x.strip()]
    usage = [json.loads(x) for x in (toy_run / "usage.jsonl").read_text().splitlines() if x.strip()]
    assert rows and all("usage" in r for r in rows)
    for phase in ("answer", "judge"):
        for cell in {(r["method"], r["source"], r["seed"]) for r in rows}:
            from_rows = sum((r["usage"].get(phase) or {}).get("calls", 0) for r in rows
                            if (r["method"], r["source"], r["seed"]) == cell)
            from_ledger = sum(u["calls"] for u in usage if (u["method"], u["source"], u["seed"]) == cell
                              and u["phase"] == phase and u["status"] in ("live", "cached"))
            assert from_rows == from_ledger, (phase, cell)
    assert any(r["usage"].get("answer", {}).get("calls") for r in rows)
