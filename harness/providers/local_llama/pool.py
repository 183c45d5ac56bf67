"""Loaded llama.cpp contexts: a per-process pool per (path, n_ctx, threads, chat format), each context
borrowed by one call for its whole generation and keeping the KV cache of its previous prompt."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import ModelUnavailableError

from .errors import LocalExtraMissingError
from .paths import DEFAULT_MODEL, DEFAULT_N_CTX, DEFAULT_SEED, SMOLLM2_GGUF
from .threads import default_instances, default_threads

_LOAD_LOCK = threading.Lock()


_ModelKey = tuple[str, int, int, str | None]  # path, n_ctx, n_threads, chat_format


LOAD_SECONDS: dict[_ModelKey, float] = {}  # how long the first context of each key took to load


@contextlib.contextmanager
def no_weight_repacking() -> Iterator[None]:
    """Load with llama.cpp's extra buffer types off (``use_extra_bufts = False``; llama-cpp-python's
    ``Llama`` has no argument for it). Those buffers repack the weights for machine-specific kernels:
    on a CPU with AMX (Sapphire Rapids) a build compiled with native flags puts SmolLM2's Q4_1 matrices
    in the AMX buffer, whose matmul segfaulted in a VM (every call of a fresh install crashed); off,
    every machine runs the same CPU kernels, which also keeps greedy outputs the same across machines."""
    import llama_cpp.llama as module

    low = module.llama_cpp
    original = low.llama_model_default_params

    def params() -> Any:
        p = original()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p

    low.llama_model_default_params = params
    try:
        yield
    finally:
        low.llama_model_default_params = original


def _new_llama(path: Path, key: _ModelKey, seed: int) -> Any:
    try:
        from llama_cpp import Llama
    except ImportError:
        raise LocalExtraMissingError(path.name if path.name != SMOLLM2_GGUF else DEFAULT_MODEL) from None
    _, n_ctx, threads, chat_format = key
    t0 = time.perf_counter()
    try:
        # one load at a time: with verbose=False llama-cpp-python points fds 1 and 2 (and sys.stdout/err)
        # at /dev/null while it loads and then restores what it saved; two loads overlapping in two
        # threads restore each other's /dev/null, and every later print of the process is lost
        with _LOAD_LOCK, no_weight_repacking():
            llm = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                seed=int(seed),
                chat_format=chat_format,  # None: the chat template embedded in the GGUF
                verbose=False,
            )
    except Exception as e:  # noqa: BLE001  (llama.cpp raises ValueError/RuntimeError/...)
        raise ModelUnavailableError(f"cannot load GGUF model {path}: {e}") from None
    if os.environ.get("SOURCEBENCH_LOCAL_GRAMMAR", "").strip().lower() != "library":
        from ..greedy_grammar import install  # same outputs, faster constrained decoding (see there)

        install(llm)
    LOAD_SECONDS.setdefault(key, time.perf_counter() - t0)
    return llm


class LlamaPool:
    """Up to ``size`` llama.cpp contexts of one model, loaded on demand; a call borrows one.

    ``borrow()`` blocks (in the worker thread) until a context is free; a context is only loaded when
    every loaded one is busy, so a sequential caller never pays for a second one.
    """

    def __init__(self, path: Path, key: _ModelKey, seed: int, size: int) -> None:
        self.path, self.key, self.seed, self.size = path, key, seed, max(1, size)
        self._free: list[Any] = []
        self._loaded: list[Any] = []
        self._loading = 0
        self._last: dict[int, str] = {}  # id(context) -> the prompt it evaluated last
        self._cond = threading.Condition()

    @property
    def loaded(self) -> int:
        return len(self._loaded)

    def borrow(self, prompt: str = "", abandoned: threading.Event | None = None) -> Any | None:
        """A free context, preferring the one whose last prompt shares the longest start with
        ``prompt`` (its evaluated KV prefix is then reused; an agent's next step usually extends its
        previous one). The outputs do not depend on which context is chosen, only the time does.

        None once ``abandoned`` is set (the caller stopped waiting: :meth:`wake` rouses it), so that
        a cancelled or interrupted call that never started is never generated."""
        with self._cond:
            while not self._free and len(self._loaded) + self._loading >= self.size:
                if abandoned is not None and abandoned.is_set():
                    return None
                self._cond.wait()
            if abandoned is not None and abandoned.is_set():
                return None
            if self._free:
                best = max(range(len(self._free)), key=lambda i: (_shared_start(self._last.get(id(self._free[i]), ""),
                                                                                 prompt), i))
                llm = self._free.pop(best)
                self._last[id(llm)] = prompt
                return llm
            self._loading += 1
        try:
            llm = _new_llama(self.path, self.key, self.seed)
        except BaseException:
            with self._cond:
                self._loading -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._loading -= 1
            self._loaded.append(llm)
            self._last[id(llm)] = prompt
        return llm

    def forget(self, llm: Any) -> None:
        """The context's state was reset: nothing of its last prompt is kept."""
        with self._cond:
            self._last[id(llm)] = ""

    def give_back(self, llm: Any) -> None:
        with self._cond:
            self._free.append(llm)
            self._cond.notify()

    def wake(self) -> None:
        """Rouse every waiting borrower, so that those whose call was abandoned give up."""
        with self._cond:
            self._cond.notify_all()

    def any(self) -> Any:
        """A loaded context for read-only use (tokenising), loading the first one if none is."""
        with self._cond:
            if self._loaded:
                return self._loaded[0]
        llm = self.borrow()
        self.give_back(llm)
        return llm


def _shared_start(a: str, b: str) -> int:
    """Length of the common start of two strings (binary search over slice comparisons, in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


_POOLS_LOCK = threading.Lock()


_POOLS: dict[tuple[_ModelKey, int], LlamaPool] = {}


def llama_pool(
    path: Path,
    *,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    instances: int | None = None,
    seed: int = DEFAULT_SEED,
    chat_format: str | None = None,
) -> LlamaPool:
    """The process-wide pool of contexts for (path, n_ctx, n_threads, chat_format, instances).

    ``seed`` only seeds the loads; every call passes its own seed.
    """
    threads = n_threads or default_threads()
    size = instances or default_instances(threads)
    key: _ModelKey = (str(path), int(n_ctx), threads, chat_format)
    with _POOLS_LOCK:
        pool = _POOLS.get((key, size))
        if pool is None:
            pool = _POOLS[(key, size)] = LlamaPool(path, key, seed, size)
        return pool
