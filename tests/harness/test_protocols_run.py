"""The model-calling part of the protocols (``harness/protocols/``) and ``sourcebench protocol`` on a run.

The streams and the leave-one-out run on a real run folder made by the Runner over the toy benchmark of
``tests/protocol_toys.py`` with the scripted model, whose toy methods make the expected verdicts exact: one
note that makes every answer wrong (harmful), one note never shown (not evaluated), and learners that can
only answer a topic after having learned from a task about it (prequential: answered before learned from).
The statistics the reports add are tested in ``tests/reports/test_protocols.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sourcebench.harness.cli import main
from sourcebench.harness.cli.protocol import compute as compute_protocol
from sourcebench.harness.data import Split
from sourcebench.harness.method import Context
from sourcebench.harness.planner import Plan
from sourcebench.harness.protocols.entries import Entry, entry_access
from sourcebench.harness.protocols.harmful import HarmfulSettings, min_detectable_tasks, sample_entries
from sourcebench.harness.protocols.prequential import (
    PrequentialSettings,
    block_bounds,
    cumulative,
    stream_order,
)
from sourcebench.harness.protocols.run import MODEL_PROTOCOLS, run_protocol
from sourcebench.harness.providers import scripted
from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.protocols import NEEDS_MODEL
from tests.protocol_toys import (
    SOURCE,
    TEST,
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


# ------------------------------------------------------------------------------------------ harmful


def test_the_model_calling_protocols_are_the_ones_reports_read_from_files():
    assert MODEL_PROTOCOLS == NEEDS_MODEL


def test_fewest_tasks_that_can_be_flagged():
    # the exact sign-flip test on n tasks never goes below 2 / 2**n: 2/32 = 0.0625, 2/64 = 0.031
    assert min_detectable_tasks(0.05) == 6 and min_detectable_tasks(0.01) == 8 and min_detectable_tasks(0.1) == 5
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


# ------------------------------------------------------------------------------------------ command and session


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


def _keys(obj) -> set[str]:
    """Every key of a JSON-like object, at any depth."""
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys(v)}
    return {k for v in obj for k in _keys(v)} if isinstance(obj, list) else set()


def test_the_core_returns_raw_scores_and_no_statistic(toy_run):
    """(Run last: it leaves the protocols' artifacts cached.) The core's leave-one-out gives each evaluated entry its exposed pairs and paired score lists, and no verdict,
    rate or p-value (the reports' summarize adds them); a rerun makes no live call."""
    scripted.set_script(reply)
    raw = run_protocol("harmful", toy_run, methods=["toy_notes"], settings={"max_entries": 0, "repeats": 1})
    art = raw["methods"][0]["artifacts"][0]
    bad = next(e for e in art["entries"] if e["id"] == "n-bad")
    assert len(bad["pairs"]) == 6 and bad["with_scores"] == [0.0] * 6 and bad["without_scores"] == [1.0] * 6
    red = next(e for e in art["entries"] if e["id"] == "n-red")
    assert red == {"id": "n-red", "text": "NOTE red boxes are stored on the left.", "n_tasks": 3, "undetectable": True}
    assert not _keys(raw) & {"p_value", "verdict", "rate", "harmful", "n_harmful", "test", "mean_diff"}
    assert raw["live_calls"] == 0
    pre = run_protocol("prequential", toy_run, methods=["toy_learner"], settings={"block_size": 2})
    assert set(pre["methods"][0]) == {"method", "mode", "reference", "reference_cost", "online_learning_cost", "cells"}
    assert not _keys(pre) & {"p_value", "test", "gain_pp", "curve", "block_starts"}
    assert pre["methods"][0]["cells"][0]["tasks"][0].keys() >= {"online", "stateless", "task_id"}
