"""NarrativeQA loader on fixture rows in the Hugging Face row format (JSON lines and parquet)."""

import json
from pathlib import Path

import pytest

from sourcebench.adapters import availability
from sourcebench.adapters.narrativeqa.benchmark import (
    PAPER_STORIES,
    NarrativeQA,
    drop_near_duplicates,
    story_text,
)
from sourcebench.harness.data import Task
from sourcebench.harness.errors import DataError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MOVIE, BOOK = PAPER_STORIES["breakfast_club"][0], PAPER_STORIES["call_of_the_wild"][0]


def bench(**opts) -> NarrativeQA:
    return NarrativeQA(data_dir=FIXTURES, options=opts)


def rows() -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / "narrativeqa" / "narrativeqa_test.jsonl").read_text().splitlines()]


def test_paper_stories_only_by_default():
    b = bench()
    # the fixture holds two of the paper's twelve stories and one other story, which is not used
    assert b.source_ids() == ["breakfast_club", "call_of_the_wild"]
    assert len(PAPER_STORIES) == 12 and len({d for d, _, _ in PAPER_STORIES.values()}) == 12
    other = NarrativeQA(data_dir=FIXTURES, options={"stories": "ffffffffffffffffffffffffffffffffffffffff"})
    assert other.source_ids() == ["ffffffffffffffffffffffffffffffffffffffff"]


def test_script_is_read_in_full_and_split_into_scenes():
    src = bench().load_source("breakfast_club")
    ids = [e.id for e in src.elements]
    assert ids[1:] == ["breakfast_club#int-school-library---morning", "breakfast_club#ext-school-parking-lot---noon",
                       "breakfast_club#int-school-library---afternoon"]
    text = "\n".join(e.text for e in src.elements)
    # the web page around the script is gone: no tags, no style sheet, nothing after the end marker
    assert "<" not in text and "color: black" not in text and "Copyright notice" not in text
    assert "Advertisement" not in text and text.rstrip().endswith("THE END")
    assert "Pepper" in src.element("breakfast_club#int-school-library---afternoon").text
    assert src.metadata["document_id"] == MOVIE and src.metadata["kind"] == "movie"


def test_book_is_cut_to_its_markers_and_split_into_chapters():
    src = bench().load_source("call_of_the_wild")
    assert [e.id for e in src.elements] == ["call_of_the_wild#chapter-i", "call_of_the_wild#chapter-ii",
                                            "call_of_the_wild#chapter-iii"]
    text = "\n".join(e.text for e in src.elements)
    assert "Project Gutenberg" not in text and "START OF THIS" not in text and "END OF THIS" not in text


def test_tasks_keep_both_answers_and_drop_near_duplicates():
    tasks = bench().load_tasks("breakfast_club")
    qs = [t.question for t in tasks]
    assert qs == ["What is the name of the dog the students hide?", "Who writes the essay for the group?",
                  "What did the janitor once want to be?"]
    essay = tasks[1]
    assert essay.reference == ["Mara", "Mara writes it"]
    assert len(essay.metadata["near_duplicates"]) == 1
    book = bench().load_tasks("call_of_the_wild")
    assert len(book) == 3  # the very same question appears twice in the rows
    assert all(len(t.reference) == 2 and t.group == t.id for t in book + tasks)


def test_near_duplicates_need_similar_questions_and_overlapping_answers():
    def t(i, q, a):
        return Task(id=i, source_id="s", question=q, reference=a)

    kept = drop_near_duplicates([
        t("1", "Who is Mara's father?", ["Tom"]),
        t("2", "Who is Mara's mother?", ["Ann"]),  # similar wording, different answer: kept
        t("3", "Who is the father of Mara?", ["Tom"]),  # same question reworded, same answer: dropped
    ])
    assert [k.id for k in kept] == ["1", "2"] and kept[0].metadata["near_duplicates"] == ["3"]


def test_story_markers_absent_keep_the_whole_text():
    assert story_text({"text": "Plain story.", "start": "", "end": ""}) == "Plain story."
    assert story_text({"text": "Head. Story starts. Story ends. Foot.", "start": "Story starts",
                       "end": "Story ends."}) == "Story starts. Story ends."


def test_parquet_files_in_the_data_folder(tmp_path):
    import datasets

    folder = tmp_path / "narrativeqa"
    folder.mkdir()
    datasets.Dataset.from_list(rows()).to_parquet(str(folder / "test-00000-of-00001.parquet"))
    b = NarrativeQA(data_dir=tmp_path)
    assert b.source_ids() == ["breakfast_club", "call_of_the_wild"]
    assert [t.id for t in b.load_tasks("call_of_the_wild")] == [t.id for t in bench().load_tasks("call_of_the_wild")]
    assert [e.id for e in b.load_source("breakfast_club").elements] == \
           [e.id for e in bench().load_source("breakfast_club").elements]


def test_offline_without_files_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "huggingface.co cannot be resolved")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    b = NarrativeQA(data_dir=tmp_path)
    with pytest.raises(DataError, match=r"deepmind/narrativeqa@2e643e7.*not available offline.*--data-dir"):
        b.source_ids()
    st = b.data_status()
    assert st.state == "missing" and "not available offline" in st.detail


def test_unknown_story_is_a_data_error():
    with pytest.raises(DataError, match="story 'persuasion' is not in"):
        bench().load_source("persuasion")


def test_a_local_snapshot_reads_the_test_split_only(tmp_path):
    """The Hub's layout holds train/validation/test parquet files: only test's are read (the others, some
    16 GB of story text, would be scanned for nothing: the paper's stories are all in test)."""
    import datasets

    folder = tmp_path / "narrativeqa" / "data"
    folder.mkdir(parents=True)
    datasets.Dataset.from_list(rows()).to_parquet(str(folder / "test-00000-of-00001.parquet"))
    for split in ("train", "validation"):
        (folder / f"{split}-00000-of-00001.parquet").write_bytes(b"not parquet: reading it would fail")
    (tmp_path / "narrativeqa" / "narrativeqa_train.jsonl").write_text("not JSON either\n")
    b = NarrativeQA(data_dir=tmp_path)
    assert b._local_files() == [folder / "test-00000-of-00001.parquet"]
    assert b.source_ids() == ["breakfast_club", "call_of_the_wild"]


def test_the_hub_is_streamed_once_then_read_from_the_saved_snapshot(tmp_path, monkeypatch):
    import datasets

    calls = []

    def load_dataset(path, split=None, revision=None, streaming=False, **kw):
        calls.append((path, split, revision, streaming))
        return iter(rows())

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "")
    first = NarrativeQA(data_dir=tmp_path)
    assert first.source_ids() == ["breakfast_club", "call_of_the_wild"]
    assert first.stories()[1].startswith("huggingface:deepmind/narrativeqa@")
    assert calls == [("deepmind/narrativeqa", "test", first.revision(), True)]
    snap = tmp_path / "narrativeqa" / first.snapshot_name()
    assert snap.is_file() and snap.name == f"narrativeqa-test-paper-{first.revision()[:12]}.jsonl"
    second = NarrativeQA(data_dir=tmp_path)
    assert second.source_ids() == first.source_ids() and second.stories()[1] == str(snap)
    assert len(calls) == 1  # not streamed again
    for sid in first.source_ids():
        assert [t.id for t in second.load_tasks(sid)] == [t.id for t in first.load_tasks(sid)]
        assert [e.text for e in second.load_source(sid).elements] == [e.text for e in first.load_source(sid).elements]
    assert second.data_status().state == "present"


def test_a_snapshot_that_cannot_be_saved_is_logged_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: iter(rows()))
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "")
    blocked = tmp_path / "file"
    blocked.write_text("a file where the data folder would go")
    b = NarrativeQA(data_dir=blocked)
    with caplog.at_level("WARNING", logger="sourcebench.adapters.narrativeqa.benchmark"):
        assert b.source_ids() == ["breakfast_club", "call_of_the_wild"]
    assert "could not save the streamed rows" in caplog.text


def _long_book(tmp_path: Path) -> NarrativeQA:
    """One book of three 6,000-character chapters, each paragraph naming its own rare word."""
    paras = []
    for ch in ("I", "II", "III"):
        paras.append(f"CHAPTER {ch}")
        for i in range(20):
            paras.append(f"Paragraph {ch}.{i} tells how the sled crossed the ice near the camp word{ch}x{i}. " * 3)
    text = "\n\n".join(paras)
    row = {"document": {"id": "b" * 40, "kind": "gutenberg", "url": "", "start": "CHAPTER I", "end": "",
                        "text": text, "summary": {"title": "Long Book"}},
           "question": {"text": "Where did the sled cross?"}, "answers": [{"text": "the ice"}]}
    (tmp_path / "narrativeqa").mkdir()
    (tmp_path / "narrativeqa" / "narrativeqa_test.jsonl").write_text(json.dumps(row) + "\n")
    return NarrativeQA(data_dir=tmp_path, options={"stories": "b" * 40})


def test_a_storys_last_paragraph_is_reachable_through_the_index(tmp_path):
    """Sections are no longer than what the shared index indexes and a solver is shown (1,200 characters),
    so every paragraph, the last one included, can be retrieved and is shown whole."""
    from sourcebench.harness.embeddings import HashEmbedder
    from sourcebench.harness.retrieval import EXCERPT_CHARS, HybridIndex, index_text

    src = _long_book(tmp_path).load_source("b" * 40)
    assert max(len(e.text) for e in src.elements) <= EXCERPT_CHARS
    indexed = "\n".join(index_text(e) for e in src.elements)
    last = "Paragraph III.19 tells how the sled crossed the ice near the camp wordIIIx19."
    for ch, n in (("I", 20), ("II", 20), ("III", 20)):  # every paragraph of every chapter is indexed
        assert all(f"word{ch}x{i}." in indexed for i in range(n))
    hits = HybridIndex(src.elements, HashEmbedder()).search("wordIIIx19", k=8)
    assert hits and last in hits[0].text and not hits[0].text.endswith(" ...")  # retrieved and shown whole
