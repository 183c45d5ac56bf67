"""Notes a method records with an artifact while learning (``REPORT_NOTES`` in its learn stats) reach
the leaderboard per source and seed: SourceLearn's seed whose Pi1 came out empty is reported as such."""

from __future__ import annotations

import json
from pathlib import Path

from sourcebench.harness.artifacts import MANIFEST
from sourcebench.harness.method import REPORT_NOTES
from sourcebench.reports.leaderboard import write_report

NOTE = "empty Pi1: no MT built; scored: the model task learning reached"


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "benchmark": "phantomwiki", "seeds": [0, 1],
                                              "methods": [{"name": "sourcelearn", "version": "8", "config": {},
                                                           "deviations": []}]}))
    rows = []
    for seed, art in ((0, "aaaa000000000000"), (1, "bbbb000000000000")):
        folder = run / "artifacts" / "method_sourcelearn" / art
        folder.mkdir(parents=True)
        stats = {"mt_built": seed != 1, **({REPORT_NOTES: [NOTE]} if seed == 1 else {})}
        (folder / MANIFEST).write_text(json.dumps({"kind": "method/sourcelearn", "key": art, "stats": stats}))
        rows += [{"run_id": "r1", "benchmark": "phantomwiki", "source": "s1", "method": "sourcelearn",
                  "method_version": "8", "seed": seed, "task_id": f"t{i}", "score": float(i % 2),
                  "correct": bool(i % 2), "failed": False, "failure_reason": "", "artifact": art} for i in range(2)]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_a_seed_with_an_empty_pi1_is_reported_per_seed(tmp_path):
    paths = write_report(_run(tmp_path), n_boot=50, protocols=[])
    md = paths["md"].read_text()
    assert "notes recorded while learning, per seed" in md
    lines = [x for x in md.splitlines() if NOTE in x]
    assert len(lines) == 1 and "| sourcelearn | s1 | 1 |" in lines[0]  # seed 1 only; seed 0 built its MT
    assert NOTE in paths["html"].read_text()
