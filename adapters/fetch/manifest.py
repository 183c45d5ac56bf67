"""``fetch-manifest.json``: what each fetch step produced (sizes, sha256, commits), per benchmark folder.

A re-run trusts a step only when its files still match what the manifest recorded (or the pinned
hash), so a file changed or truncated since is fetched again. The manifest is rewritten atomically
after every step: an interrupted fetch keeps the record of the steps it finished.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sourcebench.harness.io import atomic_write_json

MANIFEST = "fetch-manifest.json"


class Manifest:
    def __init__(self, folder: Path, benchmark: str, log=print):
        self.path = Path(folder) / MANIFEST
        self.benchmark = benchmark
        self.steps: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.steps = dict(data["steps"])
            except (ValueError, KeyError, TypeError):
                log(f"{self.path}: unreadable manifest, ignored: every step is checked again")

    def get(self, step: str) -> dict[str, Any] | None:
        return self.steps.get(step)

    def record(self, step: str, **info: Any) -> None:
        self.steps[step] = info
        self._save()

    def forget(self, step: str) -> None:
        if self.steps.pop(step, None) is not None:
            self._save()

    def _save(self) -> None:
        atomic_write_json(self.path, {"benchmark": self.benchmark, "steps": dict(sorted(self.steps.items()))})
