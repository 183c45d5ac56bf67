"""Keyword notes: a SourceBench method defined outside SourceBench, in one file.

Learning: for each guidance question, a note naming the source element whose words overlap the
question most (never the reference answer). Answering: the elements that share most words with
the question, plus the notes that share at least two words with it, through the shared prompt.
Each note is an entry (the harmful-entry protocol removes them one at a time), and the method
brings a ``sourcebench notes RUN_DIR`` command that lists what it learned.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from sourcebench import (
    Answer,
    Command,
    Context,
    Element,
    Entry,
    Evidence,
    LearnContext,
    Method,
    MethodConfig,
    Source,
    Task,
)

NOTES_FILE = "notes.json"
_WORD = re.compile(r"[a-z0-9]{3,}")


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def rank(source: Source, query: str, k: int) -> list[Element]:
    q = words(query)
    return sorted(source.elements, key=lambda e: (-len(q & words(f"{e.title} {e.text}")), e.id))[:k]


class KeywordNotesConfig(MethodConfig):
    top_k: int = 4  # elements shown per question
    max_notes: int = 50
    min_overlap: int = 2  # words a note shares with a question to be shown


class KeywordNotes(Method):
    name = "keyword-notes"
    version = "1"
    Config = KeywordNotesConfig
    uses_guidance = True
    entry_kind = "note"
    description = "keyword-matched elements plus notes pointing guidance questions to their best element"

    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        notes = []
        for t in guidance[: self.config.max_notes]:
            best = rank(source, t.question, 1)
            if best:
                notes.append({"id": f"note-{len(notes)}",
                              "text": f"A question like '{t.question}' is answered in {best[0].title}."})
        (ctx.workdir / NOTES_FILE).write_text(json.dumps(notes, indent=1), encoding="utf-8")
        return {"n_notes": len(notes)}

    def load(self, artifact_dir: Path, ctx: Context) -> list[dict[str, str]]:
        return json.loads((Path(artifact_dir) / NOTES_FILE).read_text(encoding="utf-8"))

    async def answer(self, task: Task, state: list[dict[str, str]], ctx: Context) -> Answer:
        q = words(task.question)
        shown = [n["text"] for n in state if len(q & words(n["text"])) >= self.config.min_overlap]
        evidence = [Evidence(element_id=e.id, title=e.title, text=e.text)
                    for e in rank(ctx.source, task.question, self.config.top_k)]
        notes = "Notes from earlier questions:\n" + "\n".join(shown) if shown else ""
        return await ctx.solve(task, evidence, notes=notes)

    # -- the optional hooks of harness.method.Method -------------------------------------------
    def entries(self, state: list[dict[str, str]]) -> list[Entry]:
        return [Entry(n["id"], n["text"]) for n in state]

    def without(self, state: list[dict[str, str]], entry_id: str) -> list[dict[str, str]]:
        return [n for n in state if n["id"] != entry_id]

    @classmethod
    def cli_commands(cls) -> list[Command]:
        return [Command("notes", _add_parser, _run)]


def _add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("notes", help="list the notes keyword-notes learned in a run folder")
    p.add_argument("run_dir", type=Path)
    return p


def _run(args: argparse.Namespace) -> int:
    files = sorted(Path(args.run_dir).glob(f"artifacts/method_{KeywordNotes.name}/*/{NOTES_FILE}"))
    for f in files:
        print(f"{f.parent.name}: {len(json.loads(f.read_text(encoding='utf-8')))} notes")
    print(f"{len(files)} artifact(s)")
    return 0
