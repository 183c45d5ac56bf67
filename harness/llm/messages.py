"""Chat messages as the harness writes them (plain role/content dicts) and as inspect-ai takes them."""

from __future__ import annotations

from typing import Any

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


def norm_messages(messages: str | list[Message]) -> list[Message]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def to_inspect(messages: list[Message]) -> list[Any]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    out = []
    for m in messages:
        cls = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}[m["role"]]
        out.append(cls(content=m["content"]))
    return out
