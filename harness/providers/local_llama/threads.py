"""CPU threads per llama.cpp context and contexts per model (environment overrides, else from the CPUs)."""

from __future__ import annotations

import os

from sourcebench.harness.errors import ModelUnavailableError


def _env_count(name: str) -> int | None:
    """A positive whole number from the environment (at least 1), None when unset."""
    env = os.environ.get(name, "").strip()
    if not env:
        return None
    try:
        return max(1, int(env))
    except ValueError:
        raise ModelUnavailableError(f"{name}={env!r}: expected a positive whole number") from None


def default_threads() -> int:
    """CPU threads for llama.cpp: ``$SOURCEBENCH_LOCAL_THREADS``, else half the CPUs (at least 1).

    Not all of them: llama-cpp-python's wheels use OpenMP, whose threads spin at every barrier, so
    when anything else wants the CPU (another sample's retrieval, a second process, torch) a model
    using every core slows down by 5-20x (measured on a busy 2-core machine: generation 0.8-2.5
    tok/s with 2 threads against 14-50 tok/s with 1). Half the CPUs is also llama-cpp-python's
    own default (physical cores on hyper-threaded machines).
    """
    env = _env_count("SOURCEBENCH_LOCAL_THREADS")
    if env:
        return env
    return max(1, (os.cpu_count() or 2) // 2)


def default_instances(threads: int) -> int:
    """Contexts generating at once: ``$SOURCEBENCH_LOCAL_INSTANCES``, else CPUs // threads (at least 1).

    One context with every core is slower than one context per share of the cores: llama.cpp's
    threads meet at a barrier after every operation, and a small model's operations are too short
    to keep many threads busy (SmolLM2 on a 2-core machine: two 1-thread contexts evaluated 147 prompt
    tokens per second against 125 for one 2-thread context). Methods and test phases that
    issue calls concurrently use the extra contexts; a strictly sequential one uses a single context.
    """
    env = _env_count("SOURCEBENCH_LOCAL_INSTANCES")
    if env:
        return env
    return max(1, (os.cpu_count() or 2) // max(1, threads))
