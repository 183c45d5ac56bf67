"""Evaluation protocols of the seed papers, as report options that work for every method.

* ``key-overlap`` (seed 002): accuracy per group of test tasks by how many of the keys their
  questions name (``Benchmark.task_keys``) the guidance tasks named too (``keyoverlap.py``); from
  the run folder and the benchmark data.
* ``break-even`` (seed 002): build cost / per-task saving against each method's zero-learning
  variant (``Method.zero_learning_variant``, else the baseline), in calls and tokens
  (``breakeven.py``); from usage.jsonl.
* ``prequential`` (seed 002): answer each task before learning from it; cumulative accuracy curve
  and gain over the method's stateless reference, with the learning cost that reference contains
  (``prequential.py``); makes model calls.
* ``harmful`` (seed 001): harmful-entry leave-one-out over entry-based artifacts, with the task as
  unit and undetectable entries marked (``harmful.py``); makes model calls.

Protocols that make model calls run through ``compute`` (``sourcebench protocol NAME RUN_DIR``):
the run's backend, cache and artifacts, calls counted under phase ``protocol``, results written to
``<run>/protocols/<name>.json``. ``sourcebench report RUN_DIR --protocols a,b`` appends the
sections to the leaderboard (``render.protocol_sections``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import ConfigError
from sourcebench.harness.io import atomic_write_json
from sourcebench.harness.runner import RunLock

PROTOCOLS = ("key-overlap", "break-even", "prequential", "harmful")
NEEDS_MODEL = ("prequential", "harmful")
ALIASES = {"keyoverlap": "key-overlap", "key_overlap": "key-overlap", "breakeven": "break-even",
           "break_even": "break-even", "harmful-entry": "harmful", "harmful_entry": "harmful", "online": "prequential"}


def parse_protocols(names: list[str] | str | None) -> list[str]:
    """Validated protocol names in the order given (``all`` = every protocol, ``none`` = no protocol);
    unknown names are an error."""
    if names is None:
        return []
    items = [x.strip() for x in (names.split(",") if isinstance(names, str) else names) if x.strip()]
    out: list[str] = []
    if items == ["none"]:
        return out
    for x in items:
        if x == "all":
            out += [p for p in PROTOCOLS if p not in out]
            continue
        name = ALIASES.get(x, x)
        if name not in PROTOCOLS:
            raise ConfigError(f"--protocols: unknown protocol {x!r}; known: {', '.join(PROTOCOLS)}, all")
        if name not in out:
            out.append(name)
    return out


def default_protocols(data: Any) -> list[str]:
    """Sections a report shows when none are asked for: key-overlap and break-even (no model calls)
    when a method of the run learns from guidance, since both say how that learning pays off;
    and any protocol already computed for the run (``sourcebench protocol NAME RUN_DIR``)."""
    learns = any(m.get("uses_guidance") for m in (data.run.get("methods") or []))
    names = [p for p in PROTOCOLS if p not in NEEDS_MODEL] if learns else []
    return names + [p for p in NEEDS_MODEL if result_path(data.run_dir, p).exists()]


def result_path(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / "protocols" / f"{name}.json"


def compute(name: str, run_dir: Path, *, methods: list[str] | None = None, baseline: str = "hybrid_rag",
            data_dir: Path | None = None, settings: dict[str, Any] | None = None,
            progress: Any = None) -> dict[str, Any]:
    """Run one protocol on a run folder, write ``<run>/protocols/<name>.json`` and return the result."""
    run_dir = Path(run_dir)
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    if name in ("key-overlap", "break-even"):
        from ..rundata import load_run
        from . import breakeven, keyoverlap

        data = load_run(run_dir)
        result = (keyoverlap.compute(data, baseline=baseline, data_dir=data_dir, seed=int(settings.get("seed", 0)))
                  if name == "key-overlap"
                  else breakeven.compute(data, baseline=baseline))
    elif name in NEEDS_MODEL:
        result = _merge(_with_model(name, run_dir, methods, data_dir, settings, progress or (lambda msg: None)),
                        result_path(run_dir, name))
    else:
        raise ConfigError(f"unknown protocol {name!r}; known: {', '.join(PROTOCOLS)}")
    atomic_write_json(result_path(run_dir, name), result)
    return result


def _with_model(name: str, run_dir: Path, methods: list[str] | None, data_dir: Path | None,
                settings: dict[str, Any], progress: Any) -> dict[str, Any]:
    from sourcebench.harness.protocols.session import RunSession

    with RunLock(run_dir):
        session = RunSession(run_dir, methods=methods, data_dir=data_dir)
        if name == "prequential":
            from .prequential import PrequentialSettings, run

            coro = run(session, PrequentialSettings(**_known(settings, PrequentialSettings)), progress)
        else:
            from .harmful import HarmfulSettings, run  # type: ignore[assignment]

            coro = run(session, HarmfulSettings(**_known(settings, HarmfulSettings)), progress)  # type: ignore[arg-type]
        result = asyncio.run(coro)
        result["live_calls"] = session.live_calls
        return result


def _merge(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """Keep the methods of an earlier result with the same settings that this run did not redo, so
    ``--methods a`` then ``--methods b`` leaves both in the file (a change of settings replaces it)."""
    if not path.exists():
        return result
    from sourcebench.harness.io import read_json

    old = read_json(path)
    if old.get("settings") != result.get("settings") or old.get("benchmark") != result.get("benchmark"):
        return result
    done = {m["method"] for m in result["methods"]}
    result["methods"] = [m for m in old.get("methods", []) if m.get("method") not in done] + result["methods"]
    return result


def _known(settings: dict[str, Any], model: Any) -> dict[str, Any]:
    """The settings that apply to this protocol (the CLI passes one bag for all of them)."""
    return {k: v for k, v in settings.items() if k in model.model_fields}
