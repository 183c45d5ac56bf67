"""``--test-processes N``: a cell's test tasks split over N worker processes give the same rows as
one process, each task exactly once, and a re-run makes no call."""

from __future__ import annotations

import pytest

from sourcebench.harness.runner import shard_of
from tests.conftest import need_data
from tests.hardening.common import cache_keys, comparable, live_calls, pw_args, row_key, rows, run_sub


def test_shards_are_stable_and_cover_every_task():
    ids = [f"q{i}" for i in range(200)]
    shards = [shard_of(t, 3) for t in ids]
    assert set(shards) == {0, 1, 2} and shards == [shard_of(t, 3) for t in ids]
    assert all(shard_of(t, 1) == 0 for t in ids)


@pytest.mark.slow
def test_test_processes_match_one_process(tmp_path):
    need_data("phantomwiki")
    methods, seeds = "hybrid_rag,no_source", "0,1"
    one = tmp_path / "one"
    p = run_sub(pw_args(one, "scripted/extractive", methods, 4, seeds, "--no-report"))
    assert p.returncode == 0, p.stderr
    two = tmp_path / "two"
    p = run_sub(pw_args(two, "scripted/extractive", methods, 4, seeds, "--test-processes", "2",
                        "--max-connections", "4"), timeout=900)
    assert p.returncode == 0, p.stderr
    assert "test phase: 2 processes" in p.stdout and "2 connection(s)" in p.stdout
    final = rows(two)
    assert len(final) == 16 and len({row_key(r) for r in final}) == 16
    assert comparable(final) == comparable(rows(one))
    assert cache_keys(two) == cache_keys(one)
    assert (two / "report" / "leaderboard.md").exists()
    calls = live_calls(two)
    p = run_sub(pw_args(two, "scripted/extractive", methods, 4, seeds, "--test-processes", "2", "--no-report"))
    assert p.returncode == 0 and "0 new result row(s), 0 live model call(s)" in p.stdout
    assert live_calls(two) == calls


def test_test_processes_refused_with_ray(tmp_path):
    p = run_sub(pw_args(tmp_path / "x", "scripted/extractive", "no_source", 1, "0", "--executor", "ray",
                        "--test-processes", "2"))
    assert p.returncode != 0 and "--test-processes: only with --executor local" in p.stderr
    assert "Traceback" not in p.stderr


def test_local_model_cores_split_over_test_processes(monkeypatch, tmp_path):
    """Each of N test processes of an embedded model gets 1/N of the contexts the machine would get."""
    from sourcebench.harness.executors import _local_share
    from sourcebench.harness.runner import RunConfig

    monkeypatch.delenv("SOURCEBENCH_LOCAL_INSTANCES", raising=False)
    monkeypatch.delenv("SOURCEBENCH_LOCAL_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)  # 4 threads per context, 2 contexts
    local = RunConfig(benchmark="phantomwiki", methods=["hybrid_rag"], model="local/smollm2", out=tmp_path)
    assert _local_share(local, 2) == 1 and _local_share(local, 4) == 1
    monkeypatch.setenv("SOURCEBENCH_LOCAL_THREADS", "1")  # 8 one-thread contexts
    assert _local_share(local, 2) == 4
    judged = RunConfig(benchmark="swe_qa", methods=["hybrid_rag"], model="openai/gpt-4o", out=tmp_path,
                       judge_model="local/smollm2")
    assert _local_share(judged, 2) == 4
    api = RunConfig(benchmark="phantomwiki", methods=["hybrid_rag"], model="scripted/extractive", out=tmp_path)
    assert _local_share(api, 2) is None
    monkeypatch.setenv("SOURCEBENCH_LOCAL_INSTANCES", "1")  # the user's choice wins
    assert _local_share(local, 2) is None
