"""The model client: ``LLM`` makes every call (cache, ledger, budget, connection gate, retries, output
caps fitted to the window) and ``BoundLLM`` binds it to a method and phase."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import threading
import time
from typing import Any

from pydantic import BaseModel, ValidationError

from .. import callscope, stopping
from ..errors import ModelUnavailableError
from ..io import redact_secrets
from ..schema_limits import json_schema_model, schema_json, with_bound_words, with_choices, within_limits
from ..token_budget import DEFAULT_CHARS_PER_TOKEN, TEMPLATE_TOKENS
from .cache import CallCache
from .failures import (
    CONTEXT_ERROR,
    NOT_AN_ANSWER,
    chain,
    fmt_count,
    init_error,
    is_connection_error,
    is_malformed_reply,
    not_an_answer,
    prompt_tokens_told,
    root_error,
    short_error,
)
from .ledger import UsageLedger
from .messages import Message, norm_messages, to_inspect
from .redaction import guard_inspect_logging, mask_provider
from .replies import CallResult, StructuredResult, T, cut_by_cap, validate
from .spec import ModelSpec, window_words

MALFORMED_RETRY_WAIT_S = 1.0  # first wait before re-asking after an unparsable reply (doubles, capped)


_OPENAI_CLIENT_PROVIDERS = {"openai", "openai-api"}


_SERVED_PROVIDERS = {"openai-api", "vllm", "ollama", "llama-cpp-python", "sglang"}


# How a prompt meets a known context window (a provider that counts tokens exactly is counted instead):
# 1. it is refused without a call only when over the window at chars / 4 (REFUSE_CHARS_PER_TOKEN), the
#    ratio methods budget their prompts with, so whatever a method fitted is sent;
# 2. a reasoning allowance is fitted into the room the prompt leaves, estimated at chars / 3
#    (ROOM_CHARS_PER_TOKEN): more tokens than methods assume (SmolLM2 makes about 2.8 characters a token
#    on code and 3.1 on APIBench, English prose on API models 4), so the cap leaves the prompt its room on
#    most tokenizers; never below the reply bound, which the method fitted;
# 3. the server decides the rest: when it rejects the prompt and a cap that holds an allowance (vLLM
#    refuses prompt + max_tokens over max_model_len; dense code makes 2.3 characters a cl100k token), the
#    call is asked once more with the room the server's own prompt count leaves, the reply bound at least;
#    a prompt over the window in the server's tokens is a context_overflow failure naming the window
#    (never an answer, never cached).
REFUSE_CHARS_PER_TOKEN = DEFAULT_CHARS_PER_TOKEN


ROOM_CHARS_PER_TOKEN = 3.0


class LLM:
    """A model role (solver or judge) with cache and ledger. Bind method/phase with ``.bind``."""

    def __init__(self, spec: ModelSpec, cache: CallCache | None, ledger: UsageLedger, budget: Any = None,
                 gate: Any = None):
        self.spec = spec
        self.cache = cache
        self.ledger = ledger
        self.budget = budget  # harness.budget.Budget (--max-cost) or None
        self.gate = gate  # harness.budget.CallGate (--max-connections, the run's calls in flight) or None
        self._model: Any = None
        self._model_lock = threading.Lock()

    # -- inspect model -------------------------------------------------------------------------
    def inspect_model(self) -> Any:
        with self._model_lock:
            if self._model is None:
                from inspect_ai.model import get_model

                import sourcebench.harness.providers._registry  # noqa: F401  (registers local/ and scripted/)

                kwargs: dict[str, Any] = {}
                if self.spec.base_url:
                    kwargs["base_url"] = self.spec.base_url
                if self.spec.name.split("/", 1)[0] in _OPENAI_CLIENT_PROVIDERS:
                    # inspect retries (with backoff) what can change; the OpenAI client's own 2 retries
                    # under each of inspect's attempts multiplied the tries of every failed request
                    kwargs["max_retries"] = 0
                try:
                    # not memoized: a provider reads its endpoint and key from the environment when it is
                    # made, and inspect's memo (keyed by name, not by those) would hand a later run in the
                    # same process the first run's server
                    model = get_model(self.spec.name, memoize=False, **kwargs)
                except Exception as e:  # unknown provider, missing key or package
                    raise ModelUnavailableError(f"model '{self.spec.name}': {init_error(e, self.spec.name)}") from None
                mask_provider(model)
                self._model = model
            return self._model

    def _served(self) -> bool:
        """Whether the model is served over an OpenAI-compatible endpoint whose inspect provider drops
        the schema's bounds (``OpenAICompatibleAPI.schema_exclude_fields``, and ``maxItems``, which
        inspect's schema type lacks)."""
        return self.spec.name.split("/", 1)[0] in _SERVED_PROVIDERS

    async def _room(self, msgs: list[Message], bound: int) -> int | None:
        """Output tokens a known window leaves after the prompt (at least ``bound``; None: no window):
        counted exactly where the provider counts, else estimated at ROOM_CHARS_PER_TOKEN."""
        window = self.spec.effective_context_window()
        if not window:
            return None
        text = "\n".join(m["content"] for m in msgs)
        n = await self.count_tokens(text)
        return max(bound, window - TEMPLATE_TOKENS - (n if n is not None else int(len(text) / ROOM_CHARS_PER_TOKEN)))

    def _counts_exactly(self) -> bool:
        return bool(getattr(getattr(self.inspect_model(), "api", None), "exact_token_count", False))

    async def count_tokens(self, text: str) -> int | None:
        """The model's own token count of ``text`` when its provider tokenizes exactly (local
        models declare ``exact_token_count``); None otherwise, and callers keep the chars / 4
        estimate. Counting makes no model call and is not cached or billed."""
        api = getattr(self.inspect_model(), "api", None)
        if api is None or not getattr(api, "exact_token_count", False):
            return None
        return int(await api.count_text_tokens(text))

    def cache_key(self, messages: list[Message], max_tokens: int | None, temperature: float,
                  schema: dict | None) -> str:
        payload = {
            "model": self.spec.name,
            "base_url": self.spec.resolved_base_url(),
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": self._seed(),
            "reasoning_effort": self.spec.reasoning_effort,
            "schema": schema,
            **({"structured_format": self.spec.structured_format} if schema and self.spec.structured_format else {}),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def _seed(self) -> int:
        """The seed sent and keyed: the solver's changes with the epoch (``callscope.epoch_seed``), so
        that each repeated answer is its own sample and cache entry; the judge's never does."""
        return callscope.epoch_seed(self.spec.seed) if self.spec.role == "solver" else self.spec.seed

    def bind(self, method: str, phase: str) -> BoundLLM:
        return BoundLLM(self, method, phase)

    async def generate(
        self,
        messages: str | list[Message],
        *,
        method: str,
        phase: str,
        stage: str = "",
        max_tokens: int | None = None,
        temperature: float | None = None,
        schema: type[BaseModel] | None = None,
        choices: dict[str, list[str]] | None = None,
        max_retries: int | None = None,
        timeout: int | None = None,
        attempt_timeout: int | None = None,
        _counted: bool = False,
    ) -> CallResult:
        """One call whose visible reply is bounded by ``max_tokens`` (the spec's default when None).

        On a reasoning backend the cap sent is that bound plus the reasoning allowance
        (``ModelSpec.output_cap``). A reply the cap cut short (finish reason ``length``: empty, an
        unparsable structured reply, or a text cut before its bound because reasoning took the
        budget) is asked once more with twice the cap; cut again, it is an ``output_cap`` failure
        that names the numbers, never an invalid-JSON one. ``max_retries``/``timeout``/
        ``attempt_timeout`` override the spec's retry policy (the preflight probe uses a short one)."""
        stopping.check()  # a SIGTERM whose KeyboardInterrupt was swallowed stops the run here
        if not _counted:
            self.ledger.count_request(method, phase, stage)
        msgs = norm_messages(messages)
        bound = max_tokens or self.spec.max_tokens
        cap = self.spec.output_cap(bound)
        room = None
        if cap and cap > bound:  # a cap with a reasoning allowance: at most what the prompt leaves of a known window
            room = await self._room(msgs, bound)
            cap = min(cap, room) if room else cap
        temp = self.spec.temperature if temperature is None else temperature
        portable = self.spec.name.startswith("openai/")  # OpenAI's own API: its strict-mode subset
        json_schema = schema_json(schema, portable) if schema is not None else None
        if json_schema is not None and self._served():
            json_schema = with_bound_words(json_schema)
        if json_schema is not None and choices:
            # id sets past OpenAI's strict-mode limits become plain strings (every caller checks the ids)
            json_schema = within_limits(with_choices(json_schema, choices), fields=choices)
        call = functools.partial(self._call_once, msgs, temp=temp, json_schema=json_schema, schema=schema,
                                 method=method, phase=phase, stage=stage, max_retries=max_retries,
                                 timeout=timeout, attempt_timeout=attempt_timeout)
        fitted = bool(room) and cap > bound  # an allowance fitted to an estimated room: the server may reject it
        res = await call(cap, defer_overflow=fitted)
        if res.failed and res.overflow and fitted:  # the server's own prompt count decides the cap
            told = prompt_tokens_told(res.error)
            smaller = (self.spec.effective_context_window() or 0) - told if told is not None else bound
            if not bound <= smaller < cap:  # the prompt and its reply bound do not fit: no smaller cap helps
                self.ledger.add_failure(method, phase, stage, res.error)
                return res
            cap = room = smaller
            res = await call(cap)
        if res.failed or not cut_by_cap(res, bound, schema):
            return res
        first = res
        room = room or (await self._room(msgs, bound) if cap else None)
        again = min(2 * cap, max(cap, room)) if cap and room else 2 * cap if cap else None
        if again == cap:  # the window leaves no larger cap to try
            err = (f"output_cap: output cap {fmt_count(cap)} spent: {fmt_count(res.reasoning_tokens)} reasoning tokens, "
                   f"{fmt_count(res.output_tokens)} visible; the {window_words(self.spec)} leaves no larger cap "
                   f"(reply bound {fmt_count(bound)})")
            self.ledger.add_failure(method, phase, stage, err)
            return CallResult(res.text, res.input_tokens, res.output_tokens, cached=res.cached, failed=True,
                              error=err, stop_reason=res.stop_reason, reasoning_tokens=res.reasoning_tokens, cap=cap)
        res = await call(again)
        if res.failed or not cut_by_cap(res, bound, schema):
            return res
        hint = ("raise --reasoning-tokens" if first.reasoning_tokens or res.reasoning_tokens else
                "no reasoning tokens: the reply itself ran past its bound")
        err = (f"output_cap: output cap {fmt_count(first.cap)} spent: {fmt_count(first.reasoning_tokens)} reasoning tokens, "
               f"{fmt_count(first.output_tokens)} visible; retried with {fmt_count(res.cap)}: {fmt_count(res.reasoning_tokens)} "
               f"reasoning, {fmt_count(res.output_tokens)} visible (reply bound {fmt_count(bound)}; {hint})")
        self.ledger.add_failure(method, phase, stage, err)
        return CallResult(res.text, res.input_tokens, res.output_tokens, cached=res.cached, failed=True, error=err,
                          stop_reason=res.stop_reason, reasoning_tokens=res.reasoning_tokens, cap=res.cap)

    async def _call_once(self, msgs: list[Message], cap: int | None, **kw: Any) -> CallResult:
        """``_call_uncoalesced``, but a call whose twin (same cache key) is in flight in this run waits for
        it and is answered from the cache: cells learning at once never pay twice for the same call."""
        if self.gate is None or self.cache is None:
            return await self._call_uncoalesced(msgs, cap, **kw)
        async with self.gate.single_flight(self.cache_key(msgs, cap, kw["temp"], kw["json_schema"])):
            return await self._call_uncoalesced(msgs, cap, **kw)

    async def _call_uncoalesced(self, msgs: list[Message], cap: int | None, *, temp: float, json_schema: dict | None,
                         schema: type[BaseModel] | None, method: str, phase: str, stage: str,
                         max_retries: int | None, timeout: int | None, attempt_timeout: int | None,
                         defer_overflow: bool = False) -> CallResult:
        """One request with output cap ``cap`` (None: none sent), answered from the cache when it can.
        With ``defer_overflow`` a server's context rejection is counted as a failed call but left to the
        caller to report (it may ask again with a smaller cap)."""
        key = self.cache_key(msgs, cap, temp, json_schema)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None and hit.get("stop_reason") not in NOT_AN_ANSWER:  # an error is no answer
                reasoning = int(hit.get("reasoning_tokens") or 0)
                self.ledger.add(method, phase, stage, "cached", hit["input_tokens"], hit["output_tokens"], 0.0,
                                reasoning)
                return CallResult(hit["text"], hit["input_tokens"], hit["output_tokens"], cached=True,
                                  stop_reason=hit.get("stop_reason", ""), reasoning_tokens=reasoning, cap=cap)
        window = self.spec.effective_context_window()
        if window and not self._counts_exactly():  # an exact provider reports an overflow itself
            est = int(sum(len(m["content"]) for m in msgs) / REFUSE_CHARS_PER_TOKEN)
            if est >= window:  # over: do not spend a call
                err = f"context_overflow: prompt of ~{est:,} tokens exceeds the {window_words(self.spec)}"
                self.ledger.add_failure(method, phase, stage, err)
                self.ledger.add(method, phase, stage, "failed", 0, 0, 0.0)
                return CallResult("", failed=True, error=err, cap=cap)
        booked = 0.0
        if self.budget is not None:  # --max-cost: stop before a live call would pass it
            bound = max(0, cap - max(0, self.spec.reasoning_allowance())) if cap else 0  # the visible reply bound
            booked = self.budget.reserve(sum(len(m["content"]) for m in msgs) // 4, bound)
        from inspect_ai.model import GenerateConfig, ResponseSchema

        cfg: dict[str, Any] = {"max_tokens": cap, "temperature": temp, "seed": self._seed()}
        if self.spec.reasoning_effort:
            cfg["reasoning_effort"] = self.spec.reasoning_effort
        if self.spec.max_connections:
            cfg["max_connections"] = self.spec.max_connections
        max_retries = self.spec.max_retries if max_retries is None else max_retries
        timeout = self.spec.timeout if timeout is None else timeout
        attempt_timeout = self.spec.attempt_timeout if attempt_timeout is None else attempt_timeout
        if max_retries is not None:
            cfg["max_retries"] = max_retries
        if timeout is not None:
            cfg["timeout"] = timeout
        if attempt_timeout is not None:
            cfg["attempt_timeout"] = attempt_timeout
        if schema is not None and json_schema is not None:
            cfg["response_schema"] = ResponseSchema(name=schema.__name__[:64], json_schema=json_schema_model(json_schema),
                                                    strict=True)
            if self._served():  # inspect drops maxItems and maxLength: the schema as built, in the request body
                cfg["extra_body"] = {"response_format": {"type": "json_object", "schema": json_schema}
                                     if self.spec.structured_format == "json_object" else
                                     {"type": "json_schema", "json_schema": {
                                         "name": schema.__name__[:64], "schema": json_schema, "strict": True}}}
        model = self.inspect_model()
        guard_inspect_logging()
        t0 = time.perf_counter()
        try:
            if self.gate is None:
                out = await self._generate_retrying_malformed(model, msgs, GenerateConfig(**cfg), max_retries)
            else:  # one slot of the run's connection budget for the call, its retries included
                async with self.gate.slot(self.ledger):
                    out = await self._generate_retrying_malformed(model, msgs, GenerateConfig(**cfg), max_retries)
        except asyncio.CancelledError:  # the booking is released below
            raise
        except Exception as e:
            e = root_error(e)
            if is_connection_error(e):
                where = self.spec.resolved_base_url() or self.spec.name
                cause = [x for x in chain(e)][-1]
                raise ModelUnavailableError(f"model endpoint {where} is unreachable ({type(cause).__name__}: "
                                            f"{redact_secrets(str(cause)[:120], bearer=True)})") from None
            err = short_error(e)
            overflow = bool(CONTEXT_ERROR.search(err))
            if overflow:  # vLLM's 400 has no code for inspect to read
                err = f"context_overflow: the prompt and its cap do not fit the {window_words(self.spec)} ({err})"
            if not (overflow and defer_overflow):
                self.ledger.add_failure(method, phase, stage, err)
            self.ledger.add(method, phase, stage, "failed", 0, 0, time.perf_counter() - t0)
            return CallResult("", failed=True, error=err, cap=cap, overflow=overflow)
        finally:
            if self.budget is not None and booked:  # the booking ends here; a reply is charged below,
                self.budget.release(booked)  # with no await in between
                booked = 0.0
        secs = time.perf_counter() - t0
        text = redact_secrets(out.completion or "")  # as the cache will hold it: a resumed run sees the same
        usage = out.usage
        inp = int(usage.input_tokens) if usage else sum(len(m["content"]) for m in msgs) // 4
        reasoning = int(getattr(usage, "reasoning_tokens", None) or 0) if usage else 0
        # providers count reasoning inside output tokens (OpenAI's completion/output tokens): keep them apart
        outp = max(0, int(usage.output_tokens) - reasoning) if usage else len(text) // 4
        stop = str(out.stop_reason or "")
        err = not_an_answer(self.spec, out, stop, text, inp if usage else None,
                             (outp + reasoning) if usage else None, cap)
        if err:  # never cached: the same request at a larger window, or later, is asked again
            overflow = stop == "model_length"  # the server refused the request (a cut reply is not this)
            if not (overflow and defer_overflow):
                self.ledger.add_failure(method, phase, stage, err)
            self.ledger.add(method, phase, stage, "failed", inp, 0, secs, reasoning)
            return CallResult("", failed=True, error=err, reasoning_tokens=reasoning, cap=cap, overflow=overflow)
        # cached before counted: a stop (KeyboardInterrupt) between the two leaves a completed call
        # uncounted, which the resumed run replays from the cache, never a counted call it must pay again
        if self.cache is not None:
            self.cache.put(key, {"text": text, "input_tokens": inp, "output_tokens": outp, "stop_reason": stop,
                                 **({"reasoning_tokens": reasoning} if reasoning else {})})
        self.ledger.add(method, phase, stage, "live", inp, outp, secs, reasoning)
        if self.budget is not None:
            self.budget.charge(inp, outp, reasoning)
        return CallResult(text, inp, outp, cached=False, stop_reason=stop, reasoning_tokens=reasoning, cap=cap)

    async def _generate_retrying_malformed(self, model: Any, msgs: list[Message], config: Any,
                                           max_retries: int | None) -> Any:
        """``model.generate``, asked again (backoff 1 s, 2 s, ...) when the reply cannot be parsed.

        inspect retries HTTP 429/5xx, timeouts and dropped connections itself, but a reply with an
        invalid JSON body raises at once; such a reply is a transient server fault, so it gets the
        same bounded number of retries (``max_retries``, default 5) before the call fails.
        """
        tries = 1 + (5 if max_retries is None else max_retries)
        for attempt in range(tries):
            try:
                return await model.generate(to_inspect(msgs), config=config)
            except Exception as e:
                if attempt + 1 >= tries or not is_malformed_reply(root_error(e)):
                    raise
            await asyncio.sleep(min(30.0, MALFORMED_RETRY_WAIT_S * 2**attempt))
        raise AssertionError("unreachable")

    async def structured(
        self,
        messages: str | list[Message],
        schema: type[T],
        *,
        method: str,
        phase: str,
        stage: str = "",
        max_tokens: int | None = None,
        choices: dict[str, list[str]] | None = None,
        max_retries: int | None = None,
        timeout: int | None = None,
    ) -> StructuredResult:
        """A schema-constrained call, validated with pydantic; one retry that shows the validation error.
        ``choices`` restricts string fields by name to the given values in the schema sent (see
        ``with_choices``); the reply is still validated against ``schema`` and callers still check."""
        msgs = norm_messages(messages)
        self.ledger.count_request(method, phase, stage)
        res = await self.generate(msgs, method=method, phase=phase, stage=stage, max_tokens=max_tokens, schema=schema,
                                  choices=choices, max_retries=max_retries, timeout=timeout, _counted=True)
        if res.failed:
            return StructuredResult(None, "", failed=True, error=res.error)
        try:
            return StructuredResult(validate(schema, res.text), res.text)
        except ValidationError as e:
            first_error = short_error(e)
        retry = msgs + [
            {"role": "assistant", "content": res.text},
            {"role": "user", "content": "That reply is not valid JSON for the required schema: "
             f"{first_error}. Reply again with only a JSON object that matches the schema."},
        ]
        res2 = await self.generate(retry, method=method, phase=phase, stage=stage, max_tokens=max_tokens, schema=schema,
                                   choices=choices, max_retries=max_retries, timeout=timeout, _counted=True)
        if res2.failed:  # the failed call is already in the ledger with its reason
            return StructuredResult(None, res2.text, failed=True, error=res2.error, attempts=2)
        try:
            return StructuredResult(validate(schema, res2.text), res2.text, attempts=2)
        except ValidationError as e:
            err = f"invalid structured output after retry: {short_error(e)}"
        self.ledger.add_failure(method, phase, stage, err)
        return StructuredResult(None, res2.text, failed=True, error=err, attempts=2)


class BoundLLM:
    """An LLM bound to a method and phase, so method code only names the stage."""

    def __init__(self, llm: LLM, method: str, phase: str):
        self.llm = llm
        self.method = method
        self.phase = phase
        # characters of source material per token of this model, for prompt budgets; 4 unless a
        # method measured its source (harness.token_budget.measure_chars_per_token)
        self.chars_per_token = DEFAULT_CHARS_PER_TOKEN

    @property
    def spec(self) -> ModelSpec:
        return self.llm.spec

    async def generate(self, messages: str | list[Message], *, stage: str = "", **kw: Any) -> CallResult:
        return await self.llm.generate(messages, method=self.method, phase=self.phase, stage=stage, **kw)

    async def structured(self, messages: str | list[Message], schema: type[T], *, stage: str = "", **kw: Any) -> StructuredResult:
        return await self.llm.structured(messages, schema, method=self.method, phase=self.phase, stage=stage, **kw)

    async def count_tokens(self, text: str) -> int | None:
        return await self.llm.count_tokens(text)
