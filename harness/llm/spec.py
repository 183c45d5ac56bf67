"""A model and its generation settings (``ModelSpec``), and the reasoning policy: which backends reason,
the allowance a reply cap gets for it, and how it fits a known context window."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

# the reasoning allowance's values (UNLIMITED, DEFAULT_REASONING_TOKENS) are the --reasoning-tokens option's,
# defined with it so that reading a run's configuration (harness.config -> options) never loads the model layer
from ..options import DEFAULT_REASONING_TOKENS, UNLIMITED


@dataclass(frozen=True)
class ModelSpec:
    """A model and its generation settings, as recorded in run metadata (never with a key)."""

    name: str
    role: str = "solver"
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int = 0
    base_url: str | None = None
    context_window: int | None = None
    # where the window came from ("--context-window", "server: max_model_len", ...), for run.json and
    # error messages; not part of ``settings()``
    context_window_origin: str | None = None
    # how a served model gets its schema: None, OpenAI's ``json_schema``; "json_object", llama-cpp-python's
    # server form ``{"type": "json_object", "schema": ...}`` (it answers json_schema with HTTP 500); the
    # preflight picks it when only that form works
    structured_format: str | None = None
    max_connections: int | None = None
    reasoning_effort: str | None = None
    # The reasoning allowance: tokens a reasoning backend may spend before its visible reply, added
    # to every stage's reply bound (``max_tokens`` of a call bounds the visible reply only). None: the
    # default of the effort (``DEFAULT_REASONING_TOKENS``); UNLIMITED: no output cap is sent at all.
    reasoning_tokens: int | None = None
    # Whether the backend reasons: None decides from the effort and the model family
    # (``reasoning_family``); the runner's preflight sets True when the probe reports reasoning tokens.
    reasons: bool | None = None
    # Retry policy (not part of ``settings()``: it changes how long a call is tried, not its output).
    # ``max_retries`` bounds inspect's retries (exponential backoff) so that a persistent fault ends as
    # a failed call, hence a scored failure, instead of retrying for ever; ``attempt_timeout`` abandons
    # and retries an attempt that hangs; ``timeout`` bounds one call, retries included.
    max_retries: int | None = None
    timeout: int | None = None
    attempt_timeout: int | None = None

    def settings(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base_url": self.resolved_base_url(),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "context_window": self.effective_context_window(),
            "reasoning_effort": self.reasoning_effort,
            **({"reasoning_tokens": self.reasoning_allowance(), "reasons": True} if self.is_reasoning() else {}),
            **({"structured_format": self.structured_format} if self.structured_format else {}),
        }

    def is_reasoning(self) -> bool:
        """Whether reply caps need a reasoning allowance: an effort other than 'none' is set, the
        model's family is known to reason, or the preflight saw reasoning tokens."""
        if self.reasons is not None:
            return self.reasons
        if self.reasoning_effort == "none":
            return False
        return bool(self.reasoning_effort) or reasoning_family(self.name)

    def reasoning_allowance(self) -> int:
        """Tokens added to each reply bound on a reasoning backend (UNLIMITED: send no cap)."""
        if not self.is_reasoning():
            return 0
        wanted = self.wanted_reasoning_allowance()
        window = self.effective_context_window()
        if window and wanted != UNLIMITED and wanted > window // 2:
            return window // 2  # the rest of the window for the prompt and the reply
        return wanted

    def wanted_reasoning_allowance(self) -> int:
        """The allowance asked for (``--reasoning-tokens`` or the effort's default), before it is
        fitted into a known context window: at most half of it, since a server rejects (vLLM) or
        silently clamps (llama.cpp) a cap that leaves no room for the prompt."""
        if not self.is_reasoning():
            return 0
        if self.reasoning_tokens is not None:
            return self.reasoning_tokens
        return DEFAULT_REASONING_TOKENS.get(self.reasoning_effort or "", DEFAULT_REASONING_TOKENS["medium"])

    def output_cap(self, reply_bound: int) -> int | None:
        """The ``max_tokens`` sent for a visible reply of at most ``reply_bound`` tokens: the bound
        itself on a backend that does not reason, plus the reasoning allowance on one that does (those
        count reasoning against the cap), None (no cap) with an unlimited allowance."""
        allowance = self.reasoning_allowance()
        if allowance == UNLIMITED:
            return None
        return reply_bound + allowance

    def resolved_base_url(self) -> str | None:
        """Endpoint as inspect would resolve it from the environment (for provenance and cache keys)."""
        if self.base_url:
            return self.base_url
        parts = self.name.split("/")
        if parts[0] == "openai-api" and len(parts) >= 3:
            return os.environ.get(f"{parts[1].upper().replace('-', '_')}_BASE_URL")
        if parts[0] == "openai":
            return os.environ.get("OPENAI_BASE_URL")
        if parts[0] == "vllm":
            return os.environ.get("VLLM_BASE_URL")
        return None

    def effective_context_window(self) -> int | None:
        if self.context_window:
            return self.context_window
        if self.name.startswith("local/"):
            return 8192
        return None


# Model families that reason before they reply (reasoning tokens count against the output cap).
_REASONING_FAMILY = re.compile(r"(^|[/_.-])(gpt-oss|gpt-5(?!\S*-chat)|o[134](-mini|-pro)?(?=$|[-_.])|"
                               r"deepseek-(reasoner|r1|v4)|qwq|qwen3|magistral)|thinking|reasoning|reasoner",
                               re.IGNORECASE)


def reasoning_family(name: str) -> bool:
    """Whether a model name belongs to a family known to reason (gpt-oss, gpt-5, o1/o3/o4,
    DeepSeek's reasoner, R1 and V4, QwQ, Qwen3, Magistral, or a name saying thinking/reasoning)."""
    return bool(_REASONING_FAMILY.search(name.split("/", 1)[-1] if "/" in name else name))


def window_words(spec: ModelSpec) -> str:
    window = spec.effective_context_window()
    if not window:
        return "model's context window"
    origin = f", {spec.context_window_origin}" if spec.context_window_origin else ""
    return f"{window:,}-token context window{origin}"


def parse_model_spec(name: str, role: str = "solver", **kw: Any) -> ModelSpec:
    if not name or "/" not in name:
        raise ConfigError(f"--model '{name}': expected provider/model, e.g. local/smollm2 or openai/gpt-4o-mini")
    return ModelSpec(name=name, role=role, **{k: v for k, v in kw.items() if v is not None})
