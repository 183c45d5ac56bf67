"""The reports' one table model: ``Table`` of ``Row``s whose cells are display text (``str``, ``Link``)
or a ``Cell`` (an accuracy with its interval, Δ, best/second mark and health marks).

Every table of every report is built into this model: the leaderboard's, the protocols', the paper
tables of ``reports.tables`` and the reproduction page's. ``reports.layout`` is its one Markdown and
HTML renderer and ``reports.export`` writes it as CSV and LaTeX, so a number is formatted in one place
and the files of one table cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Self

NA = "—"
NOT_RUN = "not run"
DAGGER = "\u2020"  # a value built on cells that lost more than the allowed share of their work
INCOMPLETE_MARK = "\u2021"  # a value whose cell and baseline cover different tasks
MARK = "\u00a7"  # a value that includes a substitute source (reports.provenance_marks)
ARROW_UP, ARROW_DOWN, ARROW_ZERO = "↑", "↓", "±"


@dataclass
class Cell:
    """One table cell: an accuracy (``value``, fraction) with its statistics, or a preformatted text."""

    value: float | None = None
    text: str = ""  # preformatted content for non-accuracy cells (counts, tokens, percentages)
    delta: float | None = None  # pp, from displayed values
    delta_exact: float | None = None  # pp, unrounded
    delta_ci: tuple[float, float] | None = None  # pp, the paired test's inverted interval of delta
    incomplete: str = ""  # why the comparison's two cells cover different tasks ("" when they do not)
    mark: str = ""  # "best" | "second" | ""
    ci: tuple[float, float] | None = None
    n: int | None = None  # distinct test tasks behind the value
    status: str = "ok"  # "ok" | "not run"
    reason: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list, repr=False)  # result rows, for paired tests
    # why the cells behind this value are degraded (harness/health.py); shown with a dagger and a note
    degraded: list[str] = field(default_factory=list)
    # footnotes of the sources behind this value that are not their pinned tree (reports/provenance_marks.py)
    substitute: list[str] = field(default_factory=list)

    @property
    def shown(self) -> float | None:
        """The value as printed (%, one decimal), the basis of deltas and marks."""
        return None if self.value is None or math.isnan(self.value) else float(f"{100.0 * self.value:.1f}")


class Link(str):
    """Cell text that links to ``href`` (a page beside the report, a log viewer URL); elsewhere (CSV,
    terminal) it is its text."""

    href: str

    def __new__(cls, text: str, href: str) -> Self:
        out = super().__new__(cls, text)
        out.href = href
        return out


CellValue = str | Cell  # a str may be a Link


@dataclass
class Row:
    """A table row: its label columns (``stub``), its data cells and whether a rule precedes it.

    A row reads as the sequence of all its columns, labels first, so a text table's rows index like lists.
    """

    stub: list[str]
    cells: list[CellValue]
    rule: bool = False

    def _all(self) -> list[CellValue]:
        return [*self.stub, *self.cells]

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __setitem__(self, i: Any, value: Any) -> None:
        everything = self._all()
        everything[i] = value
        n = len(self.stub)
        self.stub, self.cells = [str(s) for s in everything[:n]], everything[n:]

    def __len__(self) -> int:
        return len(self.stub) + len(self.cells)

    def __iter__(self) -> Iterator[CellValue]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return (self.stub, self.cells, self.rule) == (other.stub, other.cells, other.rule)
        if isinstance(other, (list, tuple)):
            return self._all() == list(other)
        return NotImplemented


@dataclass
class Table:
    """A titled table. ``header`` names every column, the ``stub`` label columns first; ``rows`` given as
    plain lists become ``Row``s with their first ``stub`` entries as labels. ``groups`` span headings
    over consecutive data columns; ``caption`` (paragraphs) and ``note`` (one line) are shown under it,
    then ``notes`` and the footnotes its cells' marks need (``footnotes``). ``stats`` are the paired
    comparisons behind a table's Δs (``reports.grid.stats_table``); ``show_ci`` prints each accuracy's
    interval beside it."""

    title: str
    header: list[str]
    rows: list[Row] = field(default_factory=list)
    note: str = ""
    id: str = ""
    stub: int = 0
    caption: list[str] = field(default_factory=list)
    groups: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)
    show_ci: bool = False

    def __post_init__(self) -> None:
        self.rows = [r if isinstance(r, Row) else Row(list(r[: self.stub]), list(r[self.stub:])) for r in self.rows]

    @property
    def stub_header(self) -> list[str]:
        return self.header[: self.stub]

    @property
    def columns(self) -> list[str]:
        """The data columns' headings."""
        return self.header[self.stub:]

    def group_per_column(self) -> list[str]:
        """The spanning heading over each data column ("" where none)."""
        out: list[str] = []
        for label, span in self.groups:
            out += [label] * span
        return out + [""] * (len(self.columns) - len(out))

    def cells(self) -> Iterator[Cell]:
        return (c for r in self.rows for c in r.cells if isinstance(c, Cell))


def pct_text(x: float | None, digits: int = 1) -> str:
    return NA if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def delta_plain(d: float) -> str:
    arrow = ARROW_UP if d > 0 else ARROW_DOWN if d < 0 else ARROW_ZERO
    return f"{arrow}{abs(d):.1f}"


def ci_plain(c: Cell) -> str:
    if not c.ci or math.isnan(c.ci[0]):
        return ""
    return f"[{100 * c.ci[0]:.1f}, {100 * c.ci[1]:.1f}]"


def marks(c: Cell) -> str:
    """The health and provenance marks after a value."""
    return (DAGGER if c.degraded else "") + (INCOMPLETE_MARK if c.incomplete else "") + (MARK if c.substitute else "")


def as_cell(c: CellValue) -> Cell:
    """A text cell as a ``Cell`` holding that text (for the exports, which write every cell's fields)."""
    return c if isinstance(c, Cell) else Cell(text=str(c))


def cell_plain(c: CellValue, show_ci: bool = False) -> str:
    """Unformatted text of a cell (CSV ``shown`` column, figure labels, the terminal)."""
    if not isinstance(c, Cell):
        return str(c)
    if c.status == NOT_RUN:
        return NOT_RUN
    if c.value is None:
        return c.text or NA
    out = pct_text(c.shown) + marks(c)
    if c.delta is not None:
        out += " " + delta_plain(c.delta)
    if show_ci and ci_plain(c):
        out += " " + ci_plain(c)
    return out


def footnotes(t: Table) -> list[str]:
    """The table's notes, then one naming every degraded and every incomplete cell behind a marked value
    (not comparable with healthy ones), then the footnotes of its substitute sources (``MARK``)."""
    cells = list(t.cells())
    reasons = list(dict.fromkeys(x for c in cells for x in c.degraded))
    incomplete = list(dict.fromkeys(c.incomplete for c in cells if c.incomplete))
    out = list(t.notes)
    if reasons:
        out.append(f"{DAGGER} DEGRADED, not comparable with healthy cells (never marked best): " + " | ".join(reasons))
    if incomplete:
        out.append(f"{INCOMPLETE_MARK} INCOMPLETE, the cell and its baseline cover different tasks (Δ on the paired "
                   "tasks only; never marked best): " + " | ".join(incomplete))
    return out + list(dict.fromkeys(n for c in cells for n in c.substitute))


__all__ = ["ARROW_DOWN", "ARROW_UP", "ARROW_ZERO", "DAGGER", "INCOMPLETE_MARK", "MARK", "NA", "NOT_RUN", "Cell",
           "CellValue", "Link", "Row", "Table", "as_cell", "cell_plain", "ci_plain", "delta_plain", "footnotes", "marks",
           "pct_text"]
