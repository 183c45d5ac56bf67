"""``--executor ray``: the same run under a local Ray instance gives the same rows as the local executor.

The Ray run also resumes a folder a local run started (a subset of the tasks), so it shows that the
cells Ray schedules skip rows already present, exactly as a local re-run does, and that a finished
folder is not sent to Ray at all.
"""

from __future__ import annotations

import pytest

from tests.conftest import need_data
from tests.hardening.common import cache_keys, comparable, live_calls, pw_args, row_key, rows, run_sub

pytestmark = pytest.mark.slow


def test_ray_executor_matches_local_and_resumes(tmp_path):
    pytest.importorskip("ray")
    need_data("phantomwiki")
    methods, seeds = "hybrid_rag,no_source", "0,1"
    local = tmp_path / "local"
    p = run_sub(pw_args(local, "scripted/extractive", methods, 4, seeds, "--no-report"))
    assert p.returncode == 0, p.stderr
    assert len(rows(local)) == 16

    distributed = tmp_path / "ray"
    p = run_sub(pw_args(distributed, "scripted/extractive", methods, 2, seeds, "--no-report"))  # half of it, locally
    assert p.returncode == 0, p.stderr
    first_half = rows(distributed)
    calls_before = live_calls(distributed)
    assert len(first_half) == 8

    p = run_sub(pw_args(distributed, "scripted/extractive", methods, 4, seeds, "--executor", "ray"), timeout=900)
    assert p.returncode == 0, p.stderr
    assert "4 test cell(s) submitted" in p.stdout  # (method, seed) cells of one source, as Ray tasks
    final = rows(distributed)
    assert len(final) == 16 and len({row_key(r) for r in final}) == 16
    assert final[:8] == first_half  # rows of the local half untouched
    assert comparable(final) == comparable(rows(local))
    # the Ray tasks made the calls of the other half, and the two folders hold the same calls
    assert live_calls(distributed) > calls_before
    assert cache_keys(distributed) == cache_keys(local)
    assert (distributed / "report" / "leaderboard.md").exists()  # written by the driver

    p = run_sub(pw_args(distributed, "scripted/extractive", methods, 4, seeds, "--executor", "ray", "--no-report"))
    assert p.returncode == 0 and "0 new result row(s), 0 live model call(s)" in p.stdout
    assert "ray:" not in p.stdout  # nothing pending: no Ray task at all
