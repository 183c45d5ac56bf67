"""One typed run configuration: groups saved verbatim in run.json, reloaded with validation.

An earlier version's run.json (one flat ``config`` object) still loads, so its folder resumes; a bad
one is a one-line error naming the file; the data folder comes from the configuration (or the
caller), never from the command line the run recorded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sourcebench.adapters.phantomwiki.benchmark import BUNDLED
from sourcebench.harness.cli import main
from sourcebench.harness.config import (
    BackendConfig,
    BudgetConfig,
    DataConfig,
    ExecutionConfig,
    RunConfig,
    recorded_data_dir,
)
from sourcebench.harness.errors import DataError
from sourcebench.harness.protocols.session import run_config
from sourcebench.harness.runner import Runner

GROUPS = {"data": DataConfig, "backend": BackendConfig, "execution": ExecutionConfig, "budget": BudgetConfig}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("cfg")
    data = base / "data"
    shutil.copytree(BUNDLED, data / "phantomwiki")
    out = base / "run"
    assert main(["run", "--benchmark", "phantomwiki", "--opt", "max_difficulty=2", "--methods", "no_source",
                 "--model", "scripted/extractive", "--embedder", "hash", "--seeds", "0", "--limit", "2",
                 "--out", str(out), "--data-dir", str(data), "--max-tokens", "300", "--max-failure-share", "0.2",
                 "--max-connections", "3", "--no-report"]) == 0
    return out


def _flat(config: dict) -> dict:
    """A config as the flat RunConfig of earlier versions wrote it."""
    return {k: v for k, v in config.items() if k not in GROUPS} | {
        k: v for g in GROUPS for k, v in config[g].items()}


def test_the_configuration_is_typed_groups_saved_verbatim(run_dir):
    saved = json.loads((run_dir / "run.json").read_text())["config"]
    assert set(saved) == {"out", "rerun", *GROUPS}
    for group, cls in GROUPS.items():
        assert set(saved[group]) == set(cls.model_fields), group
    cfg = RunConfig.load(run_dir / "run.json")
    assert isinstance(cfg.backend, BackendConfig) and cfg.backend.max_tokens == 300
    assert cfg.budget.max_failure_share == 0.2 and cfg.execution.max_connections == 3
    assert cfg.data.methods == ["no_source"] and cfg.data.data_dir == run_dir.parent / "data"
    assert cfg.to_dict() == saved  # verbatim: nothing added, nothing lost
    assert cfg.model == cfg.backend.model  # flat names read the groups
    again = cfg.evolve(max_connections=5, methods=["hybrid_rag"])
    assert (again.execution.max_connections, again.data.methods, cfg.execution.max_connections) == (5, ["hybrid_rag"], 3)


def test_a_folder_with_an_earlier_flat_config_loads_and_resumes(run_dir, tmp_path):
    out = tmp_path / "old"
    shutil.copytree(run_dir, out)
    meta = json.loads((out / "run.json").read_text())
    meta["config"] = _flat(meta["config"])
    (out / "run.json").write_text(json.dumps(meta))
    cfg = run_config(out)
    assert cfg.to_dict()["backend"] == RunConfig.load(run_dir / "run.json").to_dict()["backend"]
    assert cfg.data.data_dir == run_dir.parent / "data"
    summary = Runner(cfg).run()
    assert summary["rows_done_before"] == 2 and summary["rows_new"] == 0 and summary["live_calls"] == 0


def test_a_bad_run_json_is_one_line_naming_the_file(run_dir, tmp_path):
    out = tmp_path / "bad"
    shutil.copytree(run_dir, out)
    meta = json.loads((out / "run.json").read_text())
    meta["config"]["backend"]["max_tokens"] = "many"
    (out / "run.json").write_text(json.dumps(meta))
    with pytest.raises(DataError) as e:
        run_config(out)
    msg = str(e.value)
    assert msg.startswith(str(out / "run.json")) and "backend.max_tokens" in msg and "\n" not in msg
    meta["config"] = {**_flat(json.loads((run_dir / "run.json").read_text())["config"]), "seeds": "zero"}
    (out / "run.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"run\.json: config: data\.seeds"):
        run_config(out)


def test_the_data_folder_is_never_read_from_the_recorded_command_line(run_dir, tmp_path):
    out = tmp_path / "older"
    shutil.copytree(run_dir, out)
    meta = json.loads((out / "run.json").read_text())
    del meta["config"]  # a folder written before run.json held its configuration
    meta["command"] = f"sourcebench run --data-dir {tmp_path / 'elsewhere'} --out {out}"
    (out / "run.json").write_text(json.dumps(meta))
    assert run_config(out).data.data_dir is None and recorded_data_dir(meta) is None
    assert recorded_data_dir(json.loads((run_dir / "run.json").read_text())) == run_dir.parent / "data"
    assert run_config(out, data_dir=run_dir.parent / "data").data.data_dir == run_dir.parent / "data"
