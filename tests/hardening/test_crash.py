"""Crash safety: SIGKILL at seeded points, resume, and compare with an uninterrupted run.

What is guaranteed, and asserted here:

* ``results.jsonl`` after the resume holds exactly the rows of the uninterrupted run (no duplicate,
  no missing row), and every row written before the kill is kept as it was;
* a model call that completed before the kill is never made again: a completed call is in the
  call cache (written as soon as the reply arrives), so the resumed run's live calls are exactly
  the calls missing from the cache after the kill;
* calls that were in flight at the kill (sent, reply not yet cached) are the only ones sent twice;
  their number is bounded by the concurrency (measured with the fault server, which sees every
  request);
* ``usage.jsonl`` never counts more live calls than the uninterrupted run: counters are flushed
  per scored task (and during a build, every ``Runner.LEARN_USAGE_FLUSH_S``), so the calls of a
  task cut off by the kill are counted once, by the resumed run, or (if they were already cached)
  as cache hits;
* SIGTERM stops a run as Ctrl-C does: the counts are written and partial artifacts removed.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import need_data
from tests.hardening.common import cache_keys, comparable, live_calls, pw_args, row_key, rows, run_sub
from tests.hardening.common import popen as start

pytestmark = pytest.mark.slow

KILL_SEED = 8
N_TASKS = 10  # per method; awm (learns from guidance with model calls) and no_source, seed 0
N_ROWS = 2 * N_TASKS
KILL_AFTER_ROWS = sorted(int(x) for x in np.random.default_rng(KILL_SEED).choice(np.arange(1, N_ROWS), 3, replace=False))


def args(out: Path, model: str = "scripted/extractive", *extra: str) -> list[str]:
    # AWM answers its 12 guidance tasks 4 at a time while learning (its own concurrency setting; by
    # default it sends all 12 at once and freezes the moment they return), then induces workflows. Two
    # test tasks at a time: rows then arrive a pair per scripted delay, never in a burst that could
    # carry the run past the kill point within one poll.
    return pw_args(out, model, "awm,no_source", N_TASKS, "0", "--guidance-limit", "12", "--no-report",
                   "--max-samples", "2", "--method-config", "awm.concurrency=4", *extra)


def n_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def n_cached(out: Path) -> int:
    path = out / "cache" / "llm_calls.sqlite"
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def kill_when(p: subprocess.Popen, ready, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and p.poll() is None:
        if ready():
            p.send_signal(signal.SIGKILL)
            p.wait()
            return
        time.sleep(0.02)
    p.kill()
    pytest.fail(f"the run ended (rc {p.poll()}) before the kill point was reached")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    need_data("phantomwiki")
    out = tmp_path_factory.mktemp("ref") / "run"
    p = run_sub(args(out))
    assert p.returncode == 0, p.stderr
    keys = cache_keys(out)
    assert live_calls(out) == len(keys)  # precondition: every distinct call is made once
    return {"rows": rows(out), "keys": keys, "live": live_calls(out)}


def check_resume(out: Path, reference: dict, env: dict[str, str]) -> dict:
    """After a kill: resume, then check rows and call accounting against the reference."""
    results = out / "results.jsonl"
    before = results.read_bytes() if results.exists() else b""
    kept = before[: before.rfind(b"\n") + 1]  # complete lines written before the kill
    cached_at_kill = cache_keys(out)
    live_at_kill = live_calls(out) if (out / "usage.jsonl").exists() else 0
    assert len(kept.splitlines()) < N_ROWS, "the run finished before it was killed"

    p = run_sub(args(out), env={**env, "SOURCEBENCH_SCRIPTED_DELAY": "0"})
    assert p.returncode == 0, p.stderr
    final = rows(out)
    assert results.read_bytes().startswith(kept)  # rows written before the kill are untouched
    assert len(final) == N_ROWS and len({row_key(r) for r in final}) == N_ROWS
    assert comparable(final) == comparable(reference["rows"])
    assert cache_keys(out) == reference["keys"]  # the same calls, no other
    live_resumed = live_calls(out) - live_at_kill
    assert live_resumed == len(reference["keys"] - cached_at_kill)  # no completed call made again
    assert live_at_kill <= len(cached_at_kill)  # what the killed run counted, it had completed
    assert live_calls(out) <= reference["live"]
    return {"cached_at_kill": cached_at_kill, "kept_rows": len(kept.splitlines())}


SLOW = {"SOURCEBENCH_SCRIPTED_DELAY": "0.15"}
# While learning is interrupted: AWM's 12 guidance answers are three rounds of 4 calls, so a 2 s delay
# leaves 4 s between the first cached answers and the frozen artifact, wide enough for the poll to land
# inside it on a loaded 2-core CI machine.
LEARNING_DELAY = {"SOURCEBENCH_SCRIPTED_DELAY": "2"}


def test_kill_while_learning_then_resume(tmp_path, reference):
    out = tmp_path / "run"
    p = start(args(out), env=LEARNING_DELAY)
    # kill once the first round of guidance answers is cached, while the next is in flight
    kill_when(p, lambda: n_cached(out) >= 3 and n_lines(out / "results.jsonl") == 0)
    assert not list((out / "artifacts").glob("method_awm/*/artifact.json"))  # killed before freezing
    info = check_resume(out, reference, SLOW)
    assert info["kept_rows"] == 0 and len(info["cached_at_kill"]) >= 3


@pytest.mark.parametrize("extra", [("--learn-concurrency", "1"), ()], ids=["one-cell-at-a-time", "cells-at-once"])
def test_sigterm_while_learning_counts_the_calls_and_removes_the_partial_build(tmp_path, reference, extra):
    """``kill`` (SIGTERM) stops a run as Ctrl-C does: the learning calls made so far are counted in
    usage.jsonl (a SIGKILL would lose them), no half-built artifact folder is left, and the same
    command resumes to the uninterrupted result (also when cells were being learned at once)."""
    out, log = tmp_path / "run", tmp_path / "run.log"
    p = start(args(out, "scripted/extractive", *extra), env=LEARNING_DELAY, log=log)
    deadline = time.time() + 300
    while p.poll() is None and not (n_cached(out) >= 3 and n_lines(out / "results.jsonl") == 0):
        assert time.time() < deadline
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=120) == 130, log.read_text()[-2000:]
    assert "interrupted; run the same command again to resume" in log.read_text()
    assert not list((out / "artifacts").glob("method_awm/*")) and not list((out / "artifacts").glob("method_awm/.*"))
    counted, completed = live_calls(out), len(cache_keys(out))
    assert 3 <= counted <= completed
    check_resume(out, reference, SLOW)


@pytest.mark.parametrize("after_rows", KILL_AFTER_ROWS)
def test_kill_during_test_phase_then_resume(tmp_path, reference, after_rows):
    out = tmp_path / "run"
    p = start(args(out), env=SLOW)
    kill_when(p, lambda: n_lines(out / "results.jsonl") >= after_rows)
    info = check_resume(out, reference, SLOW)
    assert info["kept_rows"] >= after_rows


def test_kill_twice_then_resume(tmp_path, reference):
    out = tmp_path / "run"
    for after in (3, 9):
        p = start(args(out), env=SLOW)
        kill_when(p, lambda after=after: n_lines(out / "results.jsonl") >= after)
    check_resume(out, reference, SLOW)


def test_calls_in_flight_at_the_kill_are_the_only_ones_sent_twice(tmp_path, fault_server):
    """Server-side count of every request: what is actually billed."""
    need_data("phantomwiki")
    env = {"FAULT_BASE_URL": fault_server.url, "FAULT_API_KEY": "unused-but-required-key"}
    model, conc = "openai-api/fault/lat150", 4
    ref = tmp_path / "ref"
    fault_server.reset()
    p = run_sub(args(ref, model, "--max-connections", str(conc)), env=env)
    assert p.returncode == 0, p.stderr
    sent_ref = fault_server.stats()["requests"]
    assert sent_ref == len(cache_keys(ref)) == live_calls(ref)

    out = tmp_path / "run"
    fault_server.reset()
    proc = start(args(out, model, "--max-connections", str(conc)), env=env)
    kill_when(proc, lambda: n_lines(out / "results.jsonl") >= 7)
    time.sleep(0.5)  # requests the dead client had sent finish on the server side
    sent_killed = fault_server.stats()["requests"]
    cached_at_kill = len(cache_keys(out))
    p = run_sub(args(out, model, "--max-connections", str(conc)), env=env)
    assert p.returncode == 0, p.stderr
    sent_total = fault_server.stats()["requests"]
    assert comparable(rows(out), ("run_id", "artifact")) == comparable(rows(ref), ("run_id", "artifact"))
    in_flight = sent_killed - cached_at_kill  # sent, but the reply never reached the cache
    assert 0 <= in_flight <= conc
    assert sent_total - sent_ref == in_flight  # nothing else was sent twice
    assert sent_total - sent_killed == sent_ref - cached_at_kill  # the resume sent only what was missing


def test_torn_last_line_is_dropped_and_recomputed(tmp_path, reference):
    out = tmp_path / "run"
    p = start(args(out), env=SLOW)
    kill_when(p, lambda: n_lines(out / "results.jsonl") >= 5)
    results = out / "results.jsonl"
    data = results.read_bytes()
    last = data[: data.rfind(b"\n")].rfind(b"\n") + 1
    results.write_bytes(data[: last + 40])  # what a crash in the middle of an append leaves
    check_resume(out, reference, SLOW)


def test_second_run_on_the_same_folder_is_refused(tmp_path, reference):
    out = tmp_path / "run"
    log = tmp_path / "first.log"
    first = start(args(out), env={"SOURCEBENCH_SCRIPTED_DELAY": "1.0"}, log=log)  # long enough to overlap
    deadline = time.time() + 300
    while time.time() < deadline and not (out / ".lock").exists():
        time.sleep(0.05)
    while time.time() < deadline and not (out / ".lock").read_text().strip():
        time.sleep(0.05)
    second = run_sub(args(out), env={"SOURCEBENCH_SCRIPTED_DELAY": "0"})
    assert second.returncode == 2
    err = second.stderr.strip()
    assert len(err.splitlines()) == 1 and "another sourcebench run is using this folder" in err, err
    assert "Traceback" not in second.stderr
    assert first.wait(timeout=600) == 0, log.read_text()[-2000:]
    assert comparable(rows(out)) == comparable(reference["rows"])
    # once the first run is done the folder is free again: a re-run is a no-op
    again = run_sub(args(out))
    assert again.returncode == 0 and "0 new result row(s), 0 live model call(s)" in again.stdout
