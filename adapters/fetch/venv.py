"""A separate virtual environment for a tool whose dependencies cannot live next to SourceBench's.

AppWorld (pydantic 1) and the PhantomWiki generator (Python >= 3.12, pyswip) each get their own
venv under their data folder and are run as subprocesses. Commands are logged as they run and a
failure is one line with the command and the tail of its output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sourcebench.harness.errors import SourceBenchError

from . import Log


def run_logged(cmd: list[str], env: dict[str, str] | None = None, log: Log = print) -> None:
    """Run ``cmd`` (``env`` added to this process's environment); raise with its last lines on failure."""
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, check=False, env={**os.environ, **(env or {})}, text=True, capture_output=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise SourceBenchError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {' | '.join(tail)}")


def venv_python(venv: Path) -> Path:
    return Path(venv) / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(venv: Path, base_python: str | None = None, log: Log = print) -> Path:
    """The venv's interpreter, creating the venv with ``base_python`` (default: this one) if absent."""
    python = venv_python(venv)
    if not python.is_file():
        run_logged([base_python or sys.executable, "-m", "venv", str(venv)], None, log)
    return python


def python_version(python: str) -> tuple[int, int] | None:
    """(major, minor) of an interpreter, None when it does not run (a pyenv shim without a version, ...)."""
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], check=False,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def find_python(minimum: tuple[int, int], explicit: str | None = None) -> tuple[str | None, list[str]]:
    """(an interpreter of at least ``minimum``, the candidates tried): ``explicit`` if given, else this
    interpreter, else python3.N on PATH from newest down, else python3."""
    if explicit:
        cands = [explicit]
    else:
        names = [f"python3.{n}" for n in range(20, minimum[1] - 1, -1)] + ["python3"]
        cands = [sys.executable] + [p for p in (shutil.which(n) for n in names) if p]
    tried = []
    for c in dict.fromkeys(cands):
        v = python_version(c)
        tried.append(f"{c} ({'.'.join(map(str, v)) if v else 'does not run'})")
        if v is not None and v >= minimum:
            return c, tried
    return None, tried


def installed_version(python: Path, dist: str) -> str | None:
    """The version of distribution ``dist`` installed for ``python``, None when it is not installed."""
    code = f"import importlib.metadata as m\ntry: print(m.version({dist!r}))\nexcept m.PackageNotFoundError: pass"
    try:
        out = subprocess.run([str(python), "-c", code], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
