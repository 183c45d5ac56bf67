"""Evaluation protocols of the seed papers, as report options that work for every method.

* ``key-overlap`` (seed 002): accuracy per group of test tasks by how many of the keys their
  questions name (``Benchmark.task_keys``) the guidance tasks named too (``keyoverlap.py``); from
  the run folder and the benchmark data.
* ``break-even`` (seed 002): build cost / per-task saving against each method's zero-learning
  variant (``Method.zero_learning_variant``, else the baseline), in calls and tokens
  (``breakeven.py``); from usage.jsonl.
* ``prequential`` (seed 002): answer each task before learning from it; cumulative accuracy curve
  and gain over the method's stateless reference, with the learning cost that reference contains
  (``prequential.py``: the accuracies, paired test and curve of the streams).
* ``harmful`` (seed 001): harmful-entry leave-one-out over entry-based artifacts, with the task as
  unit and undetectable entries marked (``harmful.py``: the verdicts and rates).

Reports read run folders and render; they never call a model (an import-linter contract keeps this
package off ``harness.protocols``, the model layer and the runner). The two protocols that need new
answers are therefore split: the core (``harness/protocols/prequential.py`` and ``harmful.py``) makes
the calls and returns raw scores, the ``summarize`` of ``prequential.py`` and ``harmful.py`` here
turns them into the result, and ``sourcebench protocol NAME RUN_DIR`` (``harness/cli/protocol.py``)
joins the two and writes ``<run>/protocols/<name>.json``, calls counted under phase ``protocol``.
``sourcebench report RUN_DIR --protocols a,b`` appends the sections to the leaderboard
(``render.protocol_sections``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sourcebench.harness.errors import ConfigError

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
