"""An OpenAI-compatible test backend that behaves like the hosted APIs the harness meets in production.

Endpoints (under ``/v1``): ``POST /chat/completions``, ``POST /responses`` (the Responses API, which
inspect-ai uses for ``openai/gpt-5*`` and o-series models), ``POST /embeddings``, ``GET /models``,
and for tests ``GET /stats`` and ``POST /reset``. What it enforces, as the real services do:

* **Reasoning.** A model reasons when its name is of a reasoning family (``gpt-oss*``, ``gpt-5*``,
  ``o1``/``o3``/``o4*``, ``deepseek-r1``, ``deepseek-v4*``, ``deepseek-*reason*``, or a name token
  ``reason``) or when the request sets an effort (``reasoning_effort``; Responses:
  ``reasoning.effort``). Reasoning tokens are spent before the visible reply and count against the
  cap (``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens``; none sent: no limit), by
  effort: low ~100-200, medium ~600-1,200, high ~2,000-4,000 (see ``reasoning.py``), picked by a
  hash of the request. A cap below the reasoning gives an empty reply with finish reason ``length``
  (Responses: ``status: "incomplete"``, ``incomplete_details.reason: "max_output_tokens"``); a cap
  that leaves room for part of the reply cuts it. Usage reports reasoning tokens apart
  (``completion_tokens_details.reasoning_tokens`` / ``output_tokens_details.reasoning_tokens``).
* **Request rules of OpenAI's reasoning families** (``gpt-5*``, ``o*``): chat completions refuse
  ``max_tokens`` (they want ``max_completion_tokens``); both endpoints refuse a temperature other
  than 1 (unless the effort is ``none``) and efforts the model lacks (o-series: low/medium/high;
  gpt-5, -mini, -nano: minimal/low/medium/high); the Responses API refuses ``max_output_tokens``
  below 16.
* **Strict structured outputs** (``json_schema`` with ``strict: true``): the schema must pass
  ``strict_schema_violations`` (OpenAI's rules and size limits), else HTTP 400 with the API's error
  body (``code: invalid_json_schema``). Model names starting ``ft:`` get the fine-tuned profile.
* **Embeddings**: at most 8,191 tokens per input (cl100k_base), 2,048 inputs and 300,000 tokens per
  request, with the API's error messages; vectors are deterministic unit vectors from hashed words
  (similar texts are near), in the model's dimension (3,072 for text-embedding-3-large, 1,536 for
  -3-small and ada-002, ``embed_dim`` otherwise; ``dimensions`` honoured), float or base64.

* **Servers other than OpenAI's** (attributes a test sets, restored by ``reset()``):
  ``context_window`` enforces a window in tokens on chat completions, answered as ``context_style``
  says: ``"openai"`` (HTTP 400, ``code: context_length_exceeded``, prompt + cap over the window),
  ``"vllm"`` (HTTP 400 with vLLM's error body, no code), ``"llamacpp"`` (a prompt over the window:
  HTTP 400 ``context_length_exceeded``; prompt + cap over it: the cap silently lowered, as llama.cpp's
  server does). ``advertise_window`` lists ``max_model_len`` in ``/v1/models`` (vLLM); with
  ``context_style="llamacpp"`` ``GET /props`` reports ``n_ctx``. ``json_schema = False`` answers
  ``response_format: json_schema`` with HTTP 500, as llama-cpp-python's server does. A last message
  holding ``[[refuse]]`` is refused with HTTP 400, ``code: content_filter``.

Replies are schema-valid and drawn from the prompt (``content.py``). ``stats()`` counts requests,
rejections (with reasons), finish reasons and tokens for tests to assert on. The server binds
127.0.0.1, requires the API key it was given, and stops by itself after ``lifetime`` seconds.

Use: ``with ApiServer() as api: os.environ.update(api.env())``, then ``--model
openai-api/testapi/gpt-oss-120b`` (chat completions) or ``--model openai/gpt-5-mini`` (Responses API)
and ``--embedder openai/text-embedding-3-large``; the pytest fixtures are in ``fixtures.py``.
Standalone: ``python tests/backends/api_server.py --port 8765``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from tests.backends import content, reasoning, tokens
from tests.backends.json_http import JsonHttpServer
from tests.backends.strict_schema import strict_schema_violations

API_KEY = "sk-testapi-local-0000"
SERVICE = "testapi"  # ``openai-api/testapi/<model>`` reads TESTAPI_BASE_URL and TESTAPI_API_KEY
EMBED_MAX_INPUT_TOKENS = 8191  # the models page; the API's error message says "maximum context length is 8192"
EMBED_MAX_INPUTS = 2048
EMBED_MAX_REQUEST_TOKENS = 300_000
EMBED_DIMS = {"text-embedding-3-large": 3072, "text-embedding-3-small": 1536, "text-embedding-ada-002": 1536}
RESPONSES_MIN_OUTPUT_TOKENS = 16
MAX_CALL_RECORDS = 20_000
REFUSE_MARKER = "[[refuse]]"  # a chat message holding it is refused (HTTP 400, code content_filter)
_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ApiError(Exception):
    """A refusal, answered as the API would: HTTP ``status`` and an ``error`` object."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Stats:
    requests: collections.Counter = field(default_factory=collections.Counter)  # endpoint -> requests
    ok: collections.Counter = field(default_factory=collections.Counter)  # endpoint -> answered 200
    rejected: list[dict[str, Any]] = field(default_factory=list)  # endpoint, status, code, param, message, model
    finish: collections.Counter = field(default_factory=collections.Counter)  # "endpoint:finish" -> replies
    prompt_tokens: int = 0
    reasoning_tokens: int = 0
    visible_tokens: int = 0
    calls: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_CALL_RECORDS))
    embed_inputs: int = 0
    embed_tokens: int = 0
    embed_max_input_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"requests": dict(self.requests), "ok": dict(self.ok), "rejected": list(self.rejected),
                "finish": dict(self.finish), "prompt_tokens": self.prompt_tokens,
                "reasoning_tokens": self.reasoning_tokens, "visible_tokens": self.visible_tokens,
                "calls": list(self.calls), "embed_inputs": self.embed_inputs, "embed_tokens": self.embed_tokens,
                "embed_max_input_tokens": self.embed_max_input_tokens, "token_counter": tokens.counter_name()}


@dataclass(frozen=True)
class Generation:
    text: str
    finish: str  # "stop" | "length"
    prompt_tokens: int
    reasoning_tokens: int  # spent (at most the cap)
    completion_tokens: int  # reasoning + visible


def _text(content_: Any) -> str:
    """Message content as text: a string, or the text of its parts (chat and Responses part types)."""
    if isinstance(content_, list):
        return "".join(str(p.get("text", "")) for p in content_ if isinstance(p, dict))
    return "" if content_ is None else str(content_)


def _listed(values: tuple[str, ...]) -> str:
    """'a', 'b', and 'c' (the API's way of listing allowed values)."""
    quoted = [f"'{v}'" for v in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _role(role: Any) -> str:
    return "system" if role in ("system", "developer") else str(role or "user")


class ApiServer(JsonHttpServer):
    """The backend, in a background thread (``with ApiServer() as api``); ``api.env()`` points clients at it."""

    thread_name = "api-server"
    stats_type = Stats

    def __init__(self, port: int = 0, lifetime: float = 3600.0, api_key: str = API_KEY, embed_dim: int = 256,
                 strict_profile: str = "current", latency: float = 0.0):
        super().__init__(port=port, lifetime=lifetime)
        self.api_key = api_key
        self.embed_dim = embed_dim
        self.strict_profile = strict_profile
        self.latency = latency
        self._server_defaults()

    def _server_defaults(self) -> None:
        self.context_window: int | None = None
        self.context_style = "openai"
        self.advertise_window = False
        self.json_schema = True

    def reset(self) -> None:
        super().reset()
        self._server_defaults()

    def env(self) -> dict[str, str]:
        """Environment that points inspect's ``openai-api/testapi/*`` and ``openai/*`` models and the
        harness's ``openai/<model>`` embedder at this server."""
        return {f"{SERVICE.upper()}_BASE_URL": self.url, f"{SERVICE.upper()}_API_KEY": self.api_key,
                "OPENAI_BASE_URL": self.url, "OPENAI_API_KEY": self.api_key, "SOURCEBENCH_EMBED_BASE_URL": self.url}

    def _warm_up(self) -> None:
        tokens.count("warm up")  # loads the tokenizer before the first request
        content.reply([{"role": "user", "content": "warm up"}], None, "0" * 16)

    # -- stats ------------------------------------------------------------------------------------
    def rejections(self, endpoint: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.stats_.rejected if endpoint is None or r["endpoint"] == endpoint]

    # -- HTTP -------------------------------------------------------------------------------------
    async def _route(self, method: str, path: str, headers: dict[str, str], body: bytes,
                     writer: asyncio.StreamWriter) -> bool:
        route = path.split("?", 1)[0].rstrip("/")
        if method == "GET" and route.endswith("/stats"):
            await self._send(writer, 200, self.stats())
            return True
        if method == "GET" and route.endswith("/props") and self.context_style == "llamacpp" and self.context_window:
            await self._send(writer, 200, {"default_generation_settings": {"n_ctx": self.context_window},
                                           "total_slots": 1})
            return True
        if method == "POST" and route.endswith("/reset"):
            self.reset()
            await self._send(writer, 200, {"ok": True})
            return True
        endpoint = {"/chat/completions": "chat.completions", "/responses": "responses",
                    "/embeddings": "embeddings", "/models": "models"}.get(route[route.find("/v1") + 3:]
                                                                          if "/v1" in route else route)
        with self._lock:
            self.stats_.requests[endpoint or "unknown"] += 1
        model = ""
        try:
            if endpoint is None or (endpoint == "models") != (method == "GET"):
                raise ApiError(404, f"Invalid URL ({method} {path})")
            self._check_auth(headers)
            if endpoint == "models":
                window = {"max_model_len": self.context_window} if self.advertise_window and self.context_window else {}
                reply: dict[str, Any] = {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": SERVICE, **window}
                    for m in ("gpt-oss-120b", "gpt-5-mini", "deepseek-v4-flash", "llama-3-8b-instruct", *EMBED_DIMS)]}
            else:
                try:
                    req = json.loads(body or b"{}")
                except ValueError:
                    raise ApiError(400, "We could not parse the JSON body of your request. (HINT: This likely means "
                                        "you aren't using your HTTP library correctly.)") from None
                if not isinstance(req, dict):
                    raise ApiError(400, "The request body must be a JSON object.")
                model = str(req.get("model") or "")
                if not model:
                    raise ApiError(400, "you must provide a model parameter", param="model")
                if self.latency:
                    await asyncio.sleep(self.latency)
                reply = (self._chat(req) if endpoint == "chat.completions" else
                         self._responses(req) if endpoint == "responses" else self._embeddings(req))
        except ApiError as e:
            with self._lock:
                if len(self.stats_.rejected) < MAX_CALL_RECORDS:
                    self.stats_.rejected.append({"endpoint": endpoint or path, "status": e.status, "code": e.code,
                                                 "param": e.param, "message": e.message, "model": model})
            await self._send(writer, e.status, e.body())
            return True
        with self._lock:
            self.stats_.ok[endpoint] += 1
        await self._send(writer, 200, reply)
        return True

    def _check_auth(self, headers: dict[str, str]) -> None:
        auth = headers.get("authorization", "")
        if not auth:
            raise ApiError(401, "You didn't provide an API key. You need to provide your API key in an "
                                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
        if self.api_key and auth != f"Bearer {self.api_key}":
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")

    # -- generation ---------------------------------------------------------------------------------
    def _schema(self, model: str, fmt: dict[str, Any] | None, param: str) -> tuple[dict[str, Any] | None, str]:
        """The schema a request asks for (checked when strict) and its name (``json_object``: JSON, no schema)."""
        if not fmt or fmt.get("type") in (None, "text"):
            return None, ""
        if fmt.get("type") == "json_object":
            return None, "json_object"
        if fmt.get("type") == "json_schema" and not self.json_schema:  # llama-cpp-python's server
            raise ApiError(500, "Internal Server Error", type_="server_error")
        if fmt.get("type") != "json_schema":
            raise ApiError(400, f"Invalid value: '{fmt.get('type')}'. Supported values are: 'text', "
                                "'json_object', and 'json_schema'.", param=f"{param}.type", code="invalid_value")
        # chat: {"type": "json_schema", "json_schema": {...}}; Responses: the fields sit in text.format itself
        spec = fmt.get("json_schema") if "json_schema" in fmt else fmt
        name = spec.get("name")
        if not isinstance(name, str) or not _SCHEMA_NAME.match(name):
            raise ApiError(400, f"Invalid '{param}.name': string does not match pattern. Expected a string that "
                                "matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters.",
                           param=f"{param}.name", code="invalid_value")
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise ApiError(400, f"Missing required parameter: '{param}.schema'.", param=f"{param}.schema",
                           code="missing_required_parameter")
        if spec.get("strict"):
            profile = "fine-tuned" if reasoning.base_name(model).startswith("ft:") else self.strict_profile
            problems = strict_schema_violations(schema, profile)
            if problems:
                raise ApiError(400, f"Invalid schema for response_format '{name}': {problems[0]}",
                               param="response_format" if param == "response_format" else "text.format.schema",
                               code="invalid_json_schema")
        return schema, name

    def _generate(self, endpoint: str, model: str, messages: list[dict[str, str]], schema: dict[str, Any] | None,
                  schema_name: str, cap: int | None, effort: str | None) -> Generation:
        key = hashlib.sha256(json.dumps([model, messages, schema, effort], sort_keys=True).encode()).hexdigest()
        text = content.reply(messages, schema, key, json_object=schema_name == "json_object")
        prompt_tokens = sum(tokens.count(m["content"]) + 4 for m in messages)
        cap = self._window(endpoint, prompt_tokens, cap)
        level = reasoning.effective_effort(model, effort)
        think = reasoning.reasoning_tokens(level, key, prompt_tokens)
        visible = tokens.count(text)
        finish = "stop"
        if cap is not None and think + visible > cap:
            finish = "length"
            think = min(think, cap)
            text = tokens.head(text, cap - think)
        completion = cap if finish == "length" else think + visible
        gen = Generation(text, finish, prompt_tokens, think, completion)
        with self._lock:
            st = self.stats_
            st.finish[f"{endpoint}:{finish}"] += 1
            st.prompt_tokens += prompt_tokens
            st.reasoning_tokens += think
            st.visible_tokens += completion - think
            st.calls.append({"endpoint": endpoint, "model": model, "effort": level, "cap": cap,
                             "schema": schema_name or None, "schema_bounds": _bounds(schema),
                             "prompt_tokens": prompt_tokens, "reasoning_tokens": think,
                             "visible_tokens": completion - think, "finish": finish})
        return gen

    def _window(self, endpoint: str, prompt: int, cap: int | None) -> int | None:
        """The context window, enforced as the configured server kind does; the cap it lets through."""
        w = self.context_window
        if not w or endpoint != "chat.completions":
            return cap
        want = prompt + (cap or 0)
        if self.context_style == "vllm" and want > w:
            raise ApiError(400, f"This model's maximum context length is {w} tokens. However, you requested {want} "
                                f"tokens ({prompt} in the messages, {cap or 0} in the completion). Please reduce the "
                                "length of the messages or completion.", type_="BadRequestError")
        if self.context_style == "llamacpp":
            if prompt >= w:
                raise ApiError(400, f"the request exceeds the available context size ({prompt} tokens, context {w})",
                               code="context_length_exceeded")
            return min(cap, w - prompt) if cap else w - prompt
        if want > w:
            raise ApiError(400, f"This model's maximum context length is {w} tokens. However, your messages resulted "
                                f"in {want} tokens ({prompt} in the messages, {cap or 0} in the completion). Please "
                                "reduce the length of the messages or completion.", param="messages",
                           code="context_length_exceeded")
        return cap

    @staticmethod
    def _effort(value: Any, param: str, model: str) -> str | None:
        if value is None:
            return None
        if value not in reasoning.EFFORTS:
            raise ApiError(400, f"Invalid value: '{value}'. Supported values are: {_listed(reasoning.EFFORTS)}.",
                           param=param, code="invalid_value")
        supported = reasoning.supported_efforts(model)
        if value not in supported:
            raise ApiError(400, f"Unsupported value: '{value}' is not supported with the '{model}' model. Supported "
                                f"values are: {_listed(supported)}.", param=param, code="unsupported_value")
        return str(value)

    @staticmethod
    def _cap(req: dict[str, Any], names: tuple[str, ...]) -> int | None:
        caps = [req[n] for n in names if req.get(n) is not None]
        for c in caps:
            if not isinstance(c, int) or isinstance(c, bool) or c < 1:
                raise ApiError(400, f"Invalid value for the output token cap: {c!r}.", code="invalid_value")
        return min(caps) if caps else None

    @staticmethod
    def _check_openai_reasoning_params(model: str, req: dict[str, Any], effort: str | None) -> None:
        if not reasoning.is_openai_reasoning(model) or effort == "none":
            return
        t = req.get("temperature")
        if t is not None and t != 1:
            raise ApiError(400, "Unsupported parameter: 'temperature' is not supported with this model.",
                           param="temperature", code="unsupported_parameter")

    def _chat(self, req: dict[str, Any]) -> dict[str, Any]:
        model = str(req["model"])
        if req.get("stream"):
            raise ApiError(400, "The test backend does not stream; send stream: false.", param="stream")
        raw = req.get("messages")
        if not isinstance(raw, list) or not raw:
            raise ApiError(400, "Invalid 'messages': empty array. Expected an array with minimum length 1.",
                           param="messages", code="empty_array")
        messages = [{"role": _role(m.get("role")), "content": _text(m.get("content"))} for m in raw
                    if isinstance(m, dict)]
        if reasoning.is_openai_reasoning(model) and req.get("max_tokens") is not None:
            raise ApiError(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                                "'max_completion_tokens' instead.", param="max_tokens", code="unsupported_parameter")
        effort = self._effort(req.get("reasoning_effort"), "reasoning_effort", model)
        self._check_openai_reasoning_params(model, req, effort)
        if messages and REFUSE_MARKER in messages[-1]["content"]:  # Azure's and OpenAI's safety refusals
            raise ApiError(400, "The response was filtered due to the prompt triggering content management policy.",
                           param="prompt", code="content_filter")
        schema, schema_name = self._schema(model, req.get("response_format"), "response_format")
        gen = self._generate("chat.completions", model, messages, schema, schema_name,
                             self._cap(req, ("max_tokens", "max_completion_tokens")), effort)
        message: dict[str, Any] = {"role": "assistant", "content": gen.text, "refusal": None}
        if gen.reasoning_tokens and not reasoning.is_openai_reasoning(model):  # vLLM / DeepSeek show their thinking
            message["reasoning_content"] = "Working out the answer from the context."
        return {"id": f"chatcmpl-{time.time_ns():x}", "object": "chat.completion", "created": int(time.time()),
                "model": model, "system_fingerprint": None,
                "choices": [{"index": 0, "finish_reason": gen.finish, "logprobs": None, "message": message}],
                "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                          "total_tokens": gen.prompt_tokens + gen.completion_tokens,
                          "prompt_tokens_details": {"cached_tokens": 0},
                          "completion_tokens_details": {"reasoning_tokens": gen.reasoning_tokens}}}

    def _responses(self, req: dict[str, Any]) -> dict[str, Any]:
        model = str(req["model"])
        if req.get("stream"):
            raise ApiError(400, "The test backend does not stream; send stream: false.", param="stream")
        messages: list[dict[str, str]] = []
        if req.get("instructions"):
            messages.append({"role": "system", "content": str(req["instructions"])})
        inp = req.get("input")
        if isinstance(inp, str):
            messages.append({"role": "user", "content": inp})
        elif isinstance(inp, list):
            for item in inp:
                if isinstance(item, dict) and (item.get("type") in (None, "message") and "role" in item):
                    messages.append({"role": _role(item.get("role")), "content": _text(item.get("content"))})
                elif isinstance(item, dict) and item.get("type") == "function_call_output":
                    messages.append({"role": "user", "content": str(item.get("output", ""))})
        if not messages:
            raise ApiError(400, "Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
        cap = self._cap(req, ("max_output_tokens",))
        if cap is not None and cap < RESPONSES_MIN_OUTPUT_TOKENS:
            raise ApiError(400, f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
                                f"{RESPONSES_MIN_OUTPUT_TOKENS}, but got {cap} instead.",
                           param="max_output_tokens", code="integer_below_min_value")
        rs = req.get("reasoning") if isinstance(req.get("reasoning"), dict) else {}
        effort = self._effort(rs.get("effort"), "reasoning.effort", model)
        self._check_openai_reasoning_params(model, req, effort)
        fmt = (req.get("text") or {}).get("format") if isinstance(req.get("text"), dict) else None
        schema, schema_name = self._schema(model, fmt, "text.format")
        gen = self._generate("responses", model, messages, schema, schema_name, cap, effort)
        rid = f"{time.time_ns():x}"
        output: list[dict[str, Any]] = []
        if gen.reasoning_tokens:
            item: dict[str, Any] = {"id": f"rs_{rid}", "type": "reasoning", "summary": []}
            if rs.get("summary") not in (None, "none"):
                item["summary"] = [{"type": "summary_text", "text": "**Reading the context**\n\nLooking for the "
                                                                     "passage that answers the question."}]
            if "reasoning.encrypted_content" in (req.get("include") or []):
                item["encrypted_content"] = base64.b64encode(f"reasoning:{rid}".encode()).decode()
            output.append(item)
        if gen.text or gen.finish == "stop":
            output.append({"id": f"msg_{rid}", "type": "message", "role": "assistant",
                           "status": "completed" if gen.finish == "stop" else "incomplete",
                           "content": [{"type": "output_text", "text": gen.text, "annotations": [], "logprobs": []}]})
        incomplete = gen.finish == "length"
        return {"id": f"resp_{rid}", "object": "response", "created_at": int(time.time()), "model": model,
                "status": "incomplete" if incomplete else "completed",
                "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "error": None, "instructions": req.get("instructions"), "metadata": req.get("metadata") or {},
                "max_output_tokens": cap, "output": output, "parallel_tool_calls": True,
                "reasoning": {"effort": reasoning.effective_effort(model, effort), "summary": rs.get("summary")},
                "store": bool(req.get("store", True)), "temperature": req.get("temperature", 1.0),
                "text": req.get("text") or {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
                "top_p": req.get("top_p", 1.0), "truncation": "disabled",
                "usage": {"input_tokens": gen.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": gen.completion_tokens,
                          "output_tokens_details": {"reasoning_tokens": gen.reasoning_tokens},
                          "total_tokens": gen.prompt_tokens + gen.completion_tokens}}

    # -- embeddings ---------------------------------------------------------------------------------
    def _embeddings(self, req: dict[str, Any]) -> dict[str, Any]:
        model = str(req["model"])
        inp = req.get("input")
        invalid = ApiError(400, "'$.input' is invalid. Please check the API reference: "
                                "https://platform.openai.com/docs/api-reference.")
        if isinstance(inp, str) or (isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp)):
            inputs: list[Any] = [inp]
        elif isinstance(inp, list) and inp:
            inputs = inp
        else:
            raise invalid
        if len(inputs) > EMBED_MAX_INPUTS:
            raise ApiError(400, f"Invalid 'input': array too long. Expected an array with maximum length "
                                f"{EMBED_MAX_INPUTS}, but got an array with length {len(inputs)} instead.",
                           param="input", code="array_above_max_length")
        counts: list[int] = []
        for i, x in enumerate(inputs):
            if isinstance(x, str):
                if not x:
                    raise invalid
                n = tokens.count(x)
            elif isinstance(x, list) and x and all(isinstance(t, int) for t in x):
                n = len(x)
            else:
                raise invalid
            if n > EMBED_MAX_INPUT_TOKENS:
                raise ApiError(400, f"This model's maximum context length is {EMBED_MAX_INPUT_TOKENS + 1} tokens, "
                                    f"however you requested {n} tokens in input {i}. Please reduce the length of "
                                    "the input.", param="input")
            counts.append(n)
        total = sum(counts)
        if total > EMBED_MAX_REQUEST_TOKENS:
            raise ApiError(400, f"Requested {total} tokens, max {EMBED_MAX_REQUEST_TOKENS} tokens per request",
                           code="max_tokens_per_request", type_="max_tokens_per_request")
        native = EMBED_DIMS.get(model, self.embed_dim)
        dim = req.get("dimensions")
        if dim is not None:
            if model == "text-embedding-ada-002":
                raise ApiError(400, "This model does not support specifying dimensions.", param="dimensions")
            if not isinstance(dim, int) or not 1 <= dim <= native:
                raise ApiError(400, f"Invalid 'dimensions': expected an integer from 1 to {native}, got {dim!r}.",
                               param="dimensions", code="invalid_value")
        vecs = np.stack([hashed_vector(x, dim or native) for x in inputs])
        b64 = req.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if b64 else v.tolist()}
                for i, v in enumerate(vecs)]
        with self._lock:
            st = self.stats_
            st.embed_inputs += len(inputs)
            st.embed_tokens += total
            st.embed_max_input_tokens = max(st.embed_max_input_tokens, max(counts))
            st.calls.append({"endpoint": "embeddings", "model": model, "inputs": len(inputs), "tokens": total,
                             "max_input_tokens": max(counts), "dimensions": dim or native})
        return {"object": "list", "data": data, "model": model,
                "usage": {"prompt_tokens": total, "total_tokens": total}}


def _bounds(schema: Any) -> int:
    """How many ``maxItems``/``maxLength`` bounds a schema carries (what reached the server)."""
    if isinstance(schema, dict):
        return sum(1 for k in ("maxItems", "maxLength") if k in schema) + sum(_bounds(v) for v in schema.values())
    if isinstance(schema, list):
        return sum(_bounds(v) for v in schema)
    return 0


_EMBED_WORD = re.compile(r"\w+")


def hashed_vector(x: str | list[int], dim: int) -> np.ndarray:
    """A unit vector from signed feature hashing of the words (token ids for token input): texts that
    share words are near, so retrieval over these vectors finds related passages."""
    feats = [str(t) for t in x] if isinstance(x, list) else [w.lower() for w in _EMBED_WORD.findall(x)] or [x]
    v = np.zeros(dim, dtype=np.float64)
    for f, n in collections.Counter(feats).items():
        d = hashlib.blake2b(f.encode(), digest_size=8).digest()
        v[int.from_bytes(d[:4], "little") % dim] += (1.0 if d[4] & 1 else -1.0) * (1 + np.log(n))
    norm = float(np.linalg.norm(v))
    return (v / norm if norm else np.eye(1, dim, 0)[0]).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description="OpenAI-compatible test backend with real API limits (127.0.0.1 only)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lifetime", type=float, default=3600.0, help="exit after this many seconds (default 3600)")
    ap.add_argument("--api-key", default=API_KEY)
    ap.add_argument("--embed-dim", type=int, default=256, help="dimension for embedding models it does not know")
    ap.add_argument("--strict-profile", default="current", choices=("current", "fine-tuned"))
    ap.add_argument("--context-window", type=int, help="enforce a context window of this many tokens")
    ap.add_argument("--context-style", default="openai", choices=("openai", "vllm", "llamacpp"))
    ap.add_argument("--advertise-window", action="store_true", help="list max_model_len in /v1/models (vLLM)")
    ap.add_argument("--no-json-schema", action="store_true", help="answer json_schema with HTTP 500")
    a = ap.parse_args()
    server = ApiServer(a.port, a.lifetime, a.api_key, a.embed_dim, a.strict_profile)
    server.context_window, server.context_style = a.context_window, a.context_style
    server.advertise_window, server.json_schema = a.advertise_window, not a.no_json_schema
    asyncio.run(server.serve(announce=True))


if __name__ == "__main__":
    main()
