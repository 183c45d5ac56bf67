"""Credentials kept out of what inspect-ai records: the provider's errors and replies masked where they
first reach this process, and a filter on inspect's log handler."""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

from ..io import redact_secrets, secret_values
from .failures import chain


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


def _masked(v: Any, secrets: list[str], bearer: bool = True) -> Any:
    """``v`` with the ``secrets`` (and passwords in URLs; with ``bearer``, any ``Bearer <token>``)
    masked in its strings, dicts and lists walked; ``v`` itself, the same object, when it holds none."""
    if isinstance(v, str):
        if (bearer and "earer" in v) or "://" in v or any(x in v for x in secrets):
            new = redact_secrets(v, bearer=bearer)
            return new if new != v else v
        return v
    if isinstance(v, (list, tuple)):
        items = [_masked(x, secrets, bearer) for x in v]
        return v if all(a is b for a, b in zip(items, v)) else type(v)(items)
    if isinstance(v, dict):
        pairs = {k: _masked(x, secrets, bearer) for k, x in v.items()}
        return v if all(pairs[k] is x for k, x in v.items()) else pairs
    return v


def _mask_exception(e: BaseException) -> None:
    """Mask credentials in an exception and its causes in place: its type, status code and retry
    class stay what inspect's retry and this layer's classification read."""
    secrets = secret_values()
    for x in chain(e):
        with contextlib.suppress(Exception):
            args = _masked(x.args, secrets)
            if args is not x.args:
                x.args = args
        for k, v in list(getattr(x, "__dict__", {}).items()):
            new = _masked(v, secrets)
            if new is not v:
                with contextlib.suppress(Exception):
                    setattr(x, k, new)


def _mask_reply(result: Any) -> Any:
    """A provider's return value (an output, an exception, or either with its ``ModelCall``) with
    credentials masked: what inspect records of a call is what the provider returns. A reply's text
    is masked as the call cache holds it (the environment's credentials, passwords in URLs); a
    ``Bearer`` token is masked only in errors and raw bodies, since a model may well write
    ``Bearer YOUR_TOKEN`` in an answer."""
    if isinstance(result, tuple):
        return tuple(_mask_reply(x) for x in result)
    if isinstance(result, BaseException):
        _mask_exception(result)
        return result
    dump = getattr(result, "model_dump", None)
    if dump is None:
        return result
    data = dump()
    secrets = secret_values()
    if "choices" in data:  # an output: its error as an error, the rest as a reply
        masked = {k: _masked(x, secrets, bearer=k == "error") for k, x in data.items()}
        masked = data if all(masked[k] is x for k, x in data.items()) else masked
    else:
        masked = _masked(data, secrets)
    if masked is data:
        return result
    fresh = type(result).model_validate(masked)
    private = getattr(result, "__pydantic_private__", None)
    if private:  # a ModelCall's filter, say, which dumping drops
        fresh.__pydantic_private__ = dict(private)
    return fresh


def mask_provider(model: Any) -> None:
    """Mask credentials in whatever leaves the provider of ``model``, before inspect records it.

    inspect writes a failed call's error, traceback and error body into the sample's transcript in
    the ``.eval`` log, and a killed run's log keeps them; a server that echoes the request's key (in
    an HTTP 401's body, say) would put it there. Wrapping the provider's ``generate`` masks the key
    where it first reaches this process, so it is never written."""
    api = getattr(model, "api", None)
    if api is None or getattr(api, "_sourcebench_masked", False):
        return
    inner = api.generate

    @functools.wraps(inner)
    async def generate(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await inner(*args, **kwargs)
        except Exception as e:
            _mask_exception(e)
            raise
        return _mask_reply(result)

    api.generate = generate
    api._sourcebench_masked = True


def guard_inspect_logging() -> None:
    """Put the redacting filter on inspect's log handler (it exists once an eval has started)."""
    for name in ("", "inspect_ai"):
        for h in logging.getLogger(name).handlers:
            if hasattr(h, "trace_logger") and not any(isinstance(f, _RedactingLogFilter) for f in h.filters):
                h.addFilter(_RedactingLogFilter())
