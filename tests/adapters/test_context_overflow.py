"""A prompt longer than the context window is a scored failure with its reason on every benchmark.

Each benchmark runs through the real runner with the scripted model and ``--context-window 64``: the
endpoint probe fits, every answer prompt does not. No run may crash; every row must be a failure
scored 0 whose reason says context_overflow, and the report must count it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sourcebench.adapters.appworld import AppWorld
from sourcebench.harness.runner import RunConfig, Runner
from sourcebench.reports.leaderboard import write_report
from tests.adapters.appworld_fakes import FakeEnv
from tests.conftest import need_data

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WINDOW = 64


def _tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def route(path):\n    return path\n")
    return root


CASES = {
    "phantomwiki": lambda tmp: {"data_dir": need_data("phantomwiki").parent},
    "apibench": lambda tmp: {"data_dir": need_data("apibench").parent, "sources": ["torchhub"]},
    "swe_qa": lambda tmp: {"data_dir": need_data("swe_qa").parent, "sources": ["flask"],
                           "options": {"flask": str(_tree(tmp / "flask-tree"))}},
    "multidoc2dial": lambda tmp: {"data_dir": FIXTURES, "sources": ["dmv"]},
    "narrativeqa": lambda tmp: {"data_dir": FIXTURES, "sources": ["breakfast_club"]},
    "appworld": lambda tmp: {"data_dir": FIXTURES},
}


@pytest.mark.parametrize("benchmark", sorted(CASES))
def test_prompt_over_the_window_is_a_scored_failure(benchmark, tmp_path, monkeypatch):
    if benchmark == "appworld":  # no AppWorld task data here: fake worlds at the package boundary
        envs = []

        async def fake_open(self, task_id, experiment_name):
            envs.append(FakeEnv())
            return envs[-1]

        monkeypatch.setattr(AppWorld, "open_environment", fake_open)
    out = tmp_path / "run"
    cfg = RunConfig(benchmark=benchmark, methods=["hybrid_rag"], model="scripted/extractive", out=out, seeds=[0],
                    limit=2, embedder="hash", context_window=WINDOW, **CASES[benchmark](tmp_path))
    summary = Runner(cfg).run()
    write_report(out, data_dir=cfg.data_dir)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary["rows_new"] == len(rows) == 2
    for r in rows:
        assert r["failed"] and r["score"] == 0.0 and not r["correct"]
        assert r["failure_reason"].startswith("context_overflow: prompt of ~"), r["failure_reason"]
        assert f"exceeds the {WINDOW}-token context window" in r["failure_reason"]
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert any(f["error"].startswith("context_overflow") and f["phase"] == "answer" for f in failures)
    md = (out / "report" / "leaderboard.md").read_text()
    assert "| 2/2 |" in md and "context_overflow" in md
    if benchmark == "appworld":
        assert all(e.closed and not e.executed for e in envs)  # the agent never acted
