import json

import pytest

import sourcebench.adapters.phantomwiki.benchmark as pw
from sourcebench.adapters.phantomwiki.benchmark import PhantomWiki
from sourcebench.adapters.phantomwiki.trim import KEPT, trim_questions
from sourcebench.adapters.phantomwiki.trim import main as trim_main
from sourcebench.harness.errors import ConfigError, DataError
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


# -- the universe bundled with the package ------------------------------------------------------

BUNDLED_ID = "seed1_people25_depth20"


@pytest.fixture
def no_data_folders(tmp_path, monkeypatch):
    """No data folder holds an instance (a bare clone), and the once-per-process notice not yet given."""
    monkeypatch.setattr(pw, "default_data_dirs", lambda: [tmp_path / "data", tmp_path / "shared" / "data"])
    monkeypatch.setattr(pw, "_bundled_notice_given", False)
    return tmp_path


def test_bundled_instance_is_used_when_no_data_folder_has_one(no_data_folders, capsys):
    (no_data_folders / "data" / "phantomwiki").mkdir(parents=True)  # a folder without an instance
    b = PhantomWiki(options={"max_difficulty": "2"})
    assert b.data_root() == pw.BUNDLED and b.source_ids() == [BUNDLED_ID]
    src = b.load_source(BUNDLED_ID)
    assert src.origin == str(pw.BUNDLED / BUNDLED_ID / "articles.json") and len(src.elements) == 73
    tasks = b.load_tasks(BUNDLED_ID)
    assert len(tasks) == 500 and len({t.group for t in tasks}) == 50 and len({t.id for t in tasks}) == 500
    assert len(b.select_test(tasks)) == 70
    b.load_source(BUNDLED_ID)
    err = capsys.readouterr().err
    assert err.count("using the small universe bundled with the package") == 1, err
    st = b.data_status()
    assert st.present and st.location == str(pw.BUNDLED) and st.detail.startswith("bundled with the package")


def test_bundled_instance_has_easy_questions_on_both_sides_of_every_split(no_data_folders):
    """The quickstart (--opt max_difficulty=2 --limit 8, seeds 0-2) has 8 easy test questions and
    guidance questions for every seed."""
    b = PhantomWiki(options={"max_difficulty": "2"})
    src, tasks = b.load_source(BUNDLED_ID), b.load_tasks(BUNDLED_ID)
    by_id = {t.id: t for t in tasks}
    for sp in b.make_splits(src, tasks, [0, 1, 2]):
        assert len(b.select_test([by_id[i] for i in sp.test_ids])) >= 8
        assert sum(1 for i in sp.guidance_ids if by_id[i].metadata["difficulty"] <= 2) >= 8


def test_a_data_folder_instance_wins_over_the_bundled_one(no_data_folders, capsys):
    inst = no_data_folders / "shared" / "data" / "phantomwiki" / "w"
    inst.mkdir(parents=True)
    (inst / "articles.json").write_text('[{"title": "A", "article": "# A\\n## Family\\nx"}]')
    b = PhantomWiki()
    assert b.data_root() == inst.parent and b.source_ids() == ["w"]
    b.load_source("w")
    assert "bundled" not in capsys.readouterr().err and "bundled" not in b.data_status().detail


def test_an_explicit_data_dir_is_never_replaced_by_the_bundled_one(no_data_folders):
    with pytest.raises(DataError, match="no PhantomWiki instance"):
        PhantomWiki(data_dir=no_data_folders).source_ids()
    assert not PhantomWiki(data_dir=no_data_folders).data_status().present


def test_bundled_questions_are_already_trimmed():
    """The shipped file is the trimming's fixed point: only the fields the adapter reads, traces as
    (variable, person) pairs."""
    people = {a["title"] for a in json.loads((pw.BUNDLED / BUNDLED_ID / "articles.json").read_text())}
    qs = json.loads((pw.BUNDLED / BUNDLED_ID / "questions.json").read_text())
    assert trim_questions(qs, people) == qs
    assert {k for q in qs for k in q} == {*KEPT, "solution_traces"}
    assert all(len(t) == 1 and set(t.values()) <= people for q in qs for t in q["solution_traces"])
    assert sum(1 for q in qs if pw.gold_path(q, people)) > 400  # most questions have a path of people


def test_trimming_keeps_every_task_identical(tmp_path):
    """Trimming changes no loaded task (gold paths included), on generator-format questions whose
    traces hold duplicates, several variables, non-person values and a JSON string."""
    src = tmp_path / "gen"
    src.mkdir()
    people = ["Ann Lee", "Bo Kim", "Cy Ray", "Di Fox"]
    (src / "articles.json").write_text(json.dumps([{"title": p, "article": f"# {p}\n## Family\nx", "facts": []}
                                                   for p in people]))
    traces = [{"Y_4": "Bo Kim", "Y_2": "Cy Ray", "Y_3": "0901-01-18"}, {"Y_4": "Bo Kim", "Y_2": "Di Fox"},
              {"Y_4": "Bo Kim", "Y_2": "Cy Ray", "Y_3": "0901-01-18"}]
    qs = [{"id": "q1", "question": "Who is the friend of the mother of Ann Lee?", "answer": ["Cy Ray", "Di Fox"],
           "prolog": {"query": ['friend(Y_4, Y_2)', 'mother("Ann Lee", Y_4)'], "answer": "Y_2"},
           "solution_traces": json.dumps(traces), "template": ["Who", "is"], "type": 3, "difficulty": 2,
           "is_aggregation_question": False},
          {"id": "q2", "question": "How many siblings does Ann Lee have?", "answer": ["2"],
           "prolog": {"query": ['aggregate_all(count, distinct(sibling("Ann Lee", Y_1)), Count_1)'],
                      "answer": "Count_1"},
           "solution_traces": '[{"Count_1": 2}]', "template": [], "type": 4, "difficulty": 1,
           "is_aggregation_question": True}]
    (src / "questions.json").write_text(json.dumps(qs))
    assert trim_main([str(src), str(tmp_path / "out" / "phantomwiki" / "w")]) == 0
    trimmed = json.loads((tmp_path / "out" / "phantomwiki" / "w" / "questions.json").read_text())
    assert trimmed[0]["solution_traces"] == [{"Y_2": "Cy Ray"}, {"Y_2": "Di Fox"}, {"Y_4": "Bo Kim"}]
    assert trimmed[1]["solution_traces"] == [] and "template" not in trimmed[0]
    (tmp_path / "orig" / "phantomwiki").mkdir(parents=True)
    (src).rename(tmp_path / "orig" / "phantomwiki" / "w")
    before = PhantomWiki(data_dir=tmp_path / "orig").load_tasks("w")
    after = PhantomWiki(data_dir=tmp_path / "out").load_tasks("w")
    assert before[0].metadata["gold_path"] == [["Ann Lee"], ["Bo Kim"], ["Cy Ray", "Di Fox"]]
    assert [t.model_dump() for t in before] == [t.model_dump() for t in after]


def test_trimming_the_real_instance_keeps_every_task_identical(tmp_path):
    """The same on official generator output (the shared instance, another universe than the bundled one)."""
    root = need_data("phantomwiki")
    [sid] = PhantomWiki(data_dir=root.parent).source_ids()
    assert trim_main([str(root / sid), str(tmp_path / "phantomwiki" / sid)]) == 0
    before = PhantomWiki(data_dir=root.parent).load_tasks(sid)
    after = PhantomWiki(data_dir=tmp_path).load_tasks(sid)
    assert [t.model_dump() for t in before] == [t.model_dump() for t in after]
    assert (tmp_path / "phantomwiki" / sid / "questions.json").stat().st_size < 500_000


def test_trimming_refuses_a_change_of_gold_path(monkeypatch):
    from sourcebench.adapters.phantomwiki import trim

    monkeypatch.setattr(trim, "trim_question", lambda q, people: {**q, "solution_traces": []})
    q = {"id": "q1", "prolog": {"query": ['friend("Ann Lee", Y_2)']}, "solution_traces": [{"Y_2": "Bo Kim"}]}
    with pytest.raises(ValueError, match="q1: trimming changes its gold path"):
        trim.trim_questions([q], {"Ann Lee", "Bo Kim"})


@pytest.mark.slow
def test_quickstart_command_runs_on_the_bundled_universe(no_data_folders, tmp_path, capsys):
    """README command 1 as on a bare clone (scripted model and hash embedder instead of SmolLM2): it
    finishes with a leaderboard, says once that it used the bundled universe, and run.json names it."""
    from sourcebench.harness.cli import main

    out = tmp_path / "quickstart"
    assert main(["run", "--benchmark", "phantomwiki", "--opt", "max_difficulty=2", "--methods", "hybrid_rag,no_source",
                 "--model", "scripted/extractive", "--embedder", "hash", "--limit", "8", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("using the small universe bundled with the package") == 1, err
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 3 * 8 and {r["source"] for r in rows} == {BUNDLED_ID}
    meta = json.loads((out / "run.json").read_text())
    assert [s["origin"] for s in meta["sources"]] == [str(pw.BUNDLED / BUNDLED_ID / "articles.json")]
    assert (out / "report" / "leaderboard.md").is_file()
