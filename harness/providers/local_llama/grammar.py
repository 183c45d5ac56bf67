"""GBNF grammars built from JSON schemas (memoised), so a constrained reply always parses."""

from __future__ import annotations

import json
from typing import Any

_GRAMMARS: dict[str, Any] = {}


def grammar_for_schema(schema: dict[str, Any]) -> Any:
    """A ``LlamaGrammar`` for a prepared JSON schema (cached).

    llama-cpp-python's ``response_format={"type": "json_object", "schema": ...}`` silently falls back
    to "any JSON" when the schema cannot be converted; building the grammar here turns that into an
    error instead of quietly unconstrained output.
    """
    # not sort_keys: the grammar emits properties in schema order, which matters (reasoning before answer)
    key = json.dumps(schema)
    grammar = _GRAMMARS.get(key)
    if grammar is None:
        from llama_cpp import LlamaGrammar

        try:
            grammar = LlamaGrammar.from_json_schema(key, verbose=False)
        except Exception as e:  # noqa: BLE001  (the converter asserts, KeyErrors, ...)
            raise ValueError(
                f"cannot turn the response schema into a grammar: {type(e).__name__}: {e}"
            ) from None
        _GRAMMARS[key] = grammar
    return grammar
