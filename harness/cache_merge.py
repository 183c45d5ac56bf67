"""Pool the caches of runs made apart, so a later run (or `reproduce`) pays for no call twice.

A cache folder holds ``llm_calls.sqlite`` (model replies keyed by model, settings and messages) and
``embeddings.sqlite`` (vectors keyed by embedder and text hash). Both are keyed by content, so
merging is a union: an entry already in the destination is kept as it is (same key, same call).
The sources are opened read-only; the destination is written in one transaction per file, so an
interrupted merge leaves it as it was or complete.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .embeddings import EmbeddingCache
from .errors import ConfigError
from .llm import CallCache

FILES = {"llm_calls.sqlite": "calls", "embeddings.sqlite": "embeddings"}


@dataclass
class MergeCount:
    file: str
    source: Path
    rows: int  # rows in the source
    added: int  # rows the destination did not have


def cache_folder(path: Path) -> Path:
    """A cache folder, or a run folder whose ``cache/`` is meant."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"{path}: no such folder")
    if not any((path / f).exists() for f in FILES) and (path / "cache").is_dir():
        path = path / "cache"
    if not any((path / f).exists() for f in FILES):
        raise ConfigError(f"{path}: not a cache folder (it has neither {' nor '.join(FILES)})")
    return path


def _create(dest: Path) -> None:
    """Make the destination files with the tables the harness itself creates."""
    CallCache(dest / "llm_calls.sqlite")
    EmbeddingCache(dest / "embeddings.sqlite")


def merge_caches(sources: list[Path], dest: Path) -> list[MergeCount]:
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"{dest}: not a directory")
    folders = [cache_folder(s) for s in sources]
    for f in folders:
        if f.resolve() == dest.resolve():
            raise ConfigError(f"{f}: is the destination itself")
    dest.mkdir(parents=True, exist_ok=True)
    _create(dest)
    counts: list[MergeCount] = []
    for name, table in FILES.items():
        con = sqlite3.connect((dest / name).resolve().as_uri(), timeout=60, uri=True)  # uri: ATTACH ... mode=ro
        try:
            for folder in folders:
                src = folder / name
                if not src.exists():
                    continue
                try:
                    con.execute("ATTACH DATABASE ? AS src", (f"{src.resolve().as_uri()}?mode=ro",))
                    (rows,) = con.execute(f"SELECT count(*) FROM src.{table}").fetchone()
                except sqlite3.DatabaseError as e:
                    if any(r[1] == "src" for r in con.execute("PRAGMA database_list")):
                        con.execute("DETACH DATABASE src")
                    raise ConfigError(f"{src}: not a SourceBench cache ({e})") from None
                try:
                    before = con.total_changes
                    with con:
                        con.execute(f"INSERT OR IGNORE INTO main.{table} SELECT * FROM src.{table}")
                    counts.append(MergeCount(name, src, rows, con.total_changes - before))
                finally:
                    con.execute("DETACH DATABASE src")
        finally:
            con.close()
    return counts
