"""The embedder protocol: float32 rows, L2-normalised (cosine similarity is a dot product), every input
cut to the model's limit and every request packed within its batch limits in ``Embedder.embed``."""

from __future__ import annotations

import abc
import logging
import threading

import numpy as np

from ..embed_limits import (
    EmbedStats,
    InputLimits,
    plan_batches,
)

log = logging.getLogger("sourcebench.harness.embeddings")  # one logger for the package


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation to float32; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)


class Embedder(abc.ABC):
    """Maps texts to L2-normalised float32 vectors, each input cut to ``limits`` and batched within them.

    ``embed`` = ``prepare`` (cut every text to the model's input limit, counted in ``stats``) then
    ``embed_prepared`` (requests of at most ``batch_size`` inputs, within the limits' request caps).
    An embedder without ``limits`` (the hash embedder) takes any text.
    """

    name: str = ""
    batch_size: int = 64

    @property
    @abc.abstractmethod
    def dim(self) -> int: ...

    @abc.abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch (rows need not be normalised)."""

    @property
    def limits(self) -> InputLimits | None:
        """The model's input and request limits; ``None``: no limit."""
        return None

    @property
    def stats(self) -> EmbedStats:
        """Inputs seen, cut and sent by this embedder (see ``EmbedStats``)."""
        st = self.__dict__.get("_stats")
        if st is None:
            with _STATS_LOCK:
                st = self.__dict__.setdefault("_stats", EmbedStats())
        return st

    def prepare(self, texts: list[str]) -> list[str]:
        """``texts`` with every one over the input limit cut to its longest prefix that fits.

        The first cut of an embedder is logged (one line); all are counted in ``stats``."""
        texts = list(texts)
        limits = self.limits
        stats = self.stats
        if limits is None:
            stats.add(inputs=len(texts))
            return texts
        stats.limits = stats.limits or limits.describe()
        counter, n = limits.counter, limits.max_input_tokens
        out, cut, dropped, longest = [], 0, 0, 0
        for t in texts:
            if counter.fits(t, n):
                out.append(t)
                continue
            prefix, before, after = counter.cut(t, n)
            out.append(prefix)
            if before > after:
                cut, dropped, longest = cut + 1, dropped + before - after, max(longest, before)
                if not self.__dict__.get("_cut_logged"):
                    self.__dict__["_cut_logged"] = True
                    log.warning("embedder %s: an input of %s tokens was cut to %s (limit: %s); every cut is "
                                "counted in the run's embedder stats", self.name, f"{before:,}", f"{after:,}",
                                limits.describe())
        stats.add(inputs=len(texts), cut_inputs=cut, cut_tokens=dropped, longest_cut_input=longest)
        return out

    def embed_prepared(self, texts: list[str]) -> np.ndarray:
        """Embed texts already within the input limit (``prepare``d), in requests within the batch limits."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        limits = self.limits
        # An empty text is sent as " " (one token) where the API rejects empty strings.
        counts = [max(1, c) for c in limits.counter.count_many(texts)] if limits is not None else [0] * len(texts)
        parts = []
        for a, b in plan_batches(counts, self.batch_size, limits):
            parts.append(self._embed_batch(texts[a:b]))
            self.stats.add(requests=1, sent_inputs=b - a, sent_tokens=sum(counts[a:b]))
        return l2_normalise(np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0])

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_prepared(self.prepare(texts))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


_STATS_LOCK = threading.Lock()


def dimension_changed(name: str, where: str, before: int, now: int) -> str:
    """The one-line error when an embedder's vectors change size within a run (they could not be compared)."""
    return (f"embedder {name} ({where}): returned vectors of dimension {now} after {before} earlier in this "
            f"run; one run needs one dimension (did the served model or its `dimensions` setting change?)")
