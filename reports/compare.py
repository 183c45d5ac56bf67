"""Task by task across two methods of one run folder: wins, losses and ties, and why.

Rows are paired on (benchmark, source, seed, task_id), the same pairing the leaderboard's tests use.
For each pair the page shows the question, the reference, both answers and scores, the titles of
the evidence each method put into the shared prompt, and each method's own context: the notes it
added (cut in the row at the harness's limit) and the answer metadata the other method's row does
not share (activated model units, workflows, tree nodes, actions, ...). Per-group breakdowns use
the rows' ``group`` and the task metadata keys that take a few scalar values (question type,
difficulty). Rows written before rows carried the question or the evidence titles show ``n/a``.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import ConfigError
from sourcebench.harness.io import atomic_write_text

from .layout import Page, pct, render_html
from .rundata import RunData, load_run
from .table import NA, Table
from .text import safe

MAX_GROUP_VALUES = 12  # a metadata key with more distinct values is an id, not a group
TERMINAL_TEXT = 300  # characters of a note or an answer in the terminal (the HTML page has the row's text)


@dataclass
class Pair:
    key: tuple
    x: dict[str, Any]
    y: dict[str, Any]

    @property
    def outcome(self) -> str:
        a, b = float(self.x.get("score", 0.0)), float(self.y.get("score", 0.0))
        return "win" if a > b else "loss" if a < b else "tie"


@dataclass
class Comparison:
    method: str
    baseline: str
    pairs: list[Pair]
    unpaired: dict[str, int] = field(default_factory=dict)  # method -> its rows without a partner

    def by(self, outcome: str) -> list[Pair]:
        return [p for p in self.pairs if p.outcome == outcome]

    def counts(self, pairs: list[Pair] | None = None) -> dict[str, int]:
        pairs = self.pairs if pairs is None else pairs
        c = {"win": 0, "loss": 0, "tie": 0}
        for p in pairs:
            c[p.outcome] += 1
        return c


def _key(r: dict[str, Any]) -> tuple:
    return (r.get("benchmark"), r.get("source"), int(r.get("seed", 0)), str(r.get("task_id")))


def compare(data: RunData, method: str, baseline: str) -> Comparison:
    """The paired rows of ``method`` and ``baseline``; an unknown method is a one-line error naming the known."""
    known = sorted({str(r["method"]) for r in data.results})
    for name, what in ((method, "--method"), (baseline, "--baseline")):
        if name not in known:
            raise ConfigError(f"{what} {name}: no rows in {data.run_dir} (methods there: {', '.join(known)})")
    if method == baseline:
        raise ConfigError(f"--method and --baseline are both {method}")
    xs = {_key(r): r for r in data.results if r["method"] == method}
    ys = {_key(r): r for r in data.results if r["method"] == baseline}
    pairs = [Pair(k, xs[k], ys[k]) for k in sorted(set(xs) & set(ys), key=str)]
    return Comparison(method, baseline, pairs, {method: len(set(xs) - set(ys)), baseline: len(set(ys) - set(xs))})


def _groupings(pairs: list[Pair]) -> dict[str, dict[str, list[Pair]]]:
    """``group`` and every task-metadata key with 2..MAX_GROUP_VALUES scalar values shared by both rows."""
    out: dict[str, dict[str, list[Pair]]] = {}
    groups: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        groups[str(p.x.get("group") or NA)].append(p)
    if len(groups) > 1:
        out["group"] = dict(groups)
    keys = set.intersection(*(set(p.x.get("metadata") or {}) for p in pairs)) if pairs else set()
    for k in sorted(keys):
        vals: dict[str, list[Pair]] = defaultdict(list)
        for p in pairs:
            v, w = (p.x.get("metadata") or {}).get(k), (p.y.get("metadata") or {}).get(k)
            if v != w or not isinstance(v, str | int | float | bool):
                break
            vals[str(v)].append(p)
        else:
            if 2 <= len(vals) <= MAX_GROUP_VALUES and len(vals) < len(pairs):
                out[k] = dict(vals)
    return out


def _mean(rows: list[dict[str, Any]]) -> float:
    return sum(float(r.get("score", 0.0)) for r in rows) / len(rows) if rows else 0.0


def own_context(row: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """What this method's row carries that the other's does not: its notes and its own answer metadata."""
    theirs = other.get("metadata") or {}
    meta = {k: v for k, v in (row.get("metadata") or {}).items() if k not in theirs or theirs[k] != v}
    return {**({"notes": row["notes"]} if row.get("notes") else {}), **meta}


def _own_text(row: dict[str, Any], other: dict[str, Any]) -> str:
    """The notes as text, then the rest of the method's own metadata as JSON."""
    own = own_context(row, other)
    notes = own.pop("notes", "")
    return "\n".join(x for x in (notes, _text(own) if own else "") if x)


def _text(v: Any, limit: int | None = None) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    if limit is not None and len(s) > limit:
        return s[:limit] + f" [... {len(s) - limit} more characters]"
    return s


def _evidence(row: dict[str, Any]) -> str:
    if "evidence_titles" not in row:
        return NA
    return "; ".join(map(str, row["evidence_titles"])) or "(none)"


def _headline(c: Comparison) -> Table:
    n = c.counts()
    xs, ys = [p.x for p in c.pairs], [p.y for p in c.pairs]
    unpaired = ", ".join(f"{m}: {k}" for m, k in c.unpaired.items() if k)
    return Table(
        f"{c.method} vs {c.baseline}: task by task",
        ["paired tasks", "wins", "losses", "ties", f"{c.method} mean %", f"{c.baseline} mean %"],
        [[str(len(c.pairs)), str(n["win"]), str(n["loss"]), str(n["tie"]), pct(_mean(xs)), pct(_mean(ys))]],
        f"A win: {c.method} scored higher than {c.baseline} on the same task (benchmark, source, seed, task)."
        + (f" Rows without a partner, not compared: {unpaired}." if unpaired else ""),
    )


def _group_tables(c: Comparison) -> list[Table]:
    tables = []
    for key, groups in _groupings(c.pairs).items():
        rows = []
        for value, pairs in sorted(groups.items(), key=lambda kv: kv[0]):
            n = c.counts(pairs)
            rows.append([safe(value), str(len(pairs)), str(n["win"]), str(n["loss"]), str(n["tie"]),
                         pct(_mean([p.x for p in pairs])), pct(_mean([p.y for p in pairs]))])
        tables.append(Table(f"by {key}", [key, "tasks", "wins", "losses", "ties", f"{c.method} mean %",
                                          f"{c.baseline} mean %"], rows))
    return tables


def _task_table(c: Comparison, outcome: str) -> Table:
    title = {"win": "wins", "loss": "losses", "tie": "ties"}[outcome]
    rows = []
    for p in c.by(outcome):
        rows.append([safe(f"{p.x.get('source')} seed {p.x.get('seed')} {p.x.get('sample_id') or p.x.get('task_id')}"),
                     safe(p.x.get("question") or NA), safe(_text(p.x.get("reference"))),
                     safe(p.x.get("answer")), f"{float(p.x.get('score', 0)):.2f}" + (" (failed)" if p.x.get("failed")
                                                                                  else ""),
                     safe(p.y.get("answer")), f"{float(p.y.get('score', 0)):.2f}" + (" (failed)" if p.y.get("failed")
                                                                                  else ""),
                     safe(_evidence(p.x)), safe(_own_text(p.x, p.y)), safe(_evidence(p.y)), safe(_own_text(p.y, p.x))])
    return Table(f"{title} of {c.method} ({len(rows)})",
                 ["task", "question", "reference", f"{c.method} answer", "score", f"{c.baseline} answer", "score",
                  f"{c.method} evidence", f"{c.method} own context", f"{c.baseline} evidence",
                  f"{c.baseline} own context"], rows)


def page_name(method: str, baseline: str) -> str:
    clean = lambda s: re.sub(r"[^\w.@=+-]", "_", s)
    return f"compare-{clean(method)}-vs-{clean(baseline)}.html"


def render_page(c: Comparison, data: RunData) -> str:
    title = f"SourceBench: {c.method} vs {c.baseline}, run {data.run.get('run_id') or data.run_dir.name}"
    sections = [("Headline", [_headline(c), *_group_tables(c)])]
    sections += [(name, [_task_table(c, o)]) for name, o in (("Wins", "win"), ("Losses", "loss"), ("Ties", "tie"))]
    cap = [f"Run folder: {data.run_dir}", f"Model: {(data.run.get('model') or {}).get('name', NA)}",
           "Own context: the method's notes and the answer metadata the other method's row does not share."]
    return render_html(Page(title, sections, intro=cap))


def write_page(run_dir: str | Path, method: str, baseline: str, out_dir: str | Path | None = None,
               data: RunData | None = None) -> tuple[Comparison, Path]:
    data = data or load_run(run_dir)
    c = compare(data, method, baseline)
    out = Path(out_dir) if out_dir is not None else data.run_dir / "report"
    path = out / page_name(method, baseline)
    atomic_write_text(path, render_page(c, data))
    return c, path


def terminal_lines(c: Comparison, show: int = 5) -> list[str]:
    """The headline, the group breakdowns and up to ``show`` wins, losses and ties, as plain lines."""
    lines = []
    head = _headline(c)
    lines.append(f"{head.title}: " + ", ".join(f"{h} {v}" for h, v in zip(head.header, head.rows[0], strict=True)))
    if head.note:
        lines.append(head.note)
    for t in _group_tables(c):
        lines.append(f"{t.title}:")
        lines += ["  " + ", ".join(f"{h} {v}" if i else v for i, (h, v) in enumerate(zip(t.header, r, strict=True)))
                  for r in t.rows]
    for outcome, name in (("win", "wins"), ("loss", "losses"), ("tie", "ties")):
        pairs = c.by(outcome)
        lines.append(f"{name} ({len(pairs)}{f', first {show}' if len(pairs) > show else ''}):")
        for p in pairs[:show]:
            lines.append(f"- [{p.x.get('source')} seed {p.x.get('seed')} {p.x.get('task_id')}] "
                         f"{safe(p.x.get('question') or NA)}")
            lines.append(f"    reference: {safe(_text(p.x.get('reference'), TERMINAL_TEXT))}")
            for row, other, m in ((p.x, p.y, c.method), (p.y, p.x, c.baseline)):
                lines.append(f"    {m}: {float(row.get('score', 0)):.2f} {safe(_text(row.get('answer'), TERMINAL_TEXT))!r}"
                             + (f" (failed: {safe(row.get('failure_reason'))})" if row.get("failed") else ""))
                lines.append(f"      evidence: {safe(_text(_evidence(row), TERMINAL_TEXT))}")
                own = own_context(row, other)
                if own:
                    lines.append(f"      own context: {safe(_text(own, TERMINAL_TEXT))}")
    return lines


def write_task_pages(data: RunData, summary: list[dict[str, Any]], out_dir: Path, baseline: str) -> dict[str, str]:
    """Write a per-task page for each method of the leaderboard against the baseline (the baseline's
    own row: against the best other method); method -> the page's file name, for the leaderboard to
    link. Methods without paired rows get no page."""
    links: dict[str, str] = {}
    for b in summary:
        names = [e["method"] for e in b["methods"] if e.get("status") == "ok"]
        others = [m for m in names if m != baseline]
        for m in names:
            against = baseline if m != baseline else (others[0] if others else None)
            if against is None or against not in names or m in links:
                continue
            try:
                write_page(data.run_dir, m, against, out_dir, data=data)
            except ConfigError:
                continue
            links[m] = page_name(m, against)
    return links
