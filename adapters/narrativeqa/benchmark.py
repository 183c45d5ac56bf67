"""NarrativeQA: questions about whole stories, each story read in full (not through its summary).

By default the 12 test-split stories of the paper (6 movie scripts, 6 books), each one source split
into scenes or chapters (``split_story``: INT./EXT. scene headings, chapter/book/act headings, else
paragraph chunks), each cut into paragraph-aligned parts of at most 1,200 characters: what the shared
index indexes of an element and what a solver is shown of it (``harness.retrieval.EXCERPT_CHARS``), so
the index and every method's evidence reach the whole story. Raw story files carry a preamble (Project
Gutenberg header, web page around a script): the text is cut to the row's ``start``/``end``
markers and HTML pages are turned into text. Tasks are the story's questions, both reference answers
kept for the LLM judge; near-duplicate question/answer pairs (two annotators asking the same thing)
are dropped so that one cannot sit in guidance and its twin in test.

Data, in order: rows of the test split in the Hugging Face row format (``document{id, kind, url,
start, end, text, summary}``, ``question{text}``, ``answers[{text}]``) from
``<data>/narrativeqa/*.jsonl`` or the dataset's own parquet files there (files named for the train
or validation split are skipped: the three splits hold some 16 GB of story text, the paper's
stories are all in test); else the test split of ``deepmind/narrativeqa`` streamed from the Hub at
a pinned revision (``--opt revision=`` to change it), once: the requested stories' rows are then
saved as a snapshot in the first data folder (as ``sourcebench data fetch narrativeqa`` does), which
later runs read instead of streaming the split again. A snapshot keeps each story's text in its
first row only.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from sourcebench.adapters.availability import Availability, candidate_dirs, hub_status, iter_rows
from sourcebench.adapters.fetch import FetchedData
from sourcebench.adapters.fetch.download import sha256_of
from sourcebench.adapters.fetch.manifest import Manifest
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Score, Source, Task
from sourcebench.harness.elements import split_story
from sourcebench.harness.errors import ConfigError, DataError
from sourcebench.harness.io import atomic_file, iter_jsonl
from sourcebench.harness.retrieval import EXCERPT_CHARS
from sourcebench.judges.llm_judge import JUDGE_NAME, judged_score

log = logging.getLogger(__name__)

# source id -> (document id in the test split, title, kind), in the paper's order
PAPER_STORIES: dict[str, tuple[str, str, str]] = {
    "breakfast_club": ("053c75f420da5b13619eff42645f4e13882435b7", "The Breakfast Club", "movie"),
    "taxi_driver": ("6bec7c2bdd0b01296bc9020288d833709e54cd52", "Taxi Driver", "movie"),
    "all_about_eve": ("20696abc25990b16584085154ce317d4018cffe8", "All About Eve", "movie"),
    "broadcast_news": ("e46daf966d764e1ef9d880884efa3b17a636e65d", "Broadcast News", "movie"),
    "demolition_man": ("069ba0ceb78ef8fe8a193b7b4f225938f2044f0c", "Demolition Man", "movie"),
    "lotr_fellowship": ("750ec3a9ab4879f2593fb1baed81e6b449a5c755",
                        "The Lord of the Rings: The Fellowship of the Ring", "movie"),
    "press_cuttings": ("ebb8c31643ca701cef556caebc31c8490f4dfc9e", "Press Cuttings", "gutenberg"),
    "out_of_times_abyss": ("0e9c46e2aaab8f794dd9e636ee6e88f301a2ef78", "Out of Time's Abyss", "gutenberg"),
    "call_of_the_wild": ("1fa32a0798f79e13ca92ae84eda9ab3eb12c70a4", "The Call of the Wild", "gutenberg"),
    "castle_of_otranto": ("eaba6723befdddc5c5177c5c1bf5262d850c2a99", "The Castle of Otranto", "gutenberg"),
    "persuasion": ("55d68540c6b86bc90f7a9e630c8b13c0920bf834", "Persuasion", "gutenberg"),
    "old_wives_tale": ("03690ff2154ebecb454ea267cec529358ab6923b", "The Old Wives' Tale", "gutenberg"),
}
HF_REPO = "deepmind/narrativeqa"
# The revision MTEB pins for this repository; not verifiable offline here (see README).
HF_REVISION = "2e643e7363944af1c33a652d1c87320d0871c4e4"
# Sections no longer than what the shared index indexes and a solver is shown of an element: with
# 4,000-character sections about 70 % of a story was neither indexed nor shown by Hybrid RAG, AWM,
# SourceLearn's raw evidence and HippoRAG 2's solver, while RAPTOR's leaves read all of it.
SECTION_CHARS = EXCERPT_CHARS
DUP_QUESTION_JACCARD = 0.7
DUP_ANSWER_JACCARD = 0.5

_WORD = re.compile(r"[a-z0-9]+")
# a file named for another split than test (the Hub's data/train-00000-of-00024.parquet, ...)
_OTHER_SPLIT = re.compile(r"(^|[-_.])(train|validation|valid|dev)([-_.]|$)", re.IGNORECASE)
_HTML_HINT = re.compile(r"<\s*(html|body|pre|p|br|b|div|table|font)\b", re.IGNORECASE)


# function words that rewording adds or drops; question words are kept (who/why/where change the question)
_STOP = frozenset("a an the of to in on at by for with from and or is are was were be been did does do s his her "
                  "their its".split())


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _STOP


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def html_to_text(text: str) -> str:
    """Visible text of a web page, line structure kept (scripts are laid out in <pre> blocks)."""
    text = re.sub(r"(?is)<(script|style)\b.*?</\1\s*>", "", text)
    text = re.sub(r"(?is)<!--.*?-->", "", text)
    text = re.sub(r"(?i)<br\s*/?>", "\n", text)
    text = re.sub(r"(?i)</?(p|div|tr|table|h[1-6]|li|pre|blockquote)\b[^>]*>", "\n", text)
    text = re.sub(r"<[^>]+>", "", text)
    return html.unescape(text).replace("\r\n", "\n").replace("\r", "\n")


def story_text(document: dict[str, Any]) -> str:
    """The story itself: cut to its ``start``/``end`` markers, an HTML page turned into text."""
    text = str(document.get("text") or "")
    start, end = str(document.get("start") or "").strip(), str(document.get("end") or "").strip()
    if start and (i := text.find(start)) > 0:
        text = text[i:]
    if end and (j := text.rfind(end)) >= 0:
        text = text[: j + len(end)]
    if _HTML_HINT.search(text[:20000]):
        text = html_to_text(text)
    return text.strip()


def task_id(source_id: str, question: str) -> str:
    return f"{source_id}-{hashlib.sha256(question.strip().encode()).hexdigest()[:10]}"


def drop_near_duplicates(tasks: list[Task]) -> list[Task]:
    """Keep the first of each near-duplicate pair: similar question words and overlapping answers."""
    kept: list[Task] = []
    sigs: list[tuple[set[str], list[set[str]]]] = []
    for t in tasks:
        q, answers = _words(t.question), [_words(a) for a in t.reference]
        twin = next((i for i, (kq, ka) in enumerate(sigs) if _jaccard(q, kq) >= DUP_QUESTION_JACCARD
                     and any(_jaccard(a, b) >= DUP_ANSWER_JACCARD for a in answers for b in ka)), None)
        if twin is None:
            kept.append(t)
            sigs.append((q, answers))
        else:
            first = kept[twin]
            dups = first.metadata.get("near_duplicates", []) + [t.id]
            kept[twin] = first.model_copy(update={"metadata": {**first.metadata, "near_duplicates": dups}})
    return kept


class NarrativeQA(FetchedData, Benchmark):
    name = "narrativeqa"
    version = "2-A"  # 2: sections of at most 1,200 characters (what is indexed and shown), was 4,000
    deviations: ClassVar[list[str]] = [
        ("a story is cut at its chapter, act and scene headings (INT./EXT. in scripts) into paragraph-aligned "
         "sections of at most 1,200 characters, so that the shared index (element name + first 1,200 "
         "characters) and the excerpt a solver sees hold all of its text; the official SourceLearn has no "
         "story preparation: a story file is one section split only at Markdown '#' headings, of which its "
         "first 1,200 characters are indexed and shown"),
        ("an HTML page (some scripts) is turned into text and the story is cut to the row's start/end "
         "markers, so no web page or Project Gutenberg licence text is indexed"),
    ]
    subdir = "narrativeqa"
    scorer_name = JUDGE_NAME
    needs_judge_model = True
    answer_instructions = "Answer the question about the story in a few words or one short sentence."
    known_options = {
        "stories": "which stories: paper (default, the paper's 12) or comma-separated document ids",
        "revision": f"Hugging Face revision of {HF_REPO} (default {HF_REVISION[:12]}...)",
    }

    def __init__(self, data_dir: Path | None = None, options: dict[str, str] | None = None):
        super().__init__(data_dir, options)
        self._stories: tuple[dict[str, dict[str, Any]], str] | None = None

    def how_to_get(self) -> str:
        return (f"`sourcebench data fetch narrativeqa` saves the requested stories' rows of the {HF_REPO} test split "
                f"(revision {self.revision()[:12]}) into DATA/narrativeqa/; or put the test split's parquet files, or "
                f"JSON lines in the same row format, there; online, a run streams the test split once and saves "
                f"the same snapshot")

    def revision(self) -> str:
        return self.options.get("revision", HF_REVISION)

    # -- which stories -----------------------------------------------------------------------------
    def wanted(self) -> dict[str, str]:
        """document id -> source id of the stories this run covers."""
        opt = self.options.get("stories", "paper")
        if opt == "paper":
            return {doc_id: sid for sid, (doc_id, _, _) in PAPER_STORIES.items()}
        ids = [x.strip() for x in opt.split(",") if x.strip()]
        if not ids:
            raise ConfigError("narrativeqa: --opt stories= needs 'paper' or document ids")
        by_doc = {doc_id: sid for sid, (doc_id, _, _) in PAPER_STORIES.items()}
        return {i: by_doc.get(i, i) for i in ids}

    # -- loading -----------------------------------------------------------------------------------
    def _local_files(self) -> list[Path]:
        """The first data folder's test-split files (JSON lines, parquet); other splits' files are skipped."""
        for d in candidate_dirs(self):
            if d.is_dir():
                files = sorted(d.glob("*.jsonl")) + sorted(d.glob("*.parquet")) + sorted(d.glob("data/*.parquet"))
                files = [f for f in files if not _OTHER_SPLIT.search(f.name)]
                if files:
                    return files
        return []

    def snapshot_name(self) -> str:
        """The file a snapshot of this selection is saved as (test split, stories, revision in the name)."""
        which = "paper" if self.options.get("stories", "paper") == "paper" else \
            hashlib.sha256(",".join(sorted(self.wanted())).encode()).hexdigest()[:10]
        return f"narrativeqa-test-{which}-{self.revision()[:12]}.jsonl"

    def stories(self) -> tuple[dict[str, dict[str, Any]], str]:
        """(source id -> {"document": ..., "rows": [...]}, origin) for the wanted stories present."""
        if self._stories is None:
            wanted = self.wanted()
            files = self._local_files()
            rows = self._local_rows(files, set(wanted)) if files else self._hub_rows_saved(set(wanted))
            origin = (", ".join(str(f) for f in files) if files else f"huggingface:{HF_REPO}@{self.revision()}")
            out: dict[str, dict[str, Any]] = {}
            for where, row in rows:
                doc = row.get("document")
                if not isinstance(doc, dict) or "id" not in doc or not isinstance(row.get("question"), dict):
                    raise DataError(f"{where}: not a NarrativeQA row (needs document{{id, text}}, question{{text}}, answers)")
                sid = wanted[str(doc["id"])]
                entry = out.setdefault(sid, {"document": doc, "rows": []})
                if not entry["document"].get("text") and doc.get("text"):
                    entry["document"] = doc
                entry["rows"].append(row)
            order = {sid: i for i, sid in enumerate(wanted.values())}
            self._stories = (dict(sorted(out.items(), key=lambda kv: order[kv[0]])), origin)
        return self._stories

    def _local_rows(self, files: list[Path], ids: set[str]):
        for f in files:
            if f.suffix == ".jsonl":
                for line, obj in iter_jsonl(f):
                    if str((obj.get("document") or {}).get("id")) in ids:
                        yield f"{f}:{line}", obj
            else:
                yield from ((str(f), r) for r in _parquet_rows(f, ids))

    def _hub_rows_saved(self, ids: set[str]) -> list[tuple[str, dict[str, Any]]]:
        """The Hub's rows of these stories, saved as a snapshot in the first data folder so that the next
        run reads them there instead of streaming the split again (a folder that cannot be written is
        logged and the run goes on with the streamed rows)."""
        rows = list(self.hub_rows(ids))
        if rows:
            folder = candidate_dirs(self)[0]
            try:
                path = save_snapshot(folder, self, [r for _, r in rows])
                log.info("narrativeqa: saved the %d streamed rows to %s; later runs read them there", len(rows), path)
            except OSError as e:
                log.warning("narrativeqa: could not save the streamed rows in %s (%s); the next run streams them "
                            "again (`sourcebench data fetch narrativeqa --dest DIR` saves them elsewhere)", folder,
                            e.strerror or e)
        return rows

    def hub_rows(self, ids: set[str]):
        """(where, row) of the Hub's test split for the stories ``ids`` (the split is streamed through)."""
        looked = ", ".join(str(d) for d in candidate_dirs(self))
        hint = (f"no NarrativeQA rows in {looked}; where there is internet, `sourcebench data fetch narrativeqa` "
                f"saves the stories' rows into DATA/narrativeqa")
        rev = self.revision()

        def load():
            import datasets

            return datasets.load_dataset(HF_REPO, split="test", revision=rev, streaming=True)

        for row in iter_rows(f"narrativeqa: Hugging Face {HF_REPO}@{rev}", hint, load):
            if str(row["document"]["id"]) in ids:
                yield f"huggingface:{HF_REPO}", row

    def source_ids(self) -> list[str]:
        stories, origin = self.stories()
        if not stories:
            raise DataError(f"narrativeqa: none of the {len(self.wanted())} requested stories is in {origin}; "
                            "`sourcebench data fetch narrativeqa` (with the same --opt stories=) saves them")
        return list(stories)

    def _story(self, source_id: str) -> dict[str, Any]:
        stories, origin = self.stories()
        if source_id not in stories:
            raise DataError(f"narrativeqa: story '{source_id}' is not in {origin} (present: {', '.join(stories) or 'none'})")
        return stories[source_id]

    def load_source(self, source_id: str) -> Source:
        doc = self._story(source_id)["document"]
        text = story_text(doc)
        if not text:
            raise DataError(f"narrativeqa/{source_id}: the story text is empty")
        elements = split_story(source_id, text, max_chars=SECTION_CHARS)
        title = PAPER_STORIES.get(source_id, ("", (doc.get("summary") or {}).get("title") or source_id, ""))[1]
        return Source(id=source_id, kind="documents", elements=elements, origin=self.stories()[1],
                      description=f"NarrativeQA: the full text of {title} ({doc.get('kind', 'story')})",
                      metadata={"document_id": doc["id"], "kind": doc.get("kind"), "url": doc.get("url"),
                                "n_words": len(text.split())})

    def load_tasks(self, source_id: str) -> list[Task]:
        tasks = []
        for row in self._story(source_id)["rows"]:
            question = str(row["question"].get("text") or "").strip()
            answers = [str(a.get("text") or "").strip() for a in row.get("answers") or [] if isinstance(a, dict)]
            answers = [a for a in answers if a]
            if not question or not answers:
                continue
            tid = task_id(source_id, question)
            tasks.append(Task(id=tid, source_id=source_id, question=question, reference=answers, group=tid,
                              metadata={"document_id": row["document"]["id"]}))
        unique = list({t.id: t for t in tasks}.values())  # the very same question twice: keep one
        kept = drop_near_duplicates(unique)
        if not kept:
            raise DataError(f"narrativeqa/{source_id}: no questions with answers")
        return kept

    def data_status(self) -> Availability:
        looked = [str(d) for d in candidate_dirs(self)]
        if not self._local_files():
            state, detail = hub_status(f"Hugging Face {HF_REPO}@{self.revision()[:12]}")
            return Availability(self.name, False, "", f"no NarrativeQA rows on disk; {detail}", self.how_to_get(),
                                state=state, looked_in=looked + [f"huggingface:{HF_REPO}@{self.revision()}"])
        try:
            ids = self.source_ids()
        except DataError as e:
            return Availability(self.name, False, "", str(e), self.how_to_get(), state="missing", looked_in=looked)
        return Availability(self.name, True, self.stories()[1],
                            f"{len(ids)} of {len(self.wanted())} requested stories: {', '.join(ids)}",
                            self.how_to_get(), state="present", looked_in=looked)

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        return await judged_score(self.name, self.scorer_name, task, answer, judge)


def _parquet_rows(path: Path, ids: set[str]):
    """Rows of one of the dataset's parquet files whose document id is wanted (others never decoded)."""
    import pyarrow.dataset as pds

    try:
        table = pds.dataset(str(path), format="parquet").to_table(filter=pds.field("document", "id").isin(sorted(ids)))
    except Exception as e:  # pyarrow raises ArrowInvalid and friends on foreign files
        raise DataError(f"{path}: not a NarrativeQA parquet file ({type(e).__name__}: {str(e)[:200]})") from None
    yield from table.to_pylist()


DOC_KEYS_AFTER_FIRST = ("id", "kind", "url", "start", "end")  # the story text and summary go in the first row


def save_snapshot(folder: Path, bench: Any, rows: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` (one selection's rows, Hub format) as the snapshot of ``bench``'s selection and
    record it in the folder's manifest; returns the file's path."""
    path = Path(folder) / bench.snapshot_name()
    seen: set[str] = set()
    stories: dict[str, int] = {}
    with atomic_file(path) as f:
        for row in rows:
            doc = row["document"]
            doc_id = str(doc["id"])
            if doc_id in seen:
                row = {**row, "document": {k: doc[k] for k in DOC_KEYS_AFTER_FIRST if k in doc}}
            seen.add(doc_id)
            stories[doc_id] = stories.get(doc_id, 0) + 1
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    Manifest(folder, "narrativeqa", lambda _: None).record(
        path.name, source=f"huggingface:deepmind/narrativeqa@{bench.revision()}", split="test",
        rows_per_story=stories, size=path.stat().st_size, sha256=sha256_of(path))
    return path
