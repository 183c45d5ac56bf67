"""Result rows as read back from ``results.jsonl``: checked, not trusted.

Both the runner (which rows are done) and the reports (the numbers) read this file; a row edited by
hand or written twice must stop them with one line naming the file and line, not become a score. A
score that is the string "0.9" was once averaged as 0.9 by one reader and skipped as done by the
other; a line written twice counted twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import DataError
from .io import iter_jsonl, require_fields

RESULT_KEY = ("benchmark", "source", "method", "seed", "task_id")


def check_result_row(path: Path, line: int, row: dict[str, Any]) -> None:
    """The fields every reader relies on have the type and range the runner writes."""
    require_fields(path, line, row, [*RESULT_KEY, "score"])
    where = f"{path}:{line}"
    for k in ("benchmark", "source", "method"):
        if not isinstance(row[k], str) or not row[k]:
            raise DataError(f"{where}: field {k} must be a non-empty string, got {row[k]!r}")
    seed = row["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DataError(f"{where}: field seed must be a non-negative integer, got {seed!r}")
    if not isinstance(row["task_id"], (str, int)) or isinstance(row["task_id"], bool) or row["task_id"] == "":
        raise DataError(f"{where}: field task_id must be a non-empty string, got {row['task_id']!r}")
    score = row["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) \
            or not 0.0 <= score <= 1.0:
        raise DataError(f"{where}: field score must be a number between 0 and 1, got {score!r}")
    for k in ("correct", "failed"):
        if k in row and not isinstance(row[k], bool):
            raise DataError(f"{where}: field {k} must be true or false, got {row[k]!r}")
    if "epochs" in row:
        ep = row["epochs"]
        if not isinstance(ep, list) or len(ep) < 2 or not all(
                isinstance(e, dict) and isinstance(e.get("score"), (int, float)) and not isinstance(e["score"], bool)
                and math.isfinite(e["score"]) and 0.0 <= e["score"] <= 1.0 for e in ep):
            raise DataError(f"{where}: field epochs must list at least 2 epochs, each with a score between 0 and 1")


def epochs_of(row: dict[str, Any]) -> int:
    """How many answers the row's score is the mean of (``--epochs``; 1 for a row without epochs)."""
    return len(row["epochs"]) if isinstance(row.get("epochs"), list) else 1


def check_epochs_agree(path: Path, rows: list[dict[str, Any]], epochs: int) -> None:
    """A folder holds one number of epochs: scores averaged over 3 answers and single answers are not
    comparable (their variance differs), so a run asking for another number stops naming the file."""
    other = next((r for r in rows if epochs_of(r) != epochs), None)
    if other is not None:
        raise DataError(f"{path}: holds rows answered with {epochs_of(other)} epoch(s) (method {other['method']}); "
                        f"this run asks for {epochs}: use another --out")


def row_key(row: dict[str, Any]) -> tuple:
    return (row["benchmark"], row["source"], row["method"], int(row["seed"]), str(row["task_id"]))


def iter_result_rows(path: Path, *, tolerate_torn_tail: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, row) of a results file, each checked; a second row for the same (benchmark, source,
    method, seed, task) is an error naming both lines (a run appends one row per task)."""
    seen: dict[tuple, int] = {}
    for line, row in iter_jsonl(path, tolerate_torn_tail=tolerate_torn_tail):
        check_result_row(path, line, row)
        key = row_key(row)
        if key in seen:
            raise DataError(f"{path}:{line}: duplicate result row (the same benchmark, source, method, seed and "
                            f"task as line {seen[key]}); remove one of the two lines")
        seen[key] = line
        yield line, row


def read_result_rows(path: Path, *, tolerate_torn_tail: bool = True) -> list[dict[str, Any]]:
    return [row for _, row in iter_result_rows(path, tolerate_torn_tail=tolerate_torn_tail)]
