"""The comparison columns as a reader sees them: the leaderboard's HTML opened in headless Chromium shows,
for each method compared with the baseline, Δ with its 95% interval, the paired tasks (groups) and the
minimum detectable effect, read back from the browser's DOM (not from the HTML text we wrote)."""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser

import pytest
from test_forest import _chromium
from test_leaderboard import make_run

from sourcebench.reports.leaderboard import write_report

pytestmark = pytest.mark.slow


class _Tables(HTMLParser):
    """Every table of a DOM as rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.row: list[str] | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag):  # type: ignore[no-untyped-def]
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables[-1].append(self.row)
            self.row = None

    def handle_data(self, data):  # type: ignore[no-untyped-def]
        if self.cell is not None:
            self.cell.append(data)


def dom_tables(exe: str, page, profile) -> list[list[list[str]]]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"]
    dom = subprocess.run([exe, *flags, "--dump-dom", page.as_uri()], check=False, capture_output=True, text=True,
                         timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    parser = _Tables()
    parser.feed(dom.stdout)
    return parser.tables


# Δ with its interval, or with "—" and why where the groups are too few for one (the fixture has 5)
INTERVAL = re.compile(r"^[+-]\d+\.\d (\[[+-]\d+\.\d, [+-]\d+\.\d\]|\(interval —, too few groups)")


def test_leaderboard_comparison_columns_in_headless_chromium(tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    paths = write_report(make_run(tmp_path), n_boot=200)
    tables = dom_tables(exe, paths["html"].resolve(), tmp_path / "profile")
    boards = [t for t in tables if t and any(c.startswith("Δ vs baseline") for c in t[0])]
    assert len(boards) == 2  # phantomwiki and apibench
    compared = {}
    for board in boards:
        head = board[0]
        col = {name: next(i for i, c in enumerate(head) if c.startswith(name))
               for name in ("method", "Δ vs baseline", "paired tasks", "MDE")}
        assert "95% CI" in head[col["Δ vs baseline"]]
        for r in board[1:]:
            if "baseline" not in r[col["method"]] and r[col["Δ vs baseline"]] != "—":
                compared[r[col["method"]]] = (r[col["Δ vs baseline"]], r[col["paired tasks"]], r[col["MDE"]])
    assert set(compared) == {"no_source"}, compared  # on phantomwiki; sourcelearn has no rows
    for method, (delta, pairs, mde) in compared.items():
        assert INTERVAL.match(delta), (method, delta)
        assert re.match(r"^\d+ of \d+ \(\d+ groups\)$", pairs), (method, pairs)
        assert re.match(r"^(\d+\.\d( \(not resolvable by this run\))?|none possible \(< \d+ groups\))$", mde), (method, mde)
