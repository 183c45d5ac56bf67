"""The on-disk embedding cache (sqlite) and the embedder that reads through it."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..embed_limits import (
    EmbedStats,
    InputLimits,
)
from ..errors import ModelUnavailableError
from .base import Embedder


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """sqlite3 file cache of vectors keyed by (embedder name, sha256(text)), stored as float32 bytes.

    One connection per call under a process-wide lock; WAL mode and a busy timeout let several
    processes share the file.
    """

    _CHUNK = 500  # keys per SELECT ... IN (...)

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._lock, self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute(
                "CREATE TABLE IF NOT EXISTS embeddings ("
                " embedder TEXT NOT NULL, key TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL,"
                " PRIMARY KEY (embedder, key)) WITHOUT ROWID"
            )

    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(self.path, timeout=60.0)
        except sqlite3.Error as e:
            from .errors import DataError

            raise DataError(f"embedding cache {self.path}: cannot open: {e}") from None
        con.execute("PRAGMA synchronous=NORMAL")
        return con

    def get_many(self, embedder: str, keys: Iterable[str]) -> dict[str, np.ndarray]:
        keys = list(dict.fromkeys(keys))
        found: dict[str, np.ndarray] = {}
        if not keys:
            return found
        with self._lock:
            con = self._connect()
            try:
                for i in range(0, len(keys), self._CHUNK):
                    chunk = keys[i : i + self._CHUNK]
                    q = f"SELECT key, vec FROM embeddings WHERE embedder=? AND key IN ({','.join('?' * len(chunk))})"
                    for k, blob in con.execute(q, [embedder, *chunk]):
                        found[k] = np.frombuffer(blob, dtype=np.float32)
            finally:
                con.close()
        return found

    def put_many(self, embedder: str, keys: list[str], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if len(keys) != len(vectors):
            raise ValueError("keys and vectors differ in length")
        if not keys:
            return
        rows = [(embedder, k, int(v.shape[0]), v.tobytes()) for k, v in zip(keys, vectors)]
        with self._lock:
            con = self._connect()
            try:
                with con:
                    con.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)", rows)
            finally:
                con.close()

    def count(self, embedder: str | None = None) -> int:
        with self._lock:
            con = self._connect()
            try:
                if embedder is None:
                    return con.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
                return con.execute("SELECT COUNT(*) FROM embeddings WHERE embedder=?", (embedder,)).fetchone()[0]
            finally:
                con.close()


class CachedEmbedder(Embedder):
    """Wraps an embedder; only texts missing from the cache are embedded (each unique text once).

    Texts are cut to the inner embedder's limits first and keyed by the text actually embedded, so a
    cut (and any change of the cutting rule) is part of the key. ``limits`` and ``stats`` are the
    inner embedder's. ``hits``/``misses`` count requested texts (positions, duplicates included)
    found / not found in the cache at the start of each ``embed`` call.
    """

    def __init__(self, inner: Embedder, cache: EmbeddingCache):
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.batch_size = inner.batch_size
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._dim: int | None = None  # the dimension of the first vectors this embedder gave

    @property
    def dim(self) -> int:
        return self._dim if self._dim is not None else self.inner.dim

    @property
    def limits(self) -> InputLimits | None:
        return self.inner.limits

    @property
    def stats(self) -> EmbedStats:
        return self.inner.stats

    def prepare(self, texts: list[str]) -> list[str]:
        return self.inner.prepare(texts)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - embed_prepared is overridden
        return self.inner.embed_prepared(texts)

    def embed_prepared(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [text_key(t) for t in texts]
        found = self.cache.get_many(self.name, keys)
        missing: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in found:
                missing.setdefault(k, t)
        n_hit = sum(1 for k in keys if k in found)
        with self._lock:
            self.hits += n_hit
            self.misses += len(keys) - n_hit
        if missing:
            mkeys = list(missing)
            vecs = self.inner.embed_prepared([missing[k] for k in mkeys])
            self.cache.put_many(self.name, mkeys, vecs)
            found.update(zip(mkeys, vecs))
        dims = sorted({int(v.shape[0]) for v in found.values()} | ({self._dim} if self._dim is not None else set()))
        if len(dims) > 1:  # cached vectors of another size than fresh ones (or than earlier in the run)
            raise ModelUnavailableError(
                f"embedder {self.name}: vectors of dimensions {' and '.join(map(str, dims))} in one run (the "
                f"cache {self.cache.path} holds vectors of another size than the endpoint gives now, or the "
                f"endpoint changed); one run needs one dimension: use another --cache-dir or fix the endpoint")
        self._dim = dims[0]
        # Inner embedders already normalise; re-normalising would make cached and fresh vectors differ in the last bit.
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)
