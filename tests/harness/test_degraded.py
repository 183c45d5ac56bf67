"""Degraded cells: a run whose answers the output cap ate is not a row of zeros.

``scripted/gpt-oss-rsn600`` is a reasoning family (gpt-oss) whose every reply spends 600 reasoning
tokens first, counted against the cap, as the hosted APIs do.
"""

from __future__ import annotations

import json

import pytest

from sourcebench.harness.cli import main
from sourcebench.harness.health import EXIT_DEGRADED
from tests.conftest import SHARED_DATA, need_data

pytestmark = pytest.mark.slow


def _args(out, *extra):
    return ["run", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source", "--model",
            "scripted/gpt-oss-rsn600", "--limit", "3", "--seeds", "0", "--embedder", "hash", "--out", str(out),
            "--data-dir", str(SHARED_DATA), *extra]


def _jsonl(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_default_allowance_answers_and_the_report_shows_reasoning_tokens(tmp_path):
    need_data("phantomwiki")
    out = tmp_path / "ok"
    assert main(_args(out)) == 0
    rows = _jsonl(out / "results.jsonl")
    assert rows and not any(r["failed"] for r in rows)
    answer = [u for u in _jsonl(out / "usage.jsonl") if u["phase"] == "answer" and u["status"] == "live"]
    assert sum(u["reasoning_tokens"] for u in answer) == 600 * sum(u["calls"] for u in answer)
    md = (out / "report" / "leaderboard.md").read_text()
    assert "answer reasoning" in md and "DEGRADED (" not in md and "degraded:" not in md
    assert json.loads((out / "run.json").read_text())["model"]["reasoning_tokens"] == 25_000


def test_a_small_allowance_degrades_every_cell_exits_4_and_says_why(tmp_path, capsys):
    need_data("phantomwiki")
    out = tmp_path / "small"
    assert main(_args(out, "--reasoning-tokens", "50")) == EXIT_DEGRADED
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "hybrid_rag on" in printed and "degraded: test: 3 of 3 answers failed" in printed
    assert "more than 10 % of its answers" in printed and "with --limit 3, one failed answer of 3 is 33 %" in printed
    rows = _jsonl(out / "results.jsonl")
    assert all(r["failed"] and r["failure_reason"].startswith("output_cap:") for r in rows)
    assert "Invalid JSON" not in rows[0]["failure_reason"] and "600 reasoning" not in rows[0]["failure_reason"]
    md = (out / "report" / "leaderboard.md").read_text()
    assert md.count("DEGRADED (") == 2  # both methods' accuracy cells
    assert "no_source on" in md and "answers failed" in md
    # --allow-degraded: the same finished folder, exit 0, no model call
    assert main(_args(out, "--reasoning-tokens", "50", "--allow-degraded")) == 0
    assert "0 live model call(s)" in capsys.readouterr().out
