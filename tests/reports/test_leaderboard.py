"""End to end: a tiny hand-made run folder -> leaderboard.md / .csv / .html with hand-checked numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from sourcebench.harness.errors import DataError
from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.rundata import load_run

SECRET = "sk-proj-THISisAsecretKEY1234567890"

# phantomwiki, sources s1 (3 tasks) and s2 (2 tasks), seeds 0 and 1:
#   hybrid_rag  seed 0: s1 2/3, s2 1/2 -> 7/12; seed 1: s1 1, s2 1/2 -> 9/12; macro 2/3 = 66.7 %
#   no_source   seed 0: s1 1/3, s2 0 (one failed) -> 1/6; seed 1: s1 1/3, s2 1/2 -> 5/12; 7/24 = 29.2 %
#   delta = 29.17 - 66.67 = -37.5 pp. Paired test, task as unit (no_source - hybrid_rag averaged over the
#   two seeds): s1-t0 0, s1-t1 -1, s1-t2 -1/2, s2-t0 -1/2, s2-t1 0; statistic = mean over sources of the
#   source's mean = (-1/2 + -1/4) / 2 = -0.375; three non-zero tasks, all negative, so of the 2**3 sign
#   patterns only all-minus and all-plus reach |-0.375|: p = 2/8 = 0.25. (Pairing (source, seed, task)
#   rows instead counted s1-t1 twice: 4 discordant rows, McNemar p = 2/16 = 0.125.)
SCORES = {
    "hybrid_rag": {("s1", 0): [1, 1, 0], ("s2", 0): [1, 0], ("s1", 1): [1, 1, 1], ("s2", 1): [1, 0]},
    "no_source": {("s1", 0): [1, 0, 0], ("s2", 0): [0, 0], ("s1", 1): [1, 0, 0], ("s2", 1): [1, 0]},
}


def _row(method, source, seed, i, score, benchmark="phantomwiki", **kw):
    return {
        "run_id": "r1",
        "benchmark": benchmark,
        "source": source,
        "method": method,
        "method_version": "1",
        "seed": seed,
        "task_id": f"{source}-t{i}",
        "score": score,
        "correct": bool(score),
        "failed": False,
        "failure_reason": "",
        **kw,
    }


def _jsonl(path: Path, rows, tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail, encoding="utf-8")


def make_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(
        json.dumps(
            {
                "run_id": "r1",
                "created": "2026-01-01T00:00:00Z",
                "command": f"sourcebench run --api-key {SECRET}",
                "benchmark": "phantomwiki",
                "methods": [
                    {"name": "hybrid_rag", "version": "1", "config": {"api_key": SECRET}, "deviations": []},
                    {
                        "name": "no_source",
                        "version": "1",
                        "config": {},
                        "deviations": ["answers without the source"],
                    },
                    {"name": "sourcelearn", "version": "2", "config": {}, "deviations": ["BM25 only <fast>"]},
                ],
                "model": {
                    "name": "local/smollm2",
                    "base_url": "http://user:pw@127.0.0.1:8000/v1?key=abc",
                    "temperature": 0.0,
                    "max_tokens": 256,
                    "seed": 0,
                    "context_window": 8192,
                    "api_key": SECRET,
                },
                "judge_model": None,
                "embedder": "all-MiniLM-L6-v2",
                "seeds": [0, 1],
                "limit": None,
                "sources": [{"id": "s1", "origin": "phantomwiki", "fingerprint": "abc123", "n_elements": 51}],
                "versions": {"python": "3.11.9", "packages": {"numpy": "2.0"}},
                "git_commit": "deadbeef" * 5,
            }
        ),
        encoding="utf-8",
    )
    rows = []
    for method, table in SCORES.items():
        for (src, seed), scores in table.items():
            rows += [_row(method, src, seed, i, float(s)) for i, s in enumerate(scores)]
    failed = next(r for r in rows if r["method"] == "no_source" and r["source"] == "s2" and r["seed"] == 0)
    failed.update(failed=True, failure_reason=f"model call failed: 401 invalid key {SECRET}")
    rows += [
        _row("no_source", "a1", 0, 0, 1.0, benchmark="apibench"),
        _row("no_source", "a1", 0, 1, 0.0, benchmark="apibench"),
    ]
    _jsonl(run / "results.jsonl", rows, tail='{"run_id": "r1", "bench')  # torn final line
    u = {
        "benchmark": "phantomwiki",
        "source": "s1",
        "method": "hybrid_rag",
        "seed": None,
        "stage": "x",
        "seconds": 1.0,
    }
    _jsonl(
        run / "usage.jsonl",
        [
            {**u, "phase": "learn", "status": "live", "calls": 3, "input_tokens": 100, "output_tokens": 20},
            {**u, "phase": "learn", "status": "cached", "calls": 2, "input_tokens": 50, "output_tokens": 10},
            {**u, "phase": "answer", "status": "live", "calls": 6, "input_tokens": 600, "output_tokens": 60},
            {**u, "phase": "answer", "status": "live", "calls": 4, "input_tokens": 400, "output_tokens": 40},
            {**u, "phase": "answer", "status": "failed", "calls": 1, "input_tokens": 0, "output_tokens": 0},
            {
                **u,
                "method": "no_source",
                "phase": "answer",
                "status": "failed",
                "calls": 1,
                "input_tokens": 0,
                "output_tokens": 0,
            },
        ],
    )
    _jsonl(
        run / "failures.jsonl",
        [
            {
                "benchmark": "phantomwiki",
                "source": "s2",
                "method": "no_source",
                "seed": 0,
                "phase": "answer",
                "stage": "answer",
                "error": f"AuthenticationError: bad key {SECRET}",
            },
        ],
    )
    return run


def test_load_run_tolerates_torn_tail_refuses_duplicates_and_names_missing_files(tmp_path):
    run = make_run(tmp_path)
    data = load_run(run)
    assert len(data.results) == 20 + 2
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    (run / "results.jsonl").write_text(lines[0] + "".join(lines))  # the first row written twice
    with pytest.raises(DataError, match=r"results.jsonl:2: duplicate result row .* as line 1"):
        load_run(run)
    (run / "results.jsonl").write_text("".join(lines))
    (run / "usage.jsonl").unlink()
    assert load_run(run).usage == []
    (run / "results.jsonl").unlink()
    with pytest.raises(DataError, match="results.jsonl"):
        load_run(run)
    (run / "run.json").unlink()
    with pytest.raises(DataError, match="run.json"):
        load_run(run)


def test_write_report_end_to_end(tmp_path):
    run = make_run(tmp_path)
    paths = write_report(run, n_boot=300)
    # one forest plot per benchmark next to the Markdown (tests/reports/test_forest.py checks them)
    assert set(paths) == {"md", "csv", "html", "forest_phantomwiki.png", "forest_apibench.png"}
    assert all(p.parent == run / "report" and p.is_file() for p in paths.values())
    md, html_text = paths["md"].read_text(), paths["html"].read_text()
    csv_text = paths["csv"].read_text()

    for text in (md, html_text, csv_text):
        assert SECRET not in text and "THISisAsecret" not in text
        assert "user:pw" not in text and "key=abc" not in text

    # Markdown: baseline first, numbers, signed delta, task-level p, failures, not run, captions
    lines = md.splitlines()
    pw = md.split("## phantomwiki", 1)[1].splitlines()
    main = [
        ln
        for ln in pw
        if ln.startswith("| ") and ("hybrid_rag" in ln or "no_source" in ln or "sourcelearn" in ln)
    ]
    assert main[0].startswith("| hybrid_rag (baseline) | 66.7 [")
    # one of the two answers of no_source's (s2, seed 0) cell failed: more than 10 %, so the cell is degraded
    ns = next(ln for ln in main if ln.startswith("| no_source | DEGRADED (29.2 ["))
    # Δ on the paired tasks with its interval (the inverted sign-flip test: with 5 groups no shift can reach
    # p < 0.05, so "—" and why, never a number), pairs of tasks (groups), the MDE after Holm, and the failed
    # share next to the accuracy
    assert "(10.0% failed))" in ns
    # 5 paired groups: no Δ can reach 80% power at 0.05 (it takes 8 that differ), so no MDE is shown (the CSV
    # keeps the observed one, 62.9); and no 95% interval (the smallest attainable p is 1/16)
    assert ("| -37.5 (interval —, too few groups for a 95 % interval (5 groups: the smallest attainable p is "
            "0.0625)) | 0.250 | 5 of 5 (5 groups) | none possible (< 8 groups) | 5 | 1/10 "
            "| 29.2 ± 17.7 | 17.7 (5 tasks) | 1 |") in ns
    assert "no_source on s2 (seed 0): degraded: test: 1 of 2 answers failed (50 %; model call failed 1)" in md
    assert "| sourcelearn | not run | — | — |" in md
    assert "apibench" in md and "Baseline hybrid_rag has no results for this benchmark" in md
    api = next(ln for ln in lines if ln.startswith("| no_source | 50.0 ["))
    assert "| — | — |" in api
    assert "5 (3 live)" in md and "180 (120 live)" in md  # learn calls and tokens
    assert "10 (10 live)" in md and "1,100 (1,100 live)" in md  # answer rows with the same key summed
    # learning cost per stage: the learn rows of stage "x" (live 3 calls / 120 tokens / 1 s, cached 2)
    assert "phantomwiki: learning cost by stage" in md
    assert "| hybrid_rag | x | 5 (3 live) | 180 (120 live) | 1 | 0 |" in md
    assert "mean over split seeds of (mean over sources" in md
    assert "Holm" in md and "McNemar" in md and "local/smollm2" in md and "deadbeef" * 5 in md
    assert "with the group as unit" in md and "tasks within" not in md
    assert "5 paired tasks in 5 groups (10 task x seed rows), exact" in md
    assert "Holm-Bonferroni over the 1 method compared with hybrid_rag on this benchmark" in md
    assert "sourcelearn: BM25 only \\<fast>" in md  # escaped: no raw HTML tag in Markdown
    assert "no_source: answers without the source" in md
    assert "| s1 | 83.3 | 33.3 | not run |" in md  # per-source: hybrid (2/3+1)/2, no_source 1/3
    assert "| model call failed |" in md and "AuthenticationError" in md

    # HTML: self-contained, escaped, same numbers; its only links are the per-task pages beside it
    import re

    pages = set(re.findall(r'href="([^"]*)"', html_text))
    assert pages and all(re.fullmatch(r"compare-[\w.@=+-]+-vs-[\w.@=+-]+\.html", p) for p in pages), pages
    assert all((run / "report" / p).is_file() for p in pages)
    for external in ("<script", "<link", "@import", "url("):
        assert external not in html_text
    assert html_text.count("src=") == html_text.count('src="data:image/png;base64,') == 2  # embedded figures only
    assert "<style>" in html_text and "BM25 only &lt;fast&gt;" in html_text
    assert "-37.5" in html_text and "not run" in html_text and "29.2 [" in html_text

    # CSV: one row per benchmark x method with numbers
    rows = list(csv.DictReader(csv_text.splitlines()))
    assert [(r["benchmark"], r["method"]) for r in rows] == [
        ("apibench", "no_source"),
        ("apibench", "hybrid_rag"),
        ("apibench", "sourcelearn"),
        ("phantomwiki", "hybrid_rag"),
        ("phantomwiki", "no_source"),
        ("phantomwiki", "sourcelearn"),
    ]
    by = {(r["benchmark"], r["method"]): r for r in rows}
    hy, no = by[("phantomwiki", "hybrid_rag")], by[("phantomwiki", "no_source")]
    assert float(hy["accuracy_pct"]) == pytest.approx(200 / 3, abs=1e-3)
    assert float(no["accuracy_pct"]) == pytest.approx(700 / 24, abs=1e-3)
    assert float(no["delta_pp"]) == pytest.approx(-37.5, abs=1e-3) and hy["delta_pp"] == ""
    assert no["test"] == "paired_permutation" and float(no["p_holm"]) == pytest.approx(0.25)
    assert (no["n_pairs"], no["n_paired_rows"], no["p_exact"]) == ("5", "10", "1")
    assert no["holm_family_size"] == "1"
    assert float(no["ci_lo_pct"]) <= float(no["accuracy_pct"]) <= float(no["ci_hi_pct"])
    assert (no["n_tasks"], no["n_rows"], no["failed_rows"]) == ("5", "10", "1")
    assert float(no["acc_seed0_pct"]) == pytest.approx(100 / 6, abs=1e-3)
    assert (hy["learn_calls"], hy["learn_calls_live"], hy["learn_tokens"]) == ("5", "3", "180")
    assert (hy["answer_failed"], hy["failed_calls"], no["failed_calls"]) == ("1", "1", "1")
    assert by[("phantomwiki", "sourcelearn")]["status"] == "not run"
    assert by[("apibench", "no_source")]["delta_pp"] == "" and by[("apibench", "no_source")]["p_value"] == ""


def test_report_out_dir_and_other_baseline(tmp_path):
    run = make_run(tmp_path)
    paths = write_report(run, out_dir=tmp_path / "elsewhere", baseline="no_source", n_boot=100)
    assert paths["md"].parent == tmp_path / "elsewhere"
    md = paths["md"].read_text()
    assert "| no_source (baseline) | DEGRADED (29.2 [" in md
    # the baseline is degraded: the comparison keeps its numbers but gets no stars
    assert "| hybrid_rag | 66.7 [" in md and "| +37.5 (interval —, too few groups" in md
    again = write_report(run, out_dir=tmp_path / "again", baseline="no_source", n_boot=100)
    assert again["csv"].read_text() == paths["csv"].read_text()  # seeded: identical numbers


def test_failed_calls_count_replies_that_stayed_invalid(tmp_path):
    """A reply still invalid after the structured-output retry is a failed call too (live in usage,
    useless to the method): the cost tables count it, as the Failures table lists it."""
    run = make_run(tmp_path)
    with (run / "failures.jsonl").open("a") as f:
        f.write(json.dumps({"benchmark": "phantomwiki", "source": "s1", "method": "hybrid_rag", "seed": 0,
                            "phase": "learn", "stage": "x",
                            "error": "invalid structured output after retry: ValidationError: EOF"}) + "\n")
    paths = write_report(run, n_boot=100)
    assert "| hybrid_rag | x | 5 (3 live) | 180 (120 live) | 1 | 1 |" in paths["md"].read_text()  # learning stage
    with paths["csv"].open() as f:
        hy = next(r for r in csv.DictReader(f) if r["benchmark"] == "phantomwiki" and r["method"] == "hybrid_rag")
    assert (hy["learn_failed"], hy["answer_failed"], hy["failed_calls"]) == ("1", "1", "2")


def _cached_run(tmp_path: Path, name: str, seed_rows) -> Path:
    """A run folder of three methods whose answer to a task is the same under every seed testing it."""
    run = tmp_path / name
    run.mkdir()
    run_json = {"run_id": name, "benchmark": "phantomwiki", "seeds": sorted(seed_rows)}
    (run / "run.json").write_text(json.dumps(run_json))
    answers = {"hybrid_rag": [1, 1, 0, 1, 0, 1, 1, 0, 1, 1], "no_source": [0, 1, 0, 0, 0, 1, 0, 0, 0, 1],
               "raptor": [0.5, 1, 0.25, 1, 0, 0.5, 1, 0, 0.75, 1]}
    rows = [_row(m, "s1" if i < 6 else "s2", seed, i, float(scores[i]))
            for m, scores in answers.items() for seed, ids in seed_rows.items() for i in ids]
    _jsonl(run / "results.jsonl", rows)
    return run


def test_leaderboard_p_values_are_unchanged_by_replicated_seeds(tmp_path):
    """A task counts once: duplicating a seed of cached answers, or splitting a seed's tasks between two
    seeds, leaves every p and every Holm-adjusted p of the leaderboard as it was."""
    from sourcebench.reports.board import summarize

    seeds = {0: [0, 1, 2, 3, 6, 7], 1: [2, 3, 4, 5, 8], 2: [0, 4, 5, 9]}
    split = {0: [0, 1, 2], 3: [3, 6, 7], 1: seeds[1], 2: seeds[2]}  # seed 0's tasks shared with a seed 3
    variants = {"ref": seeds, "dup": {**seeds, 3: seeds[0]}, "split": split}
    got = {}
    for name, spec in variants.items():
        (bench,) = summarize(load_run(_cached_run(tmp_path, name, spec)), n_boot=50)
        got[name] = {e["method"]: (e.get("p_value"), e.get("p_holm"), e.get("n_pairs"))
                     for e in bench["methods"]}
    assert got["ref"]["no_source"][0] is not None and got["ref"]["raptor"][2] == 10
    for name in ("dup", "split"):
        for m, (p, ph, n) in got["ref"].items():
            assert got[name][m][2] == n and (p is None) == (got[name][m][0] is None), (name, m)
            if p is not None:
                assert got[name][m][0] == pytest.approx(p, rel=1e-12) and got[name][m][1] == pytest.approx(ph)
