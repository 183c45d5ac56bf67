"""``LocalLlamaAPI``: the inspect-ai ``ModelAPI`` registered as ``local``, generating with a pooled context."""

from __future__ import annotations

import importlib.util
import re
import threading
import time
from typing import Any, Literal

import anyio
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelCall,
    ModelOutput,
    ModelUsage,
    modelapi,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from sourcebench.harness.errors import ModelUnavailableError
from sourcebench.harness.schema_limits import full_schema, prepare_json_schema

from .errors import CallAbandonedError, ContextWindowExceededError, LocalExtraMissingError
from .grammar import grammar_for_schema
from .paths import DEFAULT_MAX_TOKENS, DEFAULT_N_CTX, DEFAULT_SEED, DEFAULT_TEMPERATURE, resolve_model_path
from .pool import LlamaPool, llama_pool
from .threads import default_instances, default_threads

_TEXT_CONTENT = {"text", "reasoning"}  # reasoning parts are dropped; anything else is unsupported


def to_llama_messages(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """Convert inspect chat messages to llama-cpp-python's ``{"role", "content"}`` dicts (text only).

    Tool results (there are no tool calls from this provider, but a transcript may carry some) become
    user messages. Images, audio and other media raise ``ValueError``: silently dropping them would
    make a multimodal sample look answerable by a text-only model.
    """
    out: list[dict[str, str]] = []
    for message in messages:
        if not isinstance(message.content, str):
            bad = sorted({c.type for c in message.content if c.type not in _TEXT_CONTENT})
            if bad:
                raise ValueError(f"local models accept text only; message has {', '.join(bad)} content")
        text = message.text
        if isinstance(message, ChatMessageSystem):
            out.append({"role": "system", "content": text})
        elif isinstance(message, ChatMessageUser):
            out.append({"role": "user", "content": text})
        elif isinstance(message, ChatMessageAssistant):
            out.append({"role": "assistant", "content": text})
        elif isinstance(message, ChatMessageTool):
            result = f"Error: {message.error.message}" if message.error else text
            out.append(
                {"role": "user", "content": f"[result of tool {message.function or 'call'}]\n{result}"}
            )
        else:  # pragma: no cover - inspect has no other roles today
            out.append({"role": str(getattr(message, "role", "user")), "content": text})
    return out


_CTX_ERROR = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


_STOP_REASONS: dict[str | None, Literal["stop", "max_tokens"]] = {"stop": "stop", "length": "max_tokens"}


@modelapi(name="local")
class LocalLlamaAPI(ModelAPI):
    """In-process llama.cpp model (``local/smollm2`` or ``local/<path.gguf>``)."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig | None = None,
        *,
        model_path: str | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        instances: int | None = None,
        seed: int = DEFAULT_SEED,
        chat_format: str | None = None,
        repeat_penalty: float = 1.1,
        prefix_cache: bool = True,
        context_overflow: Literal["model_length", "raise"] = "model_length",
        **model_args: Any,
    ) -> None:
        super().__init__(
            model_name=model_name, base_url=base_url, api_key=api_key, config=config or GenerateConfig()
        )
        if model_args:
            raise ModelUnavailableError(
                f"local/{model_name}: unknown model args {', '.join(sorted(model_args))} (known: model_path, "
                "n_ctx, n_threads, instances, seed, chat_format, repeat_penalty, prefix_cache, context_overflow)"
            )
        if context_overflow not in ("model_length", "raise"):
            raise ModelUnavailableError(
                f"local/{model_name}: context_overflow must be 'model_length' or 'raise'"
            )
        self.model_path = resolve_model_path(model_name, model_path)
        if importlib.util.find_spec("llama_cpp") is None:
            raise LocalExtraMissingError(model_name)
        self.n_ctx = int(n_ctx)
        self.n_threads = int(n_threads) if n_threads else default_threads()
        self.instances = int(instances) if instances else default_instances(self.n_threads)
        self.seed = int(seed)
        self.chat_format = chat_format
        self.repeat_penalty = float(repeat_penalty)
        self.prefix_cache = bool(prefix_cache)
        self.context_overflow = context_overflow

    # -- model ------------------------------------------------------------------------------------------
    def pool(self) -> LlamaPool:
        return llama_pool(
            self.model_path,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            instances=self.instances,
            seed=self.seed,
            chat_format=self.chat_format,
        )

    def llama(self) -> Any:
        """A loaded context for read-only use (tokenising); generation borrows one from :meth:`pool`."""
        return self.pool().any()

    # -- ModelAPI ---------------------------------------------------------------------------------------
    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> tuple[ModelOutput | Exception, ModelCall]:
        if tools and tool_choice != "none":
            raise NotImplementedError(f"local/{self.model_name} does not support tool calling")
        messages = to_llama_messages(input)
        request: dict[str, Any] = {
            "messages": messages,
            "max_tokens": config.max_tokens if config.max_tokens is not None else DEFAULT_MAX_TOKENS,
            "temperature": config.temperature if config.temperature is not None else DEFAULT_TEMPERATURE,
            "seed": config.seed if config.seed is not None else self.seed,
            "repeat_penalty": self.repeat_penalty,
        }
        if config.top_p is not None:
            request["top_p"] = config.top_p
        if config.top_k is not None:
            request["top_k"] = config.top_k
        if config.stop_seqs:
            request["stop"] = list(config.stop_seqs)
        if config.frequency_penalty is not None:
            request["frequency_penalty"] = config.frequency_penalty
        if config.presence_penalty is not None:
            request["presence_penalty"] = config.presence_penalty
        if config.logit_bias:
            request["logit_bias"] = dict(config.logit_bias)
        schema: dict[str, Any] | None = None
        if config.response_schema is not None:

            schema = prepare_json_schema(full_schema(config.response_schema.json_schema.model_dump(exclude_none=True)))
            request["response_format"] = {"type": "json_object", "schema": schema}

        pool = self.pool()
        await anyio.to_thread.run_sync(pool.any)  # load (and fail on a bad file) before the grammar work
        kwargs = dict(request)
        if schema is not None:
            # the same constraint llama-cpp would derive from response_format, minus its silent fallback
            kwargs.pop("response_format")
            kwargs["grammar"] = grammar_for_schema(schema)

        affinity = "\x00".join(f"{m['role']}\x01{m.get('content') or ''}" for m in messages) if self.prefix_cache else ""

        abandoned = threading.Event()

        def run() -> tuple[dict[str, Any], float]:
            llm = pool.borrow(affinity, abandoned)  # this context is ours until the generation ends
            if llm is None:
                raise CallAbandonedError  # nobody awaits this reply any more: do not generate it
            try:
                if not self.prefix_cache:
                    llm.reset()  # evaluate the whole prompt
                t0 = time.perf_counter()
                response = llm.create_chat_completion(**kwargs)
                return response, time.perf_counter() - t0
            except BaseException:
                llm.reset()  # a failed evaluation leaves no half-written state for the next call to reuse
                pool.forget(llm)
                raise
            finally:
                pool.give_back(llm)

        try:
            # abandon_on_cancel: an attempt timeout, cancelled sample or interrupted run returns at
            # once. A generation already under way finishes in its thread and is discarded; one still
            # waiting for a context is dropped (after Ctrl-C or SIGTERM the process would otherwise
            # generate every queued call, one after another, before it could exit)
            try:
                response, seconds = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
            except BaseException:  # cancelled (or failed): a thread still waiting for a context gives up
                abandoned.set()
                pool.wake()
                raise
        except ValueError as e:
            m = _CTX_ERROR.search(str(e))
            if not m:
                raise
            overflow = ContextWindowExceededError(int(m.group(1)), int(m.group(2)))
            if self.context_overflow == "raise":
                raise overflow from None
            output = ModelOutput(
                model=self.model_name,
                choices=[
                    ChatCompletionChoice(
                        message=ChatMessageAssistant(content="", model=self.model_name, source="generate"),
                        stop_reason="model_length",
                    )
                ],
                usage=ModelUsage(
                    input_tokens=overflow.prompt_tokens, output_tokens=0, total_tokens=overflow.prompt_tokens
                ),
                error=str(overflow),
            )
            return output, ModelCall.create(request=request, response={"error": str(overflow)}, time=0.0)

        choice = response["choices"][0]
        text = choice["message"].get("content") or ""
        usage = response.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens", 0))
        completion_tokens = int(usage.get("completion_tokens", 0))
        stop_reason: Literal["stop", "max_tokens", "model_length", "unknown"] = _STOP_REASONS.get(
            choice.get("finish_reason"), "unknown"
        )
        if stop_reason == "max_tokens" and prompt_tokens + completion_tokens >= self.n_ctx:
            stop_reason = "model_length"  # llama-cpp cut max_tokens down to what the window had left
        output = ModelOutput(
            model=self.model_name,
            choices=[
                ChatCompletionChoice(
                    message=ChatMessageAssistant(content=text, model=self.model_name, source="generate"),
                    stop_reason=stop_reason,
                )
            ],
            usage=ModelUsage(
                input_tokens=prompt_tokens,
                output_tokens=completion_tokens,
                total_tokens=prompt_tokens + completion_tokens,
            ),
        )
        return output, ModelCall.create(request=request, response=response, time=seconds)

    def max_tokens(self) -> int | None:
        return DEFAULT_MAX_TOKENS

    def max_connections(self) -> int:
        return self.instances

    exact_token_count = True  # count_text_tokens is the model's own tokenizer, not an estimate

    def should_retry(self, ex: Exception) -> bool:
        return False  # local failures (bad schema, missing file, overflow) are not transient

    def canonical_name(self) -> str:
        return self.model_name

    async def count_text_tokens(self, text: str) -> int:
        """Exact token count with the model's own tokenizer (inspect's default needs tiktoken data);
        methods that fill a small window check their fit with it (chars / 4 undercounts SmolLM2 by up
        to ~40 % on ids and names)."""
        return len(await self.tokenize(text))

    async def tokenize(self, text: str) -> list[int]:
        llm = await anyio.to_thread.run_sync(self.llama)
        return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))
