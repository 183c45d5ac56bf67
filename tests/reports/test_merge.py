"""``sourcebench report RUN_A RUN_B``: run folders made apart merged into one leaderboard where their splits,
data and evaluator match; folders with different splits refused with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sourcebench.adapters.phantomwiki.benchmark import BUNDLED
from sourcebench.harness.cli import main


def run(out: Path, model: str, limit: int = 2, extra: tuple[str, ...] = ()) -> Path:
    assert main(["run", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source", "--model", model,
                 "--embedder", "hash", "--limit", str(limit), "--seeds", "0", "--data-dir", str(BUNDLED),
                 "--out", str(out), "--no-report", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("merge")
    return run(root / "a", "scripted/extractive"), run(root / "b", "scripted/other", limit=3)


def test_two_runs_of_different_models_merge_into_one_leaderboard(two_models, tmp_path, capsys):
    a, b = two_models
    capsys.readouterr()
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "compared: 1 cell(s)" in out
    # b scored one more task (--limit 3): left out, so both backends are compared on the same 2 tasks
    assert "not comparable, left out: phantomwiki/seed1_people25_depth20 seed 0: 1 task(s) not scored in every " \
           "folder" in out
    md = (tmp_path / "m" / "leaderboard.md").read_text()
    for name in ("hybrid_rag [scripted/extractive] (baseline)", "hybrid_rag [scripted/other]",
                 "no_source [scripted/extractive]", "no_source [scripted/other]"):
        assert f"| {name} |" in md
    assert "| 2 | 0/2 |" in md  # n tasks: the common ones
    merge = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert [f["model"] for f in merge["folders"]] == ["scripted/extractive", "scripted/other"]
    assert len(merge["left_out"]) == 1


def test_folders_with_different_splits_are_refused_with_the_reason(two_models, tmp_path, capsys):
    a, b = two_models
    other = tmp_path / "other-split"
    shutil.copytree(b, other)
    # a folder whose split of the same source and seed is another (as a changed split rule would make it)
    rows = [json.loads(x) for x in (other / "results.jsonl").read_text().splitlines()]
    (other / "results.jsonl").write_text("".join(json.dumps({**r, "split_id": "0123456789ab"}) + "\n" for r in rows))
    capsys.readouterr()
    assert main(["report", str(a), str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sourcebench: error: report: the run folders have no comparable cell: "
                          "phantomwiki/seed1_people25_depth20 seed 0: different splits (split ids ")
    assert "0123456789ab" in err and len(err.splitlines()) == 1
    assert not (a / "report-merged").exists()


def test_other_benchmark_options_are_not_comparable(two_models, tmp_path, capsys):
    a, _ = two_models
    c = run(tmp_path / "c", "scripted/other", extra=("--opt", "max_difficulty=2"))
    capsys.readouterr()
    assert main(["report", str(a), str(c)]) == 2
    assert "different benchmark options" in capsys.readouterr().err
