import pytest

from sourcebench.adapters.swe_qa import SWEQA
from sourcebench.harness.errors import DataError
from tests.conftest import need_data


def make_tree(root):
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "app.py").write_text("class App:\n    def run(self):\n        return 1\n\n\ndef helper():\n    pass\n")
    (root / "docs").mkdir()
    (root / "docs" / "index.rst").write_text("Intro\n=====\n\nHello.\n\nUsage\n-----\n\nRun it.\n")
    return root


def test_questions_and_pinned_commit():
    root = need_data("swe_qa")
    b = SWEQA(data_dir=root.parent)
    assert b.source_ids() == ["streamlink", "sphinx", "xarray", "pytest", "flask", "conan"]
    tasks = b.load_tasks("flask")
    assert len(tasks) == 48 and len({t.id for t in tasks}) == 48
    assert b.commit("flask") == "85c5d93"


def test_source_tree_from_option(tmp_path):
    root = need_data("swe_qa")
    tree = make_tree(tmp_path / "flask-3.1.1")
    b = SWEQA(data_dir=root.parent, options={"flask": str(tree)})
    src = b.load_source("flask")
    ids = {e.id for e in src.elements}
    assert "src/pkg/app.py#App.run" in ids and "docs/index.rst#usage" in ids
    assert src.kind == "code" and src.metadata["pinned_commit"] == "85c5d93"


def test_missing_tree_is_a_clear_error(tmp_path):
    root = need_data("swe_qa")
    with pytest.raises(DataError, match=r"swe_qa/flask: source tree not found; pass --opt flask=DIR"):
        SWEQA(data_dir=root.parent).load_source("flask")
    with pytest.raises(DataError, match="not a directory"):
        SWEQA(data_dir=root.parent, options={"flask": str(tmp_path / "nope")}).load_source("flask")
