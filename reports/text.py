"""Free text as the reports show it: anything shaped like a credential masked by the core's redaction
(``redact_credentials``), since a report is meant to be shared and error messages or commands can echo keys."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sourcebench.harness.io import redact_credentials


def safe(value: Any) -> str:
    """Text with anything credential-shaped masked (``***``)."""
    return redact_credentials("" if value is None else str(value))


def safe_url(url: Any) -> str:
    """A base URL without user:password, query or fragment (where tokens sometimes ride along)."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return safe(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return safe(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


__all__ = ["safe", "safe_url"]
