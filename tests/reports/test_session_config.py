"""A protocol run rebuilt from ``run.json`` uses exactly the test phase's settings and cache.

Prequential and harmful-entry protocols call the model again and compare with the test phase; with
other settings or another cache the comparison would not mean what it prints.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from sourcebench.adapters.phantomwiki.benchmark import BUNDLED
from sourcebench.harness.cli import main
from sourcebench.harness.protocols.session import run_config
from sourcebench.harness.runner import RunConfig

# what the protocols may set themselves: which methods, and that nothing is displayed
REBUILT_APART = {"methods", "display", "out"}


def test_a_protocol_run_rebuilt_from_run_json_has_the_test_phase_settings(tmp_path):
    out, cache, data = tmp_path / "run", tmp_path / "shared-cache", tmp_path / "data"
    shutil.copytree(BUNDLED, data / "phantomwiki")  # a data folder of the user's own
    argv = ["run", "--benchmark", "phantomwiki", "--opt", "max_difficulty=2", "--methods", "no_source",
            "--model", "scripted/extractive", "--embedder", "hash", "--seeds", "0", "--limit", "2",
            "--out", str(out), "--cache-dir", str(cache), "--data-dir", str(data),
            "--reasoning-effort", "medium", "--judge-reasoning-effort", "low", "--reasoning-tokens", "3000",
            "--judge-reasoning-tokens", "700", "--max-failure-share", "0.25", "--max-tokens", "400",
            "--temperature", "0.0", "--max-retries", "2", "--no-report"]
    assert main(argv) == 0
    rebuilt = run_config(out)
    assert isinstance(rebuilt, RunConfig)
    saved = RunConfig.from_dict(json.loads((out / "run.json").read_text())["config"])
    for f in dataclasses.fields(RunConfig):
        if f.name not in REBUILT_APART:
            assert getattr(rebuilt, f.name) == getattr(saved, f.name), f.name
    assert rebuilt.reasoning_effort == "medium" and rebuilt.judge_reasoning_effort == "low"
    assert (rebuilt.reasoning_tokens, rebuilt.judge_reasoning_tokens) == (3000, 700)
    assert rebuilt.max_failure_share == 0.25 and rebuilt.cache_dir == cache and rebuilt.data_dir == data
    assert rebuilt.out == out and rebuilt.methods == ["no_source"]


def test_the_config_round_trips_with_validation(tmp_path):
    cfg = RunConfig(benchmark="b", methods=["m"], model="scripted/unit", out=tmp_path, seeds=[0, 2],
                    cache_dir=tmp_path / "c", task_shard=(1, 3), method_configs={"m": {"k": 1}})
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    from sourcebench.harness.errors import DataError

    with pytest.raises(DataError, match="seeds"):
        RunConfig.from_dict({**cfg.to_dict(), "seeds": "zero"})
