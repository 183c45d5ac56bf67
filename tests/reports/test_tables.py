"""The paper's tables: hand-computed arithmetic (macro accuracy, deltas from displayed values, best and
second marks, not-run cells) on hand-made run folders, and golden files of every table rendered from
a results folder produced with the scripted model (``golden/fixture``, see test_reproduce.py).

Regenerate the golden files after an intended layout change with
``SOURCEBENCH_REGEN_GOLDEN=1 pytest tests/reports/test_tables.py -k golden`` and review the diff.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from sourcebench.reports.config import parse_config
from sourcebench.reports.export import to_csv, to_latex
from sourcebench.reports.figures import render_figures
from sourcebench.reports.grid import Cell, mark_best, set_delta
from sourcebench.reports.layout import md_table
from sourcebench.reports.results import Results, status_path
from sourcebench.reports.stats import holm
from sourcebench.reports.tables import build_all, table1, table2, table5, table6

GOLDEN = Path(__file__).parent / "golden"
FIXTURE = GOLDEN / "fixture"


# ------------------------------------------------------------------------------------ helpers

def _row(method, source, seed, i, score, **kw):
    return {"run_id": "r", "benchmark": "b", "source": source, "method": method, "seed": seed,
            "task_id": f"{source}-t{i}", "score": float(score), "correct": bool(score), "failed": False, **kw}


def _folder(root: Path, backend: str, bench: str, rows: list[dict]) -> Path:
    folder = root / backend / bench
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"run_id": "r", "benchmark": {"name": bench}, "methods": []}))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _scores(method: str, source: str, seed: int, scores: list[int], **kw) -> list[dict]:
    return [_row(method, source, seed, i, s, **kw) for i, s in enumerate(scores)]


def _config(**tables) -> dict:
    return {"name": "hand", "output": "unused", "seeds": [0, 1],
            "statistics": {"bootstrap_resamples": 200, "permutation_resamples": 999},
            "backends": [{"id": "luna", "label": "GPT-5.6-Luna", "model": "m1"},
                         {"id": "oss", "label": "gpt-oss-120b", "model": "m2"}],
            "benchmarks": [{"id": "mdd", "label": "MultiDoc2Dial", "group": "Document QA"},
                           {"id": "two", "label": "TwoSources", "group": "Document QA"}],
            "tables": tables}


def _cells(table, row: int) -> list[str]:
    return [to_markdown_cell(c) for c in table.rows[row].cells]


def to_markdown_cell(c: Cell) -> str:
    from sourcebench.reports.layout import md_value

    return md_value(c)


# ---------------------------------------------------------------------------- Table 1 arithmetic

@pytest.fixture
def hand_root(tmp_path):
    """The MultiDoc2Dial column of the paper's Table 1 (GPT-5.6-Luna), and a two-source benchmark.

    mdd (one source, one seed, 1000 tasks): Hybrid RAG 649 correct = 64.9, RAPTOR 71.2, HippoRAG 2 66.3,
    AWM 65.1, SourceLearn 77.6: the paper prints 71.2 (up 6.3, underlined), 66.3 (up 1.4), 65.1 (up 0.2),
    77.6 (up 12.7, bold).
    two (sources s1: 4 tasks, s2: 2 tasks; seeds 0 and 1), macro = mean over seeds of mean over sources:
      hybrid_rag  seed 0: s1 2/4, s2 1/2 -> 0.5; seed 1: s1 3/4, s2 0/2 -> 0.375; macro 0.4375 -> "43.8"
      raptor      seed 0: 1, 1 -> 1; seed 1: 1, 1/2 -> 0.75; macro 0.875 -> "87.5"
      hipporag2   the same scores as raptor (a tie for best)
      awm         seed 0: 2/4, 1/2; seed 1: 2/4, 1/2 -> 0.5 -> "50.0" (second)
      sourcelearn no rows (not run)
    Δ(raptor) = 87.5 - 43.8 = 43.7 as printed (the unrounded difference is 43.75).
    Backend oss: only Hybrid RAG and SourceLearn ran on mdd, so marks are per backend.
    """
    n = 1000
    rows = []
    for m, k in (("hybrid_rag", 649), ("raptor", 712), ("hipporag2", 663), ("awm", 651), ("sourcelearn", 776)):
        rows += [_row(m, "dmv", 0, i, int(i < k)) for i in range(n)]
    _folder(tmp_path, "luna", "mdd", rows)
    two = []
    spec = {"hybrid_rag": {("s1", 0): [1, 1, 0, 0], ("s2", 0): [1, 0], ("s1", 1): [1, 1, 1, 0], ("s2", 1): [0, 0]},
            "raptor": {("s1", 0): [1, 1, 1, 1], ("s2", 0): [1, 1], ("s1", 1): [1, 1, 1, 1], ("s2", 1): [0, 1]},
            "awm": {("s1", 0): [1, 1, 0, 0], ("s2", 0): [1, 0], ("s1", 1): [0, 1, 1, 0], ("s2", 1): [0, 1]}}
    spec["hipporag2"] = spec["raptor"]
    for m, cells in spec.items():
        for (src, seed), scores in cells.items():
            two += _scores(m, src, seed, scores)
    _folder(tmp_path, "luna", "two", two)
    oss = _scores("hybrid_rag", "dmv", 0, [1, 0, 0, 0]) + _scores("sourcelearn", "dmv", 0, [1, 1, 0, 0])
    _folder(tmp_path, "oss", "mdd", oss)
    status = {"cells": {"oss/two/hybrid_rag": {"status": "not run", "reason": "data unavailable: no files"}}}
    status_path(tmp_path, "hand").write_text(json.dumps(status))
    return tmp_path


def test_table1_reproduces_the_paper_column_by_hand(hand_root):
    cfg = parse_config(_config(table1={}))
    t = table1(Results(cfg, hand_root))
    assert t.columns == ["MultiDoc2Dial", "TwoSources"] and t.groups == [("Document QA", 2)]
    assert [r.stub for r in t.rows[:5]] == [["GPT-5.6-Luna", "Hybrid RAG"], ["", "RAPTOR"], ["", "HippoRAG 2"],
                                            ["", "AWM"], ["", "SourceLearn"]]
    col = [to_markdown_cell(r.cells[0]) for r in t.rows[:5]]
    assert col == ["64.9", "<u>71.2</u><sub>↑6.3</sub>", "66.3<sub>↑1.4</sub>", "65.1<sub>↑0.2</sub>",
                   "**77.6**<sub>↑12.7</sub>"]
    two = [to_markdown_cell(r.cells[1]) for r in t.rows[:5]]
    # Δ is the tested paired statistic rounded by the one rule (43.75 -> 43.8), not shown minus shown (43.7)
    assert two == ["43.8", "**87.5**<sub>↑43.8</sub>", "**87.5**<sub>↑43.8</sub>", "<u>50.0</u><sub>↑6.2</sub>",
                   "not run"]
    raptor_two = t.rows[1].cells[1]
    assert raptor_two.value == pytest.approx(0.875) and raptor_two.delta_exact == pytest.approx(43.75)
    assert raptor_two.n == 6  # distinct (source, task) pairs
    # backend oss: its own marks; the cells of a benchmark that did not run say why
    oss = t.rows[5:]
    assert [to_markdown_cell(r.cells[0]) for r in oss] == ["<u>25.0</u>", "not run", "not run", "not run",
                                                           "**50.0**<sub>↑25.0</sub>"]
    assert oss[0].cells[1].reason == "data unavailable: no files" and oss[0].rule
    assert any("data unavailable: no files" in n and "gpt-oss-120b / Hybrid RAG × Document QA TwoSources" in n
               for n in t.notes)
    # statistics: McNemar on the 1000 paired tasks (one seed, one source); one Holm family per backend and
    # benchmark, as in the leaderboard: MultiDoc2Dial's 4 methods vs Hybrid RAG, TwoSources' 3 tested ones
    s = next(x for x in t.stats if x["backend"] == "GPT-5.6-Luna" and x["method"] == "SourceLearn"
             and x["column"] == "MultiDoc2Dial")
    assert s["test"] == "mcnemar_exact" and s["n_pairs"] == 1000 and s["delta_pp"] == pytest.approx(12.7)
    luna = [x for x in t.stats if x["backend"] == "GPT-5.6-Luna" and x["p_value"] is not None]
    assert len(luna) == 7 and all(x["p_holm"] >= x["p_value"] for x in luna)
    for bench, m in (("MultiDoc2Dial", 4), ("TwoSources", 3)):
        fam = [x for x in luna if x["benchmark"] == bench]
        assert len(fam) == m and {x["holm_m"] for x in fam} == {m}
        adjusted = holm({x["method"]: x["p_value"] for x in fam})
        assert [x["p_holm"] for x in fam] == pytest.approx([adjusted[x["method"]] for x in fam])
    # TwoSources' tasks are tested under both seeds: the unit is the task (6), not the 12 task x seed rows
    raptor = next(x for x in luna if x["benchmark"] == "TwoSources" and x["method"] == "RAPTOR")
    assert (raptor["test"], raptor["n_pairs"], raptor["n_paired_rows"]) == ("paired_permutation", 6, 12)
    # gpt-oss-120b's MultiDoc2Dial comparison has 4 paired tasks: below 5 nothing is tested ("—")
    oss_s = next(x for x in t.stats if x["backend"] == "gpt-oss-120b" and x["delta_pp"] is not None)
    assert oss_s["p_value"] is None and oss_s["n_pairs"] == 4 and "fewer than 5" in oss_s["reason"]
    assert ("p (Holm): Holm-Bonferroni over the methods compared with Hybrid RAG on one benchmark, one family "
            "per backend and benchmark (m = 3-4 tested comparisons per family).") in t.caption


def test_table1_renders_the_same_numbers_in_every_format(hand_root):
    cfg = parse_config(_config(table1={"show_ci": True}))
    t = table1(Results(cfg, hand_root))
    tex = to_latex(t)
    assert r"\underline{71.2}\sbup{6.3}" in tex and r"\textbf{77.6}\sbup{12.7}" in tex
    assert r"\multicolumn{2}{c}{Document QA}" in tex and r"\toprule" in tex and r"\bottomrule" in tex
    assert r"\textit{not run}" in tex
    rows = list(csv.DictReader(io.StringIO(to_csv(t))))
    r = next(x for x in rows if x["row"] == "GPT-5.6-Luna / RAPTOR" and x["column"] == "TwoSources")
    assert (r["accuracy_pct"], r["delta_shown_pp"], r["delta_exact_pp"], r["mark"]) == ("87.5000", "43.8", "43.7500",
                                                                                         "best")
    assert float(r["ci_lo_pct"]) <= 87.5 <= float(r["ci_hi_pct"])
    md = md_table(t)
    assert "| Backend | Method | Document QA / MultiDoc2Dial | Document QA / TwoSources |" in md
    assert "[" in md.splitlines()[5]  # show_ci prints the interval in the cell


def test_marks_ties_and_too_few_values():
    cells = [Cell(value=v) for v in (0.5, 0.5, 0.25, None)]
    mark_best(cells)
    assert [c.mark for c in cells] == ["best", "best", "second", ""]
    same = [Cell(value=0.3), Cell(value=0.3)]
    mark_best(same)
    assert [c.mark for c in same] == ["best", "best"]
    alone = [Cell(value=0.9), Cell()]
    mark_best(alone)
    assert alone[0].mark == ""
    # displayed values decide: 0.7125 and 0.7134 both print 71.2 (Python rounds half to even) and tie
    close = [Cell(value=0.71249), Cell(value=0.7124), Cell(value=0.7)]
    mark_best(close)
    assert [c.mark for c in close] == ["best", "best", "second"]
    d = Cell(value=0.71249)
    set_delta(d, Cell(value=0.64951))  # 71.2 - 65.0 as printed
    assert d.delta == pytest.approx(6.2) and d.delta_exact == pytest.approx(6.298)


# ------------------------------------------------------------------------------- Tables 2, 5, 6

def test_table2_evidence_tokens_and_matched_rows(tmp_path):
    rows = []
    for seed, toks in ((0, [1000, 3000]), (1, [4000, 4000])):
        for i, tk in enumerate(toks):
            rows.append(_row("sourcelearn", "dmv", seed, i, 1, context_tokens=tk))
            rows.append(_row("hybrid_rag@matched=sourcelearn", "dmv", seed, i, i % 2, context_tokens=tk - 100))
    _folder(tmp_path, "luna", "mdd", rows)
    cfg = parse_config({**_config(table2={"counterparts": ["hybrid_rag", "raptor"]}),
                        "backends": [{"id": "luna", "label": "Luna", "model": "m"}],
                        "benchmarks": [{"id": "mdd", "label": "MultiDoc2Dial", "sources": ["dmv"]}]})
    main, tokens = table2(Results(cfg, tmp_path))
    assert [r.stub[1] for r in main.rows] == ["Hybrid RAG", "RAPTOR", "SourceLearn", "Evidence tokens"]
    assert main.columns == ["dmv"] and main.groups == [("MultiDoc2Dial", 1)]
    # tokens: seed 0 mean 2000, seed 1 mean 4000 -> 3000 -> "3.0k"
    assert main.rows[3].cells[0].text == "3.0k"
    assert [to_markdown_cell(r.cells[0]) for r in main.rows[:3]] == ["<u>50.0</u>", "not run", "**100.0**"]
    assert tokens.rows[0].cells[0].text == "2.9k" and tokens.rows[2].cells[0].text == "3.0k"
    s = main.stats[0]
    # 2 tasks, each under both seeds: 2 paired tasks (the test's unit) from 4 task x seed rows
    assert (s["method"], s["baseline"]) == ("SourceLearn", "Hybrid RAG (matched)")
    assert (s["n_pairs"], s["n_paired_rows"]) == (2, 4)


def _regions(seen: dict[tuple[str, int, str], bool]) -> dict:
    out: dict = {"sources": {}}
    for (src, seed, tid), v in seen.items():
        out["sources"].setdefault(src, {}).setdefault(str(seed), {"tests": {}})["tests"][tid] = {"seen": v}
    return out


def test_table5_strata_deltas_and_all_row(tmp_path):
    """mdd: tasks t0, t1 seen, t2, t3 unseen (seed 0). Hybrid RAG scores 1,0 | 1,1; SourceLearn 1,1 | 1,0.
    Seen: 50.0 vs 100.0 (up 50.0); unseen: 100.0 vs 50.0 (down 50.0). two: every task seen, both 1.0;
    its unseen stratum is empty, so the All row averages mdd alone for unseen."""
    rows = _scores("hybrid_rag", "dmv", 0, [1, 0, 1, 1]) + _scores("sourcelearn", "dmv", 0, [1, 1, 1, 0])
    folder = _folder(tmp_path, "luna", "mdd", rows)
    (folder / "reproduce").mkdir()
    (folder / "reproduce" / "regions.json").write_text(json.dumps(_regions(
        {("dmv", 0, f"dmv-t{i}"): i < 2 for i in range(4)})))
    folder2 = _folder(tmp_path, "luna", "two", _scores("hybrid_rag", "s1", 0, [1, 1]) + _scores("sourcelearn", "s1", 0,
                                                                                                [1, 1]))
    (folder2 / "reproduce").mkdir()
    (folder2 / "reproduce" / "regions.json").write_text(json.dumps(_regions({("s1", 0, "s1-t0"): True,
                                                                             ("s1", 0, "s1-t1"): True})))
    cfg = parse_config({**_config(table5={"methods": ["hybrid_rag", "sourcelearn"]}),
                        "backends": [{"id": "luna", "label": "Luna", "model": "m"}]})
    t = table5(Results(cfg, tmp_path))
    assert t.groups == [("Hybrid RAG", 2), ("SourceLearn", 2), ("tasks x splits", 2)]
    assert _cells(t, 0) == ["<u>50.0</u>", "**100.0**", "**100.0**<sub>↑50.0</sub>", "<u>50.0</u><sub>↓50.0</sub>",
                            "2", "2"]
    assert _cells(t, 1)[:4] == ["**100.0**", "not run", "**100.0**<sub>±0.0</sub>", "not run"]
    assert t.rows[1].cells[1].reason == "no unseen test task"
    # All: seen = mean(50, 100) = 75.0 and mean(100, 100) = 100.0; unseen: mdd only
    assert [r.stub[1] for r in t.rows] == ["MultiDoc2Dial", "TwoSources", "All"]
    assert _cells(t, 2) == ["<u>75.0</u>", "**100.0**", "**100.0**<sub>↑25.0</sub>", "<u>50.0</u><sub>↓50.0</sub>",
                            "4", "2"]


def test_table6_units_observations_accuracy(tmp_path):
    rows = (_scores("sourcelearn-m0", "ssa", 0, [1, 0]) + _scores("sourcelearn-ms", "ssa", 0, [1, 1])
            + _scores("sourcelearn-ms@cycles=2", "ssa", 0, [0, 0]))
    folder = _folder(tmp_path, "luna", "mdd", rows)
    (folder / "reproduce").mkdir()
    (folder / "reproduce" / "cycles.json").write_text(json.dumps({"sources": {"ssa": {
        "0": {"units": 571, "observations": None}, "1": {"units": 615, "observations": 95},
        "2": {"units": 1660, "observations": 53}}}}))
    cfg = parse_config({**_config(table6={"cycles": [0, 1, 2, 3]}), "backends": [{"id": "luna", "model": "m"}],
                        "benchmarks": [{"id": "mdd", "label": "MultiDoc2Dial", "sources": ["ssa"]}]})
    t = table6(Results(cfg, tmp_path))
    assert [r.stub[2] for r in t.rows] == ["0 (M0)", "1 (MS)", "2", "3"]
    assert [[to_markdown_cell(c) for c in r.cells] for r in t.rows] == [
        ["571", "—", "50.0"], ["615", "95", "100.0"], ["1,660", "53", "0.0"], ["not run", "not run", "not run"]]


# ------------------------------------------------------------------------------------ golden files

def _fixture_tables():
    import yaml

    cfg = parse_config(yaml.safe_load((FIXTURE / "config.yaml").read_text()))
    return build_all(Results(cfg, FIXTURE))


def test_golden_files_of_every_table():
    """Every table rendered from the scripted-model results folder, byte for byte."""
    if not FIXTURE.is_dir():
        pytest.fail(f"{FIXTURE} missing: regenerate it (see test_reproduce.py)")
    built = _fixture_tables()
    assert set(built) == {"table1", "table2", "table3", "table4", "table5", "table6", "figure3", "figure4",
                          "figure5"}
    regen = os.environ.get("SOURCEBENCH_REGEN_GOLDEN") == "1"
    mismatched = []
    for tables in built.values():
        for t in tables:
            for ext, fn in (("md", md_table), ("csv", to_csv), ("tex", to_latex)):
                path = GOLDEN / f"{t.id}.{ext}"
                text = fn(t)
                if regen:
                    path.write_text(text)
                elif not path.is_file() or path.read_text() != text:
                    mismatched.append(path.name)
    if regen:
        pytest.skip("golden files regenerated; review the diff")
    assert not mismatched, f"tables differ from their golden files: {mismatched}"


def test_golden_fixture_tables_are_consistent_with_its_rows():
    """Spot checks of the fixture tables against the raw rows (so a golden file cannot hide a wrong number)."""
    from sourcebench.reports.stats import macro_accuracy

    built = _fixture_tables()
    rows = [json.loads(x) for x in (FIXTURE / "scripted" / "townqa" / "results.jsonl").read_text().splitlines()]
    t1 = built["table1"][0]
    by_label = {r.stub[1]: r.cells[0] for r in t1.rows}
    for label, method in (("Hybrid RAG", "hybrid_rag"), ("No source", "no_source"), ("SourceLearn", "sourcelearn")):
        assert by_label[label].value == pytest.approx(macro_accuracy([r for r in rows if r["method"] == method]))
    assert by_label["no-such-method"].reason == "method no-such-method is not registered"
    assert all(c.status == "not run" for c in (r.cells[1] for r in t1.rows))  # the unregistered benchmark
    f5 = built["figure5"][0]
    hr = next(r for r in f5.rows if r.stub[2] == "Hybrid RAG" and r.stub[1] == "TownQA")
    assert hr.cells[2].value == pytest.approx(macro_accuracy([r for r in rows if r["method"] == "hybrid_rag@top_k=0"]))
    pngs = render_figures(built)
    assert sorted(pngs) == ["figure3_Scripted.png", "figure4_Scripted.png", "figure5_Scripted.png"]
    assert all(p[:8] == b"\x89PNG\r\n\x1a\n" and len(p) > 10_000 for p in pngs.values())
