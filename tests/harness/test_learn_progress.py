"""Long learning phases show what they are doing: method messages and model calls reach the console."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from sourcebench.harness.runner import RunConfig, Runner
from tests.conftest import SHARED_DATA, need_data

pytestmark = pytest.mark.slow


def test_learning_progress_reaches_a_log_file(tmp_path, monkeypatch):
    need_data("phantomwiki")
    monkeypatch.setattr(Runner, "LEARN_LOG_INTERVAL_S", 0.0)  # the scripted model is fast: no throttling
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=60)  # a log file: no live bar, lines instead
    cfg = RunConfig(benchmark="phantomwiki", methods=["hipporag2"], model="scripted/extractive", out=tmp_path / "run",
                    seeds=[0], limit=2, embedder="hash", data_dir=SHARED_DATA)
    summary = Runner(cfg, console=console).run()
    text = buf.getvalue()
    learn = [line for line in text.splitlines() if " learn hipporag2 on " in line]
    # the method's own message, timestamped, names the cell
    assert any(re.match(r"\d\d:\d\d:\d\d learn hipporag2 on \S+ \(seed 0\): hipporag2: OpenIE on \d+ passages", x)
               for x in learn), text[-2000:]
    # a line per 10 live calls, with the stage the calls were made in
    counts = [int(m.group(1)) for x in learn if (m := re.search(r": (\d+) live, \d+ cached calls \(stage (\w+)\)", x))]
    assert counts and all(c % 10 == 0 for c in counts)
    assert counts == sorted(counts) and max(counts) <= summary["live_calls"]
    # each count line also says how many of the cell's calls are in flight and the time left at its pace
    # (hipporag2 has measured rates, so the time left is a number, not "?")
    paces = [m for x in learn if (m := re.search(r"cached calls \(stage \w+\), (\d+) in flight, ~(\S+ \w+|\?) left", x))]
    assert paces and all(m.group(2) != "?" for m in paces[:1]), learn[-3:]


def test_time_left_from_the_pace_so_far():
    from sourcebench.harness.walltime import eta_s, short

    assert eta_s(25, 100, 10.0) == 30.0  # 75 calls left at 2.5 calls a second
    assert eta_s(0, 100, 10.0) is None and eta_s(120, 100, 10.0) is None and eta_s(5, None, 1.0) is None
    assert short(30.0) == "30 s" and short(5400.0) == "1.5 h" and short(None) == "?"


def test_cells_of_a_local_model_are_tested_one_after_another(tmp_path):
    """An in-process model keeps each context's prompt prefix (the method's notes): cells do not overlap."""
    need_data("phantomwiki")

    def runner(model: str) -> Runner:
        out = tmp_path / model.replace("/", "_")
        return Runner(RunConfig(benchmark="phantomwiki", methods=["no_source"], model=model, out=out, seeds=[0],
                                limit=2, embedder="hash", data_dir=SHARED_DATA))

    assert runner("local/smollm2").max_cells(6) == 1
    assert runner("scripted/extractive").max_cells(6) == 4
    assert runner("scripted/extractive").max_cells(2) == 2


def _learn_totals(path) -> tuple[dict, int]:
    from sourcebench.harness.io import read_jsonl

    totals: dict = {}
    rows = [r for r in read_jsonl(path) if r["phase"] == "learn"]
    for r in rows:
        key = (r["method"], r["stage"], r["status"])
        totals[key] = totals.get(key, 0) + r["calls"]
    return totals, len(rows)


def test_learning_cost_reaches_usage_jsonl_while_the_build_runs(tmp_path, monkeypatch):
    """A build killed after an hour must not take the cost of its calls with it: the counts are
    written during the build, and written in parts they add up to the same totals."""
    need_data("phantomwiki")

    def run(name: str, flush_s: float) -> tuple[dict, int]:
        monkeypatch.setattr(Runner, "LEARN_USAGE_FLUSH_S", flush_s)
        cfg = RunConfig(benchmark="phantomwiki", methods=["hipporag2"], model="scripted/extractive",
                        out=tmp_path / name, seeds=[0], limit=2, embedder="hash", data_dir=SHARED_DATA)
        Runner(cfg).run()
        return _learn_totals(tmp_path / name / "usage.jsonl")

    at_end, rows_at_end = run("at_end", float("inf"))
    often, rows_often = run("often", 0.0)
    assert at_end and sum(at_end.values()) > 1
    assert often == at_end  # no call counted twice or lost
    assert rows_often > rows_at_end  # written in parts while learning
