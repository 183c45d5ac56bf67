"""The persistent call cache: re-running a finished experiment makes zero model calls."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..io import redact_secrets


class CallCache:
    """sqlite cache of model outputs. One file, WAL mode, safe across threads and processes.

    Each thread keeps one connection (opening one per call cost milliseconds on the event loop).
    ``synchronous=NORMAL`` with WAL: a committed entry survives the process being killed, since
    the log is in the OS's page cache; only a power cut can lose the last entries, whose calls
    are then made again.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            con = self._connect()
            with con:
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                            "created REAL)")
                con.execute("SELECT key, value FROM calls LIMIT 1").fetchall()
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise
            raise self._corrupt(e) from None
        except sqlite3.DatabaseError as e:  # "file is not a database", "database disk image is malformed"
            raise self._corrupt(e) from None

    def _corrupt(self, e: Exception) -> DataError:
        return DataError(f"{self.path}: the model-call cache is not a readable sqlite database ({e}); move it "
                         "away (its calls are then made again) and run again")

    def _connect(self) -> sqlite3.Connection:
        con, pid = getattr(self._local, "con", None), getattr(self._local, "pid", None)
        if con is None or pid != os.getpid():  # never reuse a connection across a fork
            con = sqlite3.connect(self.path, timeout=30)
            con.execute("PRAGMA synchronous=NORMAL")
            self._local.con, self._local.pid = con, os.getpid()
        return con

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached reply, or None: also for a value that is not the JSON object ``put`` writes (an
        edited or damaged entry is a miss, made again and overwritten, not an error mid-run)."""
        row = self._connect().execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
        if not row:
            return None
        try:
            value = json.loads(row[0])
        except (TypeError, ValueError):
            return None
        if not isinstance(value, dict) or not isinstance(value.get("text"), str) \
                or not all(isinstance(value.get(k), int) for k in ("input_tokens", "output_tokens")):
            return None
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store a reply, credentials masked (a server may echo the key in a reply)."""
        con = self._connect()
        with con:
            con.execute(
                "INSERT OR REPLACE INTO calls (key, value, created) VALUES (?, ?, ?)",
                (key, redact_secrets(json.dumps(value, ensure_ascii=False)), time.time()),
            )
