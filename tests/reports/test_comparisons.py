"""Constructed cases where a comparison could mislead: the Δ shown is the Δ tested, on the paired tasks,
clustered by group, with an interval that covers and a mark wherever a side is missing tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sourcebench.reports.board import main_table, summarize
from sourcebench.reports.leaderboard import render_csv
from sourcebench.reports.rundata import RunData
from sourcebench.reports.stats import accuracy_ci, format_delta, format_p, learning_sd, paired_test


def _r(method, source, seed, task, score, group=None):
    row = {"benchmark": "b", "source": source, "method": method, "seed": seed, "task_id": task, "score": score}
    if group is not None:
        row["group"] = group
    return row


def _run(tmp_path, rows, methods=("hybrid_rag", "m")):
    return RunData(run_dir=tmp_path, run={"run_id": "r", "benchmark": "b",
                                          "methods": [{"name": m} for m in methods]}, results=rows)


def _entry(summary, method="m"):
    return next(e for e in summary[0]["methods"] if e["method"] == method)


def test_delta_is_computed_on_the_paired_tasks_and_a_missing_side_is_marked(tmp_path):
    # baseline 90 % on s1 and 30 % on s2; the method has only its s1 rows, at 70 %. The accuracy difference
    # is 70 - 60 = +10, but on the 40 shared tasks the method is 20 points worse (what p measures).
    rows = [_r("hybrid_rag", "s1", 0, f"t{i}", float(i < 36)) for i in range(40)]
    rows += [_r("hybrid_rag", "s2", 0, f"t{i}", float(i < 12)) for i in range(40)]
    rows += [_r("m", "s1", 0, f"t{i}", float(i < 28)) for i in range(40)]
    s = summarize(_run(tmp_path, rows), n_boot=500)
    e = _entry(s)
    assert 100 * e["accuracy"] - 100 * _entry(s, "hybrid_rag")["accuracy"] == pytest.approx(10.0)
    assert e["delta_pp"] == pytest.approx(-20.0)
    assert e["n_pairs"] == 40 and e["incomplete"] and e["a_missing"] == 40
    assert e["p_value"] == pytest.approx(2 * 0.5**8)  # 8 discordant tasks, all for the baseline
    assert e["delta_lo"] < -20.0 < e["delta_hi"] < 0
    table = main_table(s[0])
    row = next(r for r in table.rows if r[0] == "m")
    assert row[2].startswith("-20.0 [") and row[2].endswith("INCOMPLETE")
    assert row[3] == "0.00781"  # no stars for an incomplete comparison
    assert row[4] == "40 of 80 (40 groups)"
    assert "INCOMPLETE" in table.note and "m lacks 40 of the baseline's tasks" in table.note
    csv_row = render_csv(s, [0]).splitlines()[2].split(",")
    header = render_csv(s, [0]).splitlines()[0].split(",")
    got = dict(zip(header, csv_row))
    assert float(got["delta_pp"]) == pytest.approx(-20.0) and got["incomplete"] == "1"


def test_delta_weights_every_task_once_not_by_its_seeds(tmp_path):
    # tasks x0-x4 are tested under seeds 0 and 1 (the method wins each), y0-y14 under seed 2 only (the
    # baseline wins each): per-seed accuracies give +33.3, the tested per-task mean difference is -50.
    rows = []
    for seed in (0, 1):
        rows += [_r("m", "s", seed, f"x{i}", 1.0) for i in range(5)]
        rows += [_r("hybrid_rag", "s", seed, f"x{i}", 0.0) for i in range(5)]
    rows += [_r("m", "s", 2, f"y{i}", 0.0) for i in range(15)]
    rows += [_r("hybrid_rag", "s", 2, f"y{i}", 1.0) for i in range(15)]
    s = summarize(_run(tmp_path, rows), n_boot=500)
    e = _entry(s)
    assert 100 * (e["accuracy"] - _entry(s, "hybrid_rag")["accuracy"]) == pytest.approx(100 / 3)
    assert e["delta_pp"] == pytest.approx(-50.0) and e["delta_pp"] == pytest.approx(100 * e["mean_diff"])
    assert e["delta_hi"] < 0


def test_duplicated_group_mates_leave_p_and_the_interval_unchanged():
    # ten outcomes (7 wins, 3 ties); the same ten each copied as three perfectly correlated group-mates
    a = [1, 1, 1, 1, 1, 1, 1, 0, 1, 0]
    b = [0, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    one = ([_r("m", "s", 0, f"t{i}", x, group=f"g{i}") for i, x in enumerate(a)],
           [_r("h", "s", 0, f"t{i}", x, group=f"g{i}") for i, x in enumerate(b)])
    three = ([_r("m", "s", 0, f"t{i}-{k}", x, group=f"g{i}") for i, x in enumerate(a) for k in range(3)],
             [_r("h", "s", 0, f"t{i}-{k}", x, group=f"g{i}") for i, x in enumerate(b) for k in range(3)])
    t1, t3 = paired_test(*one, n_boot=1000), paired_test(*three, n_boot=1000)
    assert t1["p_value"] == pytest.approx(t3["p_value"]) == pytest.approx(2 / 2**7)
    assert (t1["ci_lo"], t1["ci_hi"]) == pytest.approx((t3["ci_lo"], t3["ci_hi"]))
    assert t3["n_pairs"] == 30 and t3["n_groups"] == 10
    # without the groups the 30 rows would count as 21 independent wins: a far smaller p
    flat = [[{k: v for k, v in r.items() if k != "group"} for r in side] for side in three]
    assert paired_test(*flat)["p_value"] < t3["p_value"] / 100
    # the accuracy interval is clustered the same way
    assert accuracy_ci(one[0]) == pytest.approx(accuracy_ci(three[0]))


def test_groups_are_clusters_within_their_source_only():
    # the same group name in two sources is two clusters
    a = [_r("m", s, 0, f"t{i}", 1.0, group="g") for s in ("s1", "s2") for i in range(5)]
    b = [_r("h", s, 0, f"t{i}", 0.0, group="g") for s in ("s1", "s2") for i in range(5)]
    assert paired_test(a, b)["n_groups"] == 2


def test_accuracy_interval_covers_at_small_n_and_never_has_zero_width():
    rng = np.random.default_rng(7)
    n, reps = 20, 400
    for p in (0.5, 0.6, 0.7, 0.8, 0.9):
        hits = 0
        for _ in range(reps):
            x = rng.random(n) < p
            lo, hi = accuracy_ci([_r("m", "s", 0, f"t{i}", float(v)) for i, v in enumerate(x)])
            hits += lo <= p <= hi
        assert hits / reps >= 0.93, (p, hits / reps)
    lo, hi = accuracy_ci([_r("m", "s", 0, f"t{i}", 1.0) for i in range(5)])
    assert hi == 1.0 and lo == pytest.approx(0.566, abs=1e-3)  # Wilson at 5/5, not [100, 100]


def test_learning_component_uses_the_tasks_every_seed_tested():
    # seed 0 tests t0-t3, seed 1 tests t2-t5: on the common tasks t2, t3 the seeds agree exactly, so the
    # between-seed (learning) component is 0 even though the per-seed accuracies differ
    rows = [_r("m", "s", 0, f"t{i}", v) for i, v in zip(range(4), (1, 1, 0, 1))]
    rows += [_r("m", "s", 1, f"t{i}", v) for i, v in zip(range(2, 6), (0, 1, 0, 0))]
    sd, n = learning_sd(rows)
    assert (sd, n) == (0.0, 2)


def test_one_rule_for_p_and_delta():
    assert format_p(0.0496) != format_p(0.0504)
    assert (format_p(0.0496), format_p(0.0504), format_p(0.25), format_p(0.0004)) == \
        ("0.0496", "0.0504", "0.250", "<0.001")
    assert format_p(0.02, 0.0014) == "0.0200 (±0.001)"
    assert (format_delta(-0.04), format_delta(2.25), format_delta(-37.5)) == ("+0.0", "+2.2", "-37.5")


def test_minimum_detectable_effect_is_reported_and_small_deltas_are_not_resolvable(tmp_path):
    # 3 wins and 2 losses of 40 tasks: Δ = +2.5 pp, far below what 40 tasks with 5 discordant can resolve
    rows = [_r("hybrid_rag", "s", 0, f"t{i}", float(i in (3, 4) or i >= 10)) for i in range(40)]
    rows += [_r("m", "s", 0, f"t{i}", float(i in (0, 1, 2) or i >= 10)) for i in range(40)]
    e = _entry(summarize(_run(tmp_path, rows), n_boot=200))
    # null sd of Δ: sqrt(5) / 40; MDE = (z_0.975 + z_0.80) * sd
    assert e["mde_pp"] == pytest.approx(100 * (1.959964 + 0.841621) * np.sqrt(5) / 40, abs=1e-3)
    assert e["resolvable"] is False
    row = next(r for r in main_table(summarize(_run(tmp_path, rows), n_boot=200)[0]).rows if r[0] == "m")
    assert row[5] == "15.7 (not resolvable by this run)"


def test_paper_tables_show_the_tested_delta_with_its_interval_and_never_mark_a_bad_cell_best():
    from sourcebench.reports.grid import (
        accuracy_cell,
        compare,
        mark_best,
        paper_table,
        set_delta,
        stats_table,
    )
    from sourcebench.reports.layout import md_table

    base_rows = [_r("h", "s1", 0, f"t{i}", float(i < 36)) for i in range(40)]
    base_rows += [_r("h", "s2", 0, f"t{i}", float(i < 12)) for i in range(40)]
    m_rows = [_r("m", "s1", 0, f"t{i}", float(i < 28)) for i in range(40)]  # only s1: incomplete
    d_rows = [_r("d", s, 0, f"t{i}", 1.0) for s in ("s1", "s2") for i in range(40)]  # best, but degraded
    base, m, d = (accuracy_cell(r, 200, 0) for r in (base_rows, m_rows, d_rows))
    d.degraded = ["d on s1 (seed 0): degraded"]
    for c in (m, d):
        set_delta(c, base)
    assert m.delta == pytest.approx(-20.0) and m.incomplete and not d.incomplete
    mark_best([base, m, d])
    assert (base.mark, m.mark, d.mark) == ("", "", "")  # one comparable value left: nothing is marked
    stats = compare([({"backend": "x", "benchmark": "b", "column": "b", "method": "m", "baseline": "h"}, m, base),
                     ({"backend": "x", "benchmark": "b", "column": "b", "method": "d", "baseline": "h"}, d, base)],
                    seed=0, n_resamples=999, n_boot=300)
    assert stats[0]["delta_pp"] == pytest.approx(-20.0) and stats[0]["ci_lo_pp"] < -20 < stats[0]["ci_hi_pp"]
    assert m.delta_ci is not None and stats[0]["incomplete"] and stats[1]["degraded"]
    t = paper_table("t", "T: x", ["c"], ["Backend", "Method"], ["b"], stats=stats)
    md = md_table(stats_table(t))
    assert "| -20.0 [" in md and "INCOMPLETE (40 / 0 tasks missing)" in md and "DEGRADED" in md
    assert "40 (40 groups)" in md


def test_a_cell_with_fewer_rows_than_planned_is_incomplete_and_protocol_tables_carry_the_mark(tmp_path):
    from sourcebench.reports.protocols.render import mark_health, unhealthy_methods
    from sourcebench.reports.rundata import missing_rows
    from sourcebench.reports.table import Table

    rows = [_r("hybrid_rag", "s", seed, f"t{i}", 1.0) for seed in (0, 1) for i in range(6)]
    rows += [_r("m", "s", 0, f"t{i}", 1.0) for i in range(6)]  # its seed-1 inspect task errored: no rows
    assert missing_rows(rows, "b", "m") == (6, 12) and missing_rows(rows, "b", "hybrid_rag") == (0, 12)
    bad = unhealthy_methods(_run(tmp_path, rows))
    assert bad == {"m": "INCOMPLETE"}
    t = Table("key-overlap", ["method", "Δ", "p"], [["m", "+5.0", "0.00100 **"], ["hybrid_rag", "—", "—"]])
    mark_health([t], bad)
    assert t.rows[0] == ["m (INCOMPLETE)", "+5.0", "0.00100"] and "no stars" in t.note


def test_the_report_shows_each_split_s_realised_guidance_share(tmp_path):
    from sourcebench.harness.data import Task
    from sourcebench.harness.splits import grouped_split, write_manifest
    from sourcebench.reports.board import provenance_tables

    tasks = [Task(id=f"a{i}", source_id="s", question="q", reference="r", group="big") for i in range(8)]
    tasks += [Task(id=f"b{i}", source_id="s", question="q", reference="r", group="small") for i in range(2)]
    far = next(sp for sp in (grouped_split("b", "s", tasks, s) for s in range(6)) if len(sp.guidance_ids) == 8)
    write_manifest(tmp_path, far)
    table = next(t for t in provenance_tables(_run(tmp_path, []), 0, 100) if t.title == "Splits")
    assert table.rows == [["b", "s", str(far.seed), "8", "2", "80.0 (off target)"]]
    assert "WARNING" in table.note and "guidance share 80 %" in table.note


def test_key_overlap_compares_each_method_with_its_own_zero_learning_variant(tmp_path, monkeypatch):
    from sourcebench.reports.protocols import breakeven, keyoverlap

    rows = [_r(m, "s", seed, f"t{i}", float(v)) for seed in (0, 1) for i in range(8)
            for m, v in (("hybrid_rag", 0), ("learner", 1), ("learner-zero", i % 2))]
    monkeypatch.setattr(keyoverlap, "benchmark_groups", lambda data, b, d: {
        (r["source"], int(r["seed"]), r["task_id"]): "all" for r in rows})
    monkeypatch.setattr(breakeven, "zero_learning_variant", lambda m: "learner-zero" if m == "learner" else None)
    res = keyoverlap.compute(_run(tmp_path, rows, ("hybrid_rag", "learner", "learner-zero")), seed=3)
    learner = next(m for m in res["benchmarks"][0]["methods"] if m["method"] == "learner")
    assert (learner["reference"], learner["reference_kind"]) == ("learner-zero", "zero-learning variant")
    cell = learner["groups"]["all"]
    # against its zero-learning variant: +50 (not +100 against the baseline), each task once: 8 pairs not 16
    assert cell["delta_pp"] == pytest.approx(50.0) and cell["n_pairs"] == 8
    other = next(m for m in res["benchmarks"][0]["methods"] if m["method"] == "learner-zero")
    assert other["reference"] == "hybrid_rag" and other["reference_kind"] == "baseline"


def test_harmful_rate_has_a_binomial_interval_and_p_is_labelled_uncorrected():
    from sourcebench.reports.protocols.render import harmful_tables

    res = {"criterion": "c", "settings": {"alpha": 0.05, "repeats": 3}, "methods": [
        {"method": "m", "status": "ok", "entry_kind": "note", "rate": 0.25, "n_entries": 9, "n_exposed": 8,
         "n_undetectable": 0, "n_detectable": 8, "n_evaluated": 8, "n_harmful": 2,
         "artifacts": [{"status": "ok", "source": "s", "seed": 0, "entries": [
             {"harmful": True, "text": "x", "n_tasks": 6, "with_mean": 0.0, "without_mean": 1.0,
              "p_value": 0.03125}]}]}]}
    main, flagged = harmful_tables(res)
    assert main.rows[0][-1] == "25.0 [7.1, 59.1]"  # Wilson 95% of 2 / 8
    assert "uncorrected" in main.note and flagged.header[-1] == "p (uncorrected)"


def test_break_even_against_a_round_off_saving_is_not_a_number():
    from sourcebench.reports.protocols import breakeven

    # 1e-9 tokens a task cheaper: 5,000,000,000,000 tasks before; now "—"
    assert breakeven.fmt_tasks(breakeven.break_even(5000.0, 1e-9, 1000.0)) == "—"
    assert breakeven.fmt_tasks(breakeven.break_even(5000.0, 10.0, 1000.0)) == "500"
    rows = [_r(m, "s", 0, f"t{i}", float(m == "m" or i < 3)) for m in ("m", "ref") for i in range(5)]
    usage = [{"benchmark": "b", "source": "s", "seed": 0, "method": m, "phase": "answer", "status": "live",
              "calls": 5, "input_tokens": 5000, "output_tokens": 0} for m in ("m", "ref")]
    data = RunData(run_dir=Path("."), run={"benchmark": "b"}, results=rows, usage=usage)
    row = breakeven.compare(data, "b", "m", "ref", "zero-learning variant")
    assert row["accuracy_delta_pp"] == pytest.approx(40.0) and row["accuracy_pairs"] == 5  # beside the saving
