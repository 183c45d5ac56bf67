"""`sourcebench estimate` covers what it claims: run's command line, every folder of a config (or how
many it could not price), judge calls only where a benchmark has a judge, a finished run's live calls
of the estimated methods only, and a local model's wall time from its measured calls per minute."""

from __future__ import annotations

import json
import sqlite3

import pytest

from sourcebench.harness import walltime
from sourcebench.harness.cli import main
from sourcebench.harness.cli.main import build_parser
from sourcebench.harness.estimate import CellUnits, Rate, estimate_cells

PW = ["--benchmark", "phantomwiki", "--seeds", "0", "--limit", "3"]


def _subparser(name: str):
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name]


def _report(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["estimate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_takes_every_option_of_run(capsys):
    run, est = _subparser("run"), _subparser("estimate")
    missing = sorted(set(run._option_string_actions) - set(est._option_string_actions))
    assert not missing, f"estimate refuses run's {missing}"
    # run's own command line, with --model, a variant and run-only settings, is priced
    rep = _report(capsys, *PW, "--methods", "hybrid_rag,hybrid_rag@top_k=4", "--model", "openai/gpt-4o-mini",
                  "--embedder", "hash", "--max-tokens", "256", "--out", "runs/x", "--max-retries", "2",
                  "--method-config", "hybrid_rag.top_k=6")
    methods = {e["method"] for e in rep["groups"][0]["estimates"]}
    assert methods == {"hybrid_rag", "hybrid_rag@top_k=4"}  # the variant priced at its method's rate
    # and refuses what run refuses, with run's one line
    with pytest.raises(SystemExit):
        main(["estimate", *PW, "--methods", "hybrid_rag", "--max-tokens", "0"])


def test_a_config_says_how_many_folders_it_priced(tmp_path, capsys):
    cfg = tmp_path / "two.yaml"
    cfg.write_text(f"""name: two
output: {tmp_path / "out"}
seeds: [0]
limit: 3
backends:
  - {{id: api, model: openai/gpt-4o-mini, reasoning_effort: low}}
benchmarks:
  - {{id: phantomwiki}}
  - {{id: swe_qa, sources: [flask], options: {{flask: {tmp_path / "no-such-tree"}}}}}
tables:
  table1: {{methods: [hybrid_rag, no_source]}}
""")
    rep = _report(capsys, "--config", str(cfg))
    assert rep["coverage"]["folders"] == 2 and rep["coverage"]["estimated"] == 1
    assert [x["folder"] for x in rep["not_estimated"]] == ["api / swe_qa"]
    assert rep["wall_time"]["latency_s"] == walltime.DEFAULT_LATENCY_S["low"]  # the backend's own effort
    assert main(["estimate", "--config", str(cfg)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "total of the 1 of 2 folder(s) estimated:" in printed
    assert "api / swe_qa: not estimated (" in printed


def test_judge_calls_only_for_a_benchmark_with_a_judge(capsys):
    rates = {"m": {"code:judge/test": Rate("test", {"calls": 1.0, "input_tokens": 500.0, "output_tokens": 20.0,
                                                     "reasoning_tokens": 0.0}, 0.0, 6),
                   "code:answer/test": Rate("test", {"calls": 1.0, "input_tokens": 900.0, "output_tokens": 20.0,
                                                      "reasoning_tokens": 0.0}, 0.0, 6)}}

    def cell(kind: str, judged: bool) -> CellUnits:
        return CellUnits("m", "s", 0, 10, 50.0, 2, 4, False, kind, (), judged)

    for kind in ("code", "documents"):  # a documents source is priced from the pooled code rates
        phases = {e.phase for e in estimate_cells([cell(kind, True)], rates)[0]}
        assert phases == {"answer", "judge"}
        phases = {e.phase for e in estimate_cells([cell(kind, False)], rates)[0]}
        assert phases == {"answer"}
    # PhantomWiki scores by rule: the shipped rates' judge and learning-judge calls are not added to it
    rep = _report(capsys, *PW, "--methods", "hybrid_rag,awm")
    assert {e["phase"] for e in rep["groups"][0]["estimates"]} <= {"answer", "learn"}


def _usage(path, rows):
    path.write_text("".join(json.dumps({"stage": "", "input_tokens": 100 * r[3], "output_tokens": 10 * r[3],
                                        "reasoning_tokens": 0, "seconds": 1.0, "method": r[0], "phase": r[1],
                                        "status": r[2], "calls": r[3]}) + "\n" for r in rows))


def test_compare_counts_live_calls_of_the_estimated_methods_only(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    _usage(run / "usage.jsonl", [("hybrid_rag", "answer", "live", 3), ("hybrid_rag", "answer", "cached", 3),
                                 ("raptor", "learn", "live", 50), ("hybrid_rag", "probe", "live", 2)])
    rep = _report(capsys, *PW, "--methods", "hybrid_rag", "--compare", str(run))
    est, measured = rep["compare"]["totals"]["calls"]
    assert measured == 3 and est == 3  # resumed (cached) calls and the other method's calls left out
    assert rep["compare"]["not_compared"] == {"raptor": 50}
    assert main(["estimate", *PW, "--methods", "hybrid_rag", "--compare", str(run)]) == 0
    assert "not compared (not estimated): raptor (50 live calls)" in " ".join(capsys.readouterr().out.split())


def _cache(run, ends):
    (run / "cache").mkdir(parents=True)
    con = sqlite3.connect(run / "cache" / "llm_calls.sqlite")
    con.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, value TEXT, created REAL)")
    con.executemany("INSERT INTO calls VALUES (?, '{}', ?)", [(f"k{i}", t) for i, t in enumerate(ends)])
    con.commit()
    con.close()


def test_measured_calls_per_minute_leave_pauses_between_invocations_out(tmp_path):
    run = tmp_path / "r"
    # 11 calls 30 s apart, a night's pause, 5 more 30 s apart: 14 gaps of work, 420 s
    ends = [1000.0 + 30 * i for i in range(11)] + [100000.0 + 30 * i for i in range(5)]
    _cache(run, ends)
    assert walltime.measured_wall(run) == 14 * 30
    assert walltime.measured_calls_per_minute(run) == pytest.approx(60 * 15 / 420)


def test_a_local_model_s_wall_time_from_measured_calls_per_minute(tmp_path, capsys):
    rep = _report(capsys, *PW, "--methods", "hybrid_rag", "--model", "local/smollm2", "--calls-per-minute", "4")
    calls = rep["totals"]["calls"]
    (f,) = rep["wall_time"]["folders"]
    assert f["local"] and f["at"][0]["test_s"] == pytest.approx(60 * calls / 4)
    # from a finished run of the same local model (--calibration): its calls over their busy time
    cal = tmp_path / "cal"
    cal.mkdir()
    (cal / "run.json").write_text(json.dumps({"model": "local/smollm2", "sources": []}))
    (cal / "results.jsonl").write_text(json.dumps({"method": "hybrid_rag", "source": "s", "seed": 0}) + "\n")
    _usage(cal / "usage.jsonl", [("hybrid_rag", "answer", "live", 1)])
    _cache(cal, [0.0, 20.0, 40.0, 60.0])  # 3 calls a minute
    rep = _report(capsys, *PW, "--methods", "hybrid_rag", "--model", "local/smollm2", "--calibration", str(cal))
    (f,) = rep["wall_time"]["folders"]
    assert f["calls_per_minute"] == pytest.approx(3.0)
    assert f["at"][0]["test_s"] == pytest.approx(60 * rep["totals"]["calls"] / 3.0)
    # without a measurement it says so instead of applying a served model's latency
    capsys.readouterr()
    assert main(["estimate", *PW, "--methods", "hybrid_rag", "--model", "local/smollm2"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "a local model's pace is this machine's" in printed and "s a call" not in printed


def test_the_wall_time_against_a_finished_run_counts_all_its_calls(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    _usage(run / "usage.jsonl", [("hybrid_rag", "answer", "live", 3)])
    (run / "run.json").write_text(json.dumps({"execution": {"connections": 2}}))
    _cache(run, [0.0, 5.0, 12.0])
    rep = _report(capsys, *PW, "--methods", "hybrid_rag", "--compare", str(run), "--latency", "10")
    wall = rep["wall_time"]
    assert wall["measured_s"] == 12.0 and wall["compare_connections"] == 2
    # 3 independent answers at 2 connections and 10 s a call: 3 x 10 / 2, plus one task's chain
    assert wall["predicted_s"] == pytest.approx(3 * 10 / 2 + 2 * 10)


def test_a_run_with_a_shared_cache_has_no_measured_wall_time(tmp_path):
    run = tmp_path / "run"
    _cache(run, [0.0, 5.0, 12.0])
    (run / "run.json").write_text(json.dumps({"execution": {"cache_dir": str(tmp_path / "shared")}}))
    assert walltime.measured_wall(run) is None and walltime.measured_calls_per_minute(run) is None


def test_a_config_and_a_command_line_at_once_are_refused(capsys):
    assert main(["estimate", "--config", "configs/smoke.yaml", *PW, "--methods", "hybrid_rag"]) == 2
    assert "not both" in capsys.readouterr().err


def test_the_test_phase_scales_with_epochs_and_learning_does_not():
    rates = {"m": {"code:answer/test": Rate("test", {"calls": 1.0, "input_tokens": 900.0, "output_tokens": 20.0,
                                                      "reasoning_tokens": 0.0}, 0.0, 6),
                   "code:learn/element": Rate("element", {"calls": 2.0, "input_tokens": 100.0,
                                                          "output_tokens": 10.0, "reasoning_tokens": 0.0}, 50.0, 6)}}

    def calls(epochs: int) -> dict[str, float]:
        cell = CellUnits("m", "s", 0, 10, 50.0, 2, 4, False, "code", (), True, epochs)
        return {e.phase: e.calls for e in estimate_cells([cell], rates)[0]}

    assert calls(1) == {"answer": 4.0, "learn": 20.0}
    assert calls(3) == {"answer": 12.0, "learn": 20.0}  # three answers per test task, one artifact
