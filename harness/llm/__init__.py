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

Modules: ``spec`` (model settings, reasoning policy), ``messages``, ``replies`` (call results, reading
structured replies), ``cache`` (call cache), ``ledger`` (usage counts), ``failures`` (error
classification), ``redaction`` (credentials kept out of inspect's records), ``client`` (``LLM``,
``BoundLLM``).
"""

from __future__ import annotations

from .cache import CallCache
from .client import LLM, MALFORMED_RETRY_WAIT_S, REFUSE_CHARS_PER_TOKEN, ROOM_CHARS_PER_TOKEN, BoundLLM
from .ledger import UsageLedger
from .messages import Message
from .replies import CallResult, StructuredResult
from .spec import DEFAULT_REASONING_TOKENS, UNLIMITED, ModelSpec, parse_model_spec, reasoning_family

__all__ = [
    "DEFAULT_REASONING_TOKENS",
    "LLM",
    "MALFORMED_RETRY_WAIT_S",
    "REFUSE_CHARS_PER_TOKEN",
    "ROOM_CHARS_PER_TOKEN",
    "UNLIMITED",
    "BoundLLM",
    "CallCache",
    "CallResult",
    "Message",
    "ModelSpec",
    "StructuredResult",
    "UsageLedger",
    "parse_model_spec",
    "reasoning_family",
]
