"""PhantomWiki: a generated universe of person articles and multi-hop questions.

Data: the official generator's output (``pw-generate --article-format json --question-format
json``): ``articles.json`` (``{title, article, facts}``) and ``questions.json``. Each instance folder
is one source; articles are split at their markdown sections. Tasks are grouped by template
(``type``) so a template never sits on both sides of a split. Scoring: answer-set EM and F1.

When no data folder holds an instance (and no ``--data-dir`` is given), the small universe bundled in
``data/`` is used, with a one-line notice, so the quickstart runs from a bare clone offline
(the generator needs Python >= 3.12 and SWI-Prolog); its PROVENANCE.md says how it was made.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from sourcebench.adapters.fetch import FetchedData
from sourcebench.harness.benchmark import Benchmark, DataStatus, default_data_dirs
from sourcebench.harness.data import Answer, Score, Source, Task
from sourcebench.harness.elements import split_markdown
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import read_json, require_fields
from sourcebench.harness.schema_limits import bounded_list, bounded_text
from sourcebench.judges.exact_f1 import exact_f1

BUNDLED = Path(__file__).resolve().parent / "data"  # official generator output, trimmed
_bundled_notice_given = False  # the notice is printed once per process

_PROLOG_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|\b([A-Z][A-Za-z0-9_]*)\b')  # "constant" or Variable


def gold_path(q: dict, people: set[str]) -> list[list[str]]:
    """The people on a question's gold reasoning path, from its named start to its answer end.

    Gold information like ``reference`` (for analyses such as the key-overlap protocol; methods must
    not read it). The Prolog query is a chain whose last atom holds the start, so atoms are walked in
    reverse; each step is a named person or the sorted people a variable takes over all solution
    traces. Steps that are not people (dates, counts, attribute values) are left out.
    """
    traces = q.get("solution_traces") or []
    if isinstance(traces, str):
        try:
            traces = json.loads(traces)
        except json.JSONDecodeError:
            traces = []
    prolog = q.get("prolog")
    query = (prolog.get("query") or []) if isinstance(prolog, dict) else []
    steps: list[list[str]] = []
    seen: set[tuple[str, str]] = set()
    for atom in reversed([str(a) for a in query]):
        for m in _PROLOG_TOKEN.finditer(atom):
            const, var = m.group(1), m.group(2)
            key = ("const", const) if const is not None else ("var", var)
            if key in seen:
                continue
            seen.add(key)
            if const is not None:
                values = [const] if const in people else []
            else:
                values = sorted({str(t[var]) for t in traces if isinstance(t, dict) and str(t.get(var)) in people})
            if values:
                steps.append(values)
    return steps


# the one attribute name with " of " inside it (PhantomWiki's attributes: date of birth, occupation, hobby, gender)
_DOB = "date of birth"
_ATTRIBUTE_CLAUSE = re.compile(r"\bthe person whose (?P<attr>.+?) is (?P<value>.+?)(?:\s+have)?\s*$")
_CAPITALISED = re.compile(r"\b[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*)*")
_IRREGULAR = {"children": "child", "grandchildren": "grandchild", "great-grandchildren": "great-grandchild",
              "wives": "wife"}


def _singular(relation: str) -> str:
    """'sons-in-law' -> 'son-in-law', 'male first cousins once removed' -> 'male first cousin once removed'."""
    if relation in _IRREGULAR:
        return _IRREGULAR[relation]
    for suffix in ("-in-law", " once removed"):
        if relation.endswith(suffix):
            return _singular(relation[: -len(suffix)]) + suffix
    words = relation.split(" ")
    last = _IRREGULAR.get(words[-1], words[-1].removesuffix("s"))
    return " ".join(words[:-1] + [last])


def _named_people(text: str, people: set[str]) -> list[str]:
    """The article titles among the runs of capitalised words in ``text``, longest first within a run
    ("Ann Leeds" is not "Ann Lee"); a lookup per candidate, so a universe of any size costs the same."""
    found: list[str] = []
    for run in _CAPITALISED.finditer(text):
        words = run.group(0).split()
        i = 0
        while i < len(words):
            j = next((j for j in range(len(words), i, -1) if " ".join(words[i:j]) in people), None)
            if j is None:
                i += 1
                continue
            found.append(" ".join(words[i:j]))
            i = j
    return list(dict.fromkeys(found))


def named_keys(question: str, people: set[str]) -> list[str]:
    """The keys a PhantomWiki question names, from its text only (never its answer or gold path): each
    person it names (an article title of the universe), the attribute value it names ("hobby = shogi"),
    and its relation and attribute words ("relation: mother", "attribute: occupation"), in order.

    Seed 002's keys are the named keys a reader's search uses (a person and a relation, or an attribute
    value); a PhantomWiki question names one anchor (a person, or "the person whose A is V") and the
    chain of relations walked from it.
    """
    q = " ".join(question.strip().rstrip("?").split())
    keys: list[str] = []
    for name in _named_people(q, people):
        keys.append(f"person: {name}")
        q = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", " ", q)
    clause = _ATTRIBUTE_CLAUSE.search(q)
    if clause:
        keys.append(f"{clause['attr']} = {clause['value']}")
        q = q[: clause.start()]
    q = " ".join(q.replace(_DOB, _DOB.replace(" ", "_")).split())
    head = re.match(r"^How many (?P<rel>.+?) does\b(?P<rest>.*?)(?:\s*\bhave)?$", q)
    words: list[str] = []
    if head:
        words.append(f"relation: {_singular(head['rel'])}")
        chain = head["rest"]
    elif (asked := re.match(r"^What is the (?P<attr>\S+)(?P<rest>(?: of\b.*)?)$", q)):
        words.append(f"attribute: {asked['attr']}")
        chain = asked["rest"]
    else:
        chain = re.sub(r"^Who is\b", "", q)
    chain = re.sub(r"^\s*of\b|\bof\s*$", "", chain.strip())  # the "of"s left where the anchor was
    for part in chain.split(" of "):
        part = re.sub(r"^\s*the\s+", "", part).strip()
        if part and part != "the":
            words.append(f"relation: {part}")
    words = [w.replace(_DOB.replace(" ", "_"), _DOB) for w in words]
    return list(dict.fromkeys(keys + words))


MAX_ANSWERS = 32  # the most gold answers of a question in the shipped instance is 24
ANSWER_CHARS = 80  # its longest answer has 31 characters


class AnswerSet(BaseModel):
    """Bounded in the schema only (parsing stays lenient): under a grammar a small model otherwise
    repeats list items, or grows one name into a sentence, until ``max_tokens`` cuts the JSON."""

    answers: bounded_list(bounded_text(ANSWER_CHARS), MAX_ANSWERS) = Field(
        description="the answer(s): names or values only")


def _has_instance(d: Path) -> bool:
    return d.is_dir() and any((p / "articles.json").is_file() for p in d.iterdir() if p.is_dir())


class PhantomWiki(FetchedData, Benchmark):
    name = "phantomwiki"
    version = "1-C"  # 1-B: the answer schema bounds the list and each answer; 1-C: phantom_eval F1 exactly
    subdir = "phantomwiki"
    scorer_name = "exact_f1"
    answer_instructions = (
        'Reply in JSON as {"answers": [...]}, listing only the name(s) or value(s) that answer the question, '
        "no sentences."
    )
    answer_schema = AnswerSet
    answer_max_tokens = 128  # answers are short lists of names or values (JSON)
    known_options = {
        "max_difficulty": "keep test questions with at most this many reasoning steps (a small model only "
        "answers easy ones; full runs use all)",
    }

    def how_to_get(self) -> str:
        return ("Generate an instance with the official generator: pip install phantom-wiki; "
                "pw-generate -od DIR/phantomwiki/<name> --article-format json --question-format json")

    def data_root(self) -> Path:
        """``--data-dir`` as given; else the first data folder holding an instance; else the bundled one."""
        if self._data_dir is not None:
            return super().data_root()
        for d in default_data_dirs():
            if _has_instance(d / self.subdir):
                return d / self.subdir
        return BUNDLED

    def bundled(self) -> bool:
        return self.data_root() == BUNDLED

    def data_status(self) -> DataStatus:
        st = super().data_status()
        if st.present and self.bundled():
            st.detail = f"bundled with the package (no data folder has a PhantomWiki instance): {st.detail}"
        return st

    def _notice_bundled(self) -> None:
        global _bundled_notice_given
        if _bundled_notice_given or not self.bundled():
            return
        _bundled_notice_given = True
        looked = ", ".join(str(d / self.subdir) for d in default_data_dirs())
        print(f"sourcebench: phantomwiki: no PhantomWiki instance in {looked}; using the small universe "
              f"bundled with the package ({BUNDLED}, see its PROVENANCE.md)", file=sys.stderr)

    def source_ids(self) -> list[str]:
        root = self.data_root()
        ids = sorted(p.name for p in root.iterdir() if (p / "articles.json").exists())
        if not ids:
            raise DataError(f"{root}: no PhantomWiki instance (a folder with articles.json and questions.json)")
        return ids

    def _dir(self, source_id: str) -> Path:
        d = self.data_root() / source_id
        if not (d / "articles.json").exists():
            raise DataError(f"{d / 'articles.json'}: file not found (unknown PhantomWiki source '{source_id}')")
        return d

    def load_source(self, source_id: str) -> Source:
        path = self._dir(source_id) / "articles.json"
        self._notice_bundled()
        articles = read_json(path)
        if not isinstance(articles, list) or not articles:
            raise DataError(f"{path}: expected a non-empty JSON list of articles")
        elements = []
        for i, a in enumerate(articles):
            if not isinstance(a, dict):
                raise DataError(f"{path}: article {i} is not an object")
            require_fields(path, None, a, ["title", "article"])
            for el in split_markdown(a["title"], a["article"]):
                elements.append(el.model_copy(update={"metadata": {**el.metadata, "entity": a["title"]}}))
        seen: set[str] = set()
        for e in elements:
            if e.id in seen:
                raise DataError(f"{path}: duplicate element id '{e.id}' (two articles with the same title?)")
            seen.add(e.id)
        return Source(id=source_id, kind="documents", elements=elements, origin=str(path),
                      description="PhantomWiki: articles about people of a generated universe")

    def _people(self, source_id: str) -> set[str]:
        articles = read_json(self._dir(source_id) / "articles.json")
        return {a["title"] for a in articles if isinstance(a, dict) and "title" in a} \
            if isinstance(articles, list) else set()

    def load_tasks(self, source_id: str) -> list[Task]:
        path = self._dir(source_id) / "questions.json"
        qs = read_json(path)
        people: set[str] | None = None  # article titles, read once the questions look valid
        if not isinstance(qs, list):
            raise DataError(f"{path}: expected a JSON list of questions")
        tasks = []
        for i, q in enumerate(qs):
            if not isinstance(q, dict):
                raise DataError(f"{path}: question {i} is not an object")
            require_fields(path, None, q, ["id", "question", "answer", "type"])
            if people is None:
                people = self._people(source_id)
            tasks.append(Task(
                id=str(q["id"]),
                source_id=source_id,
                question=q["question"],
                reference=[str(a) for a in q["answer"]],
                group=f"type-{q['type']}",
                metadata={"difficulty": q.get("difficulty"), "type": q["type"],
                          "is_aggregation_question": q.get("is_aggregation_question"),
                          "gold_path": gold_path(q, people)},
            ))
        return tasks

    def task_keys(self, task: Task) -> list[str] | None:
        """The keys the question names (``named_keys``): the universe's article titles it mentions, the
        attribute value it names and its relation and attribute words; never its answer."""
        titles = self.__dict__.setdefault("_titles", {})
        if task.source_id not in titles:
            titles[task.source_id] = self._people(task.source_id)
        return named_keys(task.question, titles[task.source_id])

    def answer_text(self, value: AnswerSet) -> str:  # type: ignore[override]
        """The text an official agent would have written: an empty answer stays (a trailing comma)."""
        return ", ".join(a.strip() for a in value.answers)

    def select_test(self, tasks: list[Task]) -> list[Task]:
        md = self.options.get("max_difficulty")
        if md is None:
            return tasks
        try:
            lim = int(md)
        except ValueError:
            from sourcebench.harness.errors import ConfigError

            raise ConfigError(f"phantomwiki: --opt max_difficulty={md!r} is not an integer") from None
        return [t for t in tasks if (t.metadata.get("difficulty") or 0) <= lim]

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        if answer.failed:
            return Score(value=0.0, correct=False, judge=self.scorer_name, failed=True, failure_reason=answer.failure_reason)
        m = exact_f1(answer.text, task.reference)
        return Score(value=m["f1"], correct=bool(m["em"]), details=m, judge=self.scorer_name)
