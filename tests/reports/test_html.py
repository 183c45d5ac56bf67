"""The self-contained reproduce report: parts that read run folders directly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import inspect_ai.log

from sourcebench.reports.layout import html_table
from sourcebench.reports.paper_page import log_table
from sourcebench.reports.table import Table


def _header(method: str, version: str) -> SimpleNamespace:
    meta = {"method": {"name": method, "version": version}, "source": "north", "seed": 0}
    return SimpleNamespace(eval=SimpleNamespace(metadata=meta), status="success",
                           results=SimpleNamespace(total_samples=3))


def test_logs_of_a_set_aside_method_version_are_marked_superseded(tmp_path, monkeypatch):
    folder = tmp_path / "b" / "town"
    (folder / "logs").mkdir(parents=True)
    logs = {"old.eval": ("sourcelearn", "3"), "new.eval": ("sourcelearn", "4"), "rag.eval": ("hybrid_rag", "1")}
    for name in logs:
        (folder / "logs" / name).write_bytes(b"")
    monkeypatch.setattr(inspect_ai.log, "read_eval_log", lambda p, header_only: _header(*logs[Path(p).name]))
    rows = [{"method": "sourcelearn", "method_version": "4"}, {"method": "hybrid_rag", "method_version": "1"}]
    res = SimpleNamespace(root=tmp_path, cfg=SimpleNamespace(backends=[SimpleNamespace(id="b", name="B")],
                                              benchmarks=[SimpleNamespace(id="town", name="Town")]),
                          folder=lambda b, bn: tmp_path / b / bn, data=lambda b, bn: SimpleNamespace(results=rows))
    page = html_table(log_table(res))
    lines = {name: next(tr for tr in page.split("<tr>") if name in tr) for name in logs}
    assert "superseded (version 3, rows now of version 4)" in lines["old.eval"]
    assert "superseded" not in lines["new.eval"] and "superseded" not in lines["rag.eval"]


def test_long_text_cells_wrap_instead_of_widening_the_page():
    long = "a deviation explained at length " * 5
    out = html_table(Table("Methods", ["method", "version", "deviations"], [["sourcelearn", "4", long]]))
    assert '<td class="num">4</td>' in out
    assert f"<td>{long}</td>" in out  # no class="num": wraps, left-aligned
