import json

import pytest

from adapters.phantomwiki import PhantomWiki
from harness.errors import ConfigError, DataError
from tests.conftest import need_data


def test_real_instance_loads():
    root = need_data("phantomwiki")
    b = PhantomWiki(data_dir=root.parent)
    [sid] = b.source_ids()
    src = b.load_source(sid)
    assert src.kind == "documents" and 150 <= len(src.elements) <= 51 * 3  # some articles lack a section
    assert src.element("Aida Wang#family") is not None
    tasks = b.load_tasks(sid)
    assert len(tasks) == 500 and len({t.group for t in tasks}) == 50
    t = tasks[0]
    assert isinstance(t.reference, list) and t.metadata["difficulty"] >= 1


def test_split_keeps_templates_on_one_side():
    root = need_data("phantomwiki")
    b = PhantomWiki(data_dir=root.parent)
    [sid] = b.source_ids()
    src, tasks = b.load_source(sid), b.load_tasks(sid)
    for sp in b.make_splits(src, tasks, [0, 1, 2]):
        g = {t.id: t.group for t in tasks}
        assert {g[i] for i in sp.guidance_ids}.isdisjoint({g[i] for i in sp.test_ids})
        assert len(sp.guidance_ids) == 150


def test_max_difficulty_filters_test_tasks_only():
    root = need_data("phantomwiki")
    b = PhantomWiki(data_dir=root.parent, options={"max_difficulty": "2"})
    [sid] = b.source_ids()
    tasks = b.load_tasks(sid)
    easy = b.select_test(tasks)
    assert 0 < len(easy) < len(tasks) and all(t.metadata["difficulty"] <= 2 for t in easy)
    with pytest.raises(ConfigError):
        PhantomWiki(options={"max_difficulty": "x"}).select_test(tasks)
    with pytest.raises(ConfigError, match="unknown option"):
        PhantomWiki(options={"bogus": "1"})


def test_bad_files_give_clear_errors(tmp_path):
    inst = tmp_path / "phantomwiki" / "w"
    inst.mkdir(parents=True)
    (inst / "articles.json").write_text('[{"title": "A"}]')
    b = PhantomWiki(data_dir=tmp_path)
    with pytest.raises(DataError, match=r"articles\.json: missing field\(s\) article"):
        b.load_source("w")
    (inst / "articles.json").write_text('[{"title": "A", "article": "# A\\n## F\\nx"}')
    with pytest.raises(DataError, match="invalid JSON"):
        b.load_source("w")
    with pytest.raises(DataError, match="questions.json: file not found"):
        b.load_tasks("w")
    (inst / "questions.json").write_text(json.dumps([{"id": "1", "question": "q"}]))
    with pytest.raises(DataError, match="missing field"):
        b.load_tasks("w")
