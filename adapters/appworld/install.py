"""Where AppWorld lives on disk, and how ``sourcebench appworld-setup`` puts it there.

``appworld`` pins pydantic 1, old fastapi/httpx/rich and more, so it cannot be installed next to
inspect-ai: it gets its own virtual environment inside a project-local AppWorld root
(``APPWORLD_ROOT``, default ``./data/appworld``) and is driven through ``worker.py``. The setup
needs PyPI once and nothing else: ``appworld install`` unpacks the bundled app code offline, and
the package's own API-docs preparation then writes the API specifications SourceBench reads as the
source (``sourcebench_api_docs.json``). The task data (``appworld download data``) comes from the
AppWorld servers and is not part of the setup.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sourcebench.adapters.fetch.venv import ensure_venv
from sourcebench.adapters.fetch.venv import run_logged as _run
from sourcebench.harness.errors import DataError

from .environment import WORKER

APPWORLD_VERSION = "0.1.3.post1"
DOCS_FILE = "sourcebench_api_docs.json"
DATASETS = ("train", "dev", "test_normal", "test_challenge")


@dataclass(frozen=True)
class Installation:
    """An AppWorld root: ``venv/`` (the package), ``.cache/``, ``data/`` (task data, if downloaded)."""

    root: Path
    python: Path

    @classmethod
    def at(cls, root: Path, python: Path | None = None) -> Installation:
        root = Path(root).expanduser().resolve()
        return cls(root, Path(python) if python else root / "venv" / "bin" / "python")

    @property
    def docs_file(self) -> Path:
        return self.root / DOCS_FILE

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def env(self) -> dict[str, str]:
        """The variables that point the package at this root (never at ~/.appworld or the cwd)."""
        return {"APPWORLD_ROOT": str(self.root), "APPWORLD_CACHE": str(self.root / ".cache")}

    def has_python(self) -> bool:
        return self.python.is_file()

    def tasks_missing(self) -> str:
        """'' when the task data is installed, else what is missing."""
        tasks = self.data_dir / "tasks"
        if not tasks.is_dir():
            return f"task data not installed ({tasks} does not exist)"
        missing = [d for d in ("train", "test_normal") if not (self.data_dir / "datasets" / f"{d}.txt").is_file()]
        if missing:
            return f"task data incomplete (no {', '.join(f'datasets/{d}.txt' for d in missing)} in {self.data_dir})"
        return ""

    def read_docs(self) -> dict[str, Any]:
        """The prepared API documentation, written by ``prepare_docs``."""
        path = self.docs_file
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{path}: file not found (run `sourcebench appworld-setup --root {self.root}`)") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: invalid JSON at line {e.lineno} ({e.msg}); delete it and run "
                            f"`sourcebench appworld-setup --root {self.root}`") from None
        if not isinstance(data, dict) or not isinstance(data.get("docs"), dict):
            raise DataError(f"{path}: expected an object with 'docs' (app -> API specifications)")
        return data

    def prepare_docs(self, timeout: float = 900) -> Path:
        """Run the package's API-docs preparation in the AppWorld venv and save its output."""
        if not self.has_python():
            raise DataError(f"{self.python}: AppWorld's Python not found (run `sourcebench appworld-setup "
                            f"--root {self.root}`)")
        try:
            out = subprocess.run([str(self.python), str(WORKER)], input='{"op": "api_docs"}\n', text=True,
                                 capture_output=True, timeout=timeout, env={**os.environ, **self.env()})
        except subprocess.TimeoutExpired:
            raise DataError(f"preparing the AppWorld API docs took over {timeout:.0f} s") from None
        line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
        reply = json.loads(line) if line.startswith("{") else {"ok": False, "error": out.stderr.strip()[-500:]}
        if not reply.get("ok"):
            raise DataError(f"AppWorld API-docs preparation failed: {reply.get('error')} (is `appworld install` done?)")
        reply.pop("ok")
        tmp = self.docs_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(reply, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(self.docs_file)
        return self.docs_file


def setup(root: Path, base_python: str | None = None, version: str = APPWORLD_VERSION,
          log: Callable[[str], None] = print) -> Installation:
    """Create the AppWorld venv under ``root``, install the package, unpack the apps, prepare the docs.

    Idempotent: steps already done are skipped, so a broken setup can be re-run.
    """
    inst = Installation.at(root)
    inst.root.mkdir(parents=True, exist_ok=True)
    if not inst.has_python():
        ensure_venv(inst.root / "venv", base_python, log)
    pip = [str(inst.python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run(pip + [f"appworld=={version}"], None, log)
    _run([str(inst.python), "-m", "appworld.cli", "install"], inst.env(), log)
    log(f"preparing the API documentation with appworld's own api_docs module -> {inst.docs_file}")
    inst.prepare_docs()
    return inst
