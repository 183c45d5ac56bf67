"""Every report table is one model (``reports.table.Table``) rendered by one Markdown/HTML renderer
(``reports.layout``): a second table class or a second place that writes table markup would let two
renderings of one number disagree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sourcebench.reports.grid import paper_table
from sourcebench.reports.layout import html_table, md_table
from sourcebench.reports.table import Cell, Link, Row, Table

REPORTS = Path(__file__).resolve().parents[2] / "reports"
MARKUP = re.compile(r"<t(able|d|r|h)\b|\|:?---")  # HTML table tags, Markdown table rules


def _modules() -> list[Path]:
    return sorted(p for p in REPORTS.rglob("*.py") if "__pycache__" not in p.parts)


def _holds_rows(c: ast.ClassDef) -> bool:
    """A class with fields ``rows`` and ``header`` or ``columns``: a table model."""
    fields = {x.target.id for x in c.body if isinstance(x, ast.AnnAssign) and isinstance(x.target, ast.Name)}
    return "rows" in fields and bool(fields & {"header", "columns"})


def test_one_table_class_in_the_reports():
    """The one class with rows of cells is ``Table`` (a config section named after a table is not one)."""
    classes = {(p.relative_to(REPORTS).as_posix(), n.name) for p in _modules()
               for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.ClassDef) and _holds_rows(n)}
    assert classes == {("table.py", "Table")}


def test_only_the_layout_writes_table_markup():
    writers = [p.relative_to(REPORTS).as_posix() for p in _modules() if MARKUP.search(p.read_text())]
    assert writers == ["layout.py"]


def test_a_paper_table_and_a_text_table_render_through_the_same_functions():
    paper = paper_table("t1", "Table 1", ["Accuracy (%)."], ["Method"], ["Town"],
                        rows=[Row(["Hybrid RAG"], [Cell(value=0.5, n=4)]), Row(["RAPTOR"], [Cell(value=0.25, n=4)])])
    paper.rows[0].cells[0].mark = "best"
    text = Table("Logs", ["method", "log"], [["hybrid_rag", Link("a.eval", "http://x/#/logs/a.eval")]])
    assert text.rows[0] == ["hybrid_rag", "a.eval"] and text.rows[0].stub == []
    md, html = md_table(paper), html_table(paper)
    assert "| Hybrid RAG | **50.0** |" in md and "|:---|---:|" in md and "*Accuracy (%).*" in md
    assert '<table id="t1">' in html and '<th scope="row">Hybrid RAG</th>' in html and "<strong>50.0</strong>" in html
    assert "| hybrid_rag | [a.eval](http://x/#/logs/a.eval) |" in md_table(text)
    assert '<td class="num"><a href="http://x/#/logs/a.eval">a.eval</a></td>' in html_table(text)
