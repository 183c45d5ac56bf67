"""Wall time before the run: the critical-path model and `sourcebench estimate --latency`."""

from __future__ import annotations

import json

from sourcebench.harness.cli import main
from sourcebench.harness.walltime import CHAINS, predict
from tests.conftest import SHARED_DATA, need_data


def test_connections_or_the_longest_chain_bound_the_learning_phase():
    cells = [{"method": "hipporag2", "elements": 100, "guidance": 0, "learn_calls": 6400, "test_calls": 0}]
    p = predict(cells, 10.0, 64)
    assert p.learn_bound == "connections" and p.learn_s == 6400 * 10.0 / 64
    chain = [{"method": "sourcelearn", "elements": 100, "guidance": 50, "learn_calls": 400, "test_calls": 0}]
    q = predict(chain, 10.0, 256)  # 400 calls over 256 connections: the task-guided chain is longer
    depth = min(400, CHAINS["sourcelearn"].depth(100, 50, 400))  # a chain is never longer than the calls
    assert q.learn_bound == "chain" and q.learn_s == depth * 10.0
    both = predict(cells + chain, 10.0, 64)  # cells share the connections: the run waits for the longest
    assert both.learn_s == max((6400 + 400) * 10.0 / 64, depth * 10.0)


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
