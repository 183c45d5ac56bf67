"""Variants in one run (``--methods m,m@key=value``) and mistakes that leave nothing behind: a model name
without a provider, a half-made ``--out``, misspelt method and benchmark names."""

from __future__ import annotations

import json
from pathlib import Path

from sourcebench.adapters.phantomwiki.benchmark import BUNDLED
from sourcebench.harness.cli import main
from sourcebench.harness.registry import get_method_class, method_list

BASE = ["--benchmark", "phantomwiki", "--embedder", "hash", "--limit", "2", "--seeds", "0", "--data-dir",
        str(BUNDLED), "--no-report"]


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def test_method_list_keeps_a_variants_settings_together_and_names_it_canonically():
    assert method_list("a,b@k=1,j=2,c") == ["a", "b@j=2,k=1", "c"]
    assert method_list("summary-notes,summary-notes@top_notes=0") == ["summary-notes", "summary-notes@top_notes=0"]


def test_a_variant_is_the_reproduce_plans_variant():
    from types import SimpleNamespace

    from sourcebench.reports.plan import Variant, k_variant

    cfg = SimpleNamespace(base_config=lambda method: {})  # an experiment config setting nothing for the method
    v = Variant.parse("hybrid_rag@top_k=2")
    assert v == Variant("hybrid_rag@top_k=2", "hybrid_rag", (("top_k", 2),))
    assert k_variant(cfg, "hybrid_rag", 2).alias == v.alias  # the alias Figure 5's cells are stored under
    cls = get_method_class(v.alias)
    m = cls(None)
    assert m.name == v.alias and m.config.top_k == 2 and isinstance(m, get_method_class("hybrid_rag"))


def test_variants_run_as_their_own_rows(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["run", *BASE, "--methods", "hybrid_rag,hybrid_rag@top_k=2", "--model", "scripted/extractive",
                 "--out", str(out)]) == 0
    got = rows(out)
    assert sorted({r["method"] for r in got}) == ["hybrid_rag", "hybrid_rag@top_k=2"] and len(got) == 4
    variant = [r for r in got if r["method"] == "hybrid_rag@top_k=2"]
    assert all(len(r["evidence_titles"]) == 2 for r in variant)  # its setting is what answered
    run = json.loads((out / "run.json").read_text())
    assert {m["name"]: m["config"]["top_k"] for m in run["methods"]} == {"hybrid_rag": 8, "hybrid_rag@top_k=2": 2}
    assert (out / "artifacts" / "method_hybrid_rag@top_k=2").is_dir()
    capsys.readouterr()
    assert main(["run", *BASE, "--methods", "hybrid_rag@nope=1", "--model", "scripted/extractive",
                 "--out", str(tmp_path / "bad")]) == 2
    assert "method 'hybrid_rag@nope=1': invalid config" in capsys.readouterr().err


def test_a_model_without_provider_is_refused_before_any_folder(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["run", *BASE, "--methods", "hybrid_rag", "--model", "smollm2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--model 'smollm2': expected provider/model, e.g. local/smollm2" in err and len(err.splitlines()) == 1
    assert not out.exists()
    assert main(["run", *BASE, "--methods", "hybrid_rag", "--model", "scripted/extractive", "--judge-model", "gpt",
                 "--out", str(out)]) == 2
    assert "--model 'gpt'" in capsys.readouterr().err and not out.exists()


def test_a_half_made_out_never_blocks_the_corrected_command(tmp_path, capsys, monkeypatch):
    out = tmp_path / "h"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # a model the machine cannot reach: the run stops at its first call, leaving run.json and no results
    assert main(["run", *BASE, "--methods", "hybrid_rag", "--model", "openai/gpt-4o-mini", "--out", str(out)]) != 0
    assert (out / "run.json").is_file() and not (out / "results.jsonl").exists()
    capsys.readouterr()
    assert main(["run", *BASE, "--methods", "hybrid_rag", "--model", "scripted/extractive", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "holds no results of its earlier phantomwiki run with openai/gpt-4o-mini" in " ".join(said.split())
    assert len(rows(out)) == 2
    # a folder holding results still refuses another model, with the reason
    assert main(["run", *BASE, "--methods", "hybrid_rag", "--model", "scripted/other", "--out", str(out)]) == 2
    assert "holds a run with model scripted/extractive" in capsys.readouterr().err


def test_did_you_mean_for_method_and_benchmark_names(tmp_path, capsys):
    assert main(["run", *BASE, "--methods", "hybrid-rag", "--model", "scripted/extractive",
                 "--out", str(tmp_path / "a")]) == 2
    assert "unknown method 'hybrid-rag'; did you mean 'hybrid_rag'?" in capsys.readouterr().err
    args = [a if a != "phantomwiki" else "phantomwik" for a in BASE]
    assert main(["run", *args, "--methods", "hybrid_rag", "--model", "scripted/extractive",
                 "--out", str(tmp_path / "b")]) == 2
    assert "unknown benchmark 'phantomwik'; did you mean 'phantomwiki'?" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
