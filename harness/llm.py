"""The model layer: every LLM call (learn, answer, judge) goes through here.

Calls are made with inspect-ai's model API, so any provider inspect supports works unchanged
(``openai/...``, ``openai-api/<service>/...``, ``vllm/...``, ``local/smollm2``, ``scripted/...``).
On top of inspect this layer adds what an evaluation harness needs:

* a persistent call cache (sqlite) keyed by model, endpoint, messages and settings, so that re-running
  a finished experiment makes zero model calls (inspect's own cache format changes between
  versions and its cached calls are not counted);
* a usage ledger counting calls and tokens per method, phase, stage and live/cached/failed;
* structured calls against a pydantic schema with one corrective retry, after which the call is
  recorded as failed and the run goes on;
* a provider's error, refusal or cut-off that inspect hands back as output text (a context-length
  error, a content filter, a reply a server cut at its window) is a failed call with its reason,
  never an answer and never cached; on OpenAI-compatible servers the schema goes out with its
  bounds, which inspect's provider drops.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from . import callscope, stopping
from .errors import ConfigError, DataError, ModelUnavailableError
from .io import redact_secrets, secret_values
from .schema_limits import json_schema_model, schema_json, with_bound_words, with_choices, within_limits
from .token_budget import DEFAULT_CHARS_PER_TOKEN, TEMPLATE_TOKENS

T = TypeVar("T", bound=BaseModel)

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


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


UNLIMITED = -1  # reasoning allowance meaning: send no output cap (``--reasoning-tokens unlimited``)

# Default reasoning allowance per effort, from the providers' documentation: OpenAI advises reserving
# at least 25,000 tokens for reasoning and output when starting with its reasoning models (medium, and
# the default effort of a reasoning family); DeepSeek's reasoner writes up to 32K tokens by default
# (high) and 64K at most (xhigh, max); low and minimal effort reason far less.
DEFAULT_REASONING_TOKENS = {"minimal": 2_048, "low": 8_192, "medium": 25_000, "high": 32_768,
                            "xhigh": 65_536, "max": 65_536}

# Model families that reason before they reply (reasoning tokens count against the output cap).
_REASONING_FAMILY = re.compile(r"(^|[/_.-])(gpt-oss|gpt-5(?!\S*-chat)|o[134](-mini|-pro)?(?=$|[-_.])|"
                               r"deepseek-(reasoner|r1|v4)|qwq|qwen3|magistral)|thinking|reasoning|reasoner",
                               re.IGNORECASE)


def reasoning_family(name: str) -> bool:
    """Whether a model name belongs to a family known to reason (gpt-oss, gpt-5, o1/o3/o4,
    DeepSeek's reasoner, R1 and V4, QwQ, Qwen3, Magistral, or a name saying thinking/reasoning)."""
    return bool(_REASONING_FAMILY.search(name.split("/", 1)[-1] if "/" in name else name))


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


@dataclass
class StructuredResult:
    value: BaseModel | None
    text: str
    failed: bool = False
    error: str = ""
    attempts: int = 1


class CallCache:
    """sqlite cache of model outputs. One file, WAL mode, safe across threads and processes.

    Each thread keeps one connection (opening one per call cost milliseconds on the event loop).
    ``synchronous=NORMAL`` with WAL: a committed entry survives the process being killed, since
    the log is in the OS's page cache; only a power cut can lose the last entries, whose calls
    are then made again.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            con = self._connect()
            with con:
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                            "created REAL)")
                con.execute("SELECT key, value FROM calls LIMIT 1").fetchall()
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise
            raise self._corrupt(e) from None
        except sqlite3.DatabaseError as e:  # "file is not a database", "database disk image is malformed"
            raise self._corrupt(e) from None

    def _corrupt(self, e: Exception) -> DataError:
        return DataError(f"{self.path}: the model-call cache is not a readable sqlite database ({e}); move it "
                         "away (its calls are then made again) and run again")

    def _connect(self) -> sqlite3.Connection:
        con, pid = getattr(self._local, "con", None), getattr(self._local, "pid", None)
        if con is None or pid != os.getpid():  # never reuse a connection across a fork
            con = sqlite3.connect(self.path, timeout=30)
            con.execute("PRAGMA synchronous=NORMAL")
            self._local.con, self._local.pid = con, os.getpid()
        return con

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached reply, or None: also for a value that is not the JSON object ``put`` writes (an
        edited or damaged entry is a miss, made again and overwritten, not an error mid-run)."""
        row = self._connect().execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
        if not row:
            return None
        try:
            value = json.loads(row[0])
        except (TypeError, ValueError):
            return None
        if not isinstance(value, dict) or not isinstance(value.get("text"), str) \
                or not all(isinstance(value.get(k), int) for k in ("input_tokens", "output_tokens")):
            return None
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store a reply, credentials masked (a server may echo the key in a reply)."""
        con = self._connect()
        with con:
            con.execute(
                "INSERT OR REPLACE INTO calls (key, value, created) VALUES (?, ?, ?)",
                (key, redact_secrets(json.dumps(value, ensure_ascii=False)), time.time()),
            )


class UsageLedger:
    """Counts calls and tokens by (method, phase, stage, status). status: live | cached | failed.

    ``snapshot`` is everything counted so far (a method diffs two snapshots to cost a stage);
    ``drain`` hands over only what was counted since the last drain, so the runner can write the
    counts to usage.jsonl while a build is still running without writing any call twice."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(_zero_counts)
        self._undrained: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(_zero_counts)
        self.failures: list[dict[str, str]] = []
        self.failed_by_stage: dict[tuple[str, str, str], int] = defaultdict(int)  # not drained
        self.requests_by_stage: dict[tuple[str, str, str], int] = defaultdict(int)
        self.in_flight = 0  # live calls of this ledger holding a connection (counted by CallGate)
        # called after every counted call with (stage, status): the runner's progress display
        self.on_call: Callable[[str, str], None] | None = None

    def add(self, method: str, phase: str, stage: str, status: str, inp: int, out: int, secs: float,
            reasoning: int = 0) -> None:
        """Count one call: ``out`` visible output tokens, ``reasoning`` reasoning tokens apart."""
        with self._lock:
            for table in (self.rows, self._undrained):
                r = table[(method, phase, stage, status)]
                r["calls"] += 1
                r["input_tokens"] += inp
                r["output_tokens"] += out
                r["reasoning_tokens"] += reasoning
                r["seconds"] += secs
        callscope.count(phase, status, inp, out, reasoning)  # the test task being answered, if any
        if self.on_call is not None:
            self.on_call(stage, status)

    def calls(self, status: str) -> int:
        with self._lock:
            return int(sum(v["calls"] for (_, _, _, s), v in self.rows.items() if s == status))

    def add_failure(self, method: str, phase: str, stage: str, error: str) -> None:
        with self._lock:
            self.failures.append({"method": method, "phase": phase, "stage": stage, "error": error[:300]})
            self.failed_by_stage[(method, phase, stage)] += 1

    def count_request(self, method: str, phase: str, stage: str) -> None:
        """One request of a stage (a ``generate`` or ``structured`` call, whatever its retries)."""
        with self._lock:
            self.requests_by_stage[(method, phase, stage)] += 1

    def stage_health(self, phase: str | None = None) -> dict[str, dict[str, int]]:
        """Per stage: requests made, calls they took (live, cached and failed attempts, retries
        included) and requests that failed for good (a failed call, a reply the output cap cut twice,
        a structured reply still invalid after its retry), for build health."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}

            def slot(st: str) -> dict[str, int]:
                return out.setdefault(st, {"requests": 0, "calls": 0, "failed": 0})

            for (_, p, st, _status), v in self.rows.items():
                if phase is None or p == phase:
                    slot(st)["calls"] += int(v["calls"])
            for (_, p, st), n in self.requests_by_stage.items():
                if phase is None or p == phase:
                    slot(st)["requests"] += n
            for (_, p, st), n in self.failed_by_stage.items():
                if phase is None or p == phase:
                    slot(st)["failed"] += n
            return out

    def live_calls(self) -> int:
        return self.calls("live")

    @staticmethod
    def _listed(table: dict[tuple[str, str, str, str], dict[str, float]]) -> list[dict[str, Any]]:
        return [{"method": m, "phase": p, "stage": st, "status": s, **v} for (m, p, st, s), v in sorted(table.items())]

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return self._listed(self.rows)

    def drain(self) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """Return and reset the counts (and failures) added since the last drain."""
        with self._lock:
            rows = self._listed(self._undrained)
            fails = list(self.failures)
            self._undrained.clear()
            self.failures.clear()
        return rows, fails


def _zero_counts() -> dict[str, float]:
    return {"calls": 0, "input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "seconds": 0.0}


def _norm_messages(messages: str | list[Message]) -> list[Message]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def _to_inspect(messages: list[Message]) -> list[Any]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    out = []
    for m in messages:
        cls = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}[m["role"]]
        out.append(cls(content=m["content"]))
    return out


# Failures to open a connection at all: the endpoint is down or misconfigured, so the whole run stops
# with a one-line error (and resumes later). A connection dropped after the request was sent, a
# truncated or unparsable reply, are failures of that one call instead.
_UNREACHABLE = {"ConnectError", "ConnectionRefusedError", "ConnectTimeout", "gaierror"}
# Replies that arrived but could not be parsed: inspect does not retry them, this layer does.
_MALFORMED = {"JSONDecodeError", "APIResponseValidationError"}


def _is_connection_error(e: BaseException) -> bool:
    return bool({type(x).__name__ for x in _chain(e)} & _UNREACHABLE)


def _is_malformed_reply(e: BaseException) -> bool:
    return bool({type(x).__name__ for x in _chain(e)} & _MALFORMED)


def _root_error(e: BaseException) -> BaseException:
    """The exception behind tenacity's ``RetryError`` (inspect's retries ran out)."""
    last = getattr(e, "last_attempt", None)
    if type(e).__name__ == "RetryError" and last is not None and last.failed:
        return last.exception() or e
    return e


MALFORMED_RETRY_WAIT_S = 1.0  # first wait before re-asking after an unparsable reply (doubles, capped)


class _RedactingLogFilter(logging.Filter):
    """Masks credentials in a log record before any handler writes it.

    inspect logs a failed model call's error verbatim (its trace file under the user's data folder,
    the eval log's logging records); a server that echoes the request's ``Authorization`` header
    would put the key there. Installed on inspect's log handler, this filter rewrites the record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = secret_values()

        def clean(v: Any) -> Any:
            if isinstance(v, str) and ("earer" in v or "://" in v or any(x in v for x in secrets)):
                return redact_secrets(v, bearer=True)
            return v

        for k, v in list(vars(record).items()):
            if isinstance(v, str):
                new = clean(v)
                if new is not v:
                    setattr(record, k, new)
        if isinstance(record.args, tuple):
            record.args = tuple(clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: clean(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = clean(logging.Formatter().formatException(record.exc_info))
        return True


def _guard_inspect_logging() -> None:
    """Put the redacting filter on inspect's log handler (it exists once an eval has started)."""
    for name in ("", "inspect_ai"):
        for h in logging.getLogger(name).handlers:
            if hasattr(h, "trace_logger") and not any(isinstance(f, _RedactingLogFilter) for f in h.filters):
                h.addFilter(_RedactingLogFilter())


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


_OPENAI_CLIENT_PROVIDERS = {"openai", "openai-api"}
_SERVED_PROVIDERS = {"openai-api", "vllm", "ollama", "llama-cpp-python", "sglang"}


def _init_error(e: BaseException, name: str) -> str:
    """inspect's initialisation error on one line, every line of it kept (its first line alone,
    "Unable to initialise ... client", does not say which variable is missing); for an
    ``openai-api/<service>/`` model, the variables it reads."""
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    msg = " ".join(x.removeprefix("ERROR: ") for x in lines) or type(e).__name__
    parts = name.split("/")
    if parts[0] == "openai-api" and len(parts) >= 3 and "defined in the environment" in msg:
        svc = parts[1].upper().replace("-", "_")
        msg += (f" (openai-api/{parts[1]}/... reads {svc}_BASE_URL, e.g. http://127.0.0.1:8000/v1, and "
                f"{svc}_API_KEY; a local server that checks no key still needs a placeholder: {svc}_API_KEY=none)")
    return redact_secrets(msg, bearer=True)


# stop reasons of an output that is not the model's answer: inspect turns a provider's context-length
# error or refusal (HTTP 400 ``context_length_exceeded``, ``content_filter``, an "input length" error)
# into an output whose text is the provider's error message
_NOT_AN_ANSWER = {"model_length": "context_overflow", "content_filter": "refused"}
# characters per token assumed for the room a prompt leaves in a declared window (the output cap sent)
# when the provider does not count tokens: SmolLM2 makes about 2.8 on code and 3.1 on APIBench, English
# prose on API models 4; the lower figure leaves the reply room on every tokenizer seen
PRECHECK_CHARS_PER_TOKEN = 3.0
# a prompt is refused without a call only when it is over the window at the ratio methods budget their
# prompts with (chars / 4): what a method fitted is always sent, and the server's own overflow error, when
# the prompt is over in its tokens, is a failure naming the window (never an answer, never cached)
REFUSE_CHARS_PER_TOKEN = DEFAULT_CHARS_PER_TOKEN
# a context-window error that reached this layer as an exception
_CONTEXT_ERROR = re.compile(r"context_length_exceeded|maximum context length|exceeds? the (available )?context size",
                            re.IGNORECASE)


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
                    self._model = get_model(self.spec.name, memoize=False, **kwargs)
                except Exception as e:  # unknown provider, missing key or package
                    raise ModelUnavailableError(f"model '{self.spec.name}': {_init_error(e, self.spec.name)}") from None
            return self._model

    def _served(self) -> bool:
        """Whether the model is served over an OpenAI-compatible endpoint whose inspect provider drops
        the schema's bounds (``OpenAICompatibleAPI.schema_exclude_fields``, and ``maxItems``, which
        inspect's schema type lacks)."""
        return self.spec.name.split("/", 1)[0] in _SERVED_PROVIDERS

    async def _room(self, msgs: list[Message], bound: int) -> int | None:
        """Output tokens a known window leaves after the prompt (at least ``bound``; None: no window):
        counted exactly where the provider counts, else estimated at PRECHECK_CHARS_PER_TOKEN."""
        window = self.spec.effective_context_window()
        if not window:
            return None
        text = "\n".join(m["content"] for m in msgs)
        n = await self.count_tokens(text)
        return max(bound, window - TEMPLATE_TOKENS - (n if n is not None else int(len(text) / PRECHECK_CHARS_PER_TOKEN)))

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
        msgs = _norm_messages(messages)
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
        res = await call(cap)
        if res.failed or not _cut_by_cap(res, bound, schema):
            return res
        first = res
        room = room or (await self._room(msgs, bound) if cap else None)
        again = min(2 * cap, max(cap, room)) if cap and room else 2 * cap if cap else None
        if again == cap:  # the window leaves no larger cap to try
            err = (f"output_cap: output cap {_n(cap)} spent: {_n(res.reasoning_tokens)} reasoning tokens, "
                   f"{_n(res.output_tokens)} visible; the {_window_words(self.spec)} leaves no larger cap "
                   f"(reply bound {_n(bound)})")
            self.ledger.add_failure(method, phase, stage, err)
            return CallResult(res.text, res.input_tokens, res.output_tokens, cached=res.cached, failed=True,
                              error=err, stop_reason=res.stop_reason, reasoning_tokens=res.reasoning_tokens, cap=cap)
        res = await call(again)
        if res.failed or not _cut_by_cap(res, bound, schema):
            return res
        hint = ("raise --reasoning-tokens" if first.reasoning_tokens or res.reasoning_tokens else
                "no reasoning tokens: the reply itself ran past its bound")
        err = (f"output_cap: output cap {_n(first.cap)} spent: {_n(first.reasoning_tokens)} reasoning tokens, "
               f"{_n(first.output_tokens)} visible; retried with {_n(res.cap)}: {_n(res.reasoning_tokens)} "
               f"reasoning, {_n(res.output_tokens)} visible (reply bound {_n(bound)}; {hint})")
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
                         max_retries: int | None, timeout: int | None, attempt_timeout: int | None) -> CallResult:
        """One request with output cap ``cap`` (None: none sent), answered from the cache when it can."""
        key = self.cache_key(msgs, cap, temp, json_schema)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None and hit.get("stop_reason") not in _NOT_AN_ANSWER:  # an error is no answer
                reasoning = int(hit.get("reasoning_tokens") or 0)
                self.ledger.add(method, phase, stage, "cached", hit["input_tokens"], hit["output_tokens"], 0.0,
                                reasoning)
                return CallResult(hit["text"], hit["input_tokens"], hit["output_tokens"], cached=True,
                                  stop_reason=hit.get("stop_reason", ""), reasoning_tokens=reasoning, cap=cap)
        window = self.spec.effective_context_window()
        if window and not self._counts_exactly():  # an exact provider reports an overflow itself
            est = int(sum(len(m["content"]) for m in msgs) / REFUSE_CHARS_PER_TOKEN)
            if est >= window:  # over: do not spend a call
                err = f"context_overflow: prompt of ~{est:,} tokens exceeds the {_window_words(self.spec)}"
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
        _guard_inspect_logging()
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
            e = _root_error(e)
            if _is_connection_error(e):
                where = self.spec.resolved_base_url() or self.spec.name
                cause = [x for x in _chain(e)][-1]
                raise ModelUnavailableError(f"model endpoint {where} is unreachable ({type(cause).__name__}: "
                                            f"{redact_secrets(str(cause)[:120], bearer=True)})") from None
            err = _short_error(e)
            if _CONTEXT_ERROR.search(err):  # vLLM's 400 has no code for inspect to read
                err = f"context_overflow: the prompt and its cap do not fit the {_window_words(self.spec)} ({err})"
            self.ledger.add_failure(method, phase, stage, err)
            self.ledger.add(method, phase, stage, "failed", 0, 0, time.perf_counter() - t0)
            return CallResult("", failed=True, error=err, cap=cap)
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
        err = _not_an_answer(self.spec, out, stop, text, inp if usage else None,
                             (outp + reasoning) if usage else None, cap)
        if err:  # never cached: the same request at a larger window, or later, is asked again
            self.ledger.add_failure(method, phase, stage, err)
            self.ledger.add(method, phase, stage, "failed", inp, 0, secs, reasoning)
            return CallResult("", failed=True, error=err, reasoning_tokens=reasoning, cap=cap)
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
                return await model.generate(_to_inspect(msgs), config=config)
            except Exception as e:
                if attempt + 1 >= tries or not _is_malformed_reply(_root_error(e)):
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
        msgs = _norm_messages(messages)
        self.ledger.count_request(method, phase, stage)
        res = await self.generate(msgs, method=method, phase=phase, stage=stage, max_tokens=max_tokens, schema=schema,
                                  choices=choices, max_retries=max_retries, timeout=timeout, _counted=True)
        if res.failed:
            return StructuredResult(None, "", failed=True, error=res.error)
        try:
            return StructuredResult(_validate(schema, res.text), res.text)
        except ValidationError as e:
            first_error = _short_error(e)
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
            return StructuredResult(_validate(schema, res2.text), res2.text, attempts=2)
        except ValidationError as e:
            err = f"invalid structured output after retry: {_short_error(e)}"
        self.ledger.add_failure(method, phase, stage, err)
        return StructuredResult(None, res2.text, failed=True, error=err, attempts=2)


def _window_words(spec: ModelSpec) -> str:
    window = spec.effective_context_window()
    if not window:
        return "model's context window"
    origin = f", {spec.context_window_origin}" if spec.context_window_origin else ""
    return f"{window:,}-token context window{origin}"


def _not_an_answer(spec: ModelSpec, out: Any, stop: str, text: str, inp: int | None, spent: int | None,
                   cap: int | None) -> str:
    """Why an output is a provider's error, refusal or cut-off rather than the model's reply ("" if
    it is a reply). inspect returns a context-length error or a refusal as an output whose text is
    the provider's message; llama.cpp's server silently lowers a cap that passes the window, so a
    reply ends as "cut by the cap" having spent fewer tokens than the cap."""
    said = redact_secrets(" ".join(str(out.error or text or stop).split())[:240], bearer=True)
    if stop in _NOT_AN_ANSWER:
        if stop == "model_length":
            return f"context_overflow: the prompt does not fit the {_window_words(spec)} (provider: {said})"
        return f"refused: the provider refused or filtered the request ({stop}: {said})"
    if getattr(out, "error", None):
        return f"model_error: {said}"
    if stop == "max_tokens" and cap and spent is not None and spent < cap:
        return (f"context_overflow: the reply was cut after {spent:,} of its {cap:,}-token cap: the "
                f"prompt ({_n(inp)} tokens) and the cap pass the {_window_words(spec)}")
    return ""


def _n(x: int | None) -> str:
    return "none" if x is None else f"{x:,}"


def _cut_by_cap(res: CallResult, bound: int, schema: type[BaseModel] | None) -> bool:
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
            _validate(schema, res.text)
            return False
        except ValidationError:
            return True
    return res.reasoning_tokens > 0 and res.output_tokens < bound


def _validate(schema: type[T], text: str) -> T:
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


def _short_error(e: BaseException) -> str:
    """``Type: message`` on one line, secrets masked (servers may echo the request's credentials)."""
    e = _root_error(e)
    raw = str(e).strip()
    if raw.startswith("Request:"):  # inspect's ModelGenerateError: the request dumped, then the provider's error
        raw = raw.rsplit("\n\n", 1)[-1].strip() or raw
    s = raw.replace("\n", " ")
    cause = list(_chain(e))[-1]
    if cause is not e and len(s) < 80:  # a generic wrapper ("Connection error."): name the cause
        s += f" ({type(cause).__name__}: {str(cause).strip().splitlines()[0][:160] if str(cause).strip() else ''})"
    return f"{type(e).__name__}: {redact_secrets(s, bearer=True)[:300]}"


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


def parse_model_spec(name: str, role: str = "solver", **kw: Any) -> ModelSpec:
    if not name or "/" not in name:
        raise ConfigError(f"--model '{name}': expected provider/model, e.g. local/smollm2 or openai/gpt-4o-mini")
    return ModelSpec(name=name, role=role, **{k: v for k, v in kw.items() if v is not None})
