"""A deterministic scripted model for exact unit tests and offline end-to-end runs.

``scripted/extractive`` answers with the context line that shares the most words with the
question (a cheap reader that makes real retrieval differences visible in scores);
``scripted/<anything>`` accepts a Python hook (``set_script``) so tests can dictate replies.
``scripted/...noisy...`` answers "I don't know." instead for about half of the (prompt, seed) pairs: a
sampling backend whose replies change with the seed, for repeated answers (``--epochs``).
Structured calls get a minimal instance of the requested JSON schema, with strings taken from the
prompt, so every schema-constrained code path runs. Usage is always set, so inspect never reaches
for a tokenizer download.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from inspect_ai.model import GenerateConfig, ModelAPI, ModelOutput, ModelUsage, modelapi

ScriptFn = Callable[[list[dict[str, str]], dict[str, Any] | None], str | None]
_SCRIPT: ScriptFn | None = None
CALLS: list[dict[str, Any]] = []  # every request seen, for assertions in tests


def set_script(fn: ScriptFn | None) -> None:
    """Install a reply function ``fn(messages, json_schema) -> str | None`` (None = default policy)."""
    global _SCRIPT
    _SCRIPT = fn


def reset() -> None:
    set_script(None)
    CALLS.clear()


_WORD = re.compile(r"[a-z0-9]{2,}")
_STOP = {"the", "of", "is", "are", "what", "who", "which", "and", "to", "in", "a", "an", "for", "that", "this",
         "with", "how", "does", "do", "on", "be", "by", "it", "as", "or", "from", "answer", "question"}


def _words(s: str) -> set[str]:
    return {w for w in _WORD.findall(s.lower()) if w not in _STOP}


def extractive_reply(prompt: str) -> str:
    """Pick the context line closest to the question (ties: first line)."""
    lines = [ln.strip() for ln in prompt.splitlines() if ln.strip()]
    qline = ""
    for ln in reversed(lines):
        if ln.lower().startswith(("question:", "instruction:", "task:")):
            qline = ln
            break
    if not qline and lines:
        qline = lines[-1]
    q = _words(qline)
    best, best_score = "", 0
    for ln in lines:
        if ln == qline or len(ln) > 600 or ln.startswith("["):
            continue
        s = len(q & _words(ln))
        if s > best_score:
            best, best_score = ln, s
    if not best:
        return "I don't know."
    # "The friends of X are A, B." -> "A, B": answer with the value part of a copular sentence
    m = re.match(r"^.*? (?:is|are) (.+?)\.?$", best)
    return m.group(1) if m else best


def _seeded_bool(prompt: str) -> bool:
    return hashlib.sha256(prompt.encode()).digest()[0] % 2 == 0


def instance_from_schema(schema: dict[str, Any], prompt: str, defs: dict[str, Any] | None = None) -> Any:
    """A minimal valid value for a JSON schema (objects, arrays, enums, refs, anyOf)."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return instance_from_schema(defs[schema["$ref"].split("/")[-1]], prompt, defs)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if "anyOf" in schema:
        non_null = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return instance_from_schema(non_null[0] if non_null else schema["anyOf"][0], prompt, defs)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "null")
    if t == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: instance_from_schema(v, prompt, defs) for k, v in props.items()}
    if t == "array":
        n = max(1, int(schema.get("minItems", 1)))
        return [instance_from_schema(schema.get("items", {"type": "string"}), prompt, defs) for _ in range(n)]
    if t == "boolean":
        return _seeded_bool(prompt)
    if t == "integer":
        return int(schema.get("minimum", 1))
    if t == "number":
        return float(schema.get("minimum", 0.5))
    if t == "null":
        return None
    return extractive_reply(prompt)[:200] or "text"


_RSN = re.compile(r"(?:^|[-_])rsn(\d+)(?:$|[-_])")


def _reasoning_tokens(model_name: str) -> int:
    """``scripted/...rsn<N>...`` reasons N tokens before every reply (for reasoning-budget tests)."""
    m = _RSN.search(model_name)
    return int(m.group(1)) if m else 0


def _reasoned(model: str, text: str, inp: int, reasoning: int, cap: int | None) -> ModelOutput:
    """What a reasoning API returns: ``reasoning`` tokens first, then as much of ``text`` as the cap
    leaves (4 characters a token); cut short, the finish reason is ``max_tokens`` (OpenAI: length)."""
    from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant

    visible_tokens = max(1, len(text) // 4)
    spent = reasoning if cap is None else min(reasoning, cap)
    room = None if cap is None else cap - spent
    stop = "stop"
    if room is not None and room < visible_tokens:
        text, visible_tokens, stop = text[: room * 4], room, "max_tokens"
    out_tokens = spent + visible_tokens
    output = ModelOutput(model=model, choices=[ChatCompletionChoice(
        message=ChatMessageAssistant(content=text, model=model, source="generate"), stop_reason=stop)])
    output.usage = ModelUsage(input_tokens=inp, output_tokens=out_tokens, total_tokens=inp + out_tokens,
                              reasoning_tokens=spent)
    return output


@modelapi(name="scripted")
class ScriptedModel(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), **model_args: Any) -> None:
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)

    async def generate(self, input, tools, tool_choice, config):  # type: ignore[override]
        import asyncio
        import json
        import os

        delay = float(os.environ.get("SOURCEBENCH_SCRIPTED_DELAY", "0") or 0)
        if delay:  # lets tests interrupt a run midway
            await asyncio.sleep(delay)

        msgs = [{"role": m.role, "content": m.text} for m in input]
        prompt = "\n".join(m["content"] for m in msgs)
        schema = config.response_schema.json_schema.model_dump(exclude_none=True) if config.response_schema else None
        CALLS.append({"messages": msgs, "schema": schema, "model": self.model_name,
                      "reasoning_effort": config.reasoning_effort, "max_tokens": config.max_tokens,
                      "seed": config.seed, "temperature": config.temperature})
        text = _SCRIPT(msgs, schema) if _SCRIPT else None
        if text is None:
            if schema is not None:
                text = json.dumps(instance_from_schema(schema, prompt))
            else:
                text = extractive_reply(prompt)
        if "noisy" in self.model_name and schema is None and _seeded_bool(f"{config.seed}\0{prompt}"):
            text = "I don't know."
        if self.model_name == "fail":
            raise RuntimeError("scripted failure")
        inp = max(1, len(prompt) // 4)
        reasoning = _reasoning_tokens(self.model_name)
        if reasoning:  # a reasoning backend: reasoning is spent first and counts against the cap
            return _reasoned(self.model_name, text, inp, reasoning, config.max_tokens)
        out = max(1, len(text) // 4)
        output = ModelOutput.from_content(model=self.model_name, content=text)
        output.usage = ModelUsage(input_tokens=inp, output_tokens=out, total_tokens=inp + out)
        return output

    def max_connections(self) -> int:
        return 8
