"""``hash-384``: feature hashing of words and character trigrams (numpy only, deterministic; the tests'
embedder and the fallback of ``auto``)."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter

import numpy as np

from .base import Embedder

_WORD_RE = re.compile(r"\w+", re.UNICODE)


_NON_ALNUM_RE = re.compile(r"[\W_]+", re.UNICODE)


def _bucket(feature: str, dim: int) -> tuple[int, float]:
    """Stable (process-independent) bucket and sign of a feature string."""
    h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return h % dim, (1.0 if (h >> 63) & 1 else -1.0)


_HASH_STATE: dict[int, dict] = {}


_HASH_LOCK = threading.Lock()


class HashEmbedder(Embedder):
    """Signed feature hashing of lowercase word tokens and character trigrams (blake2b buckets).

    Words get weight ``1 + log(count)``; each trigram occurrence (over the text lowercased, with
    every run of non-alphanumeric characters collapsed to one space and a space added at both ends,
    so word boundaries show) adds ``trigram_weight``. Deterministic across processes and
    machines; needs numpy only.
    """

    _MEMO_LIMIT = 2_000_000

    def __init__(self, dim: int = 384, trigram_weight: float = 0.5, batch_size: int = 2048):
        self._dim = int(dim)
        self.name = f"hash-{self._dim}"
        self.trigram_weight = float(trigram_weight)
        self.batch_size = batch_size
        # Memos are shared by every HashEmbedder of the same dim (the ASCII table alone is 25 MB).
        state = _HASH_STATE.setdefault(self._dim, {"words": {}, "tri": {}, "ascii": None})
        self._word_memo: dict[str, int] = state["words"]
        self._tri_memo: dict[int, tuple[int, float]] = state["tri"]
        self._state = state
        self._lock = _HASH_LOCK

    @property
    def dim(self) -> int:
        return self._dim

    def _trigram_features(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bucket and sign for each trigram code (3 code points, 21 bits each, packed in a uint64).

        Pure-ASCII trigrams go through a lazily filled 2**21-entry lookup table (no sorting); others
        through ``np.unique`` and a dict memo. Both hash the same string, so the result depends only
        on the trigram.
        """
        cols = np.empty(len(codes), dtype=np.int64)
        signs = np.empty(len(codes), dtype=np.float32)
        hi = np.uint64(0x7F)
        c0, c1, c2 = codes >> np.uint64(42), (codes >> np.uint64(21)) & np.uint64(0x1FFFFF), codes & np.uint64(0x1FFFFF)
        ascii_mask = (c0 <= hi) & (c1 <= hi) & (c2 <= hi)
        if ascii_mask.any():
            if self._state["ascii"] is None:
                self._state["ascii"] = (np.full(1 << 21, -1, dtype=np.int32), np.zeros(1 << 21, dtype=np.float32))
            acols, asigns = self._state["ascii"]
            small = ((c0[ascii_mask] << np.uint64(14)) | (c1[ascii_mask] << np.uint64(7)) | c2[ascii_mask]).astype(np.int64)
            for c in np.unique(small[acols[small] < 0]).tolist():
                acols[c], asigns[c] = _bucket("t:" + chr(c >> 14) + chr((c >> 7) & 0x7F) + chr(c & 0x7F), self._dim)
            cols[ascii_mask] = acols[small]
            signs[ascii_mask] = asigns[small]
        other = ~ascii_mask
        if other.any():
            if len(self._tri_memo) > self._MEMO_LIMIT:
                self._tri_memo.clear()
            uniq, inv = np.unique(codes[other], return_inverse=True)
            ucols = np.empty(len(uniq), dtype=np.int64)
            usigns = np.empty(len(uniq), dtype=np.float32)
            memo, mask = self._tri_memo, (1 << 21) - 1
            for i, c in enumerate(uniq.tolist()):
                r = memo.get(c)
                if r is None:
                    tri = chr(c >> 42) + chr((c >> 21) & mask) + chr(c & mask)
                    r = memo[c] = _bucket("t:" + tri, self._dim)
                ucols[i], usigns[i] = r
            cols[other] = ucols[inv]
            signs[other] = usigns[inv]
        return cols, signs

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:  # the memos are shared state
            return self._embed_batch_locked(texts)

    def _embed_batch_locked(self, texts: list[str]) -> np.ndarray:
        n, dim = len(texts), self._dim
        out = np.zeros(n * dim, dtype=np.float64)
        lowered = [t.lower() for t in texts]

        # Words: per-text counts, memoised buckets (encoded as col * 2 + positive-sign bit).
        keys: list[str] = []
        counts: list[int] = []
        n_unique = np.zeros(n, dtype=np.int64)
        for r, t in enumerate(lowered):
            c = Counter(_WORD_RE.findall(t))
            keys.extend(c.keys())
            counts.extend(c.values())
            n_unique[r] = len(c)
        if keys:
            memo = self._word_memo
            if len(memo) > self._MEMO_LIMIT:
                memo.clear()
            for w in dict.fromkeys(keys):
                if w not in memo:
                    col, sign = _bucket("w:" + w, dim)
                    memo[w] = col * 2 + (sign > 0)
            enc = np.fromiter(map(memo.__getitem__, keys), dtype=np.int64, count=len(keys))
            wsign = np.where(enc & 1, 1.0, -1.0)
            weights = wsign * (1.0 + np.log(np.asarray(counts, dtype=np.float64)))
            rows = np.repeat(np.arange(n, dtype=np.int64), n_unique)
            out += np.bincount(rows * dim + (enc >> 1), weights=weights, minlength=n * dim)

        # Trigrams: vectorised over the whole batch. Texts are joined with NUL, which the
        # normalisation never produces, and trigrams containing it are dropped.
        if self.trigram_weight:
            normed = [" " + _NON_ALNUM_RE.sub(" ", t).strip() + " " for t in lowered]
            joined = "\x00".join(normed)
            cp = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
            if len(cp) >= 3:
                lengths = np.fromiter((len(s) + 1 for s in normed), dtype=np.int64, count=n)
                row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)[: len(cp)]
                codes = (cp[:-2] << np.uint64(42)) | (cp[1:-1] << np.uint64(21)) | cp[2:]
                keep = (cp[:-2] != 0) & (cp[1:-1] != 0) & (cp[2:] != 0)
                codes, trow = codes[keep], row_of[:-2][keep]
                if len(codes):
                    tcol, tsign = self._trigram_features(codes)
                    out += np.bincount(trow * dim + tcol, weights=self.trigram_weight * tsign, minlength=n * dim)
        return out.reshape(n, dim).astype(np.float32)
