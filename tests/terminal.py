"""Run the CLI under a pseudo-terminal, as a user types it: stdout and stderr are a tty, so the code paths
a redirected run never takes (inspect's display, rich's live progress) are the ones tested."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]|\x1b\][^\x07]*\x07")


@dataclass
class TerminalRun:
    rc: int
    raw: str  # what the terminal received, control sequences included

    @property
    def text(self) -> str:
        """The output without control sequences, carriage returns as line breaks."""
        return _ANSI.sub("", self.raw).replace("\r\n", "\n").replace("\r", "\n")


def run_in_terminal(args: list[str], cwd: Path, timeout: float = 600, env: dict[str, str] | None = None,
                    columns: int = 120, rows: int = 40) -> TerminalRun:
    """``sourcebench ARGS`` (``python -m sourcebench.harness.cli``) with a pseudo-terminal as its stdin,
    stdout and stderr; returns its exit code and everything it wrote. Killed after ``timeout`` seconds."""
    master, slave = pty.openpty()
    try:
        import fcntl
        import struct
        import termios

        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    except (ImportError, OSError):
        pass
    full_env = {**os.environ, **(env or {}), "TERM": "xterm-256color", "COLUMNS": str(columns),
                "LINES": str(rows)}
    # the suite's default (tests/conftest.py) is a redirected run's; a terminal user has no such variable
    full_env.pop("INSPECT_DISPLAY", None)
    proc = subprocess.Popen([sys.executable, "-m", "sourcebench.harness.cli", *args], cwd=cwd, env=full_env,
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True, start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"sourcebench {' '.join(args)} did not end in {timeout} s:\n"
                                   + b"".join(chunks).decode(errors="replace")[-3000:])
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    data = b""
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                # drain what is left, then stop
                while select.select([master], [], [], 0.1)[0]:
                    try:
                        data = os.read(master, 65536)
                    except OSError:
                        data = b""
                    if not data:
                        break
                    chunks.append(data)
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return TerminalRun(rc, b"".join(chunks).decode(errors="replace"))
