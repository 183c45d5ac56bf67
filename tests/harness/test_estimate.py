"""Cost before money: ``sourcebench estimate`` and ``--max-cost``."""

from __future__ import annotations

import json

import pytest

from sourcebench.harness.cli import main
from sourcebench.harness.estimate import Rate, dump_rates, load_rates, measure
from tests.conftest import need_data

pytestmark = pytest.mark.slow

MODEL = "scripted/gpt-oss-rsn300"  # a reasoning family: 300 reasoning tokens a reply


def _run(out, *extra) -> int:
    return main(["run", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source,raptor", "--model", MODEL,
                 "--embedder", "hash", "--out", str(out), *extra])


def _measured(out) -> dict[str, float]:
    t = dict.fromkeys(("calls", "input_tokens", "output_tokens", "reasoning_tokens"), 0.0)
    for line in (out / "usage.jsonl").read_text().splitlines():
        u = json.loads(line)
        if u["status"] in ("live", "cached") and u["phase"] != "probe":
            for k in t:
                t[k] += u[k]
    return t


def test_an_estimate_from_a_small_run_is_within_30_percent_of_a_larger_run(tmp_path, capsys):
    small, large = tmp_path / "small", tmp_path / "large"
    assert _run(small, "--limit", "3", "--seeds", "0") == 0
    assert _run(large, "--limit", "8", "--seeds", "0,1") == 0
    capsys.readouterr()
    assert main(["estimate", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source,raptor", "--limit", "8",
                 "--seeds", "0,1", "--calibration", str(small), "--compare", str(large), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for k, (est, meas) in report["compare"]["totals"].items():
        assert meas > 0 and abs(est - meas) <= 0.3 * meas, (k, est, meas)
    m = _measured(large)
    assert report["compare"]["totals"]["calls"][1] == m["calls"]
    assert report["totals"]["reasoning_tokens"] > 0


def test_rates_round_trip_and_a_method_without_a_rate_is_said_not_guessed(tmp_path, capsys):
    out = tmp_path / "cal"
    assert _run(out, "--limit", "2", "--seeds", "0") == 0
    rates = measure([out])
    assert set(rates) == {"hybrid_rag", "no_source", "raptor"}
    assert rates["raptor"]["documents:learn/element"].unit == "element"
    assert rates["hybrid_rag"]["documents:answer/test"].per_unit["calls"] == 1
    path = tmp_path / "rates.json"
    path.write_text(dump_rates(rates, {"measured_on": str(out)}))
    back = load_rates(path)
    assert isinstance(back["raptor"]["documents:learn/element"], Rate)
    assert back["raptor"]["documents:learn/element"].per_unit == rates["raptor"]["documents:learn/element"].per_unit
    capsys.readouterr()
    assert main(["estimate", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,awm", "--limit", "4",
                 "--calibration", str(out), "--price-input", "1", "--price-output", "4"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "no measured rate for awm" in printed and "about $" in printed


def test_max_cost_stops_a_run_resumably_before_it_passes_the_budget(tmp_path, capsys):
    out = tmp_path / "budget"
    prices = ["--price-input", "100", "--price-output", "100"]  # USD per million tokens
    full = tmp_path / "full"
    assert _run(full, "--limit", "4", "--seeds", "0") == 0
    m = _measured(full)
    total = (m["input_tokens"] + m["output_tokens"] + m["reasoning_tokens"]) * 100 / 1e6
    assert _run(out, "--limit", "4", "--seeds", "0", "--max-cost", f"{total / 2:.6f}", *prices) == 5
    assert "--max-cost" in capsys.readouterr().err
    spent = _measured(out)
    assert (spent["input_tokens"] + spent["output_tokens"] + spent["reasoning_tokens"]) * 100 / 1e6 <= total / 2
    # the same command with a budget that covers it resumes and ends with the uninterrupted run's rows
    assert _run(out, "--limit", "4", "--seeds", "0", "--max-cost", f"{total * 2:.6f}", *prices) == 0
    key = ("method", "seed", "task_id", "score", "answer")

    def rows(d):
        return sorted(tuple(json.loads(x)[k] for k in key) for x in (d / "results.jsonl").read_text().splitlines())

    assert rows(out) == rows(full)


def test_estimate_prints_a_plan_for_the_paper_table_1_config(capsys):
    need_data("apibench")  # the config's one benchmark whose data the repository does not ship
    assert main(["estimate", "--config", "configs/table1.yaml"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "cell(s)" in printed
    # all 15 (backend, benchmark) folders priced, or the total says how many and the rest are named
    assert "total:" in printed or ("of 15 folder(s) estimated:" in printed and ": not estimated (" in printed)


def test_planned_mde_hand_computed():
    from statistics import NormalDist

    from sourcebench.harness.estimate import CellUnits, planned_mde

    def cell(source, seed, ids):
        return CellUnits("m", source, seed, 10, 50.0, 3, len(ids), False, "documents", tuple(ids))

    # two sources of 100 distinct test tasks each (seeds overlap: the union counts), 3 comparisons
    cells = [cell("a", 0, [f"t{i}" for i in range(80)]), cell("a", 1, [f"t{i}" for i in range(20, 100)]),
             cell("b", 0, [f"u{i}" for i in range(100)])]
    got = planned_mde(cells, comparisons=3, discordance=0.3)
    z = NormalDist().inv_cdf(1 - 0.05 / 6) + NormalDist().inv_cdf(0.8)
    sd = (2 * 0.3 / (4 * 100)) ** 0.5
    assert got["tasks"] == 200 and got["sources"] == 2 and got["mde_pp"] == pytest.approx(100 * z * sd)
    # four times the tasks halve it
    more = [cell(s, 0, [f"{s}{i}" for i in range(400)]) for s in ("a", "b")]
    assert planned_mde(more, 3)["mde_pp"] == pytest.approx(got["mde_pp"] / 2)


def test_estimate_prints_the_smallest_detectable_effect(capsys):
    assert main(["estimate", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source", "--limit", "4",
                 "--seeds", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    mde = report["groups"][0]["mde"]
    assert mde["comparisons"] == 1 and mde["tasks"] > 0 and mde["mde_pp"] > 0
    assert main(["estimate", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source", "--limit", "4",
                 "--seeds", "0"]) == 0
    assert "smallest detectable Δ" in " ".join(capsys.readouterr().out.split())
