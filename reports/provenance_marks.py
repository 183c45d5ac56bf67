"""Numbers computed on a substitute source: which (benchmark, source) cells they are, their mark, their footnote.

A benchmark that identifies the tree it loaded records it in run.json (``sources[].provenance``, e.g.
SWE-QA's pinned commit or an sdist). A source with ``pinned: false`` is not the paper's source, so every
number that includes it, in every table and figure, carries ``MARK`` and a footnote naming the tree.
Self-contained (run.json dicts and result rows in, strings out) so that the leaderboard, the paper
tables, the renderers and the figures each need one call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .table import MARK
from .text import safe


def _bench_name(run: dict[str, Any]) -> str:
    bench = run.get("benchmark")
    return str(bench.get("name") if isinstance(bench, dict) else bench or "")


def footnote(benchmark: str, source: str, prov: dict[str, Any]) -> str:
    """'§ swe_qa/flask: not the pinned tree (commit 85c5d93) but the Flask 3.1.1 sdist (content sha256 ...)'."""
    label = safe(prov.get("label") or prov.get("kind") or "another tree")
    pin = safe(str(prov.get("pinned_commit") or "")[:12] or "unknown")
    sha = safe(str(prov.get("content_sha256") or "")[:16] or "unknown")
    return (f"{MARK} {safe(benchmark)}/{safe(source)}: not the pinned tree (commit {pin}) but {label} "
            f"(content sha256 {sha}); its numbers are not comparable with the paper's source.")


def substitutes(run: dict[str, Any] | None) -> dict[tuple[str, str], str]:
    """(benchmark, source) -> footnote, for each source run.json records as not the pinned tree."""
    if not isinstance(run, dict):
        return {}
    bench = _bench_name(run)
    out: dict[tuple[str, str], str] = {}
    for s in run.get("sources") or []:
        prov = s.get("provenance") if isinstance(s, dict) else None
        if isinstance(prov, dict) and prov.get("pinned") is False:
            out[(bench, str(s.get("id")))] = footnote(bench, str(s.get("id")), prov)
    return out


def by_source(run: dict[str, Any] | None, sources: Iterable[str] | None = None) -> dict[str, str]:
    """source -> footnote, for the run's substitute sources among ``sources`` (all when None)."""
    keep = None if sources is None else set(sources)
    return {src: n for (_, src), n in substitutes(run).items() if keep is None or src in keep}


def notes_for(run: dict[str, Any] | None, sources: Iterable[str] | None = None) -> list[str]:
    """The footnotes of the run's substitute sources among ``sources`` (all when None)."""
    return list(by_source(run, sources).values())


def notes_for_rows(run: dict[str, Any] | None, rows: Iterable[dict[str, Any]]) -> list[str]:
    """The footnotes of the substitute sources behind a value computed from these result rows."""
    return notes_for(run, {str(r.get("source")) for r in rows})


def mark(text: str, notes: list[str] | bool) -> str:
    return text + MARK if notes else text


def table_notes(cells: Iterable[Any]) -> list[str]:
    """The distinct footnotes of the cells (objects with a ``substitute`` list) of a table, in order."""
    return list(dict.fromkeys(n for c in cells for n in (getattr(c, "substitute", None) or [])))


def annotate_figure(fig: Any, title: str, notes: list[str]) -> None:
    """A matplotlib figure's title with ``MARK`` and the footnotes under it, when it shows a substitute's number."""
    fig.suptitle(mark(title, notes), fontsize=10)
    if notes:
        fig.text(0.01, -0.02, "\n".join(notes), fontsize=6, va="top", ha="left", wrap=True)
