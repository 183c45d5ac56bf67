"""The evaluation protocols (key-overlap, break-even, prequential, harmful entries) as report options: their
statistics and rendering.

Pure parts are checked on hand-built inputs with hand-computed numbers; the summaries of the model-calling
protocols on raw results (hand-built, or recorded by the code before the core/reports split), and the report
sections on a real run folder made by the Runner over the toy benchmark of ``tests/protocol_toys.py`` with the
scripted model. Their model-calling part (streams, leave-one-out, the run session) is tested in
``tests/harness/test_protocols_run.py``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from sourcebench.adapters.phantomwiki.benchmark import gold_path
from sourcebench.harness.cli.protocol import compute as compute_protocol
from sourcebench.harness.data import Task
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.protocols.entries import Entry
from sourcebench.harness.providers import scripted
from sourcebench.harness.registry import register_benchmark
from sourcebench.harness.runner import RunConfig, Runner
from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.protocols import breakeven, default_protocols, keyoverlap, parse_protocols
from sourcebench.reports.protocols.harmful import CRITERION, judge_entry
from sourcebench.reports.protocols.harmful import summarize as summarize_harmful
from sourcebench.reports.protocols.prequential import summarize as summarize_prequential
from sourcebench.reports.protocols.render import break_even_tables, sparkline
from sourcebench.reports.rundata import load_run
from tests.protocol_toys import (
    GUIDANCE,
    SOURCE,
    TEST,
    NoKeys,
    ToyBoxes,
    make_toy_run,
    reply,
    toys_registered,
)

GOLDEN = Path(__file__).parents[1] / "harness" / "golden" / "protocols.json"


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


def test_five_tasks_are_never_flagged():
    # the exact sign-flip test on n tasks never goes below 2 / 2**n: 2/32 = 0.0625 (the core's detectability
    # rule, harness.protocols.harmful.min_detectable_tasks, leaves such entries out)
    assert not judge_entry([0.0] * 5, [1.0] * 5, 0.05)["harmful"]  # 5 tasks: p = 0.0625 at best


def _raw_entry(eid: str, n_tasks: int, repeats: int, fixed: int) -> dict[str, Any]:
    """A raw evaluated entry as the core returns it: removal fixes the first ``fixed`` tasks (every repeat)."""
    pairs = [[f"t{t}", r] for r in range(repeats) for t in range(n_tasks)]
    return {"id": eid, "text": f"entry {eid}", "pairs": pairs, "with_scores": [0.0] * len(pairs),
            "without_scores": [1.0 if int(t[1:]) < fixed else 0.0 for t, _ in pairs]}


def test_harmful_summary_judges_the_raw_scores():
    """From raw paired scores: each entry's verdict is judge_entry's, an artifact's rate is harmful / evaluated,
    a method's rate the mean over its artifacts with a rate, and its status says why there is none."""
    art = {"artifact": "a1", "source": "s", "seed": 0, "status": "ok", "n_entries": 4, "n_exposed": 3,
           "n_detectable": 2, "n_undetectable": 1, "n_evaluated": 2, "full_score": 0.0,
           "entries": [_raw_entry("bad", 6, 1, 6), _raw_entry("noise", 6, 1, 1),
                       {"id": "few", "text": "entry few", "n_tasks": 3, "undetectable": True}]}
    only_few = {**art, "artifact": "a2", "seed": 1, "n_detectable": 0, "n_evaluated": 0, "entries": art["entries"][2:]}
    raw = {"protocol": "harmful", "min_detectable_tasks": 6, "settings": {"alpha": 0.05}, "benchmark": "b",
           "methods": [{"method": "m", "entry_kind": "unit", "artifacts": [art, only_few,
                                                                          {"source": "s", "seed": 2,
                                                                           "status": "not learned"}]},
                       {"method": "u", "entry_kind": "unit", "artifacts": [only_few]},
                       {"method": "r", "status": "no entries", "reason": "no"}],
           "live_calls": 7}
    res = summarize_harmful(raw)
    assert list(res) == ["protocol", "criterion", "entries", "min_detectable_tasks", "settings", "benchmark",
                         "methods", "live_calls"]
    assert res["criterion"] == CRITERION and res["live_calls"] == 7
    m = res["methods"][0]
    a1 = m["artifacts"][0]
    assert list(a1) == ["artifact", "source", "seed", "status", "n_entries", "n_exposed", "n_detectable",
                        "n_undetectable", "n_evaluated", "n_harmful", "rate", "full_score", "entries"]
    bad, noise, few = a1["entries"]
    assert bad == {"id": "bad", "text": "entry bad", **judge_entry([0.0] * 6, [1.0] * 6, 0.05),
                   "pairs": [[f"t{t}", 0] for t in range(6)], "with_scores": [0.0] * 6, "without_scores": [1.0] * 6}
    assert bad["harmful"] and bad["p_value"] == pytest.approx(2 / 64) and not noise["harmful"]
    assert few == {"id": "few", "text": "entry few", "n_tasks": 3, "harmful": False, "verdict": "undetectable"}
    assert (a1["n_harmful"], a1["rate"]) == (1, 0.5) and m["artifacts"][1]["rate"] is None
    assert m["artifacts"][2] == {"source": "s", "seed": 2, "status": "not learned"}
    assert (m["status"], m["rate"], m["n_evaluated"], m["n_harmful"], m["n_undetectable"]) == ("ok", 0.5, 2, 1, 2)
    assert list(m) == ["method", "status", "entry_kind", "rate", "n_entries", "n_exposed", "n_detectable",
                       "n_undetectable", "n_evaluated", "n_harmful", "artifacts"]
    assert res["methods"][1]["status"] == "no detectable entries" and res["methods"][1]["rate"] is None
    assert res["methods"][2] == {"method": "r", "status": "no entries", "reason": "no"}
    # repeats enter the test as seeds of their task: 6 tasks x 3 repeats, the same p as 6 tasks
    rep = summarize_harmful({**raw, "methods": [{"method": "m", "entry_kind": "unit", "artifacts": [
        {**art, "n_evaluated": 1, "entries": [_raw_entry("bad", 6, 3, 6)]}]}]})
    e = rep["methods"][0]["artifacts"][0]["entries"][0]
    assert (e["n_pairs"], e["n_tasks"], e["p_value"]) == (18, 6, pytest.approx(2 / 64))


# ------------------------------------------------------------------------------------------ prequential


def test_sparkline():
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"


SUMMARY_KEYS = ("online", "stateless", "gain_pp", "test", "p_value", "curve", "block_starts")


@pytest.mark.parametrize("key", ["prequential_block2", "prequential_default"])
def test_prequential_summary_is_the_recorded_result(key):
    """The raw streams of a recorded result (its cells and costs, what the core returns), summarized again, give
    the recorded result: the accuracies, gain, test and curve the code before the split computed."""
    golden = json.loads(GOLDEN.read_text())[key]
    raw = {**golden, "methods": [{k: v for k, v in m.items() if k not in SUMMARY_KEYS} for m in golden["methods"]]}
    assert all("gain_pp" not in m for m in raw["methods"]) and any(m["gain_pp"] for m in golden["methods"])
    res = summarize_prequential(raw)
    assert res == golden
    assert list(res) == ["protocol", "settings", "benchmark", "methods", "live_calls"]  # the file's order
    assert all(list(m) == ["method", "mode", "reference", "reference_cost", "online_learning_cost", "online",
                           "stateless", "gain_pp", "test", "p_value", "curve", "block_starts", "cells"]
               for m in res["methods"])


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
