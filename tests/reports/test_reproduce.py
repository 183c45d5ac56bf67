"""``sourcebench reproduce``: configs, the plan of cells, budget-matched and gold-removed retrieval,
and the whole pipeline on a small in-memory benchmark with the scripted model.

The end-to-end run (``toy_run``) is shared by several tests (module-scoped) and also produces the
fixture behind the golden files of ``test_tables.py``: ``SOURCEBENCH_REGEN_GOLDEN=1 pytest
tests/reports/test_reproduce.py -k regenerate`` copies its result files to ``golden/fixture``.
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

from sourcebench.harness.benchmark import Benchmark, DataStatus
from sourcebench.harness.data import Answer, Element, Evidence, Score, Source, Task
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.retrieval import HybridIndex
from sourcebench.judges.exact_f1 import exact_f1
from sourcebench.reports.config import load_config, parse_config
from sourcebench.reports.plan import k_variant, matched, plan, table_variants, with_overrides

GOLDEN = Path(__file__).parent / "golden"
FIXTURE = GOLDEN / "fixture"

# Two small towns (sources) of three districts (folders, hence SourceLearn regions) with two people each;
# per person one document with a work and a friends section.
TOWNS = {
    "north": {"Ada": ("engineer", "Ben"), "Ben": ("teacher", "Ada"), "Cy": ("baker", "Dee"),
              "Dee": ("pilot", "Eve"), "Eve": ("nurse", "Fay"), "Fay": ("judge", "Cy")},
    "south": {"Gus": ("farmer", "Hal"), "Hal": ("tailor", "Ivy"), "Ivy": ("singer", "Jo"),
              "Jo": ("painter", "Ivy"), "Kai": ("sailor", "Lu"), "Lu": ("miner", "Gus")},
}


def district(name: str, town: str) -> str:
    return f"d{list(TOWNS[town]).index(name) // 2}"


class TownQA(Benchmark):
    """Questions about the people of two towns; gold documents and elements labelled, as MultiDoc2Dial."""

    name = "townqa"
    scorer_name = "exact_f1"
    answer_instructions = "Reply with the answer only."

    def data_status(self) -> DataStatus:
        return DataStatus(self.name, True, "memory", "2 sources", "")

    def source_ids(self) -> list[str]:
        return list(TOWNS)

    def load_source(self, source_id: str) -> Source:
        els = []
        for n, (job, friend) in TOWNS[source_id].items():
            path = f"{district(n, source_id)}/{n}.md"
            els.append(Element(id=f"{n}#work", title=f"{n} > Work", path=path, text=f"The occupation of {n} is {job}.",
                               metadata={"entity": n, "doc_id": n}))
            els.append(Element(id=f"{n}#friends", title=f"{n} > Friends", path=path,
                               text=f"The friend of {n} is {friend}.", metadata={"entity": n, "doc_id": n}))
        return Source(id=source_id, kind="documents", elements=els, origin="memory")

    def load_tasks(self, source_id: str) -> list[Task]:
        tasks = []
        town = TOWNS[source_id]
        for n, (job, friend) in town.items():
            two_hop = f"What is the occupation of the friend of {n}?"  # the extractive reader fails these
            for kind, q, ans, els in (("job", f"What is the occupation of {n}?", job, [f"{n}#work"]),
                                      ("friend", f"Who is the friend of {n}?", friend, [f"{n}#friends"]),
                                      ("hop", two_hop, town[friend][0], [f"{n}#friends", f"{friend}#work"])):
                docs = list(dict.fromkeys(e.split("#")[0] for e in els))
                tasks.append(Task(id=f"{kind}-{n}", source_id=source_id, question=q, reference=[ans], group=n,
                                  metadata={"gold_element_ids": els, "gold_doc_ids": docs}))
        return tasks

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        if answer.failed:
            return Score(value=0.0, correct=False, failed=True, failure_reason=answer.failure_reason, judge="exact_f1")
        m = exact_f1(answer.text, task.reference)
        return Score(value=m["f1"], correct=bool(m["em"]), details=m, judge="exact_f1")


TOY_CONFIG = """
name: toy
description: TownQA with the scripted model, every table enabled
output: {out}
seeds: [0, 1]
embedder: hash
backends:
  - {{id: scripted, label: Scripted, model: scripted/extractive}}
benchmarks:
  - {{id: townqa, label: TownQA, group: Document QA}}
  - {{id: absent, benchmark: no_such_benchmark, label: Absent, group: Document QA}}
tables:
  table1: {{methods: [hybrid_rag, no_source, sourcelearn]}}
  table2: {{counterparts: [hybrid_rag, raptor]}}
  table3: {{sample: 4}}
  table4: {{sample: 4}}
  table5: {{}}
  table6: {{cycles: [0, 1, 2]}}
  figure3: {{}}
  figure4: {{coverage_max_tasks: 2}}
  figure5: {{k: [8, 2, 0], gold_removal: [townqa]}}
"""


@pytest.fixture(scope="module")
def townqa():
    from sourcebench.harness import registry

    registry.register_benchmark("townqa", TownQA)
    yield TownQA
    registry._EXTRA[registry.BENCHMARK_GROUP].pop("townqa", None)


def _reproduce(config: Path, *extra: str) -> int:
    from sourcebench.harness.cli import main

    return main(["reproduce", str(config), *extra])


@pytest.fixture(scope="module")
def toy_run(townqa):
    """One reproduce run of TOY_CONFIG (shared), then a second identical run (must be free).

    Its own temporary folder rather than pytest's: a concurrent pytest session prunes old base temp
    folders, which must not pull the run folder away during this (minutes long) module.
    """
    import tempfile

    from sourcebench.harness.providers import scripted

    scripted.reset()
    holder = tempfile.TemporaryDirectory(prefix="sourcebench-toy")
    tmp = Path(holder.name)
    cfg_path = tmp / "toy.yaml"
    cfg_path.write_text(TOY_CONFIG.format(out=tmp / "out"))
    rc1 = _reproduce(cfg_path)
    folder = tmp / "out" / "scripted" / "townqa"
    usage1 = (folder / "usage.jsonl").read_text()
    results1 = (folder / "results.jsonl").read_text()
    n_calls = len(scripted.CALLS)
    rc2 = _reproduce(cfg_path)
    yield {"root": tmp / "out", "folder": folder, "config": cfg_path, "rc": (rc1, rc2), "usage1": usage1,
           "results1": results1, "calls_second": len(scripted.CALLS) - n_calls}
    holder.cleanup()


def _rows(folder: Path, method: str | None = None) -> list[dict]:
    rows = [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if method is None or r["method"] == method]


def _status(root: Path) -> dict:
    return json.loads((root / "reproduce-toy.json").read_text())["cells"]


# ------------------------------------------------------------------------------------- configs

def _minimal(**over) -> dict:
    d = {"name": "t", "output": "out", "backends": [{"id": "b", "model": "scripted/extractive"}],
         "benchmarks": [{"id": "phantomwiki"}], "tables": {"table1": {}}}
    d.update(over)
    return d


def test_config_rejects_typos_unknown_references_and_secrets():
    with pytest.raises(ConfigError, match="tables.tabel1"):
        parse_config(_minimal(tables={"tabel1": {}}))
    with pytest.raises(ConfigError, match="unknown benchmark"):
        parse_config(_minimal(tables={"table1": {"benchmarks": ["swe_qa"]}}))
    with pytest.raises(ConfigError, match="credentials"):
        parse_config(_minimal(backends=[{"id": "b", "model": "m", "env": {"OPENAI_API_KEY": "x"}}]))
    with pytest.raises(ConfigError, match="enable at least one"):
        parse_config(_minimal(tables={}))
    with pytest.raises(ConfigError, match="unique"):
        parse_config(_minimal(backends=[{"id": "b", "model": "m"}, {"id": "b", "model": "n"}]))
    with pytest.raises(ConfigError, match="folder"):
        parse_config(_minimal(backends=[{"id": "a/b", "model": "m"}]))


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
    cfg = parse_config(_minimal(methods={"sourcelearn": {"config": {"top_k": 6}}},
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


def test_matched_and_gold_removed_variants_are_supported_where_the_paper_has_them(tmp_path):
    from sourcebench.reports.plan import gold_removed
    from sourcebench.reports.reproduce import Reproduction, _clash

    cfg = parse_config(_minimal(tables={"table2": {"counterparts": ["hybrid_rag", "raptor", "hipporag2", "no_source"]},
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
    from sourcebench.methods.hybrid_rag import HybridRAG
    from sourcebench.reports.config import Backend
    from sourcebench.reports.reproduce import _clash, backend_env

    monkeypatch.setenv("MYVLLM_BASE_URL", "http://old")
    with backend_env(Backend(id="b", model="openai-api/myvllm/m", env={"MYVLLM_BASE_URL": "http://new"})):
        assert os.environ["MYVLLM_BASE_URL"] == "http://new"
    assert os.environ["MYVLLM_BASE_URL"] == "http://old"
    recorded = HybridRAG().config.model_dump()
    assert _clash(recorded, HybridRAG, {}) == ""
    assert _clash(recorded, HybridRAG, {"top_k": 4}) == "top_k: 8 there, 4 here"
    assert _clash({**recorded, "match_context_file": "/elsewhere.json"}, HybridRAG, {"match_context_file": "x"}) == ""
    assert _clash(None, HybridRAG, {"top_k": 4}) == ""  # the method has not run in that folder yet


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


# ------------------------------------------------------------------------------- the whole pipeline

@pytest.mark.slow
def test_reproduce_runs_every_cell_and_resumes_for_free(toy_run):
    assert toy_run["rc"] == (0, 0)
    assert toy_run["calls_second"] == 0  # a finished reproduction makes no model call
    folder = toy_run["folder"]
    assert (folder / "results.jsonl").read_text() == toy_run["results1"]
    live = [json.loads(x) for x in (folder / "usage.jsonl").read_text().splitlines()[len(toy_run["usage1"].splitlines()):]]
    assert not [u for u in live if u["status"] == "live"]
    st = _status(toy_run["root"])
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
    ref = {key(r): r for r in _rows(folder, "sourcelearn")}
    native = {key(r): r for r in _rows(folder, "hybrid_rag")}
    wide = _rows(folder, "hybrid_rag@matched=sourcelearn")
    assert len(wide) == len(ref) == len(native) == 48
    assert all(r["context_tokens"] <= ref[key(r)]["context_tokens"] for r in wide)
    assert all(r["evidence_ids"][:8] == native[key(r)]["evidence_ids"] for r in wide)
    assert any(len(r["evidence_ids"]) > 8 for r in wide)  # the budget let it read further down
    assert all(r["evidence_ids"] == [] for r in _rows(folder, "hybrid_rag@top_k=0"))
    assert all(r["evidence_ids"] == [] for r in _rows(folder, "sourcelearn@top_k=0"))
    tree = _rows(folder, "raptor@matched=sourcelearn")
    assert len(tree) == 48 and all(r["context_tokens"] <= ref[key(r)]["context_tokens"] for r in tree)
    assert all(r["evidence_ids"] and r["evidence_ids"][0].startswith("raptor:") for r in tree)
    tasks = {(t.source_id, t.id): t for s in TOWNS for t in TownQA().load_tasks(s)}
    for alias in ("hybrid_rag@exclude_gold=true", "sourcelearn@exclude_gold=true"):
        rows = _rows(folder, alias)
        assert len(rows) == 48, alias
        for r in rows:
            docs = tasks[(r["source"], r["task_id"])].metadata["gold_doc_ids"]
            assert r["evidence_ids"] and not any(e.split("#")[0] in docs for e in r["evidence_ids"])
    # task-time variants learn with the base settings: the same source model as the base method
    # (compared cell by cell: the models of different sources or seeds differ)
    arts = {(r["method"], r["source"], r["seed"]): r["artifact"] for r in _rows(folder)}
    cells = {(s, seed) for _, s, seed in arts}
    assert len(cells) == 4
    for s, seed in cells:
        model = lambda m: (folder / "artifacts" / f"method_{m}" / arts[m, s, seed] / "model.json").read_text()
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
    assert _reproduce(toy_run["config"], "--render-only") == 0
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
    assert _reproduce(cfg, "--render-only") == 0
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


def test_unknown_only_is_a_usage_error(tmp_path, capsys):
    cfg = tmp_path / "toy.yaml"
    cfg.write_text(TOY_CONFIG.format(out=tmp_path / "out"))
    assert _reproduce(cfg, "--only", "table9") == 2
    assert not (tmp_path / "out").exists()  # refused before anything ran
    assert "--only: table9 not enabled" in capsys.readouterr().err


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


def test_cache_dir_from_the_config_or_the_command_reaches_every_run_folder(tmp_path):
    from sourcebench.reports.reproduce import Reproduction

    cfg = parse_config(_minimal(cache_dir=str(tmp_path / "shared")))
    backend, bench = cfg.backends[0], cfg.benchmarks[0]

    def folder_config(rep):
        return rep.run_config(backend, bench, tmp_path / "f", ["hybrid_rag"], {})

    assert folder_config(Reproduction(cfg, tmp_path)).cache_dir == tmp_path / "shared"
    # the command line wins
    assert folder_config(Reproduction(cfg, tmp_path, cache_dir=tmp_path / "cli")).cache_dir == tmp_path / "cli"
    assert folder_config(Reproduction(parse_config(_minimal()), tmp_path)).cache_dir is None  # each folder's own
