"""``sourcebench judge``: score a responses file with an official evaluator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sourcebench.judges.apibench_ast import evaluate_file

from ..errors import ConfigError
from .common import Parser


def add_parser(sub: Any) -> argparse.ArgumentParser:
    j = sub.add_parser("judge", help="score a responses file with an official evaluator")
    jsub = j.add_subparsers(dest="judge_cmd", metavar="EVALUATOR", parser_class=Parser)
    ja = jsub.add_parser("apibench", help="the APIBench AST evaluator (official verdicts)")
    ja.add_argument("--hub", required=True, choices=["torchhub", "huggingface", "tensorflowhub"])
    ja.add_argument("--responses", required=True, type=Path, help="JSON lines of {question_id, text}")
    ja.add_argument("--data-dir", type=Path, help="folder holding the apibench data files")
    ja.add_argument("--torchhub-rule", choices=["current", "paper"], default="current",
                    help="a TorchHub response without an api_call: current (Gorilla's script since 2023-06-03: "
                         "neither correct nor hallucination) or paper (the earlier script: a hallucination)")
    return j


def run(a: argparse.Namespace) -> int:
    if a.judge_cmd != "apibench":
        raise ConfigError("judge: choose an evaluator, e.g. `sourcebench judge apibench --hub torchhub --responses F`")
    rows, totals = evaluate_file(a.hub, a.responses, a.data_dir, torchhub_rule=a.torchhub_rule)
    for r in rows:
        print(json.dumps({"question_id": r["question_id"], "correct": r["correct"], "hallucination": r["hallucination"]}))
    print(json.dumps({"totals": totals, **({"torchhub_rule": a.torchhub_rule} if a.hub == "torchhub" else {})}))
    return 0
