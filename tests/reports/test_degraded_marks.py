"""Reproduce tables mark a value built on degraded cells with a dagger and name every reason."""

from sourcebench.reports.export import to_latex
from sourcebench.reports.grid import paper_table
from sourcebench.reports.layout import md_table
from sourcebench.reports.table import DAGGER, Cell, Row, Table, cell_plain


def _table() -> Table:
    reason = "gpt-oss / phantomwiki: raptor on s1 (seed 0): degraded: test: 4 of 4 answers failed (100 %; output_cap 4)"
    return paper_table("table1", "Main results", ["Accuracy (%)."], ["Method"], ["PhantomWiki"], rows=[
        Row(["Hybrid RAG"], [Cell(value=0.5)]),
        Row(["RAPTOR"], [Cell(value=0.0, degraded=[reason])]),
    ], notes=["A note."])


def test_a_degraded_value_carries_a_dagger_and_the_reason_in_every_format():
    t = _table()
    md = md_table(t)
    assert f"0.0{DAGGER}" in md and "50.0" + DAGGER not in md
    assert "DEGRADED, not comparable with healthy cells" in md and "4 of 4 answers failed" in md
    assert "A note." in md
    tex = to_latex(t)
    assert r"0.0\textsuperscript{\dag}" in tex and r"\dag{} DEGRADED" in tex and DAGGER not in tex
    assert cell_plain(t.rows[1].cells[0]).startswith("0.0" + DAGGER)
