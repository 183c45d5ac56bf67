"""``sourcebench protocol NAME RUN_DIR``: run one evaluation protocol on a finished run folder.

Writes ``RUN_DIR/protocols/NAME.json`` and prints the protocol's tables; ``sourcebench report
RUN_DIR --protocols ...`` then puts them in the leaderboard. Protocols with model calls use the
run's cache, so running one again is free.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import ConfigError
from sourcebench.harness.io import atomic_write_json, read_json
from sourcebench.harness.method import Command
from sourcebench.reports.protocols import NEEDS_MODEL, PROTOCOLS, parse_protocols, result_path

EPILOG = """examples:
  sourcebench protocol prequential runs/phantomwiki --methods hybrid_rag,awm --blocks 4
  sourcebench protocol harmful runs/phantomwiki --methods awm,sourcelearn --max-entries 20
  sourcebench protocol key-overlap runs/phantomwiki
  sourcebench report runs/phantomwiki --protocols key-overlap,break-even,prequential,harmful

key-overlap and break-even read the run folder only; prequential and harmful make model calls
(counted in usage.jsonl under phase 'protocol')."""


def compute(name: str, run_dir: Path, *, methods: list[str] | None = None, baseline: str = "hybrid_rag",
            data_dir: Path | None = None, settings: dict[str, Any] | None = None,
            progress: Any = None) -> dict[str, Any]:
    """Run one protocol on a run folder, write ``<run>/protocols/<name>.json`` and return the result.

    key-overlap and break-even are computed from the run folder by the reports; prequential and harmful
    are run by the core (``harness.protocols.run``: model calls, raw scores), summarized by the reports
    (verdicts, rates, tests) and merged with the methods of an earlier result with the same settings.
    """
    run_dir = Path(run_dir)
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    if name in ("key-overlap", "break-even"):
        from sourcebench.reports.protocols import breakeven, keyoverlap
        from sourcebench.reports.rundata import load_run

        data = load_run(run_dir)
        result = (keyoverlap.compute(data, baseline=baseline, data_dir=data_dir, seed=int(settings.get("seed", 0)))
                  if name == "key-overlap"
                  else breakeven.compute(data, baseline=baseline))
    elif name in NEEDS_MODEL:
        from sourcebench.harness.protocols.run import run_protocol
        from sourcebench.reports.protocols import harmful, prequential

        raw = run_protocol(name, run_dir, methods=methods, data_dir=data_dir, settings=settings,
                           progress=progress or (lambda msg: None))
        summarize = prequential.summarize if name == "prequential" else harmful.summarize
        result = _merge(summarize(raw), result_path(run_dir, name))
    else:
        raise ConfigError(f"unknown protocol {name!r}; known: {', '.join(PROTOCOLS)}")
    atomic_write_json(result_path(run_dir, name), result)
    return result


def _merge(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """Keep the methods of an earlier result with the same settings that this run did not redo, so
    ``--methods a`` then ``--methods b`` leaves both in the file (a change of settings replaces it)."""
    if not path.exists():
        return result
    old = read_json(path)
    if old.get("settings") != result.get("settings") or old.get("benchmark") != result.get("benchmark"):
        return result
    done = {m["method"] for m in result["methods"]}
    result["methods"] = [m for m in old.get("methods", []) if m.get("method") not in done] + result["methods"]
    return result


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("protocol", help="run an evaluation protocol (key-overlap, break-even, prequential, "
                              "harmful) on a run folder", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    p.add_argument("name", choices=[*PROTOCOLS, "all"], help="the protocol")
    p.add_argument("run_dir", type=Path, help="run folder (sourcebench run --out DIR)")
    p.add_argument("--methods", help="comma-separated methods (default: every method of the run)")
    p.add_argument("--baseline", default="hybrid_rag", help="reference method of key-overlap and break-even")
    p.add_argument("--data-dir", type=Path, help="benchmark data folder (default: the run's, else the usual path)")
    add_settings(p)
    return p


def add_settings(p: argparse.ArgumentParser) -> None:
    """Options of the model-calling protocols (shared with ``sourcebench run --protocols``)."""
    g = p.add_argument_group("protocol settings")
    g.add_argument("--blocks", type=int, help="prequential: learning points per stream (default 4)")
    g.add_argument("--block-size", type=int, help="prequential: tasks per block (overrides --blocks)")
    g.add_argument("--max-entries", type=int, help="harmful: evaluated entries per artifact, seeded sample "
                   "(default 30; 0 = all)")
    g.add_argument("--repeats", type=int, help="harmful: paired evaluation repeats with model seeds (default 3)")
    g.add_argument("--protocol-seed", type=int, help="seed of the stream order and entry sample (default 0)")


def protocol_list(text: str) -> list[str]:
    """argparse type of ``--protocols``: validated names, so a typo fails before any work."""
    try:
        return parse_protocols(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--protocols: ")) from None


def settings_of(a: argparse.Namespace) -> dict[str, Any]:
    return {"blocks": a.blocks, "block_size": a.block_size, "max_entries": a.max_entries, "repeats": a.repeats,
            "seed": a.protocol_seed}


def run(a: argparse.Namespace) -> int:
    from sourcebench.harness.registry import get_method_class
    from sourcebench.reports.layout import md_table
    from sourcebench.reports.protocols.render import protocol_sections
    from sourcebench.reports.rundata import load_run
    from sourcebench.reports.table import Table

    methods = [m.strip() for m in (a.methods or "").split(",") if m.strip()] or None
    for m in methods or []:
        get_method_class(m)  # an unknown name is a one-line error before any work
    names = parse_protocols(a.name)
    for name in names:
        compute(name, a.run_dir, methods=methods, baseline=a.baseline, data_dir=a.data_dir,
                settings=settings_of(a), progress=print)
    data = load_run(a.run_dir)
    for title, tables in protocol_sections(data, names, baseline=a.baseline, data_dir=a.data_dir,
                                           seed=a.protocol_seed or 0):
        print(f"## {title}\n")
        for t in tables:
            print(md_table(t) if isinstance(t, Table) else f"({t.title}: {t.filename} in the report, "
                  "`sourcebench report RUN_DIR --protocols ...`)\n")
    print(f"written: {', '.join(str(a.run_dir / 'protocols' / f'{n}.json') for n in names)}")
    return 0


COMMAND = Command(name="protocol", add_parser=add_parser, run=run)
