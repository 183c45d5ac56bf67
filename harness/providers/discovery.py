"""What an OpenAI-compatible server says about the model it serves: its context window.

inspect-ai does not ask, so an ``openai-api/`` model had no window and every method fell back to an
assumed budget. Servers say it in different places:

* vLLM lists ``max_model_len`` for each model in ``GET /v1/models``;
* llama.cpp's ``llama-server`` reports ``n_ctx`` on ``GET /props`` (at the top level or in
  ``default_generation_settings``, by version);
* LM Studio, Ollama, llama-cpp-python's server and the hosted APIs say nothing there: the window is
  then ``--context-window`` or unknown.

Each request has a short timeout; an endpoint that does not answer is simply not a source.
"""

from __future__ import annotations

import os
from typing import Any

DISCOVERY_TIMEOUT_S = 5.0
ORIGIN_OPTION = "--context-window"
ORIGIN_MODELS = "server: max_model_len in /v1/models"
ORIGIN_PROPS = "server: n_ctx in /props"


def _service(name: str) -> tuple[str, str] | None:
    """(environment prefix, model id) of a model served over an OpenAI-compatible endpoint."""
    parts = name.split("/")
    if parts[0] == "openai-api" and len(parts) >= 3:
        return parts[1].upper().replace("-", "_"), "/".join(parts[2:])
    if parts[0] == "vllm" and len(parts) >= 2:
        return "VLLM", "/".join(parts[1:])
    return None


def _get(url: str, key: str | None) -> Any:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(url, headers=headers, timeout=DISCOVERY_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        return r.json()
    except ValueError:
        return None


def _positive(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else None


def discover_context_window(name: str, base_url: str | None) -> tuple[int, str] | None:
    """(window in tokens, where it was read) from the server serving ``name``, or None."""
    svc = _service(name)
    if svc is None or not base_url:
        return None
    prefix, model_id = svc
    key = os.environ.get(f"{prefix}_API_KEY")
    base = base_url.rstrip("/")
    listing = _get(f"{base}/models", key)
    if isinstance(listing, dict) and isinstance(listing.get("data"), list):
        entries = [m for m in listing["data"] if isinstance(m, dict)]
        mine = [m for m in entries if m.get("id") == model_id] or (entries if len(entries) == 1 else [])
        if mine and (n := _positive(mine[0].get("max_model_len"))):
            return n, ORIGIN_MODELS
    root = base.removesuffix("/v1")
    props = _get(f"{root}/props", key)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        n = _positive(props.get("n_ctx")) or (_positive(settings.get("n_ctx")) if isinstance(settings, dict) else None)
        if n:
            return n, ORIGIN_PROPS
    return None
