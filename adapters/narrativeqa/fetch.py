"""NarrativeQA: the test split's rows of the requested stories (default: the paper's 12), saved once.

The test split of ``deepmind/narrativeqa`` is streamed from the Hub at the adapter's pinned revision
(through ``datasets``), filtered to the stories' document ids, and saved as JSON lines in
``DATA/narrativeqa/`` (``narrativeqa-test-<selection>-<revision>.jsonl``). Every row carries the
whole story in the Hub's format; the snapshot keeps it in each story's first row only, which the
loader reads the same way. A re-run keeps a snapshot that matches its manifest record.
"""

from __future__ import annotations

from pathlib import Path

from sourcebench.adapters.fetch import FetchReport, Log, inside, safe_component
from sourcebench.adapters.fetch.download import matches
from sourcebench.adapters.fetch.manifest import Manifest
from sourcebench.harness.errors import DataError

from .benchmark import NarrativeQA, save_snapshot

OPTIONS = {
    "stories": "paper (default, the paper's 12) or comma-separated document ids",
    "revision": "Hugging Face revision of deepmind/narrativeqa (default: the adapter's pinned one)",
}
def fetch(dest: Path, settings: dict[str, str], log: Log) -> FetchReport:
    folder = Path(dest) / "narrativeqa"
    if "revision" in settings:  # it becomes part of the snapshot's file name
        safe_component("narrativeqa", "revision", settings["revision"])
    bench = NarrativeQA(data_dir=Path(dest), options=settings)
    report = FetchReport("narrativeqa", folder)
    name = bench.snapshot_name()
    inside(folder, folder / name)
    rec = Manifest(folder, "narrativeqa", log).get(name) or {}
    if rec.get("sha256") and matches(folder / name, rec["sha256"], rec.get("size")):
        log(f"kept {folder / name} (verified)")
        report.kept.append(name)
        return report
    wanted = bench.wanted()
    log(f"streaming the test split of deepmind/narrativeqa@{bench.revision()[:12]} for {len(wanted)} stories "
        "(the whole split passes through once)")
    rows = [row for _, row in bench.hub_rows(set(wanted))]
    found = {str(r["document"]["id"]) for r in rows}
    missing = [wanted[i] for i in wanted if i not in found]
    if missing:
        raise DataError(f"narrativeqa: the test split at revision {bench.revision()[:12]} has no rows for "
                        f"{', '.join(missing)}; nothing was saved")
    path = save_snapshot(folder, bench, rows)
    log(f"saved {len(rows)} rows of {len(found)} stories to {path}")
    report.done.append(name)
    return report
