"""Every registered method against the API-like test backend at medium reasoning effort.

What a user of a hosted reasoning model meets: reasoning tokens counted against the output cap,
OpenAI's strict-schema rules and limits, the embedding API's input limits. The bar is 0 failed calls
and no degraded cell, with reasoning tokens in the report; with a 50-token reasoning allowance the
cells are degraded, the run exits 4, and the report says why, one line per cell.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sourcebench.harness.cli import main
from sourcebench.harness.health import EXIT_DEGRADED
from sourcebench.harness.registry import method_names
from tests.conftest import SHARED_DATA, need_data

pytestmark = pytest.mark.slow

MODEL = "openai-api/testapi/gpt-oss-120b"  # chat completions; gpt-oss reasons
EMBEDDER = "openai/text-embedding-3-large"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def _run(out: Path, bench: list[str], *extra: str, methods: str | None = None) -> int:
    return main(["run", *bench, "--methods", methods or ",".join(method_names()), "--model", MODEL,
                 "--reasoning-effort", "medium", "--judge-reasoning-effort", "medium", "--embedder", EMBEDDER,
                 "--seeds", "0", "--limit", "2", "--out", str(out), *extra])


def _assert_clean(out: Path, api) -> None:
    rows = _jsonl(out / "results.jsonl")
    assert {r["method"] for r in rows} == set(method_names())
    assert not [r for r in rows if r["failed"]], [r["failure_reason"] for r in rows if r["failed"]][:3]
    assert _jsonl(out / "failures.jsonl") == []
    usage = _jsonl(out / "usage.jsonl")
    assert sum(u["reasoning_tokens"] for u in usage if u["status"] == "live") > 0
    md = (out / "report" / "leaderboard.md").read_text()
    assert "DEGRADED (" not in md and "degraded:" not in md and "answer reasoning" in md  # no cell marked
    # no request the API refused (strict schema, embedding limits, parameters); the preflight's look for
    # llama.cpp's /props (the window) is answered 404 here, as by OpenAI's API
    assert [r for r in api.rejections() if r["endpoint"] != "/props"] == []
    # every artifact recorded its health, and no stage lost anything
    for man in (out / "artifacts").glob("method_*/*/artifact.json"):
        health = json.loads(man.read_text())["stats"]["health"]
        assert all(c["failed"] == 0 for c in health["stages"].values()), (man, health)


def test_phantomwiki_every_method(api_env, tmp_path):
    out = tmp_path / "pw"
    assert _run(out, ["--benchmark", "phantomwiki"]) == 0  # the bundled universe when no data folder has one
    _assert_clean(out, api_env)


def test_apibench_torchhub_every_method(api_env, tmp_path):
    need_data("apibench")
    out = tmp_path / "th"
    assert _run(out, ["--benchmark", "apibench", "--sources", "torchhub", "--data-dir", str(SHARED_DATA)]) == 0
    _assert_clean(out, api_env)


def test_swe_qa_small_repository_every_method(api_env, tmp_path):
    """A small repository stands in for flask's tree (the questions are flask's); the judge is the API."""
    need_data("swe_qa")
    tree = tmp_path / "flask-src"
    pkg = tree / "src" / "flask"
    pkg.mkdir(parents=True)
    (pkg / "json.py").write_text("class DefaultJSONProvider:\n    ensure_ascii = True\n\n    def dumps(self, obj, **kw):"
                                 "\n        \"\"\"Serialize data as JSON.\"\"\"\n        return str(obj)\n\n"
                                 "    def loads(self, s):\n        return s\n")
    (pkg / "app.py").write_text("class Flask:\n    \"\"\"The flask object implements a WSGI application.\"\"\"\n\n"
                                "    def route(self, rule):\n        return rule\n\n"
                                "    def run(self, host=None, port=None):\n        return host, port\n")
    (pkg / "blueprints.py").write_text("class Blueprint:\n    def register(self, app):\n        return app\n")
    (tree / "README.md").write_text("# Flask\n\nA lightweight WSGI web application framework.\n\n## Install\n\n"
                                    "pip install flask\n")
    out = tmp_path / "swe"
    assert _run(out, ["--benchmark", "swe_qa", "--sources", "flask", "--opt", f"flask={tree}",
                      "--data-dir", str(SHARED_DATA)]) == 0
    _assert_clean(out, api_env)
    judged = [r for r in _jsonl(out / "results.jsonl") if r["judge"]["name"] == "llm_judge"]
    assert judged


def test_a_50_token_allowance_degrades_the_cells_exits_4_and_says_why(api_env, tmp_path, capsys):
    out = tmp_path / "small"
    assert _run(out, ["--benchmark", "phantomwiki"], "--reasoning-tokens", "50",
                methods="hybrid_rag,no_source,raptor") == EXIT_DEGRADED
    printed = " ".join(capsys.readouterr().out.split())
    assert printed.count("degraded:") >= 3 and "exit code 4" in printed
    md = (out / "report" / "leaderboard.md").read_text()
    for method in ("hybrid_rag", "no_source", "raptor"):
        assert f"{method} on " in md
    assert "output_cap" in md
    fails = _jsonl(out / "failures.jsonl")
    assert fails and all(f["error"].startswith("output_cap:") for f in fails)
