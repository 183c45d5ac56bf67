"""The reports' side of ``sourcebench reproduce``: experiment configs, the plan of cells,
budget-matched and gold-removed retrieval, and the report written from the toy reproduction
(tests/toy_reproduction.py; the pipeline that runs it is tested in
tests/harness/test_reproduce_pipeline.py).

The toy run also produces the fixture behind the golden files of ``test_tables.py``:
``SOURCEBENCH_REGEN_GOLDEN=1 pytest tests/reports/test_reproduce.py -k regenerate`` copies its result
files to ``golden/fixture``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sourcebench.harness.data import Evidence
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.retrieval import HybridIndex
from sourcebench.reports.config import load_config, parse_config
from sourcebench.reports.plan import k_variant, matched, plan, table_variants, with_overrides
from tests.toy_reproduction import (
    TownQA,
    minimal_config,
    run_reproduce,
    townqa_registered,
    toy_reproduction,
)

GOLDEN = Path(__file__).parent / "golden"
FIXTURE = GOLDEN / "fixture"


@pytest.fixture(scope="module")
def townqa():
    with townqa_registered() as cls:
        yield cls


@pytest.fixture(scope="module")
def toy_run(townqa):
    """The toy reproduction (run once per process, shared with the other module that reads it)."""
    return toy_reproduction()


# ------------------------------------------------------------------------------------- configs

def test_config_rejects_typos_unknown_references_and_secrets():
    with pytest.raises(ConfigError, match="tables.tabel1"):
        parse_config(minimal_config(tables={"tabel1": {}}))
    with pytest.raises(ConfigError, match="unknown benchmark"):
        parse_config(minimal_config(tables={"table1": {"benchmarks": ["swe_qa"]}}))
    with pytest.raises(ConfigError, match="credentials"):
        parse_config(minimal_config(backends=[{"id": "b", "model": "m", "env": {"OPENAI_API_KEY": "x"}}]))
    with pytest.raises(ConfigError, match="enable at least one"):
        parse_config(minimal_config(tables={}))
    with pytest.raises(ConfigError, match="unique"):
        parse_config(minimal_config(backends=[{"id": "b", "model": "m"}, {"id": "b", "model": "n"}]))
    with pytest.raises(ConfigError, match="folder"):
        parse_config(minimal_config(backends=[{"id": "a/b", "model": "m"}]))


def test_config_loads_yaml_and_toml(tmp_path):
    (tmp_path / "c.toml").write_text('name = "t"\noutput = "o"\n[[backends]]\nid = "b"\nmodel = "m"\n'
                                     '[[benchmarks]]\nid = "apibench"\nsources = ["torchhub"]\n[tables.table1]\n')
    cfg = load_config(tmp_path / "c.toml")
    assert cfg.benchmarks[0].sources == ["torchhub"] and cfg.tables.enabled() == ["table1"]
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")


def test_shipped_configs_are_valid_and_plan_cells():
    configs = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
    names = {p.stem for p in configs}
    assert {"small", "table1", "table2", "table3", "table4", "table5", "table6", "figure3", "figure4",
            "figure5"} <= names
    for p in configs:
        cfg = load_config(p)
        assert plan(cfg), p
    small = load_config(Path(__file__).resolve().parents[2] / "configs" / "small.yaml")
    assert [b.model for b in small.backends] == ["local/smollm2"]
    assert {(b.registered, tuple(b.sources or [])) for b in small.benchmarks} == {("phantomwiki", ()),
                                                                                   ("apibench", ("torchhub",))}


# ---------------------------------------------------------------------------------------- plan

def test_variant_aliases_collapse_to_the_method_when_nothing_changes():
    cfg = parse_config(minimal_config(methods={"sourcelearn": {"config": {"top_k": 6}}},
                                      tables={"figure5": {"k": [8, 6, 0]}, "table6": {"cycles": [0, 1, 3]},
                                              "table2": {}}))
    bench = cfg.benchmarks[0]
    assert k_variant(cfg, "hybrid_rag", 8).alias == "hybrid_rag"  # the default k: Table 1's cells
    assert k_variant(cfg, "sourcelearn", 6).alias == "sourcelearn"  # the configured base k
    assert k_variant(cfg, "sourcelearn", 8).alias == "sourcelearn@top_k=8"
    assert k_variant(cfg, "hybrid_rag", 0).task_time
    six = [v.alias for v in table_variants(cfg, "table6", bench)]
    assert six == ["sourcelearn-m0", "sourcelearn-ms", "sourcelearn-ms@cycles=3"]
    assert not with_overrides(cfg, "sourcelearn-ms", {"cycles": 3}, task_time=False).task_time
    m = matched(cfg, "hybrid_rag", "sourcelearn")
    assert m.alias == "hybrid_rag@matched=sourcelearn" and m.learn_config(cfg) == {}
    folders = plan(cfg)
    assert [(f.backend, f.benchmark) for f in folders] == [("b", "phantomwiki")]
    aliases = [v.alias for v in folders[0].variants]
    assert len(aliases) == len(set(aliases)) and "hybrid_rag@top_k=0" in aliases
    assert plan(cfg, only={"table6"})[0].tables == ["table6"]


def test_registered_methods_that_fail_to_import_are_not_run():
    from sourcebench.harness import registry
    from sourcebench.reports.plan import resolve_method

    registry.register_method("half-written", "sourcebench.methods.no_such_module:Method")
    try:
        cls, why = resolve_method("half-written")
    finally:
        registry._EXTRA[registry.METHOD_GROUP].pop("half-written", None)
    assert cls is None and why.startswith("method half-written is not available (ModuleNotFoundError")
    assert resolve_method("hybrid_rag")[0].name == "hybrid_rag"


# ------------------------------------------------------------------------- matched / gold retrieval

def _toy_index():
    bench = TownQA()
    source = bench.load_source("north")
    return bench, source, HybridIndex(source.elements, HashEmbedder())


def test_read_further_keeps_the_native_prefix_and_stops_before_the_budget():
    from sourcebench.harness.data import estimate_tokens
    from sourcebench.harness.method import Context
    from sourcebench.methods.hybrid_rag import read_further

    bench, source, index = _toy_index()
    task = bench.load_tasks("north")[0]
    ctx = Context(source=source, benchmark=bench, llm=None, embedder=index.embedder, store=None)  # type: ignore[arg-type]

    def size(ev: list[Evidence]) -> int:
        return estimate_tokens("".join(m["content"] for m in bench.build_prompt(task, ev)))

    native = index.search(task.question, k=2)
    full = read_further(index, source, task, ctx, 10**6, top_k=2, cap=None)
    assert [e.element_id for e in full[:2]] == [e.element_id for e in native]
    assert len(full) == len(source.elements)  # an unbounded budget reads the whole ranking
    target = size(full[:5]) + 1
    got = read_further(index, source, task, ctx, target, top_k=2, cap=None)
    assert [e.element_id for e in got] == [e.element_id for e in full[:5]]
    assert size(got) <= target < size(full[:6])
    assert len(read_further(index, source, task, ctx, 1, top_k=2, cap=None)) == 2  # never below top_k


def test_hybrid_rag_matched_and_gold_removed_answers(tmp_path):
    from sourcebench.harness.artifacts import ArtifactStore
    from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
    from sourcebench.harness.method import Context
    from sourcebench.methods.hybrid_rag import HybridRAG, context_key

    bench, source, _ = _toy_index()
    task = bench.load_tasks("north")[0]
    llm = LLM(ModelSpec(name="scripted/unit"), CallCache(tmp_path / "c.sqlite"), UsageLedger()).bind("hybrid_rag", "answer")
    ctx = Context(source=source, benchmark=bench, llm=llm, embedder=HashEmbedder(), store=ArtifactStore(tmp_path / "a"),
                  seed=0)
    native = asyncio.run(HybridRAG({"top_k": 2}).answer(task, None, ctx))
    targets = tmp_path / "m.json"
    targets.write_text(json.dumps({"targets": {context_key("north", 0, task.id): native.context_tokens + 40}}))
    m = HybridRAG({"top_k": 2, "match_context_file": str(targets)})
    state = m.load(tmp_path, ctx)
    wide = asyncio.run(m.answer(task, state, ctx))
    assert wide.evidence_ids[:2] == native.evidence_ids and len(wide.evidence_ids) > 2
    assert native.context_tokens < wide.context_tokens <= native.context_tokens + 40
    other = task.model_copy(update={"id": "unknown"})
    assert asyncio.run(m.answer(other, state, ctx)).failure_reason.startswith("match_context")
    g = asyncio.run(HybridRAG({"exclude_gold": True}).answer(task, None, ctx))
    assert g.evidence_ids and not any(e.startswith("Ada#") for e in g.evidence_ids)  # the whole gold document
    nogold = task.model_copy(update={"metadata": {}})
    assert asyncio.run(HybridRAG({"exclude_gold": True}).answer(nogold, None, ctx)).failed


# ----------------------------------------------------------------- the report of the toy reproduction

@pytest.mark.slow
def test_report_has_every_table_figure_and_log_link(toy_run):
    rep = toy_run["root"] / "report" / "toy"
    for tid in ("table1", "table2", "table2_tokens", "table3", "table4", "table5", "table6", "figure3", "figure4a",
                "figure4b", "figure4c", "figure4d", "figure5a", "figure5b"):
        for ext in ("md", "csv", "tex", "html"):
            assert (rep / f"{tid}.{ext}").is_file(), f"{tid}.{ext}"
    pngs = sorted(p.name for p in rep.glob("*.png"))
    assert pngs == ["figure3_Scripted.png", "figure4_Scripted.png", "figure5_Scripted.png"]
    assert all((rep / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    page = (rep / "index.html").read_text()
    assert page.count('<img alt="figure') == 3 and page.count("data:image/png;base64,") == 3
    assert 'id="table1"' in page and 'id="table6"' in page and "not run" in page
    logs = sorted((toy_run["folder"] / "logs").glob("*.eval"))
    # each log opens as a page of inspect-ai's viewer serving the output root (inspect view --recursive)
    assert logs and all(f'href="http://127.0.0.1:7575/#/logs/scripted/townqa/logs/{p.name}"' in page for p in logs)
    assert "inspect view --recursive --log-dir" in page
    assert "src=\"http" not in page and "<script" not in page  # self-contained, nothing fetched


@pytest.mark.slow
def test_render_only_rewrites_the_same_tables(toy_run, tmp_path):
    rep = toy_run["root"] / "report" / "toy"
    before = {p.name: p.read_text() for p in rep.glob("*.csv")}
    sections = (rep / "index.html").read_text().count("<section id=")
    assert run_reproduce(toy_run["config"], "--render-only") == 0
    assert {p.name: p.read_text() for p in rep.glob("*.csv")} == before
    assert (rep / "index.html").read_text().count("<section id=") == sections == 13


@pytest.mark.slow
def test_figure5_without_gold_removal_benchmarks_has_no_panel_b(toy_run, tmp_path):
    """``gold_removal: []`` (the small config) asks for no panel (b): no empty "not run" table or panel."""
    text = toy_run["config"].read_text().replace("name: toy", "name: toy-nogold").replace(
        "gold_removal: [townqa]", "gold_removal: []")
    assert "gold_removal: []" in text and "name: toy-nogold" in text
    cfg = tmp_path / "toy-nogold.yaml"
    cfg.write_text(text)
    rep = toy_run["root"] / "report" / "toy-nogold"
    rep.mkdir(parents=True)
    (rep / "figure5b.csv").write_text("left by an earlier render\n")
    (rep / "notes.txt").write_text("a user's file\n")
    assert run_reproduce(cfg, "--render-only") == 0
    assert (rep / "notes.txt").is_file()  # only tables and figures the report no longer makes are removed
    town = [ln for ln in (rep / "figure5a.csv").read_text().splitlines() if "/ TownQA /" in ln]
    assert town and town == [ln for ln in (toy_run["root"] / "report" / "toy" / "figure5a.csv").read_text()
                             .splitlines() if "/ TownQA /" in ln]  # panel (a) unchanged
    assert not list(rep.glob("figure5b.*"))
    page = (rep / "index.html").read_text()
    assert "Figure 5b" not in page and page.count('<img alt="figure') == 3
    from PIL import Image

    with Image.open(rep / "figure5_Scripted.png") as one, \
            Image.open(toy_run["root"] / "report" / "toy" / "figure5_Scripted.png") as two:
        assert one.size[0] < two.size[0]  # one panel, half the width


@pytest.mark.skipif(os.environ.get("SOURCEBENCH_REGEN_GOLDEN") != "1", reason="set SOURCEBENCH_REGEN_GOLDEN=1 "
                    "to regenerate the golden fixture")
@pytest.mark.slow
def test_regenerate_golden_fixture(toy_run):
    """Copy the files the tables read (not caches, artifacts or logs) into golden/fixture."""
    if FIXTURE.exists():
        shutil.rmtree(FIXTURE)
    root = toy_run["root"]
    FIXTURE.mkdir(parents=True)
    shutil.copy(root / "reproduce-toy.json", FIXTURE / "reproduce-toy.json")
    shutil.copy(toy_run["config"], FIXTURE / "config.yaml")
    for folder in (root / "scripted").iterdir():
        dst = FIXTURE / "scripted" / folder.name
        for name in ("run.json", "results.jsonl", "usage.jsonl", "failures.jsonl"):
            if (folder / name).is_file():
                dst.mkdir(parents=True, exist_ok=True)
                shutil.copy(folder / name, dst / name)
        for sub in ("reproduce", "audit"):
            if (folder / sub).is_dir():
                shutil.copytree(folder / sub, dst / sub, ignore=shutil.ignore_patterns("matched_*", "*_items.jsonl"))
    _scrub(FIXTURE)
    pytest.skip(f"fixture regenerated in {FIXTURE}; now regenerate the golden files (see test_tables.py)")


KEEP = ("run_id", "benchmark", "source", "method", "method_version", "seed", "split_id", "task_id", "group",
        "item_hash", "score", "correct", "failed", "failure_reason", "evidence_ids", "context_tokens", "artifact")


def _scrub(root: Path) -> None:
    """Machine-specific paths out of the fixture, and result rows cut to the fields tables read."""
    for p in root.rglob("*"):
        if p.is_file() and p.suffix in (".json", ".jsonl", ".yaml"):
            text = re.sub(r"/tmp/sourcebench-toy[^/\"'\s,]*/", "<tmp>/", p.read_text())
            if p.name == "results.jsonl":
                rows = [json.loads(x) for x in text.splitlines() if x.strip()]
                text = "".join(json.dumps({k: r[k] for k in KEEP if k in r}) + "\n" for r in rows)
            p.write_text(text)


# -------------------------------------------------------------------------------- headless browser

def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.slow
def test_html_report_opens_in_headless_chromium(toy_run, tmp_path):
    """Screenshot and DOM of the report in headless Chromium: the page loads, tables and figures are there."""
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    page = (toy_run["root"] / "report" / "toy" / "index.html").resolve()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "report.png"
    r = subprocess.run([exe, *flags, f"--screenshot={shot}", "--window-size=1400,3000", page.as_uri()],
                       check=False, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1400, 3000)
        colors = img.convert("RGB").resize((70, 150)).getcolors(maxcolors=100000)
        assert colors is not None and len(colors) > 20  # rendered content, not a blank page
    dom = subprocess.run([exe, *flags, "--dump-dom", page.as_uri()], check=False, capture_output=True, text=True,
                         timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.count('<table id="') >= 14  # the paper tables (and their comparisons) carry their ids
    assert html.count("<img") == 3
    for tid in ("table1", "table2", "table3", "table4", "table5", "table6", "figure3", "figure4", "figure5"):
        assert f'<section id="{tid}">' in html, tid
    assert "Table 1: main results" in html
    # the paired comparisons as the browser shows them: Δ with its interval, the pairs and the MDE
    from tests.reports.test_comparison_columns_in_chromium import _Tables

    parser = _Tables()
    parser.feed(html)
    heads = [t[0] for t in parser.tables if t and "Δ (pp) [95% CI]" in t[0]]
    assert heads and all({"Paired tasks (groups)", "MDE 80% (pp)", "p (Holm)"} <= set(h) for h in heads)


# -------------------------------------------------------------------------------------------- LaTeX

@pytest.mark.slow
def test_latex_tables_compile_with_pdflatex(toy_run, tmp_path):
    """Every .tex table compiles in a minimal document with the packages its header names."""
    exe = shutil.which("pdflatex")
    if exe is None:
        pytest.skip("pdflatex is not installed (apt-get install -y texlive-latex-recommended)")
    tables = sorted((toy_run["root"] / "report" / "toy").glob("*.tex"))
    assert len(tables) >= 15
    for tex in tables:
        header = tex.read_text().splitlines()[0]
        assert header.startswith("% Requires") and "booktabs" in header, tex.name
        packages = re.findall(r"\\usepackage\{(\w+)\}", header)
        doc = tmp_path / f"doc_{tex.stem}.tex"
        doc.write_text("\\documentclass{article}\n\\usepackage[margin=1cm,landscape]{geometry}\n"
                       + "".join(f"\\usepackage{{{p}}}\n" for p in packages)
                       + f"\\begin{{document}}\n\\input{{{tex}}}\n\\end{{document}}\n")
        r = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, check=False)
        log = (tmp_path / f"doc_{tex.stem}.log").read_text(errors="replace")
        assert r.returncode == 0, f"{tex.name}: " + "\n".join(ln for ln in log.splitlines() if ln.startswith("!"))
        assert (tmp_path / f"doc_{tex.stem}.pdf").stat().st_size > 1000, tex.name
        assert "Undefined control sequence" not in log and "Missing $" not in log, tex.name


