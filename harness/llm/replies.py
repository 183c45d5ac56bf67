"""What a call returns (``CallResult``, ``StructuredResult``) and how a reply is read: structured replies
parsed against their schema, and whether the output cap rather than the model ended a reply."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)


@dataclass
class CallResult:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0  # visible output (reasoning tokens apart)
    cached: bool = False
    failed: bool = False
    error: str = ""
    stop_reason: str = ""
    reasoning_tokens: int = 0
    cap: int | None = None  # the max_tokens sent
    overflow: bool = False  # the server refused the prompt and cap as over its context window


@dataclass
class StructuredResult:
    value: BaseModel | None
    text: str
    failed: bool = False
    error: str = ""
    attempts: int = 1


def cut_by_cap(res: CallResult, bound: int, schema: type[BaseModel] | None) -> bool:
    """Whether the output cap, not the model, ended this reply before it was usable: finish reason
    ``length`` with an empty reply, a structured reply that does not parse, or a plain reply shorter
    than its bound because reasoning took the budget. A plain reply the bound itself cut is a reply
    (the bound is the stage's choice)."""
    if res.stop_reason != "max_tokens":
        return False
    if not res.text.strip():
        return True
    if schema is not None:
        try:
            validate(schema, res.text)
            return False
        except ValidationError:
            return True
    return res.reasoning_tokens > 0 and res.output_tokens < bound


def validate(schema: type[T], text: str) -> T:
    """Parse a structured reply. JSON with raw control characters inside strings (a literal newline
    in a long "reasoning", which llama.cpp's schema grammar lets through) is read as such, since its
    meaning is unambiguous; anything else invalid raises the original validation error."""
    body = _strip_fences(text)
    try:
        return schema.model_validate_json(body)
    except ValidationError as e:
        if not any(err.get("type") == "json_invalid" for err in e.errors()):
            raise
        try:
            obj = json.loads(body, strict=False)
        except ValueError:
            raise e from None
        return schema.model_validate(obj)


def _strip_fences(text: str) -> str:
    t = text.strip()
    if t.startswith("```"):
        t = t.split("\n", 1)[1] if "\n" in t else t
        if t.rstrip().endswith("```"):
            t = t.rstrip()[:-3]
    return t.strip()
