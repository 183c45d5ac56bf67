"""``sourcebench protocol NAME RUN_DIR``: run one evaluation protocol on a finished run folder.

Writes ``RUN_DIR/protocols/NAME.json`` and prints the protocol's tables; ``sourcebench report
RUN_DIR --protocols ...`` then puts them in the leaderboard. Protocols with model calls use the
run's cache, so running one again is free.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sourcebench.harness.method import Command

from . import PROTOCOLS, compute, parse_protocols

EPILOG = """examples:
  sourcebench protocol prequential runs/phantomwiki --methods hybrid_rag,awm --blocks 4
  sourcebench protocol harmful runs/phantomwiki --methods awm,sourcelearn --max-entries 20
  sourcebench protocol key-overlap runs/phantomwiki
  sourcebench report runs/phantomwiki --protocols key-overlap,break-even,prequential,harmful

key-overlap and break-even read the run folder only; prequential and harmful make model calls
(counted in usage.jsonl under phase 'protocol')."""


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
    from sourcebench.harness.errors import ConfigError

    try:
        return parse_protocols(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--protocols: ")) from None


def settings_of(a: argparse.Namespace) -> dict[str, Any]:
    return {"blocks": a.blocks, "block_size": a.block_size, "max_entries": a.max_entries, "repeats": a.repeats,
            "seed": a.protocol_seed}


def run(a: argparse.Namespace) -> int:
    from sourcebench.harness.registry import get_method_class

    from ..rundata import load_run
    from .render import protocol_sections

    methods = [m.strip() for m in (a.methods or "").split(",") if m.strip()] or None
    for m in methods or []:
        get_method_class(m)  # an unknown name is a one-line error before any work
    names = parse_protocols(a.name)
    for name in names:
        compute(name, a.run_dir, methods=methods, baseline=a.baseline, data_dir=a.data_dir,
                settings=settings_of(a), progress=print)
    from ..layout import Table, md_table

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
