"""A run typed in a terminal: every display mode works under a pseudo-terminal and redirected, and the
mode asked for is the one inspect shows (its default would otherwise be fixed by the first model call)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.terminal import run_in_terminal

RUN = ["run", "--benchmark", "phantomwiki", "--opt", "max_difficulty=2", "--methods", "no_source",
       "--embedder", "hash", "--seeds", "0", "--limit", "2", "--model", "scripted/extractive", "--no-report"]
PANEL = "total time:"  # inspect's task panel (plain, rich and full displays print it when a task ends)


def test_default_display_in_a_terminal(tmp_path):
    got = run_in_terminal([*RUN, "--out", str(tmp_path / "run")], cwd=tmp_path)
    assert got.rc == 0, got.text[-3000:]
    assert "AttributeError" not in got.text
    assert (tmp_path / "run" / "results.jsonl").read_text().count("\n") == 2
    assert PANEL in got.text  # a terminal's default is inspect's plain display


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["full", "conversation", "rich", "plain", "log", "none"])
def test_every_display_mode_in_a_terminal_and_redirected(tmp_path, mode):
    got = run_in_terminal([*RUN, "--display", mode, "--out", str(tmp_path / "tty")], cwd=tmp_path)
    assert got.rc == 0, got.text[-3000:]
    assert (PANEL in got.text) == (mode not in ("none", "log")), got.text[-3000:]
    redirected = subprocess.run([sys.executable, "-m", "sourcebench.harness.cli", *RUN, "--display", mode,
                                 "--out", str(tmp_path / "file")], cwd=tmp_path, capture_output=True, text=True,
                                timeout=600)
    assert redirected.returncode == 0, redirected.stdout[-2000:] + redirected.stderr[-2000:]
    out = redirected.stdout + redirected.stderr
    assert (PANEL in out) == (mode not in ("none", "log")), out[-3000:]


def test_a_redirected_run_shows_no_inspect_panels(tmp_path):
    """Redirected, the default is no inspect display: the preflight's call must not fix inspect's default."""
    got = subprocess.run([sys.executable, "-m", "sourcebench.harness.cli", *RUN, "--out", str(tmp_path / "run")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    assert PANEL not in got.stdout + got.stderr
