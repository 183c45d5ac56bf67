"""MultiDoc2Dial: goal-oriented dialogues grounded in the documents of four government domains.

Each domain (dmv, ssa, studentaid, va) is one source whose elements are the documents' sections
(the ``id_sec`` groups of each document's ``spans``; heading-only sections become part of the
titles of the sections under them). A task is a user turn, asked with the dialogue so far, whose
reference is the agent's reply in the next turn; its gold documents and sections are the
references of that agent turn, kept so retrieval-robustness studies can remove them. The turns are
those the official loading script (``doc2dial_pub.py``, config ``multidoc2dial``) keeps: every user
turn the agent answers next, unless the agent has no solution (``respond_no_solution``), so a reply
that asks back (``query_condition``) is a reference too. By default
60 turns per domain are drawn, seeded and fixed, from the validation dialogues; splits group turns
by dialogue so one conversation never straddles guidance and test. Scoring: the QA LLM judge.

Data, in order: the original files (``multidoc2dial_doc.json`` and
``multidoc2dial_dial_{train,validation}.json``) in ``<data>/multidoc2dial`` (or its
``multidoc2dial/`` subfolder, as the zip unpacks), which ``sourcebench data fetch multidoc2dial``
puts there from the official zip; else, as a fallback, the Hub's parquet conversion of
``IBM/multidoc2dial`` (a loading-script dataset, which recent ``datasets`` no longer runs) at
revision ``refs/convert/parquet``, configs ``document_domain`` and ``dialogue_domain`` (the Hub
makes such conversions on its own schedule: they may be missing or change).
"""

from __future__ import annotations

import ast
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sourcebench.adapters.availability import Availability, candidate_dirs, hub_status, iter_rows, parquet_url
from sourcebench.adapters.fetch import FetchedData
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Score, Source, Task, stable_hash
from sourcebench.harness.errors import ConfigError, DataError
from sourcebench.harness.io import read_json
from sourcebench.judges.llm_judge import JUDGE_NAME, judged_score

DOMAINS = ("dmv", "ssa", "studentaid", "va")
DOMAIN_NAMES = {"dmv": "New York DMV", "ssa": "Social Security Administration",
                "studentaid": "Federal Student Aid", "va": "Veterans Affairs"}
DOC_FILE = "multidoc2dial_doc.json"
DIAL_FILES = {"train": "multidoc2dial_dial_train.json", "validation": "multidoc2dial_dial_validation.json"}
HF_REPO = "IBM/multidoc2dial"
HF_REVISION = "refs/convert/parquet"
PAPER_TASKS = 60
SELECTION_SEED = 20211107  # fixed: the drawn turns are part of the benchmark definition, not of a split
HEADING_TAG = re.compile(r"^h[1-6]$")
NO_SOLUTION = "respond_no_solution"  # the one agent act the official loading script leaves out


def _parent_titles(value: Any) -> list[str]:
    """``parent_titles`` as plain strings, whichever shape it arrives in.

    The JSON release has a list of ``{id_sp, text, level}``; the parquet conversion has the same as a
    Python-literal string or as a dict of lists.
    """
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value) if value.strip() else []
        except (ValueError, SyntaxError):
            return [value] if value.strip() else []
    if isinstance(value, dict):
        value = value.get("text") or []
    out = []
    for p in value or []:
        text = p.get("text") if isinstance(p, dict) else p
        if isinstance(text, str) and text.strip():
            out.append(text.strip())
    return out


def _spans(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans of a document in text order (a dict keyed by ``id_sp`` in JSON, a list in parquet)."""
    spans = doc.get("spans") or {}
    items = list(spans.values()) if isinstance(spans, dict) else list(spans)
    return sorted(items, key=lambda s: (int(s.get("start_sp") or 0), str(s.get("id_sp"))))


def doc_title(doc: dict[str, Any]) -> str:
    """The page title without the ``#N`` suffix the release adds to tell same-named pages apart."""
    return re.sub(r"#\d+$", "", str(doc.get("title") or doc.get("doc_id") or "")).strip()


def element_id(doc_id: str, id_sec: str) -> str:
    return f"{doc_id}::{id_sec}"


def document_sections(domain: str, doc: dict[str, Any]) -> tuple[list[Element], dict[str, str]]:
    """(elements, id_sp -> element id) of one document: one element per non-heading ``id_sec``.

    A heading-only section's span ids map to the first element under it, so a gold reference that
    lands on a heading still names a retrievable element.
    """
    doc_id = str(doc["doc_id"])
    sections: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for sp in _spans(doc):
        sections.setdefault(str(sp.get("id_sec")), []).append(sp)
    heading_parents: dict[str, list[str]] = {}
    for spans in sections.values():
        for sp in spans:
            if HEADING_TAG.match(str(sp.get("tag") or "")):
                heading_parents.setdefault(str(sp.get("title") or "").strip(), _parent_titles(sp.get("parent_titles")))
    page = doc_title(doc)
    elements: list[Element] = []
    span_to_el: dict[str, str] = {}
    pending_heading_spans: list[str] = []
    for id_sec, spans in sections.items():
        ids = [str(sp.get("id_sp")) for sp in spans]
        if all(HEADING_TAG.match(str(sp.get("tag") or "")) for sp in spans):
            pending_heading_spans += ids
            continue
        first = spans[0]
        text = str(first.get("text_sec") or "").strip() or " ".join(str(sp.get("text_sp") or "").strip() for sp in spans)
        if not text.strip():
            pending_heading_spans += ids
            continue
        heading = str(first.get("title") or "").strip()
        path = [page] + [t for t in heading_parents.get(heading, []) if t != page] + ([heading] if heading and heading != page else [])
        eid = element_id(doc_id, id_sec)
        # the document is the element's file and entity ("/" in a page title must not read as a folder)
        elements.append(Element(id=eid, title=" > ".join(dict.fromkeys(path)), text=text,
                                path=doc_id.replace("/", "|"), kind="section",
                                metadata={"domain": domain, "doc_id": doc_id, "entity": doc_id, "id_sec": id_sec,
                                          "span_ids": ids}))
        for i in pending_heading_spans + ids:
            span_to_el[i] = eid
        pending_heading_spans = []
    return elements, span_to_el


def _one_line(text: Any) -> str:
    return str(text or "").replace("\n", " ").replace("\t", " ").strip()


def render_question(utterance: str, history: list[dict[str, Any]]) -> str:
    """The user's latest turn first (what to answer), then the earlier turns, most recent first, as the
    official loading script orders them (``utterance[SEP]`` then the previous turns reversed, each on
    one line); here as labelled lines rather than its ``[SEP]``/``||`` string, which a fine-tuned
    retriever-generator read."""
    q = _one_line(utterance)
    if history:
        lines = [f"{'User' if t.get('role') == 'user' else 'Agent'}: {_one_line(t.get('utterance'))}"
                 for t in reversed(history)]
        q += "\n\nEarlier turns of the conversation, most recent first:\n" + "\n".join(lines)
    return q


class MultiDoc2Dial(FetchedData, Benchmark):
    name = "multidoc2dial"
    version = "3-A"  # 3: history most recent first, as the official loading script; 2: its turn rule
    subdir = "multidoc2dial"
    scorer_name = JUDGE_NAME
    needs_judge_model = True
    answer_instructions = (
        "The question is the last turn of someone talking with an agent of a government service, followed by "
        "the earlier turns, most recent first. Reply as that agent would, in one to three sentences, grounded "
        "in the documents."
    )
    known_options: ClassVar[dict[str, str]] = {
        "n_tasks": f"user turns per domain: {PAPER_TASKS} (default, the paper's), 'all', or a number",
        "dialogues": "which dialogues the turns come from: validation (default), train, or all",
    }

    deviations: ClassVar[list[str]] = [
        ("The question is the latest user turn, then the earlier turns most recent first, as the official "
         "loading script orders them, but written as labelled lines ('User: ...', 'Agent: ...') under a heading "
         "instead of its 'utterance[SEP]role: utterance||...' string, which was the input of a fine-tuned "
         "retriever-generator, not of an instructed model."),
    ]

    def __init__(self, data_dir: Path | None = None, options: dict[str, str] | None = None):
        super().__init__(data_dir, options)
        self._corpus: tuple[dict, dict, str] | None = None
        self._section_cache: dict[str, tuple[list[Element], dict[tuple[str, str], str]]] = {}

    def how_to_get(self) -> str:
        return (f"`sourcebench data fetch multidoc2dial` downloads the official multidoc2dial.zip "
                f"(https://doc2dial.github.io/multidoc2dial/file/multidoc2dial.zip) and unpacks {DOC_FILE} and "
                f"{', '.join(DIAL_FILES.values())} into DATA/multidoc2dial/, which is read first; without them, "
                f"online, the fallback is the parquet conversion of Hugging Face {HF_REPO} (revision {HF_REVISION})")

    # -- data --------------------------------------------------------------------------------------
    def _local_folder(self) -> Path | None:
        for d in candidate_dirs(self):
            for folder in (d, d / "multidoc2dial"):
                if (folder / DOC_FILE).is_file():
                    return folder
        return None

    def _dialogue_splits(self) -> list[str]:
        opt = self.options.get("dialogues", "validation")
        if opt == "all":
            return ["train", "validation"]
        if opt not in DIAL_FILES:
            raise ConfigError(f"multidoc2dial: --opt dialogues={opt!r}: expected validation, train or all")
        return [opt]

    def corpus(self) -> tuple[dict[str, dict[str, dict]], dict[str, list[dict]], str]:
        """(documents by domain and doc_id, dialogues by domain, origin), loaded once."""
        if self._corpus is None:
            folder = self._local_folder()
            self._corpus = self._load_local(folder) if folder else self._load_hub()
        return self._corpus

    def _load_local(self, folder: Path) -> tuple[dict, dict, str]:
        docs_path = folder / DOC_FILE
        raw = read_json(docs_path)
        if not isinstance(raw, dict) or not isinstance(raw.get("doc_data"), dict):
            raise DataError(f"{docs_path}: expected an object with a 'doc_data' object (domain -> doc_id -> document)")
        docs = {dom: dict(by_id) for dom, by_id in raw["doc_data"].items()}
        dials: dict[str, list[dict]] = {}
        for split in self._dialogue_splits():
            path = folder / DIAL_FILES[split]
            data = read_json(path)
            if not isinstance(data, dict) or not isinstance(data.get("dial_data"), dict):
                raise DataError(f"{path}: expected an object with a 'dial_data' object (domain -> dialogues)")
            for dom, dialogues in data["dial_data"].items():
                dials.setdefault(dom, []).extend({**d, "_split": split} for d in dialogues)
        return docs, dials, str(folder)

    def _load_hub(self) -> tuple[dict, dict, str]:
        looked = ", ".join(str(d) for d in candidate_dirs(self))
        hint = (f"no {DOC_FILE} in {looked} (local files come first, this parquet conversion is the fallback); "
                f"`sourcebench data fetch multidoc2dial` puts the official zip's files into DATA/multidoc2dial")
        what = f"multidoc2dial: Hugging Face {HF_REPO}@{HF_REVISION}"

        def loader(config: str, split: str):
            def load():
                import datasets

                url = parquet_url(HF_REPO, HF_REVISION, f"{config}/{split}/*.parquet")
                return datasets.load_dataset("parquet", data_files={split: url}, split=split)
            return load

        docs: dict[str, dict[str, dict]] = {}
        for row in iter_rows(what, hint, loader("document_domain", "train")):
            docs.setdefault(str(row["domain"]), {}).setdefault(str(row["doc_id"]), row)  # the script repeats rows
        domain_of = {doc_id: dom for dom, by_id in docs.items() for doc_id in by_id}
        dials: dict[str, list[dict]] = {}
        for split in self._dialogue_splits():
            for row in iter_rows(what, hint, loader("dialogue_domain", split)):
                dom = row.get("domain") or next((domain_of.get(r.get("doc_id")) for t in row["turns"]
                                                 for r in t.get("references") or [] if domain_of.get(r.get("doc_id"))), None)
                if dom:
                    dials.setdefault(str(dom), []).append({**row, "_split": split})
        return docs, dials, f"huggingface:{HF_REPO}@{HF_REVISION}"

    def source_ids(self) -> list[str]:
        docs, _, origin = self.corpus()
        ids = [d for d in DOMAINS if d in docs] + sorted(d for d in docs if d not in DOMAINS)
        if not ids:
            raise DataError(f"{origin}: no domains in the document data")
        return ids

    def _domain(self, source_id: str) -> dict[str, dict]:
        docs, _, origin = self.corpus()
        if source_id not in docs:
            raise DataError(f"multidoc2dial: unknown domain '{source_id}' in {origin} (known: {', '.join(sorted(docs))})")
        return docs[source_id]

    def _sections(self, source_id: str) -> tuple[list[Element], dict[tuple[str, str], str]]:
        """(elements of the domain in doc_id order, (doc_id, id_sp) -> element id), computed once."""
        if source_id not in self._section_cache:
            elements: list[Element] = []
            span_map: dict[tuple[str, str], str] = {}
            docs = self._domain(source_id)
            for doc_id in sorted(docs):
                els, spans = document_sections(source_id, docs[doc_id])
                elements += els
                span_map.update({(doc_id, sp): eid for sp, eid in spans.items()})
            self._section_cache[source_id] = (elements, span_map)
        return self._section_cache[source_id]

    def load_source(self, source_id: str) -> Source:
        elements, _ = self._sections(source_id)
        n_docs = len(self._domain(source_id))
        if not elements:
            raise DataError(f"multidoc2dial/{source_id}: the domain's documents have no text sections")
        return Source(id=source_id, kind="documents", elements=elements, origin=self.corpus()[2],
                      description=f"MultiDoc2Dial {source_id}: {n_docs} documents of the "
                                  f"{DOMAIN_NAMES.get(source_id, source_id)} web site, by section",
                      metadata={"n_documents": n_docs})

    def all_turns(self, source_id: str) -> list[Task]:
        """Every eligible user turn of the domain (before the seeded selection)."""
        _, dials, origin = self.corpus()
        _, span_map = self._sections(source_id)
        tasks = []
        for d in dials.get(source_id, []):
            turns = d.get("turns") or []
            for i, turn in enumerate(turns[:-1]):
                reply = turns[i + 1]
                if turn.get("role") != "user" or reply.get("role") != "agent":
                    continue
                refs = reply.get("references") or []
                if not refs or not str(reply.get("utterance") or "").strip() or not str(turn.get("utterance") or "").strip():
                    continue
                if str(reply.get("da") or "") == NO_SOLUTION:
                    continue  # the official rule: every agent reply is a reference except "no solution"
                gold_docs = list(dict.fromkeys(str(r["doc_id"]) for r in refs if r.get("doc_id")))
                gold_els = list(dict.fromkeys(span_map[(str(r.get("doc_id")), str(r.get("id_sp")))] for r in refs
                                              if (str(r.get("doc_id")), str(r.get("id_sp"))) in span_map))
                tid = f"{d['dial_id']}_{turn.get('turn_id')}"
                tasks.append(Task(
                    id=tid, source_id=source_id, question=render_question(str(turn["utterance"]), turns[:i]),
                    reference=[str(reply["utterance"]).strip()], group=str(d["dial_id"]),
                    metadata={"dial_id": d["dial_id"], "turn_id": turn.get("turn_id"), "dialogues": d.get("_split"),
                              "user_da": turn.get("da"), "agent_da": reply.get("da"), "gold_doc_ids": gold_docs,
                              "gold_element_ids": gold_els, "n_history_turns": i},
                ))
        if not tasks:
            raise DataError(f"multidoc2dial/{source_id}: no answerable user turns in the dialogues of {origin}")
        return tasks

    def load_tasks(self, source_id: str) -> list[Task]:
        tasks = sorted(self.all_turns(source_id), key=lambda t: t.id)
        opt = self.options.get("n_tasks", str(PAPER_TASKS))
        if opt == "all":
            return tasks
        try:
            n = int(opt)
        except ValueError:
            raise ConfigError(f"multidoc2dial: --opt n_tasks={opt!r}: expected a number or all") from None
        if n <= 0:
            raise ConfigError(f"multidoc2dial: --opt n_tasks={opt!r}: expected a positive number")
        if n >= len(tasks):
            return tasks
        rng = np.random.default_rng([SELECTION_SEED, int(stable_hash(source_id)[:8], 16)])
        return [tasks[i] for i in sorted(rng.permutation(len(tasks))[:n])]

    def data_status(self) -> Availability:
        looked = [str(d) for d in candidate_dirs(self)]
        folder = self._local_folder()
        if folder is None:
            state, detail = hub_status(f"Hugging Face {HF_REPO}@{HF_REVISION}")
            return Availability(self.name, False, "", f"no {DOC_FILE} on disk; {detail}", self.how_to_get(),
                                state=state, looked_in=looked + [f"huggingface:{HF_REPO}@{HF_REVISION}"])
        try:
            docs, dials, _ = self.corpus()
        except DataError as e:
            return Availability(self.name, False, str(folder), str(e), self.how_to_get(), state="missing",
                                looked_in=looked)
        parts = [f"{d}: {len(docs[d])} documents, {len(dials.get(d, []))} dialogues" for d in self.source_ids()]
        return Availability(self.name, True, str(folder), "; ".join(parts), self.how_to_get(), state="present",
                            looked_in=looked)

    # -- scoring -----------------------------------------------------------------------------------
    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        return await judged_score(self.name, self.scorer_name, task, answer, judge)
