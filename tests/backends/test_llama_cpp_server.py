"""A real OpenAI-compatible server none of us wrote: llama-cpp-python's ``llama_cpp.server`` serving the
embedded SmolLM2 GGUF on 127.0.0.1, driven through ``openai-api/llamacpp/smollm2``; its rows are
checked against the in-process ``local/smollm2`` provider's (same weights, same greedy decoding)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sourcebench.harness.cli import main
from tests.backends.llama_server import LlamaServer
from tests.conftest import SHARED_DATA, need_data

pytestmark = pytest.mark.model
pytest.importorskip("sse_starlette", reason="llama-cpp-python's server extra is not installed")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


@pytest.fixture(scope="module")
def llama_server():
    with LlamaServer(n_ctx=8192) as srv:
        yield srv


def _run(out: Path, model: str, bench: list[str], methods: str) -> int:
    return main(["run", *bench, "--methods", methods, "--model", model, "--embedder", "hash", "--seeds", "0",
                 "--limit", "2", "--context-window", "8192", "--out", str(out)])


def _rows(out: Path) -> dict[tuple, dict]:
    return {(r["source"], r["method"], r["task_id"]): r for r in _jsonl(out / "results.jsonl")}


def _compare(tmp_path: Path, srv: LlamaServer, monkeypatch, bench: list[str], methods: str, capsys) -> None:
    for k, v in srv.env().items():
        monkeypatch.setenv(k, v)
    served, local = tmp_path / "served", tmp_path / "local"
    assert _run(served, "openai-api/llamacpp/smollm2", bench, methods) == 0
    printed = capsys.readouterr().out
    assert _run(local, "local/smollm2", bench, methods) == 0
    a, b = _rows(served), _rows(local)
    assert a and a.keys() == b.keys()
    assert not [r for r in a.values() if r["failed"]], [r["failure_reason"] for r in a.values() if r["failed"]]
    # the one failure: the preflight's json_schema probe, which the server answered with HTTP 500
    fails = _jsonl(served / "failures.jsonl")
    assert [f["method"] for f in fails] == ["harness"] and "500" in fails[0]["error"], fails
    run = json.loads((served / "run.json").read_text())["model"]
    assert run["context_window"] == 8192 and run["context_window_origin"] == "--context-window"
    # llama-cpp-python's server answers json_schema with HTTP 500; the preflight switched to its own form
    assert "json_object" in " ".join(printed.split())
    assert run.get("structured_format") == "json_object"
    same = [k for k in a if a[k]["answer"] == b[k]["answer"]]
    assert len(same) == len(a), {k: (a[k]["answer"], b[k]["answer"]) for k in a if k not in same}


def test_phantomwiki_through_llama_cpp_server_matches_in_process(llama_server, tmp_path, monkeypatch, capsys):
    _compare(tmp_path, llama_server, monkeypatch, ["--benchmark", "phantomwiki"], "no_source,hybrid_rag", capsys)


def test_apibench_through_llama_cpp_server_matches_in_process(llama_server, tmp_path, monkeypatch, capsys):
    need_data("apibench")
    _compare(tmp_path, llama_server, monkeypatch, ["--benchmark", "apibench", "--sources", "torchhub",
                                                   "--data-dir", str(SHARED_DATA)], "no_source", capsys)
