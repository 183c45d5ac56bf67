"""Read access to a reproduce output root: one run folder per (backend, benchmark), the status of
every planned cell, and the derived files (regions, cycles, audits) that some tables read.

Layout under the root (written by ``sourcebench reproduce``, ``harness/cli/reproduce/``)::

    <backend>/<benchmark>/            a run folder (docs/results-format.md)
    <backend>/<benchmark>/reproduce/  derived data: regions.json (Table 5), cycles.json (Table 6),
                                      matched_<method>.json (Table 2 budgets)
    <backend>/<benchmark>/audit/      SourceLearn audits (Tables 3-4, Figure 4)
    reproduce-<config>.json           status of every cell: ran / not run (why) / failed (why)
    report/<config>/                  the tables, figures and the HTML report

Several configs may share a root (their common cells are then run once); the status file and the
report are per config name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import DataError
from sourcebench.harness.health import run_health
from sourcebench.harness.io import read_json

from .config import ExperimentConfig
from .rundata import RunData, load_run

DERIVED = "reproduce"
RAN, NOT_RUN, FAILED = "ran", "not run", "failed"
INCOMPLETE = "incomplete"  # ran, but fewer result rows than the folder's other methods scored


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "config"


def status_path(root: Path, config_name: str) -> Path:
    return Path(root) / f"reproduce-{slug(config_name)}.json"


def report_dir(root: Path, config_name: str) -> Path:
    return Path(root) / "report" / slug(config_name)


def cell_key(backend: str, bench: str, alias: str) -> str:
    return f"{backend}/{bench}/{alias}"


class Results:
    """Lazy, cached access to every run folder of an output root."""

    def __init__(self, cfg: ExperimentConfig, root: str | Path):
        self.cfg = cfg
        self.root = Path(root)
        path = status_path(self.root, cfg.name)
        self.status: dict[str, Any] = read_json(path) if path.is_file() else {}
        self._data: dict[tuple[str, str], RunData | None] = {}
        self._health: dict[tuple[str, str], list[Any]] = {}

    def folder(self, backend: str, bench: str) -> Path:
        return self.root / backend / bench

    def data(self, backend: str, bench: str) -> RunData | None:
        key = (backend, bench)
        if key not in self._data:
            try:
                self._data[key] = load_run(self.folder(backend, bench))
            except DataError:  # no run.json / results.jsonl yet: nothing ran there
                self._data[key] = None
        return self._data[key]

    def rows(self, backend: str, bench: str, alias: str, sources: list[str] | None = None) -> list[dict[str, Any]]:
        d = self.data(backend, bench)
        if d is None:
            return []
        return [r for r in d.results if r["method"] == alias and (sources is None or r["source"] in sources)]

    def degraded(self, backend: str, bench: str, alias: str) -> list[str]:
        """Why the (backend, benchmark, method) cells are degraded, one line per cell (none: healthy)."""
        key = (backend, bench)
        if key not in self._health:
            d = self.data(backend, bench)
            self._health[key] = [] if d is None else [
                c for c in run_health(d.run_dir, d.results, d.failures, run=d.run, usage=d.usage) if c.degraded]
        return [f"{backend} / {bench}: {c.line()}" for c in self._health[key] if c.method == alias]

    def cell_status(self, backend: str, bench: str, alias: str) -> dict[str, Any]:
        return (self.status.get("cells") or {}).get(cell_key(backend, bench, alias)) or {}

    def why_not(self, backend: str, bench: str, alias: str) -> str:
        st = self.cell_status(backend, bench, alias)
        if st.get("status") == NOT_RUN and st.get("reason"):
            return st["reason"]
        if st.get("status") == FAILED:
            return f"failed: {st.get('reason') or 'see reproduce.json'}"
        return "no results in the run folder"

    def derived(self, backend: str, bench: str, name: str) -> dict[str, Any] | None:
        path = self.folder(backend, bench) / DERIVED / name
        return read_json(path) if path.is_file() else None

    def audit(self, backend: str, bench: str, name: str) -> dict[str, Any] | None:
        path = self.folder(backend, bench) / "audit" / f"{name}.json"
        return read_json(path) if path.is_file() else None

    def step_status(self, backend: str, bench: str, step: str) -> dict[str, Any]:
        return (self.status.get("derived") or {}).get(cell_key(backend, bench, step)) or {}
