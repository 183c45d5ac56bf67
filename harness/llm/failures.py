"""Error classification: which exceptions mean an unreachable endpoint, an unparsable reply or a context
overflow, and which outputs are a provider's error, refusal or cut-off rather than an answer."""

from __future__ import annotations

import re
from typing import Any

from ..io import redact_secrets
from .spec import ModelSpec, window_words

# Failures to open a connection at all: the endpoint is down or misconfigured, so the whole run stops
# with a one-line error (and resumes later). A connection dropped after the request was sent, a
# truncated or unparsable reply, are failures of that one call instead.
_UNREACHABLE = {"ConnectError", "ConnectionRefusedError", "ConnectTimeout", "gaierror"}


# Replies that arrived but could not be parsed: inspect does not retry them, this layer does.
_MALFORMED = {"JSONDecodeError", "APIResponseValidationError"}


def is_connection_error(e: BaseException) -> bool:
    return bool({type(x).__name__ for x in chain(e)} & _UNREACHABLE)


def is_malformed_reply(e: BaseException) -> bool:
    return bool({type(x).__name__ for x in chain(e)} & _MALFORMED)


def root_error(e: BaseException) -> BaseException:
    """The exception behind tenacity's ``RetryError`` (inspect's retries ran out)."""
    last = getattr(e, "last_attempt", None)
    if type(e).__name__ == "RetryError" and last is not None and last.failed:
        return last.exception() or e
    return e


def chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def init_error(e: BaseException, name: str) -> str:
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
NOT_AN_ANSWER = {"model_length": "context_overflow", "content_filter": "refused"}


# a context-window error that reached this layer as an exception
CONTEXT_ERROR = re.compile(r"context_length_exceeded|maximum context length|exceeds? the (available )?context size",
                            re.IGNORECASE)


def not_an_answer(spec: ModelSpec, out: Any, stop: str, text: str, inp: int | None, spent: int | None,
                   cap: int | None) -> str:
    """Why an output is a provider's error, refusal or cut-off rather than the model's reply ("" if
    it is a reply). inspect returns a context-length error or a refusal as an output whose text is
    the provider's message; llama.cpp's server silently lowers a cap that passes the window, so a
    reply ends as "cut by the cap" having spent fewer tokens than the cap."""
    said = redact_secrets(" ".join(str(out.error or text or stop).split())[:240], bearer=True)
    if stop in NOT_AN_ANSWER:
        if stop == "model_length":
            return f"context_overflow: the prompt does not fit the {window_words(spec)} (provider: {said})"
        return f"refused: the provider refused or filtered the request ({stop}: {said})"
    if getattr(out, "error", None):
        return f"model_error: {said}"
    if stop == "max_tokens" and cap and spent is not None and spent < cap:
        return (f"context_overflow: the reply was cut after {spent:,} of its {cap:,}-token cap: the "
                f"prompt ({fmt_count(inp)} tokens) and the cap pass the {window_words(spec)}")
    return ""


# the prompt's tokens as a server's context error counts them: vLLM's and OpenAI's "(1,547 in the
# messages, ...)", newer vLLM's "your request has 1547 input tokens", llama.cpp's "(1547 tokens, context ...)"
_PROMPT_TOLD = re.compile(r"([\d,]+) in the messages|request has ([\d,]+) input tokens|\(([\d,]+) tokens, context")


def prompt_tokens_told(error: str) -> int | None:
    """The prompt's size in the server's own tokens, from its context-length error (None: not said)."""
    m = _PROMPT_TOLD.search(error)
    if not m:
        return None
    return int(next(g for g in m.groups() if g).replace(",", ""))


def fmt_count(x: int | None) -> str:
    return "none" if x is None else f"{x:,}"


def short_error(e: BaseException) -> str:
    """``Type: message`` on one line, secrets masked (servers may echo the request's credentials)."""
    e = root_error(e)
    raw = str(e).strip()
    if raw.startswith("Request:"):  # inspect's ModelGenerateError: the request dumped, then the provider's error
        raw = raw.rsplit("\n\n", 1)[-1].strip() or raw
    s = raw.replace("\n", " ")
    cause = list(chain(e))[-1]
    if cause is not e and len(s) < 80:  # a generic wrapper ("Connection error."): name the cause
        s += f" ({type(cause).__name__}: {str(cause).strip().splitlines()[0][:160] if str(cause).strip() else ''})"
    return f"{type(e).__name__}: {redact_secrets(s, bearer=True)[:300]}"
