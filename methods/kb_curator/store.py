"""The linked document store the curator trains: documents with outgoing links, plus its search index.

The store starts as one link-free document per source element (K0). Every change goes through
``apply`` with a validated ``Edit``, so the edit trace of a training run replays to the same store
(the paper reconstructs intermediate stores the same way). Provenance fields (origin, edited,
original text, author task) are kept for measurement and are never shown to the agent.

Learned structure is exposed as individually addressable *entries* (authored documents, links,
edits and deletions of source documents) so that protocols can remove one entry at a time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from sourcebench.harness.data import Element, Evidence, Source
from sourcebench.harness.embeddings import Embedder
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import atomic_write_text
from sourcebench.harness.retrieval import HybridIndex, dense_text

STORE_FILE = "store.json"
VECTORS_FILE = "embeddings.npy"
STORE_FORMAT = 1
AUTHORED_PREFIX = "kb:"


class Document(BaseModel):
    """One store document. ``links`` are ids of other documents (never copies of their text)."""

    id: str
    title: str
    text: str
    path: str = ""
    links: list[str] = Field(default_factory=list)
    origin: Literal["source", "authored"] = "source"
    edited: bool = False
    original_text: str | None = None  # a source document's text before its first edit
    author_task: str = ""  # guidance task during whose curation the document was written

    def element(self) -> Element:
        return Element(id=self.id, title=self.title, text=self.text, path=self.path)


class Edit(BaseModel):
    """One validated change, as recorded in the edit trace."""

    op: Literal["add", "link", "edit", "delete", "unlink"]
    doc_id: str
    title: str = ""
    text: str = ""
    targets: list[str] = Field(default_factory=list)
    task_id: str = ""


class Entry(BaseModel):
    """A unit of learned structure, removable on its own (see ``KnowledgeStore.without``).

    ``text`` is what every prompt that shows the entry contains (for exposure checks): the id of the
    document it lives in, which appears wherever that document is listed or read; a link is shown
    only when its source document is read. A deletion has no text: it can matter to any task.
    """

    id: str  # doc:<id> | link:<from>-><to> | edit:<id> | delete:<id>
    kind: Literal["document", "link", "edit", "delete"]
    text: str
    description: str
    doc_id: str
    target_id: str = ""


class KnowledgeStore:
    """Documents by id (insertion order kept), with deletions kept as tombstones for restoring."""

    def __init__(self, docs: list[Document], deleted: list[Document] | None = None, next_id: int = 1):
        self.docs: dict[str, Document] = {d.id: d for d in docs}
        self.deleted: dict[str, Document] = {d.id: d for d in deleted or []}
        self.next_id = next_id
        self.version = 0  # bumped on every change, so indexes know when to refresh

    @classmethod
    def from_source(cls, source: Source) -> KnowledgeStore:
        """K0: one link-free document per source element."""
        return cls([Document(id=e.id, title=e.title, text=e.text, path=e.path) for e in source.elements])

    # -- reading ---------------------------------------------------------------------------------
    def get(self, doc_id: str) -> Document | None:
        return self.docs.get(doc_id)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self.docs

    def __len__(self) -> int:
        return len(self.docs)

    def new_id(self) -> str:
        """The id the next authored document will get (deterministic counter)."""
        n = self.next_id
        while f"{AUTHORED_PREFIX}{n:04d}" in self.docs or f"{AUTHORED_PREFIX}{n:04d}" in self.deleted:
            n += 1
        return f"{AUTHORED_PREFIX}{n:04d}"

    # -- changing --------------------------------------------------------------------------------
    def apply(self, edit: Edit) -> None:
        """Apply a change that the tool layer has already validated (ids exist, limits hold)."""
        if edit.op == "add":
            if edit.doc_id in self.docs:
                raise ValueError(f"document {edit.doc_id} already exists")
            self.docs[edit.doc_id] = Document(id=edit.doc_id, title=edit.title, text=edit.text, origin="authored",
                                              author_task=edit.task_id)
            if edit.doc_id.startswith(AUTHORED_PREFIX) and edit.doc_id[len(AUTHORED_PREFIX):].isdigit():
                self.next_id = max(self.next_id, int(edit.doc_id[len(AUTHORED_PREFIX):]) + 1)
        elif edit.op == "link":
            doc = self.docs[edit.doc_id]
            new = [t for t in edit.targets if t not in doc.links and t != doc.id]
            self.docs[doc.id] = doc.model_copy(update={"links": doc.links + new})
        elif edit.op == "unlink":
            doc = self.docs[edit.doc_id]
            drop = set(edit.targets)
            self.docs[doc.id] = doc.model_copy(update={"links": [t for t in doc.links if t not in drop]})
        elif edit.op == "edit":
            doc = self.docs[edit.doc_id]
            original = doc.original_text
            if doc.origin == "source" and original is None:
                original = doc.text
            self.docs[doc.id] = doc.model_copy(update={"text": edit.text, "edited": True, "original_text": original})
        elif edit.op == "delete":
            doc = self.docs.pop(edit.doc_id)
            if doc.origin == "source":  # tombstone with the source text, so the deletion can be undone
                self.deleted[doc.id] = doc.model_copy(update={
                    "links": [], "text": doc.original_text if doc.original_text is not None else doc.text,
                    "edited": False, "original_text": None})
            for other in list(self.docs.values()):  # deletes cascade: no dangling links
                if doc.id in other.links:
                    self.docs[other.id] = other.model_copy(update={"links": [t for t in other.links if t != doc.id]})
        self.version += 1

    def copy(self) -> KnowledgeStore:
        return KnowledgeStore(list(self.docs.values()), list(self.deleted.values()), self.next_id)

    # -- learned structure as entries ------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """Everything training changed relative to K0 (which is link-free and unedited)."""
        out: list[Entry] = []
        for d in self.docs.values():
            if d.origin == "authored":
                out.append(Entry(id=f"doc:{d.id}", kind="document", text=d.id, description=f"{d.title}: {d.text}",
                                 doc_id=d.id))
            elif d.edited:
                out.append(Entry(id=f"edit:{d.id}", kind="edit", text=d.id, description=d.text, doc_id=d.id))
        for d in self.docs.values():
            for t in d.links:
                out.append(Entry(id=f"link:{d.id}->{t}", kind="link", text=d.id,
                                 description=f"{d.title} -> {self.docs[t].title}", doc_id=d.id, target_id=t))
        for d in self.deleted.values():
            out.append(Entry(id=f"delete:{d.id}", kind="delete", text="", description=d.title, doc_id=d.id))
        return out

    def without(self, entry_id: str) -> KnowledgeStore:
        """A copy of the store with one entry undone: an authored document removed (with its links),
        a link removed, an edited source document restored, or a deleted one brought back (unlinked)."""
        entry = next((e for e in self.entries() if e.id == entry_id), None)
        if entry is None:
            raise KeyError(f"no entry {entry_id!r} in this store")
        out = self.copy()
        if entry.kind == "document":
            out.apply(Edit(op="delete", doc_id=entry.doc_id))
        elif entry.kind == "link":
            out.apply(Edit(op="unlink", doc_id=entry.doc_id, targets=[entry.target_id]))
        elif entry.kind == "edit":
            doc = out.docs[entry.doc_id]
            out.docs[doc.id] = doc.model_copy(update={"text": doc.original_text, "edited": False,
                                                      "original_text": None})
            out.version += 1
        else:
            out.docs[entry.doc_id] = out.deleted.pop(entry.doc_id)
            out.version += 1
        return out

    # -- measurement -----------------------------------------------------------------------------
    def coverage(self) -> float:
        """Share of source documents reachable in one read from an authored document (paper, E4)."""
        source_ids = [d.id for d in self.docs.values() if d.origin == "source"]
        if not source_ids:
            return 0.0
        reached = {t for d in self.docs.values() if d.origin == "authored" for t in d.links}
        return sum(1 for i in source_ids if i in reached) / len(source_ids)

    def counts(self) -> dict[str, int]:
        docs = list(self.docs.values())
        return {
            "n_documents": len(docs),
            "n_authored": sum(d.origin == "authored" for d in docs),
            "n_links": sum(len(d.links) for d in docs),
            "n_edited_source": sum(d.origin == "source" and d.edited for d in docs),
            "n_deleted_source": len(self.deleted),
        }

    # -- persistence -----------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"format": STORE_FORMAT, "next_id": self.next_id,
                           "documents": [d.model_dump() for d in self.docs.values()],
                           "deleted": [d.model_dump() for d in self.deleted.values()]},
                          indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, where: str = STORE_FILE) -> KnowledgeStore:
        data = json.loads(text)
        if data.get("format") != STORE_FORMAT:
            raise DataError(f"{where}: unknown store format {data.get('format')!r} (expected {STORE_FORMAT})")
        return cls([Document.model_validate(d) for d in data["documents"]],
                   [Document.model_validate(d) for d in data.get("deleted", [])], int(data["next_id"]))


def _text_key(doc: Document) -> str:
    return hashlib.sha256(dense_text(doc.element()).encode("utf-8")).hexdigest()


class StoreIndex:
    """Hybrid search (BM25 + dense, RRF: the Hybrid RAG ranking) over the store's current documents.

    Vectors are cached per document text, so after an edit only changed documents are re-embedded
    (the paper's dirty-document re-embedding); BM25 is rebuilt on the next search after a change.
    """

    def __init__(self, store: KnowledgeStore, embedder: Embedder, per_file_cap: int | None = None,
                 vectors: dict[str, np.ndarray] | None = None):
        self.store = store
        self.embedder = embedder
        self.per_file_cap = per_file_cap
        self._vectors: dict[str, np.ndarray] = dict(vectors or {})  # text key -> vector
        self._index: HybridIndex | None = None
        self._built_version = -1

    def seed_vectors(self, elements: list[Element], embeddings: np.ndarray) -> None:
        """Reuse vectors already computed for the same texts (the shared Hybrid RAG index)."""
        for e, v in zip(elements, embeddings):
            self._vectors.setdefault(hashlib.sha256(dense_text(e).encode("utf-8")).hexdigest(), v)

    def vector_of_text(self, title: str, text: str) -> np.ndarray:
        doc = Document(id="?", title=title, text=text)
        key = _text_key(doc)
        if key not in self._vectors:
            self._vectors[key] = self.embedder.embed([dense_text(doc.element())])[0]
        return self._vectors[key]

    def refresh(self) -> HybridIndex:
        if self._index is None or self._built_version != self.store.version:
            docs = list(self.store.docs.values())
            keys = [_text_key(d) for d in docs]
            missing = [(k, d) for k, d in zip(keys, docs) if k not in self._vectors]
            if missing:
                vecs = self.embedder.embed([dense_text(d.element()) for _, d in missing])
                for (k, _), v in zip(missing, vecs):
                    self._vectors[k] = v
            dim = self.embedder.dim
            matrix = np.stack([self._vectors[k] for k in keys]) if keys else np.zeros((0, dim), dtype=np.float32)
            self._index = HybridIndex([d.element() for d in docs], self.embedder, embeddings=matrix)
            self._built_version = self.store.version
        return self._index

    def search(self, query: str, k: int) -> list[Evidence]:
        return self.refresh().search(query, k=k, per_file_cap=self.per_file_cap)

    def nearest(self, vector: np.ndarray, k: int, exclude: str = "") -> list[tuple[str, float]]:
        """The ``k`` documents with the highest cosine to ``vector`` (ties by id), for the dedup guard."""
        index = self.refresh()
        if not len(index):
            return []
        sims = index.embeddings @ vector.astype(np.float32)
        ranked = sorted(((float(s), i) for i, s in zip(index.ids, sims) if i != exclude), key=lambda x: (-x[0], x[1]))
        return [(i, s) for s, i in ranked[:k]]

    def for_store(self, store: KnowledgeStore) -> StoreIndex:
        """An index over another store (e.g. one entry removed) that reuses the cached vectors."""
        return StoreIndex(store, self.embedder, self.per_file_cap, self._vectors)

    # -- persistence -----------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """Vectors of the store's documents, in store order (so loading needs no embedding)."""
        index = self.refresh()
        with open(folder / VECTORS_FILE, "wb") as f:
            np.save(f, index.embeddings)

    @classmethod
    def load(cls, folder: Path, store: KnowledgeStore, embedder: Embedder,
             per_file_cap: int | None = None) -> StoreIndex:
        matrix = np.load(folder / VECTORS_FILE, allow_pickle=False)
        docs = list(store.docs.values())
        if matrix.shape[0] != len(docs):
            raise DataError(f"{folder / VECTORS_FILE}: {matrix.shape[0]} vectors for {len(docs)} documents")
        # ``embedder.dim`` is what the endpoint returns in this run (never a size assumed from the model's name)
        if len(docs) and matrix.shape[1] != embedder.dim:
            raise DataError(f"{folder / VECTORS_FILE}: vectors of dimension {matrix.shape[1]}, but embedder "
                            f"{embedder.name} returns {embedder.dim} in this run; rebuild the artifact")
        vectors = {_text_key(d): v for d, v in zip(docs, matrix)}
        return cls(store, embedder, per_file_cap, vectors)


def write_store(folder: Path, store: KnowledgeStore, index: StoreIndex) -> None:
    atomic_write_text(folder / STORE_FILE, store.to_json())
    index.save(folder)
