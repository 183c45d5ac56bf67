"""A git clone at a pinned commit, kept when already there.

A clone goes to a temporary sibling folder and is renamed into place only once it is checked out at
the commit, so an existing folder is always a whole clone: a re-run keeps one whose HEAD is the
pinned commit, moves one at another commit to it (never discarding local changes: git refuses and
the error says so), and restarts an interrupted clone (git cannot resume one). Blobs are fetched
lazily (``--filter=blob:none``): only the pinned tree's files are downloaded, not the history's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from sourcebench.harness.errors import DataError

from . import Log

GitRunner = Callable[[list[str]], str]


def run_git(args: list[str]) -> str:
    """``git ARGS``'s stdout; a DataError with git's last message lines when it fails."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # a wrong address fails instead of asking for a password
    try:
        proc = subprocess.run(["git", *args], check=False, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise DataError("git is not installed (needed to clone source repositories); install git and run "
                        "the same command again") from None
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise DataError(f"`git {' '.join(args)}` failed (exit {proc.returncode}): {tail}")
    return proc.stdout.strip()


def clone_at(url: str, commit: str, dest: Path, log: Log, git: GitRunner = run_git) -> tuple[str, str]:
    """Make ``dest`` a clone of ``url`` checked out at ``commit`` (full or abbreviated sha).

    Returns (what happened: kept | checked out | cloned, the full sha of HEAD).
    """
    dest = Path(dest)
    if dest.exists():
        if not (dest / ".git").exists():
            raise DataError(f"{dest}: exists but is not a git clone; move it away and run the same command again")
        head = git(["-C", str(dest), "rev-parse", "HEAD"])
        if head.startswith(commit):
            return "kept", head
        log(f"{dest} is at {head[:12]}, not {commit}: checking out {commit}")
        try:
            git(["-C", str(dest), "checkout", "--quiet", "--detach", commit])
        except DataError:
            git(["-C", str(dest), "fetch", "--quiet", "origin"])
            git(["-C", str(dest), "checkout", "--quiet", "--detach", commit])
        return "checked out", _verified_head(dest, commit, git)
    tmp = dest.with_name(f".{dest.name}.clone")
    if tmp.exists():
        log(f"removing the interrupted clone {tmp}")
        shutil.rmtree(tmp)
    dest.parent.mkdir(parents=True, exist_ok=True)
    log(f"cloning {url} at {commit} into {dest}")
    git(["clone", "--quiet", "--filter=blob:none", "--no-checkout", url, str(tmp)])
    git(["-C", str(tmp), "checkout", "--quiet", "--detach", commit])
    head = _verified_head(tmp, commit, git)
    os.replace(tmp, dest)
    return "cloned", head


def _verified_head(repo: Path, commit: str, git: GitRunner) -> str:
    head = git(["-C", str(repo), "rev-parse", "HEAD"])
    if not head.startswith(commit):
        raise DataError(f"{repo}: HEAD is {head[:12]} after checking out {commit}")
    return head
