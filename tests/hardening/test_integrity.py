"""Nothing silently wrong: seeds, result rows, the call cache and masked secrets, checked where they
are read or written (the bad-input table covers the same through the command line)."""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3

import pytest

from sourcebench.harness.errors import ConfigError, DataError
from sourcebench.harness.llm import CallCache
from sourcebench.harness.llm.redaction import _RedactingLogFilter
from sourcebench.harness.options import seed_list
from sourcebench.harness.runner import RunConfig

TEN = "sk-XYZ7q9w"  # a 10-character key


@pytest.mark.parametrize("text", ["0,0", "", ",", "-1", "1,2,1"])
def test_seed_lists_must_be_distinct_non_negative_and_non_empty(text):
    with pytest.raises(argparse.ArgumentTypeError, match="--seeds"):
        seed_list(text)


def test_seed_lists_accepted():
    assert seed_list("0, 1,2") == [0, 1, 2] and seed_list("7") == [7]


@pytest.mark.parametrize("seeds", [[], [0, 0], [-1], ["0"], [True], 3])
def test_a_run_config_refuses_bad_seeds(seeds, tmp_path):
    with pytest.raises(ConfigError, match="seeds"):
        RunConfig(benchmark="phantomwiki", methods=["no_source"], model="scripted/extractive", out=tmp_path,
                  seeds=seeds)


@pytest.mark.parametrize("seeds", [[-1], [0, 0], []])
def test_an_experiment_config_refuses_bad_seeds(seeds):
    from sourcebench.reports.config import parse_config

    cfg = {"name": "x", "output": "o", "seeds": seeds, "backends": [{"id": "b", "model": "scripted/extractive"}],
           "benchmarks": [{"id": "phantomwiki"}], "tables": {"table1": {}}}
    with pytest.raises(ConfigError, match="seeds"):
        parse_config(cfg)


def _run_folder(tmp_path, rows: list[dict]) -> object:
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r", "benchmark": "phantomwiki"}))
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _row(task: str = "t1", **kw) -> dict:
    return {"benchmark": "phantomwiki", "source": "w", "method": "no_source", "seed": 0, "task_id": task,
            "score": 0.5, "correct": False, "failed": False, **kw}


@pytest.mark.parametrize("bad, message", [
    ({"score": "0.9"}, r"results.jsonl:2: field score must be a number between 0 and 1, got '0.9'"),
    ({"score": float("nan")}, "field score"),
    ({"score": -0.1}, "field score"),
    ({"score": True}, "field score"),
    ({"seed": "0"}, "field seed"),
    ({"seed": 1.5}, "field seed"),
    ({"method": ""}, "field method"),
    ({"task_id": None}, "field task_id"),
    ({"correct": "yes"}, "field correct"),
])
def test_reports_refuse_result_rows_of_the_wrong_type_or_range(tmp_path, bad, message):
    from sourcebench.reports.rundata import load_run

    folder = _run_folder(tmp_path, [_row("t0"), _row("t1", **bad)])
    with pytest.raises(DataError, match=message):
        load_run(folder)


def test_reports_refuse_a_duplicated_row(tmp_path):
    from sourcebench.reports.rundata import load_run

    assert len(load_run(_run_folder(tmp_path, [_row("t0"), _row("t1")])).results) == 2
    with pytest.raises(DataError, match=r"results.jsonl:3: duplicate result row .* as line 1"):
        load_run(_run_folder(tmp_path, [_row("t0"), _row("t1"), _row("t0", score=0.9)]))


def test_a_non_json_cache_value_is_a_miss_and_is_overwritten(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    cache.put("k", {"text": "a", "input_tokens": 1, "output_tokens": 1})
    con = sqlite3.connect(tmp_path / "c.sqlite")
    for broken in ("{not json", "[1, 2]", '{"text": 5, "input_tokens": 1, "output_tokens": 1}', '{"text": "x"}'):
        with con:
            con.execute("UPDATE calls SET value = ? WHERE key = 'k'", (broken,))
        assert cache.get("k") is None
    con.close()
    cache.put("k", {"text": "b", "input_tokens": 2, "output_tokens": 3})
    assert cache.get("k") == {"text": "b", "input_tokens": 2, "output_tokens": 3}


def test_a_corrupt_call_cache_is_one_line_saying_what_to_do(tmp_path):
    path = tmp_path / "llm_calls.sqlite"
    path.write_bytes(b"garbage" * 1000)
    with pytest.raises(DataError) as e:
        CallCache(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "move it away (its calls are then made again)" in msg
    path.unlink()
    CallCache(path)  # moved away: a new cache


def test_a_short_key_in_a_reply_never_enters_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULT_API_KEY", TEN)
    cache = CallCache(tmp_path / "c.sqlite")
    cache.put("k", {"text": f"echo: Bearer {TEN}", "input_tokens": 1, "output_tokens": 1})
    con = sqlite3.connect(tmp_path / "c.sqlite")
    dump = "\n".join(con.iterdump())
    con.close()
    assert TEN not in dump and cache.get("k")["text"] == "echo: Bearer ***"


def test_the_log_filter_masks_a_short_key_before_a_handler_writes_it(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEN)
    record = logging.LogRecord("inspect_ai", logging.ERROR, __file__, 1, "HTTP 401: key %s rejected", (TEN,), None)
    assert _RedactingLogFilter().filter(record)
    assert TEN not in record.getMessage() and "***" in record.getMessage()
