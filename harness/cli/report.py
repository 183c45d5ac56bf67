"""``sourcebench report``: write the leaderboard of a run folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sourcebench.reports.leaderboard import write_report

from .protocol import protocol_list


def add_parser(sub: Any) -> argparse.ArgumentParser:
    rep = sub.add_parser("report", help="write the leaderboard (Markdown, CSV, HTML) of a run folder, or of "
                         "several merged where they are comparable",
                         description="With several RUN_DIRs (runs made apart: another backend, machine or day), "
                         "one leaderboard of their methods, each named 'method [model]', compared only on the "
                         "(benchmark, source, seed) cells whose splits, data and evaluator match in every folder; "
                         "the others are listed with the reason, and folders with nothing comparable are refused.")
    rep.add_argument("run_dir", type=Path, nargs="+")
    rep.add_argument("--baseline", default="hybrid_rag", help="method the deltas and tests are relative to")
    rep.add_argument("--out", type=Path, help="report folder (default RUN_DIR/report; merged: the first "
                     "RUN_DIR's report-merged)")
    rep.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    rep.add_argument("--protocols", type=protocol_list, help="protocol sections: key-overlap, break-even, "
                     "prequential, harmful, all or none (prequential and harmful are read from RUN_DIR/protocols, "
                     "see `sourcebench protocol`). Default: key-overlap and break-even when a method learns from "
                     "guidance, plus any protocol already computed for the run")
    rep.add_argument("--data-dir", type=Path, help="benchmark data folder for the key-overlap protocol")

    return rep


def run(a: argparse.Namespace) -> int:
    if len(a.run_dir) > 1:
        return _merged(a)
    paths = write_report(a.run_dir[0], out_dir=a.out, baseline=a.baseline, seed=a.seed, protocols=a.protocols,
                         data_dir=a.data_dir)
    md = Path(paths["md"]).read_text(encoding="utf-8")
    print(md)
    print(f"written: {', '.join(str(p) for p in paths.values())}")
    return 0


def _merged(a: argparse.Namespace) -> int:
    from sourcebench.reports.merge import merge_runs, merged_baseline

    out = a.out or a.run_dir[0] / "report-merged"
    plan, data = merge_runs(a.run_dir, out)
    for folder, label in plan.labels.items():
        print(f"{label}: {folder}")
    print(f"compared: {len(plan.cells)} cell(s) (benchmark, source, seed) held alike by every folder")
    for line in plan.left_out:
        print(f"not comparable, left out: {line}")
    paths = write_report(data, out_dir=out, baseline=merged_baseline(plan, a.baseline), seed=a.seed,
                         protocols=a.protocols or [], data_dir=a.data_dir)
    print(f"written: {', '.join(str(p) for p in paths.values())}, {out / 'merge.json'}")
    return 0
