"""Running a model-calling protocol on a finished run folder: the core's half of ``sourcebench protocol``.

Holds the run's lock (a protocol appends to the run's usage.jsonl and cache, which a resumed run
writes too), re-enters the run on its own backend (``RunSession``), runs the protocol's streams or
leave-one-out and returns its raw result with the number of live calls it made (0 on a rerun: every
call is in the run's cache). The statistics of the raw result are the reports' (``summarize`` in
``reports/protocols/``); ``harness/cli/protocol.py`` joins the two and writes the file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import ConfigError

MODEL_PROTOCOLS = ("prequential", "harmful")


def run_protocol(name: str, run_dir: Path, *, methods: list[str] | None = None, data_dir: Path | None = None,
                 settings: dict[str, Any] | None = None, progress: Any = None) -> dict[str, Any]:
    """The raw result of the model-calling protocol ``name`` on ``run_dir`` (``settings``: one bag for every
    protocol, each takes the keys it knows; None values are left to the defaults)."""
    from sourcebench.harness.runner import RunLock

    from . import harmful, prequential
    from .session import RunSession

    if name not in MODEL_PROTOCOLS:
        raise ConfigError(f"unknown model-calling protocol {name!r}; known: {', '.join(MODEL_PROTOCOLS)}")
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    progress = progress or (lambda msg: None)
    with RunLock(Path(run_dir)):
        session = RunSession(Path(run_dir), methods=methods, data_dir=data_dir)
        if name == "prequential":
            coro = prequential.run(session, prequential.PrequentialSettings(
                **_known(settings, prequential.PrequentialSettings)), progress)
        else:
            coro = harmful.run(session, harmful.HarmfulSettings(**_known(settings, harmful.HarmfulSettings)),
                               progress)
        result = asyncio.run(coro)
        result["live_calls"] = session.live_calls
        return result


def _known(settings: dict[str, Any], model: Any) -> dict[str, Any]:
    """The settings that apply to this protocol (the CLI passes one bag for all of them)."""
    return {k: v for k, v in settings.items() if k in model.model_fields}
