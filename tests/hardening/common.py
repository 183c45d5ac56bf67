"""Helpers shared by the hardening tests: run the CLI (in-process or as a subprocess), read a run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, SHARED_DATA

# A credential planted in the environment; no file a run writes may contain it.
PLANTED_KEY = "sk-planted-hardening-5f0c2a9e1d7b4c3a"


def pw_args(out: Path, model: str, methods: str = "hybrid_rag", limit: int = 4, seeds: str = "0",
            *extra: str) -> list[str]:
    """A small PhantomWiki run on the real instance with the hash embedder."""
    return ["run", "--benchmark", "phantomwiki", "--methods", methods, "--model", model, "--limit", str(limit),
            "--seeds", seeds, "--embedder", "hash", "--out", str(out), "--data-dir", str(SHARED_DATA), *extra]


def run_sub(args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``sourcebench ARGS`` in a fresh interpreter (what a user runs; needed to kill it)."""
    full_env = {**os.environ, "INSPECT_DISPLAY": "none", **(env or {})}
    return subprocess.run([sys.executable, "-m", "sourcebench.harness.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=ROOT)


def popen(args: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """Start ``sourcebench ARGS`` in the background, its output to ``log`` (or discarded)."""
    full_env = {**os.environ, "INSPECT_DISPLAY": "none", **(env or {})}
    sink = open(log, "w") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen([sys.executable, "-m", "sourcebench.harness.cli", *args], env=full_env, cwd=ROOT,
                                stdout=sink, stderr=subprocess.STDOUT)
    finally:
        if log:
            sink.close()


def jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows(out: Path) -> list[dict[str, Any]]:
    return jsonl(out / "results.jsonl")


def row_key(r: dict[str, Any]) -> tuple:
    return (r["benchmark"], r["source"], r["method"], r["seed"], r["task_id"])


def comparable(rs: list[dict[str, Any]], drop: tuple[str, ...] = ("run_id",)) -> list[dict[str, Any]]:
    """Rows sorted by key without the fields that legitimately differ between two runs."""
    return sorted(({k: v for k, v in r.items() if k not in drop} for r in rs), key=row_key)


def live_calls(out: Path) -> int:
    return int(sum(r["calls"] for r in jsonl(out / "usage.jsonl") if r["status"] == "live"))


def cache_keys(out: Path) -> set[str]:
    """Keys of the completed model calls in a run's call cache."""
    import sqlite3

    path = out / "cache" / "llm_calls.sqlite"
    if not path.exists():
        return set()
    con = sqlite3.connect(path)
    try:
        return {k for (k,) in con.execute("SELECT key FROM calls")}
    finally:
        con.close()
