"""Prompt budgets in the model's own tokens: a source's characters per token, and an exact window fit.

Methods pack source material into prompts by characters. The chars / 4 rule holds for English prose
on API models, but a small model's tokenizer cuts code and data finer: SmolLM2 makes 3.1 characters
a token on APIBench TorchHub and 1.7 on flask's ``uv.lock``, where a SourceLearn reading prompt
budgeted at chars / 4 came to 14,857 tokens against an 8,192-token window. When the provider counts
tokens exactly (local models):

* :func:`measure_chars_per_token` measures the source's typical ratio (median over a sample of its
  elements, never above 4) for a first budget;
* :func:`fit_to_window` counts the prompt actually built and rebuilds it with less material while it
  overflows, so one unusually dense element cannot overflow the window.

Other providers count nothing here (``count_tokens`` returns None): they keep 4 and the first build.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

import numpy as np

DEFAULT_CHARS_PER_TOKEN = 4.0
MIN_CHARS_PER_TOKEN = 1.0
SAMPLE_ELEMENTS = 300  # elements measured at most (evenly spaced over the source, in id order)
SAMPLE_CHARS = 4_000  # characters of each element measured
MIN_ELEMENT_CHARS = 200  # shorter texts have too few tokens for a stable ratio
TEMPLATE_TOKENS = 64  # chat-template tokens around the messages' text
FIT_TRIES = 4

Counter = Callable[[str], Awaitable[int | None]]
V = TypeVar("V")


class _Model(Protocol):  # what fit_to_window needs of a BoundLLM
    spec: Any

    async def count_tokens(self, text: str) -> int | None: ...


def sample_texts(texts: Iterable[tuple[str, str]], n: int = SAMPLE_ELEMENTS) -> list[str]:
    """Up to ``n`` texts (of at least MIN_ELEMENT_CHARS), evenly spaced in id order: deterministic."""
    pool = [t[:SAMPLE_CHARS] for _, t in sorted(texts) if len(t) >= MIN_ELEMENT_CHARS]
    if len(pool) <= n:
        return pool
    idx = np.linspace(0, len(pool) - 1, n).round().astype(int)
    return [pool[i] for i in dict.fromkeys(idx.tolist())]


async def measure_chars_per_token(texts: Iterable[tuple[str, str]], count: Counter) -> float:
    """Median characters per token over a sample of ``(id, text)`` pairs, clamped to [1, 4]; 4 when
    ``count`` (the model's exact counter, ``LLM.count_tokens``) counts nothing."""
    ratios: list[float] = []
    for text in sample_texts(texts):
        n = await count(text)
        if n is None:
            return DEFAULT_CHARS_PER_TOKEN
        if n > 0:
            ratios.append(len(text) / n)
    if not ratios:
        return DEFAULT_CHARS_PER_TOKEN
    q = float(np.median(np.array(ratios)))
    return round(min(DEFAULT_CHARS_PER_TOKEN, max(MIN_CHARS_PER_TOKEN, q)), 3)


async def fit_to_window(llm: _Model, build: Callable[[int], tuple[V, list[dict[str, str]]]], budget: int,
                        reply_tokens: int) -> V:
    """``build(budget)`` -> (value, messages); rebuilt with a smaller material budget while the messages
    and the reply overflow the window in the model's own tokens. Returns the last build's value: after
    FIT_TRIES shrinks (or with no exact counter, or no declared window) the call is left to report the
    overflow itself rather than to hide it."""
    value, messages = build(budget)
    window = llm.spec.effective_context_window()
    if not window:
        return value
    room = window - reply_tokens - TEMPLATE_TOKENS
    for _ in range(FIT_TRIES):
        n = await llm.count_tokens("\n".join(m["content"] for m in messages))
        if n is None or n <= room or budget <= 1:
            return value
        budget = max(1, int(budget * room / n * 0.95))  # material is most of the prompt: shrink in proportion
        value, messages = build(budget)
    return value
