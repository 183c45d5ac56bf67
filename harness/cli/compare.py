"""``sourcebench compare``: task by task, where a method won, lost or tied against a baseline, and why."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sourcebench.reports.compare import terminal_lines, write_page

from ..options import non_negative_int


def add_parser(sub: Any) -> argparse.ArgumentParser:
    c = sub.add_parser("compare", help="wins, losses and ties of a method against a baseline, task by task",
                       description="Pair the rows of two methods of a run folder task by task and list the wins, "
                       "losses and ties with the question, the reference, both answers and scores, the evidence "
                       "titles and each method's own context, plus per-group breakdowns; also written as "
                       "RUN_DIR/report/compare-METHOD-vs-BASELINE.html.")
    c.add_argument("run_dir", type=Path)
    c.add_argument("--method", required=True, help="the method to look at")
    c.add_argument("--baseline", default="hybrid_rag", help="the method it is compared with (default hybrid_rag)")
    c.add_argument("--show", type=non_negative_int, default=5, help="wins, losses and ties printed of each "
                   "(default 5; the HTML page lists all)")
    c.add_argument("--out", type=Path, help="folder of the HTML page (default RUN_DIR/report)")
    return c


def run(a: argparse.Namespace) -> int:
    comparison, page = write_page(a.run_dir, a.method, a.baseline, a.out)
    for line in terminal_lines(comparison, a.show):
        print(line)
    print(f"written: {page}")
    return 0
