"""``sourcebench cache merge``: merge the call and embedding caches of runs made apart."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..cache_merge import merge_caches
from ..errors import ConfigError
from .common import Parser


def add_parser(sub: Any) -> argparse.ArgumentParser:
    c = sub.add_parser("cache", help="merge the model-call and embedding caches of runs made apart")
    csub = c.add_subparsers(dest="cache_cmd", metavar="ACTION", parser_class=Parser)
    cm = csub.add_parser("merge", help="copy every cached call and embedding of SOURCE folders into --into",
                         description="Union of cache folders (or run folders, meaning their cache/): entries the "
                         "destination already has are kept. Then point a run or reproduce at it with --cache-dir.")
    cm.add_argument("sources", nargs="+", type=Path, metavar="SOURCE", help="cache folder or run folder")
    cm.add_argument("--into", required=True, type=Path, help="destination cache folder (created if missing)")

    return c


def run(a: argparse.Namespace) -> int:
    if a.cache_cmd != "merge":
        raise ConfigError("cache: choose an action, e.g. `sourcebench cache merge runs/a runs/b --into shared-cache`")
    for n in merge_caches(a.sources, a.into):
        print(f"{n.source}: {n.rows} entries, {n.added} new")
    print(f"merged into {a.into}; use it with --cache-dir {a.into}")
    return 0
