"""File helpers: atomic writes and JSON/JSONL readers whose errors name the file and line."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import DataError


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file + rename so a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append whole lines and fsync; a reader skips a torn final line (see ``read_jsonl``)."""
    if not rows:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_text(path: Path) -> str:
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 text (byte {e.start})") from None


def read_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None


def iter_jsonl(path: Path, *, tolerate_torn_tail: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object). A malformed line is a DataError naming file and line.

    With ``tolerate_torn_tail`` a final line without newline that fails to parse is skipped: that is
    what an append interrupted by a crash leaves behind, and the row will be recomputed.
    """
    text = read_text(path)
    lines = text.split("\n")
    last = len(lines)
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if tolerate_torn_tail and i == last:
                return
            raise DataError(f"{path}:{i}: malformed JSON line ({e.msg})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{i}: expected a JSON object, got {type(obj).__name__}")
        yield i, obj


def read_jsonl(path: Path, *, tolerate_torn_tail: bool = False) -> list[dict[str, Any]]:
    return [obj for _, obj in iter_jsonl(path, tolerate_torn_tail=tolerate_torn_tail)]


def require_fields(path: Path, line: int | None, obj: dict[str, Any], fields: list[str]) -> None:
    missing = [f for f in fields if f not in obj]
    if missing:
        where = f"{path}:{line}" if line else str(path)
        raise DataError(f"{where}: missing field(s) {', '.join(missing)}")
