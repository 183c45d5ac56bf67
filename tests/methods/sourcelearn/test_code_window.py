"""One closure window (official ``build_window``) for construction's entity reading and for
learning-time retrieval: the same pieces, cut as ``ast.get_source_segment`` cuts them."""

from __future__ import annotations

import ast

from sourcebench.harness.data import Source
from sourcebench.harness.elements import split_python
from sourcebench.methods.sourcelearn.code_window import _LINE, _segment, closure_window
from sourcebench.methods.sourcelearn.config import SourceLearnConfig
from sourcebench.methods.sourcelearn.construct import entity_window
from sourcebench.methods.sourcelearn.learn_retrieval import expand_code_windows
from sourcebench.methods.sourcelearn.model import Entity, Region

CODE_A = '''from pkg.b import Engine

LIMIT = 3  # the cap
UNUSED = 4


def traced(f):
    return f


@traced
def helper(x):
    return min(x, LIMIT)


@traced
def run(x):
    return Engine(helper(x))
'''
CODE_B = '''@traced
class Engine:
    def __init__(self, n):
        self.n = n
'''


def _source() -> Source:
    els = split_python("pkg/a.py", CODE_A) + split_python("pkg/b.py", CODE_B)
    return Source(id="pkg", kind="code", elements=els)


def test_construction_and_learning_share_one_window_cut_as_the_official_code_cuts_it():
    src = _source()
    run_el = src.element("pkg/a.py#run")
    region = Region(id="pkg", title="pkg", element_ids=[e.id for e in src.elements])
    ent = Entity(key="run", name="run", region="pkg", element_ids=["pkg/a.py#run"])
    built = entity_window(ent, region, src)
    assert built == closure_window(src, run_el, ["pkg/a.py", "pkg/b.py"])
    tree_a, tree_b = ast.parse(CODE_A), ast.parse(CODE_B)
    seg = {n.name if hasattr(n, "name") else n.targets[0].id: ast.get_source_segment(CODE_A, n) for n in tree_a.body
           if not isinstance(n, ast.ImportFrom)}
    assert [(eid, text) for eid, _, text in built] == [
        ("pkg/a.py#run", seg["run"]), ("pkg/a.py#traced", seg["traced"]), ("pkg/a.py#helper", seg["helper"]),
        ("pkg/a.py", "LIMIT = 3"),
        ("pkg/b.py#Engine", ast.get_source_segment(CODE_B, tree_b.body[0]))]
    assert not built[0][2].startswith("@traced")  # the official segment leaves the decorator out
    # learning-time retrieval shows the very same pieces (its scope: the symbol's top-level folder)
    shown = expand_code_windows(src, [run_el], SourceLearnConfig())
    assert [(s.element_id, s.text) for s in shown] == [(eid, text) for eid, _, text in built]


def test_segments_equal_ast_get_source_segment_on_awkward_text():
    text = ("x = 1  # tail\r\ndef f(a,\r\n      b):\r\n    return 'é'\rclass C:\f\n    y = [\n  1,\n]\n"
            "@d\nasync def g():\n    pass")
    tree = ast.parse(text)
    lines = _LINE.findall(text)
    assert all(_segment(lines, n) == ast.get_source_segment(text, n) for n in tree.body)
