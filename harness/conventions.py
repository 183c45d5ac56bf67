"""Keys and labels that methods and reports must agree on, kept in the harness so that reports
need not import a method to read what methods wrote or to write what methods read.

- the gold-evidence labels of a task (``Task.metadata``), which benchmarks set and both the
  gold-removed variants and the Table 5 regions read;
- the key of a task in a matched-context file (``match_context_file``), which reports write and
  methods read;
- the inputs that address the shared Hybrid RAG index in an artifact store, so that reports load
  the very index the run's methods built.
"""

from __future__ import annotations

from .data import Source, Task

GOLD_KEY = "gold_element_ids"
GOLD_DOCS_KEY = "gold_doc_ids"
HYBRID_INDEX_KIND = "hybrid_index"


# 2: BM25 and dense over name + excerpt; whole-file elements of files with symbols not indexed
HYBRID_INDEX_VERSION = 2


def index_inputs(source: Source, embedder_name: str) -> dict:
    return {"source": source.id, "fingerprint": source.fingerprint, "embedder": embedder_name,
            "index_version": HYBRID_INDEX_VERSION}


def context_key(source_id: str, seed: int, task_id: str) -> str:
    return f"{source_id}\t{seed}\t{task_id}"


def gold_element_ids(task: Task) -> set[str]:
    """The elements a benchmark labels as the gold evidence of a task (empty when it has none)."""
    return {str(x) for x in task.metadata.get(GOLD_KEY) or []}


def gold_document_elements(task: Task, source: Source) -> set[str]:
    """The labelled gold elements plus every element of the task's gold documents."""
    docs = {str(x) for x in task.metadata.get(GOLD_DOCS_KEY) or []}
    in_docs = {e.id for e in source.elements if docs and str(e.metadata.get("doc_id", "")) in docs}
    return gold_element_ids(task) | in_docs
