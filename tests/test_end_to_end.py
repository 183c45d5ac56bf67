"""End-to-end: the CLI as a user runs it, on real data, with the deterministic scripted model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sourcebench.harness.cli import main
from tests.conftest import SHARED_DATA, need_data

pytestmark = pytest.mark.slow


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def live_calls(out: Path) -> int:
    return sum(json.loads(line)["calls"] for line in (out / "usage.jsonl").read_text().splitlines()
               if json.loads(line)["status"] == "live")


def run_cli(*args: str) -> int:
    return main(list(args))


def test_phantomwiki_run_report_and_rerun(tmp_path, capsys):
    need_data("phantomwiki")
    out = tmp_path / "pw"
    args = ["run", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source", "--model",
            "scripted/extractive", "--limit", "6", "--seeds", "0,1", "--embedder", "hash", "--out", str(out),
            "--data-dir", str(SHARED_DATA)]
    assert run_cli(*args) == 0
    r = rows(out)
    assert len(r) == 2 * 2 * 6
    assert len({(x["method"], x["seed"], x["task_id"]) for x in r}) == 24
    by = {m: [x["score"] for x in r if x["method"] == m] for m in ("hybrid_rag", "no_source")}
    # the extractive reader can only answer from evidence: retrieval must beat closed book
    assert sum(by["hybrid_rag"]) > sum(by["no_source"])
    # both methods see the same seeded test subset (paired comparison)
    ids = {m: {(x["seed"], x["task_id"]) for x in r if x["method"] == m} for m in by}
    assert ids["hybrid_rag"] == ids["no_source"]
    meta = json.loads((out / "run.json").read_text())
    assert meta["model"]["name"] == "scripted/extractive" and "versions" in meta and "git_commit" in meta
    assert (out / "splits" / "phantomwiki").is_dir()
    html = (out / "report" / "leaderboard.html").read_text()
    assert "hybrid_rag" in html and "no_source" in html
    calls_before = live_calls(out)
    assert calls_before > 0
    capsys.readouterr()
    t0 = time.time()
    assert run_cli(*args) == 0
    assert live_calls(out) == calls_before  # a finished run re-run makes zero model calls
    assert len(rows(out)) == 24
    assert "0 live model call(s)" in capsys.readouterr().out
    assert time.time() - t0 < 60


def test_run_folders_sharing_a_cache_dir_never_pay_twice(tmp_path):
    need_data("phantomwiki")
    common = ["run", "--benchmark", "phantomwiki", "--model", "scripted/extractive", "--limit", "3", "--seeds", "0",
              "--embedder", "hash", "--data-dir", str(SHARED_DATA), "--cache-dir", str(tmp_path / "shared-cache")]
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli(*common, "--methods", "hybrid_rag", "--out", str(a)) == 0
    assert live_calls(a) > 0 and (tmp_path / "shared-cache" / "llm_calls.sqlite").is_file()
    assert not (a / "cache" / "llm_calls.sqlite").exists()
    # another folder, another method list: the hybrid_rag calls come from the shared cache
    assert run_cli(*common, "--methods", "hybrid_rag,no_source", "--out", str(b)) == 0
    hybrid_live = sum(json.loads(line)["calls"] for line in (b / "usage.jsonl").read_text().splitlines()
                      if json.loads(line)["status"] == "live" and json.loads(line)["method"] == "hybrid_rag")
    assert hybrid_live == 0
    assert {(x["task_id"], x["score"]) for x in rows(b) if x["method"] == "hybrid_rag"} == \
        {(x["task_id"], x["score"]) for x in rows(a)}
    meta = json.loads((b / "run.json").read_text())
    assert meta["execution"]["cache_dir"] == str((tmp_path / "shared-cache").resolve())


def test_apibench_torchhub_end_to_end(tmp_path):
    need_data("apibench")
    out = tmp_path / "api"
    assert run_cli("run", "--benchmark", "apibench", "--sources", "torchhub", "--methods", "hybrid_rag",
                   "--model", "scripted/extractive", "--limit", "5", "--seeds", "0", "--embedder", "hash",
                   "--out", str(out), "--data-dir", str(SHARED_DATA)) == 0
    r = rows(out)
    assert len(r) == 5 and all(x["judge"]["name"] == "apibench_ast" for x in r)
    assert all("hallucination" in x["judge"]["details"] for x in r)
    assert (out / "report" / "leaderboard.md").exists()


def test_swe_qa_with_source_tree_and_llm_judge(tmp_path):
    need_data("swe_qa")
    tree = tmp_path / "flask-src"
    (tree / "src" / "flask").mkdir(parents=True)
    (tree / "src" / "flask" / "json.py").write_text(
        "class DefaultJSONProvider:\n    ensure_ascii = True\n\n    def dumps(self, obj):\n        return obj\n")
    (tree / "README.md").write_text("# Flask\n\nA web framework.\n")
    out = tmp_path / "swe"
    assert run_cli("run", "--benchmark", "swe_qa", "--sources", "flask", "--opt", f"flask={tree}", "--methods",
                   "hybrid_rag", "--model", "scripted/extractive", "--limit", "3", "--seeds", "0", "--embedder",
                   "hash", "--out", str(out), "--data-dir", str(SHARED_DATA)) == 0
    r = rows(out)
    assert len(r) == 3 and all(x["judge"]["name"] == "llm_judge" for x in r)
    assert all("prompt" in x["judge"]["details"] and "reply" in x["judge"]["details"] for x in r)
    meta = json.loads((out / "run.json").read_text())
    assert meta["sources"][0]["origin"] == str(tree) and meta["judge_model"]["name"] == "scripted/extractive"


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "sourcebench.harness.cli", "run", "--benchmark", "phantomwiki", "--methods",
            "hybrid_rag,no_source", "--model", "scripted/extractive", "--limit", "8", "--seeds", "0,1",
            "--embedder", "hash", "--out", str(out), "--data-dir", str(SHARED_DATA), "--no-report"]


def test_killed_run_resumes_to_identical_results(tmp_path):
    need_data("phantomwiki")
    ref, out = tmp_path / "ref", tmp_path / "killed"
    env = {**os.environ, "SOURCEBENCH_SCRIPTED_DELAY": "0.15", "INSPECT_DISPLAY": "none"}
    subprocess.run(_cmd(ref), check=True, env={**env, "SOURCEBENCH_SCRIPTED_DELAY": "0"}, capture_output=True)
    p = subprocess.Popen(_cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600  # generous: a loaded machine takes long to start the run
    f = out / "results.jsonl"
    while not (f.exists() and len(f.read_text().splitlines()) >= 5):
        if time.time() > deadline or p.poll() is not None:
            p.kill()
            pytest.fail(f"the run never wrote 5 rows (exit code {p.poll()})")
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    partial = len((out / "results.jsonl").read_text().splitlines())
    assert 0 < partial < 32, "the run should have been killed midway"
    subprocess.run(_cmd(out), check=True, env={**env, "SOURCEBENCH_SCRIPTED_DELAY": "0"}, capture_output=True)
    key = lambda x: (x["method"], x["seed"], x["task_id"])
    a = sorted(rows(ref), key=key)
    b = sorted(rows(out), key=key)
    assert len(b) == 32 and len({key(x) for x in b}) == 32  # no duplicated or missing rows
    strip = lambda x: {k: v for k, v in x.items() if k not in ("run_id",)}
    assert [strip(x) for x in a] == [strip(x) for x in b]


@pytest.mark.parametrize("case", ["missing_data", "malformed", "unknown_method", "unreachable"])
def test_user_errors_are_one_line_without_traceback(tmp_path, case):
    env = {**os.environ, "INSPECT_DISPLAY": "none"}
    base = [sys.executable, "-m", "sourcebench.harness.cli", "run", "--benchmark", "phantomwiki", "--methods", "no_source",
            "--model", "scripted/extractive", "--limit", "2", "--seeds", "0", "--embedder", "hash", "--out",
            str(tmp_path / "out")]
    if case == "missing_data":
        cmd = base + ["--data-dir", str(tmp_path / "nowhere")]
        expect = "phantomwiki: data folder not found"
    elif case == "malformed":
        inst = tmp_path / "d" / "phantomwiki" / "w"
        inst.mkdir(parents=True)
        (inst / "articles.json").write_text('[{"title": "A", "article": "# A\\n## F\\nx"}]')
        (inst / "questions.json").write_text('[{"id": "1", "question": "q", "answer": ["a"], "type": 0},\n{oops}]')
        cmd = base + ["--data-dir", str(tmp_path / "d")]
        expect = "questions.json: invalid JSON at line 2"
    elif case == "unknown_method":
        cmd = base[:6] + ["--methods", "nope"] + base[8:]
        expect = "unknown method 'nope'"
    else:
        cmd = base[:8] + ["--model", "openai-api/deadend/m"] + base[10:] + ["--data-dir", str(SHARED_DATA)]
        env.update(DEADEND_BASE_URL="http://127.0.0.1:9/v1", DEADEND_API_KEY="sk-planted-secret-123")
        expect = "http://127.0.0.1:9/v1 is unreachable"
        need_data("phantomwiki")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode != 0
    err = p.stderr.strip()
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert len(err.splitlines()) == 1 and expect in err, err
    assert "sk-planted-secret-123" not in err


def test_rows_of_another_method_version_are_set_aside_and_rerun(tmp_path, monkeypatch, capsys):
    """A folder never mixes a method's versions: old rows are kept in results.stale.jsonl, the cells
    run again, and calls the new version makes exactly as before come from the cache."""
    need_data("phantomwiki")
    from sourcebench.methods.hybrid_rag import HybridRAG

    out = tmp_path / "pw"
    args = ["run", "--benchmark", "phantomwiki", "--methods", "hybrid_rag,no_source", "--model", "scripted/extractive",
            "--limit", "3", "--seeds", "0", "--embedder", "hash", "--out", str(out), "--data-dir", str(SHARED_DATA)]
    assert run_cli(*args) == 0
    before = rows(out)
    calls = live_calls(out)
    old = HybridRAG.version
    monkeypatch.setattr(HybridRAG, "version", "99")
    capsys.readouterr()
    assert run_cli(*args) == 0
    assert f"hybrid_rag: 3 result row(s) of method version {old} moved to results.stale.jsonl" in \
        " ".join(capsys.readouterr().out.split())
    after = rows(out)
    stale = [json.loads(x) for x in (out / "results.stale.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in stale) == sorted(r["task_id"] for r in before if r["method"] == "hybrid_rag")
    assert {r["method_version"] for r in stale} == {old}
    assert len(after) == len(before) and {r["method_version"] for r in after if r["method"] == "hybrid_rag"} == {"99"}
    assert [r for r in after if r["method"] == "no_source"] == [r for r in before if r["method"] == "no_source"]
    # the first version's usage moved aside with its rows; the new version's answers all came from the cache
    usage = [json.loads(x) for x in (out / "usage.jsonl").read_text().splitlines()]
    old_usage = [json.loads(x) for x in (out / "usage.stale.jsonl").read_text().splitlines()]
    assert {r["method"] for r in old_usage} == {"hybrid_rag"}
    first_hybrid_live = sum(r["calls"] for r in old_usage if r["status"] == "live")
    assert first_hybrid_live > 0 and live_calls(out) == calls - first_hybrid_live
    assert not [r for r in usage if r["method"] == "hybrid_rag" and r["status"] == "live"]
    assert sum(r["calls"] for r in usage if r["method"] == "hybrid_rag" and r["status"] == "cached") >= 3
