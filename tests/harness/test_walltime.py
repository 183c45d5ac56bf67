"""Wall time before the run: the critical-path model and `sourcebench estimate --latency`."""

from __future__ import annotations

import json

from sourcebench.harness.cli import main
from sourcebench.harness.walltime import CHAINS, predict
from tests.conftest import SHARED_DATA, need_data


def test_the_calls_off_the_chain_fill_the_connections_while_the_chain_waits_a_latency_a_call():
    cells = [{"method": "hipporag2", "elements": 100, "guidance": 0, "learn_calls": 6400, "test_calls": 0}]
    p = predict(cells, 10.0, 64)
    d = CHAINS["hipporag2"].depth(100, 0)
    assert p.learn_bound == "connections" and p.learn_s == (6400 - d) * 10.0 / 64 + d * 10.0
    chain = [{"method": "sourcelearn", "elements": 100, "guidance": 50, "learn_calls": 400, "test_calls": 0}]
    q = predict(chain, 10.0, 256)  # 400 calls over 256 connections: the task-guided chain is longer
    depth = min(400, CHAINS["sourcelearn"].depth(100, 50, 400))  # a chain is never longer than the calls
    assert q.learn_bound == "chain" and q.learn_s == (400 - depth) * 10.0 / 256 + depth * 10.0
    both = predict(cells + chain, 10.0, 64)  # cells share the connections; the longest chain is the run's
    assert both.learn_s == (6400 + 400 - depth) * 10.0 / 64 + depth * 10.0
    # at one connection every call waits for the one before: the calls x the latency
    assert predict(chain, 10.0, 1).learn_s == 400 * 10.0
    # the test phase: every task independent, plus one task's chain of an answer and a judge call
    t = predict([{"method": "hybrid_rag", "elements": 1, "guidance": 0, "learn_calls": 0, "test_calls": 64}], 5.0, 32)
    assert t.learn_s == 0 and t.test_s == 64 * 5.0 / 32 + 2 * 5.0


def test_estimate_prints_the_wall_time_at_a_latency_and_connections(capsys):
    need_data("phantomwiki")
    args = ["estimate", "--benchmark", "phantomwiki", "--methods", "hipporag2", "--seeds", "0", "--limit", "3",
            "--data-dir", str(SHARED_DATA)]
    assert main([*args, "--latency", "12", "--max-connections", "8,64"]) == 0
    out = capsys.readouterr().out
    assert "wall time at C = 8 and 12 s a call: about" in out and "wall time at C = 64 and 12 s a call" in out
    assert main([*args, "--json", "--reasoning-effort", "low"]) == 0
    wall = json.loads(capsys.readouterr().out)["wall_time"]
    assert wall["latency_s"] == 6.0 and wall["connections"] == [32] and wall["lines"]
