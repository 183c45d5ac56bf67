"""``sourcebench reproduce`` as the application tier runs it (harness/cli/reproduce/): the variants it
registers, the settings it refuses to mix, the backend environment, every cell of the toy config run
and resumed for free, and the derived regions.
"""

from __future__ import annotations

import json
import os

import pytest

from sourcebench.reports.config import parse_config
from sourcebench.reports.plan import matched
from tests.toy_reproduction import (
    TOWNS,
    TOY_CONFIG,
    TownQA,
    cell_status,
    district,
    minimal_config,
    result_rows,
    run_reproduce,
    townqa_registered,
    toy_reproduction,
)


@pytest.fixture(scope="module")
def townqa():
    with townqa_registered() as cls:
        yield cls


@pytest.fixture(scope="module")
def toy_run(townqa):
    """The toy reproduction (run once per process, shared with the other module that reads it)."""
    return toy_reproduction()


# ------------------------------------------------------------------------------------ variants

def test_matched_and_gold_removed_variants_are_supported_where_the_paper_has_them(tmp_path):
    from sourcebench.harness.cli.reproduce.pipeline import Reproduction, _clash
    from sourcebench.reports.plan import gold_removed

    cfg = parse_config(minimal_config(
        tables={"table2": {"counterparts": ["hybrid_rag", "raptor", "hipporag2", "no_source"]},
                "figure5": {"methods": ["hybrid_rag", "sourcelearn", "raptor", "hipporag2"]}}))
    rep = Reproduction(cfg, tmp_path)
    for m in ("hybrid_rag", "raptor", "hipporag2"):
        cls, config, why = rep._variant(matched(cfg, m, "sourcelearn"))
        assert not why and cls.name == f"{m}@matched=sourcelearn" and config["match_context_file"], m
    for m in ("hybrid_rag", "sourcelearn", "raptor", "hipporag2"):
        v = gold_removed(cfg, m)
        cls, config, why = rep._variant(v)
        assert v.alias == f"{m}@exclude_gold=true" and not why and config["exclude_gold"] is True, m
        # task-time: the variant learns with the base settings
        assert v.learn_config(cfg) == cfg.base_config(m)
    _, _, why = rep._variant(matched(cfg, "no_source", "sourcelearn"))
    assert "does not support" in why and "match_context_file" in why
    # settings recorded before the options existed do not clash with the defaults of today
    from sourcebench.methods.raptor import RAPTOR
    from sourcebench.methods.sourcelearn.method import SourceLearn

    for cls in (RAPTOR, SourceLearn):
        old = {k: v for k, v in cls().config.model_dump().items() if k not in ("exclude_gold", "match_context_file")}
        assert _clash(old, cls, {}) == ""
        assert _clash(old, cls, {"exclude_gold": True}).startswith("exclude_gold: None there, True here")


def test_backend_env_is_restored_and_settings_clashes_are_named(monkeypatch):
    from sourcebench.harness.cli.reproduce.pipeline import _clash, backend_env
    from sourcebench.methods.hybrid_rag import HybridRAG
    from sourcebench.reports.config import Backend

    monkeypatch.setenv("MYVLLM_BASE_URL", "http://old")
    with backend_env(Backend(id="b", model="openai-api/myvllm/m", env={"MYVLLM_BASE_URL": "http://new"})):
        assert os.environ["MYVLLM_BASE_URL"] == "http://new"
    assert os.environ["MYVLLM_BASE_URL"] == "http://old"
    recorded = HybridRAG().config.model_dump()
    assert _clash(recorded, HybridRAG, {}) == ""
    assert _clash(recorded, HybridRAG, {"top_k": 4}) == "top_k: 8 there, 4 here"
    assert _clash({**recorded, "match_context_file": "/elsewhere.json"}, HybridRAG, {"match_context_file": "x"}) == ""
    assert _clash(None, HybridRAG, {"top_k": 4}) == ""  # the method has not run in that folder yet


def test_cache_dir_from_the_config_or_the_command_reaches_every_run_folder(tmp_path):
    from sourcebench.harness.cli.reproduce.pipeline import Reproduction

    cfg = parse_config(minimal_config(cache_dir=str(tmp_path / "shared")))
    backend, bench = cfg.backends[0], cfg.benchmarks[0]

    def folder_config(rep):
        return rep.run_config(backend, bench, tmp_path / "f", ["hybrid_rag"], {})

    assert folder_config(Reproduction(cfg, tmp_path)).cache_dir == tmp_path / "shared"
    # the command line wins
    assert folder_config(Reproduction(cfg, tmp_path, cache_dir=tmp_path / "cli")).cache_dir == tmp_path / "cli"
    # each folder's own
    assert folder_config(Reproduction(parse_config(minimal_config()), tmp_path)).cache_dir is None


def test_unknown_only_is_a_usage_error(tmp_path, capsys):
    cfg = tmp_path / "toy.yaml"
    cfg.write_text(TOY_CONFIG.format(out=tmp_path / "out"))
    assert run_reproduce(cfg, "--only", "table9") == 2
    assert not (tmp_path / "out").exists()  # refused before anything ran
    assert "--only: table9 not enabled" in capsys.readouterr().err


# ------------------------------------------------------------------------------- the whole pipeline

@pytest.mark.slow
def test_reproduce_runs_every_cell_and_resumes_for_free(toy_run):
    assert toy_run["rc"] == (0, 0)
    assert toy_run["calls_second"] == 0  # a finished reproduction makes no model call
    folder = toy_run["folder"]
    assert (folder / "results.jsonl").read_text() == toy_run["results1"]
    live = [json.loads(x) for x in (folder / "usage.jsonl").read_text().splitlines()[len(toy_run["usage1"].splitlines()):]]
    assert not [u for u in live if u["status"] == "live"]
    st = cell_status(toy_run["root"])
    n_tests = sum(len(json.loads(p.read_text())["test_ids"]) for p in (folder / "splits").rglob("seed*.json"))
    assert n_tests == 48  # 2 towns x 2 seeds x 4 of 6 people (grouped 30/70 split) x 3 questions
    assert st["scripted/townqa/hybrid_rag"] == {"status": "ran", "reason": "", "rows": n_tests}
    assert "scripted/townqa/no-such-method" not in st  # a misspelled method is an error at load (tests/hardening)
    assert st["scripted/absent/hybrid_rag"]["reason"] == "benchmark no_such_benchmark is not registered"
    for alias in ("hybrid_rag@matched=sourcelearn", "raptor@matched=sourcelearn", "sourcelearn-ms@cycles=2",
                  "hybrid_rag@top_k=0", "sourcelearn@top_k=0", "hybrid_rag@exclude_gold=true",
                  "sourcelearn@exclude_gold=true", "sourcelearn-wo-cross"):
        assert st[f"scripted/townqa/{alias}"]["status"] == "ran", alias


@pytest.mark.slow
def test_variants_change_only_what_they_should(toy_run):
    folder = toy_run["folder"]
    key = lambda r: (r["source"], r["seed"], r["task_id"])
    ref = {key(r): r for r in result_rows(folder, "sourcelearn")}
    native = {key(r): r for r in result_rows(folder, "hybrid_rag")}
    wide = result_rows(folder, "hybrid_rag@matched=sourcelearn")
    assert len(wide) == len(ref) == len(native) == 48
    assert all(r["context_tokens"] <= ref[key(r)]["context_tokens"] for r in wide)
    assert all(r["evidence_ids"][:8] == native[key(r)]["evidence_ids"] for r in wide)
    assert any(len(r["evidence_ids"]) > 8 for r in wide)  # the budget let it read further down
    assert all(r["evidence_ids"] == [] for r in result_rows(folder, "hybrid_rag@top_k=0"))
    assert all(r["evidence_ids"] == [] for r in result_rows(folder, "sourcelearn@top_k=0"))
    tree = result_rows(folder, "raptor@matched=sourcelearn")
    assert len(tree) == 48 and all(r["context_tokens"] <= ref[key(r)]["context_tokens"] for r in tree)
    assert all(r["evidence_ids"] and r["evidence_ids"][0].startswith("raptor:") for r in tree)
    tasks = {(t.source_id, t.id): t for s in TOWNS for t in TownQA().load_tasks(s)}
    for alias in ("hybrid_rag@exclude_gold=true", "sourcelearn@exclude_gold=true"):
        rows = result_rows(folder, alias)
        assert len(rows) == 48, alias
        for r in rows:
            docs = tasks[(r["source"], r["task_id"])].metadata["gold_doc_ids"]
            assert r["evidence_ids"] and not any(e.split("#")[0] in docs for e in r["evidence_ids"])
    # task-time variants learn with the base settings: the same source model as the base method
    # (compared cell by cell: the models of different sources or seeds differ)
    arts = {(r["method"], r["source"], r["seed"]): r["artifact"] for r in result_rows(folder)}
    cells = {(s, seed) for _, s, seed in arts}
    assert len(cells) == 4
    for s, seed in cells:
        model = lambda m: (folder / "artifacts" / f"method_{m}" / arts[m, s, seed] / "model.json").read_text()  # noqa: B023
        assert model("sourcelearn@top_k=0") == model("sourcelearn") == model("sourcelearn@exclude_gold=true")
    one = {(folder / "artifacts" / "method_sourcelearn" / arts["sourcelearn", s, seed] / "model.json").read_text()
           for s, seed in cells}
    assert len(one) > 1  # the comparison above is not between empty models


@pytest.mark.slow
def test_regions_follow_the_documented_rule(toy_run):
    folder = toy_run["folder"]
    regions = json.loads((folder / "reproduce" / "regions.json").read_text())
    assert set(regions["granularity"].values()) == {"sourcelearn-regions"}
    bench = TownQA()
    for sid, seeds in regions["sources"].items():
        for seed, info in seeds.items():
            man = json.loads((folder / "splits" / "townqa" / sid / f"seed{seed}.json").read_text())
            assert info["n_guidance"] == len(man["guidance_ids"])
            for tid, rec in info["tests"].items():
                task = next(t for t in bench.load_tasks(sid) if t.id == tid)
                assert rec["anchor"] == "gold" and rec["anchors"] == sorted(task.metadata["gold_element_ids"])
                assert rec["regions"] == sorted({district(e.split("#")[0], sid) for e in rec["anchors"]})
                assert rec["seen"] == bool(set(rec["regions"]) & set(info["guidance_regions"]))
            guided = {district(t.split("-")[1], sid) for t in man["guidance_ids"]}
            assert set(info["guidance_regions"]) >= guided
    seen = [rec["seen"] for seeds in regions["sources"].values() for info in seeds.values()
            for rec in info["tests"].values()]
    assert any(seen) and not all(seen)  # both strata are populated
