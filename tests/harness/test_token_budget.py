"""Prompt budgets in the model's own tokens: a source's characters per token and the exact window fit."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from sourcebench.harness.llm import ModelSpec
from sourcebench.harness.token_budget import (
    DEFAULT_CHARS_PER_TOKEN,
    fit_to_window,
    measure_chars_per_token,
    sample_texts,
)


def run(coro):
    return asyncio.run(coro)


async def dense_code_counter(text: str) -> int:
    """A tokenizer that spends a token on every pair of spaces (indentation), as small models do."""
    return len(text) // 4 + text.count("  ")


PROSE = [(f"p{i}", "The mayor of the town opened a new bridge over the river in spring. " * 8) for i in range(20)]
CODE = [(f"c{i}", "def f(x):\n" + "        if x:\n            return x\n" * 20) for i in range(5)]


def test_prose_keeps_four_and_dense_code_lowers_the_ratio():
    assert run(measure_chars_per_token(PROSE, dense_code_counter)) == DEFAULT_CHARS_PER_TOKEN  # never above 4
    code = run(measure_chars_per_token(CODE, dense_code_counter))
    text = CODE[0][1]
    assert code == round(len(text) / run(dense_code_counter(text)), 3) and code < 2.0


def test_the_typical_element_sets_the_ratio():
    mostly_code = CODE * 4 + PROSE[:5]  # the median element is code
    assert run(measure_chars_per_token(mostly_code, dense_code_counter)) == run(measure_chars_per_token(CODE, dense_code_counter))
    assert run(measure_chars_per_token(PROSE + CODE, dense_code_counter)) == DEFAULT_CHARS_PER_TOKEN  # one dense file


def test_no_exact_counter_keeps_the_estimate():
    async def none(text: str) -> None:
        return None

    assert run(measure_chars_per_token(CODE, none)) == DEFAULT_CHARS_PER_TOKEN
    assert run(measure_chars_per_token([("x", "short")], dense_code_counter)) == DEFAULT_CHARS_PER_TOKEN


def test_the_sample_is_deterministic_and_spread_over_the_source():
    texts = [(f"e{i:04d}", f"{i} " + "word " * 60) for i in range(1000)]
    a = sample_texts(reversed(texts), n=10)
    assert a == sample_texts(texts, n=10) and len(a) == 10
    assert a[0].startswith("0 ") and a[-1].startswith("999 ")


def _model(window, count):
    return SimpleNamespace(spec=ModelSpec(name="scripted/x", context_window=window), count_tokens=count)


def _material_prompt(budget: int):
    text = CODE[0][1] * 40  # dense code, far more than any budget below
    msgs = [{"role": "system", "content": "Read the material."}, {"role": "user", "content": text[:budget]}]
    return budget, msgs


def test_an_overflowing_prompt_is_rebuilt_with_less_material_until_it_fits():
    async def tokens_of(budget: int) -> int:
        _, msgs = _material_prompt(budget)
        return await dense_code_counter("\n".join(m["content"] for m in msgs))

    window, reply = 3000, 500
    assert run(tokens_of(8000)) + reply > window  # chars / 4 of the room would overflow
    budget = run(fit_to_window(_model(window, dense_code_counter), _material_prompt, 8000, reply))
    assert budget < 8000 and run(tokens_of(budget)) + reply + 64 <= window
    assert run(fit_to_window(_model(100_000, dense_code_counter), _material_prompt, 8000, reply)) == 8000  # fits


def test_without_an_exact_counter_or_a_window_the_first_build_stands():
    async def none(text: str) -> None:
        return None

    assert run(fit_to_window(_model(3000, none), _material_prompt, 8000, 500)) == 8000
    assert run(fit_to_window(_model(None, dense_code_counter), _material_prompt, 8000, 500)) == 8000
