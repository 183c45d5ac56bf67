"""``sourcebench report``: write the leaderboard of a run folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.protocols.cli import protocol_list


def add_parser(sub: Any) -> argparse.ArgumentParser:
    rep = sub.add_parser("report", help="write the leaderboard (Markdown, CSV, HTML) of a run folder")
    rep.add_argument("run_dir", type=Path)
    rep.add_argument("--baseline", default="hybrid_rag", help="method the deltas and tests are relative to")
    rep.add_argument("--out", type=Path, help="report folder (default RUN_DIR/report)")
    rep.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    rep.add_argument("--protocols", type=protocol_list, help="protocol sections: key-overlap, break-even, "
                     "prequential, harmful, all or none (prequential and harmful are read from RUN_DIR/protocols, "
                     "see `sourcebench protocol`). Default: key-overlap and break-even when a method learns from "
                     "guidance, plus any protocol already computed for the run")
    rep.add_argument("--data-dir", type=Path, help="benchmark data folder for the key-overlap protocol")

    return rep


def run(a: argparse.Namespace) -> int:
    paths = write_report(a.run_dir, out_dir=a.out, baseline=a.baseline, seed=a.seed, protocols=a.protocols,
                         data_dir=a.data_dir)
    md = Path(paths["md"]).read_text(encoding="utf-8")
    print(md)
    print(f"written: {', '.join(str(p) for p in paths.values())}")
    return 0
