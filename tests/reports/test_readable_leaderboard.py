"""A leaderboard that reads like a result: the table and the figure first, the definitions, deviations
and provenance folded below them; a banner on a scripted-model run; a small run says what it cannot
show; each cell's inspect log opens in inspect-ai's viewer; a resumed build's calls are counted once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import inspect_ai.log
import pytest
from test_forest import _chromium
from test_leaderboard import _jsonl, _row, make_run

from sourcebench.reports.board import resolution
from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.rundata import load_run, usage_cost


def _retitle(run: Path, **changes) -> None:
    meta = json.loads((run / "run.json").read_text())
    meta.update(changes)
    (run / "run.json").write_text(json.dumps(meta))


def test_the_table_and_figure_come_before_the_definitions_which_are_folded(tmp_path):
    paths = write_report(make_run(tmp_path), n_boot=100)
    md, page = paths["md"].read_text(), paths["html"].read_text()
    # Markdown: both benchmarks' tables and figures, then the folded parts, the definitions, the provenance
    for bench in ("apibench", "phantomwiki"):
        assert md.index(f"**{bench}: leaderboard**") < md.index(f"forest_{bench}.png") < md.index("**apibench: cost**")
    assert md.index("**apibench: cost**") < md.index("**phantomwiki: cost**") < md.index("Macro accuracy (%)")
    assert md.index("## Deviations") > md.index("Macro accuracy (%)") and "- no_source: answers without the source" in md
    assert md.index("## Provenance") > md.index("## Deviations")
    # HTML: the definitions, deviations, provenance and the cost tables sit in <details>, the table does not
    assert page.index("phantomwiki: leaderboard") < page.index("Macro accuracy (%)")
    head = page.split("<table", 1)[0]
    assert "Macro accuracy" not in head and "<details" not in head
    for text in ("Macro accuracy (%)", "answers without the source", "report seed, bootstrap", "phantomwiki: cost"):
        before = page[:page.index(text)]
        assert before.count("<details") == before.count("</details>") + 1, text  # inside an open <details>


def test_a_run_of_the_scripted_model_carries_a_pipeline_check_banner(tmp_path):
    run = make_run(tmp_path)
    plain = write_report(run, n_boot=100)["md"].read_text()
    assert "Pipeline check, not a result" not in plain
    _retitle(run, model={"name": "scripted/extractive", "temperature": 0.0})
    paths = write_report(run, n_boot=100)
    for text in (paths["md"].read_text(), paths["html"].read_text()):
        assert "Pipeline check, not a result" in text and "scripted/extractive" in text
        assert text.index("Pipeline check, not a result") < text.index("phantomwiki: leaderboard")
    assert '<p class="banner">Pipeline check, not a result' in paths["html"].read_text()


def test_a_small_run_says_it_cannot_detect_a_difference(tmp_path):
    """4 tasks, one seed: nothing can be detected (fewer groups than z²); 20 tasks: nothing below 39 points."""
    assert resolution(4, 3) == (None, 8)
    floor, need = resolution(20, 20)
    assert need == 8 and floor == pytest.approx(39.24, abs=0.01)
    assert resolution(1000, 900)[0] < 1.0  # a large run resolves a point

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "small", "benchmark": "phantomwiki", "seeds": [0],
                                              "methods": [{"name": "hybrid_rag"}, {"name": "no_source"}]}))
    rows = [_row(m, "s1", 0, i, float(s)) for m, scores in (("hybrid_rag", [1, 1, 0, 0]), ("no_source", [1, 0, 0, 0]))
            for i, s in enumerate(scores)]
    _jsonl(run / "results.jsonl", rows)
    md = write_report(run, n_boot=100)["md"].read_text()
    assert "Small run (phantomwiki): no_source: with 4 paired tasks in 4 groups, this run cannot detect any " \
           "difference from the baseline" in md
    assert md.index("Small run") < md.index("**phantomwiki: leaderboard**")
    assert "none possible (< 8 groups)" in md  # the MDE cell of a comparison too small to have one


def test_methods_with_the_same_size_limit_share_one_clause_of_the_small_run_banner():
    from sourcebench.reports.board import resolution_lines

    same = {"n_pairs": 2, "n_groups": 2, "min_groups": 8, "floor_pp": None}
    lines = resolution_lines([{"method": "awm", **same}, {"method": "raptor", **same},
                              {"method": "rika", "n_pairs": 20, "n_groups": 20, "min_groups": 8, "floor_pp": 39.2}])
    assert len(lines) == 2 and lines[0].startswith("awm, raptor: with 2 paired tasks in 2 groups, this run cannot")
    assert lines[1].startswith("rika: with 20 paired tasks in 20 groups, this run cannot detect a difference from "
                               "the baseline below 39 points")


def test_each_cell_log_links_a_page_of_the_inspect_viewer_not_the_eval_file(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    (run / "logs").mkdir()
    names = {"a.eval": ("hybrid_rag", "s1", 0), "b.eval": ("no_source", "s1", 1)}
    for name in names:
        (run / "logs" / name).write_bytes(b"")

    def header(path, header_only):
        method, source, seed = names[Path(path).name]
        return SimpleNamespace(eval=SimpleNamespace(metadata={"method": {"name": method, "version": "1"},
                                                              "source": source, "seed": seed}),
                               status="success", results=SimpleNamespace(total_samples=3))

    monkeypatch.setattr(inspect_ai.log, "read_eval_log", header)
    paths = write_report(run, n_boot=100)
    page, md = paths["html"].read_text(), paths["md"].read_text()
    for name in names:
        assert f'<a href="http://127.0.0.1:7575/#/logs/{name}">{name}</a>' in page
        assert f"[{name}](http://127.0.0.1:7575/#/logs/{name})" in md
        assert f'href="../logs/{name}"' not in page and f'href="{name}"' not in page
    assert f"inspect view --log-dir {(run / 'logs').resolve()}" in page


def test_a_resumed_build_counts_each_call_once(tmp_path):
    """Invocation 1 made 10 live calls and 2 cached ones (a repeated prompt: calls of their own) and was
    stopped; invocation 2 replayed those 12 from the cache and made 5 more live: 17 calls, 15 live, the
    replays not counted again (29 before)."""
    cell = {"benchmark": "phantomwiki", "source": "s1", "seed": 0, "method": "hybrid_rag", "phase": "learn",
            "stage": "summary", "reasoning_tokens": 0, "seconds": 0.1}
    probe = {"benchmark": "phantomwiki", "source": "", "seed": None, "method": "harness", "phase": "probe",
             "stage": "", "status": "cached", "calls": 1, "input_tokens": 5, "output_tokens": 3}
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "r", "benchmark": "phantomwiki"}))
    _jsonl(run / "results.jsonl", [_row("hybrid_rag", "s1", 0, 0, 1.0)])
    _jsonl(run / "usage.jsonl", [
        probe,
        {**cell, "status": "live", "calls": 10, "input_tokens": 1000, "output_tokens": 100},
        {**cell, "status": "cached", "calls": 2, "input_tokens": 200, "output_tokens": 20},
        probe,
        {**cell, "status": "cached", "calls": 12, "input_tokens": 1200, "output_tokens": 120},
        {**cell, "status": "live", "calls": 5, "input_tokens": 500, "output_tokens": 50},
    ])
    data = load_run(run)
    cost = usage_cost([u for u in data.usage if u["method"] == "hybrid_rag"])["learn"]
    assert (cost["calls"], cost["calls_live"], cost["replayed"]) == (17, 15, 12)
    assert (cost["tokens"], cost["tokens_live"]) == (1870, 1650)
    md = write_report(run, n_boot=100)["md"].read_text()
    assert "| 17 (15 live) | 1,870 (1,650 live) |" in md


def test_no_module_imports_another_modules_private_names():
    """Private (_name) helpers stay in their module: a name another module needs is public."""
    import ast

    root = Path(__file__).resolve().parents[2]
    project = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] not in project or rel.parts[0] == "tests":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                ours = node.level > 0 or (node.module or "").startswith("sourcebench")
                modules |= {a.asname or a.name for a in node.names} if ours else set()
                found += [f"{rel}:{node.lineno} imports {a.name} from {node.module or '.'}" for a in node.names
                          if ours and a.name.startswith("_") and not a.name.startswith("__")]
            elif isinstance(node, ast.Import):
                modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("sourcebench")}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{rel}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not found, "\n".join(found)


def test_paper_table_labels_load_when_a_table_is_built_not_at_import():
    code = ("import sys; import sourcebench.reports.tables, sourcebench.reports.paper_page; "
            "print(sorted(m for m in sys.modules if m.startswith('sourcebench.methods')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_reports_mask_secrets_with_the_cores_redaction(monkeypatch):
    """A short API key of this environment is no credential shape; the core's redaction knows it."""
    from sourcebench.reports.text import safe

    monkeypatch.setenv("OPENAI_API_KEY", "k3y-short")
    assert safe("the server said: bad key k3y-short") == "the server said: bad key ***"
    assert safe("Authorization: Bearer abcdefgh12345") == "Authorization: Bearer ***"
    assert safe("sk-proj-THISisAsecretKEY1234567890 at http://u:pw@host/v1") == "*** at http://***@host/v1"


@pytest.mark.slow
def test_the_leaderboard_table_is_above_the_fold_in_headless_chromium(tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    run = make_run(tmp_path)
    _retitle(run, model={"name": "scripted/extractive"})
    page = write_report(run, n_boot=100)["html"].resolve()
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>window.onload=()=>{const t=document.querySelector('table').getBoundingClientRect();"
                   "document.title=[t.top,t.bottom,window.innerHeight,"
                   "[...document.querySelectorAll('details')].filter(d=>d.open).length].join(',')}</script></body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--window-size=1400,900"]
    dom = subprocess.run([exe, *flags, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()], check=False,
                         capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    top, bottom, height, open_details = dom.stdout.split("<title>", 1)[1].split("</title>", 1)[0].split(",")
    assert 0 < float(top) < float(bottom) <= float(height), (top, bottom, height)  # the whole table on screen 1
    assert open_details == "0"
    shot = tmp_path / "leaderboard.png"
    r = subprocess.run([exe, *flags, f"--screenshot={shot}", page.as_uri()], check=False, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0 and shot.stat().st_size > 0, r.stderr[-2000:]


def test_exit_4_says_the_degraded_threshold_is_a_share_of_the_cells_tasks():
    from sourcebench.harness.cli.run import degraded_message

    line = degraded_message(2, 0.10, 4, allowed=False)
    assert "more than 10 % of its answers or of a stage's model requests failed" in line
    assert "a share of the cell's tasks; with --limit 4, one failed answer of 4 is 25 %" in line
    assert line.endswith("exit code 4 (--allow-degraded: 0)")
    assert "exit code" not in degraded_message(1, 0.2, None, allowed=True)
