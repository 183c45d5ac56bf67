"""Numbers on a substitute source (run.json ``provenance.pinned`` false) carry a mark and a footnote
naming the tree in every rendering of the paper tables and in the figures."""

from sourcebench.reports.export import to_csv, to_latex
from sourcebench.reports.grid import paper_table
from sourcebench.reports.layout import html_table, md_table
from sourcebench.reports.provenance_marks import MARK, by_source, notes_for_rows, substitutes
from sourcebench.reports.table import Cell, Row, cell_plain

PROV = {"pinned": False, "pinned_commit": "52f43d9", "commit": "", "kind": "sdist", "label": "the conan 2.34.0 sdist",
        "content_sha256": "6f2654da48af4838c1c13ed04a25d9449251d4f0807e65598269eca344aa8d46"}
RUN = {"benchmark": {"name": "swe_qa"},
       "sources": [{"id": "conan", "provenance": PROV},
                   {"id": "flask", "provenance": {**PROV, "pinned": True, "kind": "clone", "commit": "85c5d93" + "0" * 33}},
                   {"id": "pytest"}]}
NOTE = ("\u00a7 swe_qa/conan: not the pinned tree (commit 52f43d9) but the conan 2.34.0 sdist (content sha256 "
        "6f2654da48af4838); its numbers are not comparable with the paper's source.")


def test_only_sources_recorded_as_not_pinned_are_substitutes():
    assert substitutes(RUN) == {("swe_qa", "conan"): NOTE}
    assert by_source(RUN, ["flask", "pytest"]) == {}
    assert notes_for_rows(RUN, [{"source": "conan"}, {"source": "flask"}]) == [NOTE]
    assert notes_for_rows(RUN, [{"source": "flask"}]) == [] and substitutes({"sources": None}) == {}


def test_every_rendering_marks_the_cell_and_names_the_tree():
    marked = Cell(value=0.5, n=10, substitute=[NOTE])
    plain = Cell(value=0.25, n=10)
    t = paper_table("table1", "Table 1", ["caption"], ["Method"], ["SWE-QA conan", "SWE-QA flask"],
                    rows=[Row(["m"], [marked, plain])])
    assert cell_plain(marked) == f"50.0{MARK}" and cell_plain(plain) == "25.0"
    md = md_table(t)
    assert f"50.0{MARK}" in md and "25.0" + MARK not in md and "swe_qa/conan: not the pinned tree" in md
    tex = to_latex(t)
    assert r"50.0\textsuperscript{\S{}}" in tex and r"\S{} swe\_qa/conan: not the pinned tree" in tex
    html = html_table(t)
    assert 'class="substitute"' in html and "<li>" + NOTE.replace("'", "&#x27;") + "</li>" in html
    assert f"50.0{MARK}" in to_csv(t)


def test_figures_carry_the_mark_and_the_footnote():
    import matplotlib.pyplot as plt

    from sourcebench.reports.provenance_marks import annotate_figure

    fig = plt.figure()
    annotate_figure(fig, "Figure 3: ablations", [NOTE])
    assert fig._suptitle.get_text() == f"Figure 3: ablations{MARK}" and NOTE in [x.get_text() for x in fig.texts]
    plt.close(fig)


def test_table1_marks_the_cells_computed_on_a_substitute_source(tmp_path):
    """A paper table reads each run folder's run.json: the cells whose rows include a substitute source
    are marked, the others are not, and the table's notes name the tree."""
    import json

    from sourcebench.reports.config import parse_config
    from sourcebench.reports.results import Results
    from sourcebench.reports.tables import table1
    from tests.reports.test_tables import _config, _folder, _scores

    rows = []
    for m in ("hybrid_rag", "sourcelearn"):
        rows += _scores(m, "conan", 0, [1, 0, 1, 0]) + _scores(m, "flask", 0, [1, 1, 0, 0])
    folder = _folder(tmp_path, "luna", "two", rows)
    run = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**run, "benchmark": {"name": "swe_qa"},
                                                 "sources": RUN["sources"]}))
    _folder(tmp_path, "luna", "mdd", _scores("hybrid_rag", "dmv", 0, [1, 0]) + _scores("sourcelearn", "dmv", 0, [1, 1]))
    cfg = parse_config({**_config(table1={}), "backends": [{"id": "luna", "label": "GPT-5.6-Luna", "model": "m1"}]})
    t = table1(Results(cfg, tmp_path))
    col = t.columns.index("TwoSources")
    assert all(r.cells[col].substitute == [NOTE] for r in t.rows if r.cells[col].value is not None)
    assert all(not r.cells[t.columns.index("MultiDoc2Dial")].substitute for r in t.rows)
    md = md_table(t)
    assert md.count(MARK) >= 3 and "swe_qa/conan: not the pinned tree" in md


def test_protocol_tables_of_a_run_with_a_substitute_carry_the_mark_and_the_note():
    from sourcebench.reports.protocols.render import mark_substitutes
    from sourcebench.reports.table import Table

    tables = [Table("swe_qa: break-even", ["method"], [["m"]], "A note.")]
    [t] = mark_substitutes(tables, [NOTE])
    assert t.title.endswith(MARK) and t.note == "A note. " + NOTE
    [same] = mark_substitutes([Table("x", ["method"], [["m"]])], [])
    assert same.title == "x" and same.note == ""
