"""Trim a PhantomWiki generator output to what the harness reads, for shipping in the package.

The generator's ``questions.json`` is mostly ``solution_traces`` (every joint solution of each Prolog
query), of which ``gold_path`` reads only the set of people each variable takes. Trimming keeps the
fields ``benchmark.py`` reads and replaces the traces by one ``{variable: person}`` entry per
distinct pair, which gives ``gold_path`` the same sets; it refuses to write a file on which any
question's ``gold_path`` differs. ``articles.json`` is copied unchanged.

Usage: ``python -m sourcebench.adapters.phantomwiki.trim GENERATED_DIR OUT_DIR``
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from .benchmark import gold_path

KEPT = ("id", "question", "answer", "type", "difficulty", "is_aggregation_question", "prolog")


def _traces(q: dict[str, Any]) -> list[dict[str, Any]]:
    traces = q.get("solution_traces") or []
    return json.loads(traces) if isinstance(traces, str) else list(traces)


def trim_question(q: dict[str, Any], people: set[str]) -> dict[str, Any]:
    """The kept fields of one question, its traces reduced to the distinct (variable, person) pairs."""
    out = {k: q[k] for k in KEPT if k in q}
    if isinstance(out.get("prolog"), dict):
        out["prolog"] = {k: out["prolog"][k] for k in ("query", "answer") if k in out["prolog"]}
    pairs = {(str(k), str(v)) for t in _traces(q) if isinstance(t, dict) for k, v in t.items() if str(v) in people}
    out["solution_traces"] = [{k: v} for k, v in sorted(pairs)]
    return out


def trim_questions(questions: list[dict[str, Any]], people: set[str]) -> list[dict[str, Any]]:
    """Every question trimmed; raises ValueError naming the first question whose gold path would change."""
    out = [trim_question(q, people) for q in questions]
    for before, after in zip(questions, out):
        if gold_path(before, people) != gold_path(after, people):
            raise ValueError(f"question {before.get('id')}: trimming changes its gold path")
    return out


def write_questions(path: Path, questions: list[dict[str, Any]]) -> None:
    """A JSON list with one question per line (small, and readable in a diff)."""
    lines = [json.dumps(q, ensure_ascii=False, separators=(",", ":")) for q in questions]
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n", encoding="utf-8")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    src, dest = Path(argv[0]), Path(argv[1])
    articles = json.loads((src / "articles.json").read_text(encoding="utf-8"))
    questions = json.loads((src / "questions.json").read_text(encoding="utf-8"))
    people = {a["title"] for a in articles}
    trimmed = trim_questions(questions, people)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "articles.json", dest / "articles.json")
    write_questions(dest / "questions.json", trimmed)
    print(f"{dest}: {len(articles)} articles, {len(trimmed)} questions "
          f"({(dest / 'questions.json').stat().st_size} bytes, from {(src / 'questions.json').stat().st_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
