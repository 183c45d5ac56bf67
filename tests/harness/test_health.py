"""Cell health read from a run folder (harness/health.py)."""

from __future__ import annotations

import json

from sourcebench.harness.health import run_health


def _artifact(run_dir, method, key, stages):
    d = run_dir / "artifacts" / f"method_{method}" / key
    d.mkdir(parents=True)
    (d / "artifact.json").write_text(json.dumps({"stats": {"health": {"stages": stages, "lost": {}}}}))


def _rows(method, key, n=4, failed=0):
    return [{"benchmark": "b", "method": method, "source": "s", "seed": 0, "task_id": f"t{i}", "artifact": key,
             "failed": i < failed, "failure_reason": "output_cap: x" if i < failed else ""} for i in range(n)]


def test_a_shared_sub_artifact_s_failures_degrade_every_cell_that_uses_it(tmp_path):
    """SourceLearn's M0 is built once, by the first cell; its failed construction calls are in that
    cell's health only, and the M0-only variant that reuses it must be degraded too."""
    _artifact(tmp_path, "sourcelearn", "k1", {"construct_read": {"requests": 10, "calls": 12, "failed": 5},
                                              "mt_answer": {"requests": 2, "calls": 2, "failed": 2}})
    _artifact(tmp_path, "sourcelearn-m0", "k2", {})
    _artifact(tmp_path, "hybrid_rag", "k3", {})
    rows = _rows("sourcelearn", "k1") + _rows("sourcelearn-m0", "k2") + _rows("hybrid_rag", "k3")
    cells = {c.method: c for c in run_health(tmp_path, rows, [], 0.10)}
    assert any("construct_read: 5 of 10" in r for r in cells["sourcelearn"].reasons)
    m0 = cells["sourcelearn-m0"].reasons
    assert m0 == ["shared with sourcelearn: learning stage construct_read: 5 of 10 model requests failed (50 %)"]
    assert not cells["hybrid_rag"].degraded  # it shares nothing


def test_test_answers_over_the_share_degrade_a_cell(tmp_path):
    _artifact(tmp_path, "hybrid_rag", "k3", {})
    cells = run_health(tmp_path, _rows("hybrid_rag", "k3", n=10, failed=2), [], 0.10)
    assert cells[0].reasons == ["test: 2 of 10 answers failed (20 %; output_cap 2)"]
    assert not run_health(tmp_path, _rows("hybrid_rag", "k3", n=10, failed=1), [], 0.10)[0].degraded
