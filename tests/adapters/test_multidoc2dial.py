"""MultiDoc2Dial loader on fixture files in the upstream formats (local JSON and the Hub's parquet)."""

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from sourcebench.adapters import availability
from sourcebench.adapters.multidoc2dial.benchmark import MultiDoc2Dial, document_sections
from sourcebench.harness.data import Answer, Task
from sourcebench.harness.errors import ConfigError, DataError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REG = "Renew your vehicle registration#1_0"
PERMIT = "Getting a learner permit#1_0"


def bench(**opts) -> MultiDoc2Dial:
    return MultiDoc2Dial(data_dir=FIXTURES, options=opts)


def test_domains_and_sections_follow_the_id_sec_structure():
    b = bench()
    assert b.source_ids() == ["dmv", "ssa"]  # in the paper's domain order, only those present
    src = b.load_source("dmv")
    ids = [e.id for e in src.elements]
    # heading-only sections (t_0, t_1, t_2) are not elements; paragraphs are, in document order
    assert ids == [f"{PERMIT}::1", f"{PERMIT}::2", f"{REG}::1", f"{REG}::2", f"{REG}::3"]
    sec = src.element(f"{REG}::1")
    assert sec.text.startswith("You can renew online up to 60 days") and "plate number" in sec.text
    # the title is the page title (without the release's #1) and the heading path, without repeats
    assert sec.title == "Renew your vehicle registration > Renew online"
    assert src.element(f"{REG}::3").title == "Renew your vehicle registration > Renew by mail"
    assert sec.path == REG and sec.metadata["span_ids"] == ["3", "4"] and sec.metadata["domain"] == "dmv"
    assert src.kind == "documents" and src.metadata["n_documents"] == 2


def test_tasks_are_answered_user_turns_with_history_and_gold_labels():
    b = bench()
    tasks = {t.id: t for t in b.load_tasks("dmv")}
    # 5 eligible turns: the closing thanks (no agent turn after it) is not a task
    assert sorted(tasks) == sorted(["a1b2c3d4e5f60718293a4b5c6d7e8f90_1", "a1b2c3d4e5f60718293a4b5c6d7e8f90_3",
                                    "0f1e2d3c4b5a69788796a5b4c3d2e1f0_1", "0f1e2d3c4b5a69788796a5b4c3d2e1f0_3",
                                    "11112222333344445555666677778888_1"])
    t = tasks["a1b2c3d4e5f60718293a4b5c6d7e8f90_3"]
    assert t.question.startswith("And if I would rather send it by mail?\n\nEarlier turns of the conversation, "
                                 "most recent first:\n")
    # the official loading script: utterance, then the previous turns reversed (the latest first)
    assert t.question.index("Agent: You can renew") < t.question.index("User: How do I renew my registration online?")
    assert t.reference == ["Mail the renewal form with a check; it takes about two weeks."]
    assert t.group == "a1b2c3d4e5f60718293a4b5c6d7e8f90"  # grouped by dialogue
    # gold documents/sections come from the next agent turn's references (span 8 lies in section 3)
    assert t.metadata["gold_doc_ids"] == [REG] and t.metadata["gold_element_ids"] == [f"{REG}::3"]
    first = tasks["0f1e2d3c4b5a69788796a5b4c3d2e1f0_3"]
    assert first.metadata["n_history_turns"] == 2 and first.metadata["gold_element_ids"] == [f"{PERMIT}::1"]


def test_history_is_most_recent_first_on_one_line_each():
    """doc2dial_pub.py builds the question as the utterance, then the earlier turns in reverse order, each
    with newlines and tabs replaced by spaces."""
    from sourcebench.adapters.multidoc2dial.benchmark import render_question

    history = [{"role": "user", "utterance": "first\nquestion"}, {"role": "agent", "utterance": "first\treply"},
               {"role": "user", "utterance": "second question"}, {"role": "agent", "utterance": "second reply"}]
    assert render_question("third\nquestion ", history) == (
        "third question\n\nEarlier turns of the conversation, most recent first:\n"
        "Agent: second reply\nUser: second question\nAgent: first reply\nUser: first question")
    assert render_question("only turn", []) == "only turn"


def test_turns_kept_follow_the_official_loading_script():
    """doc2dial_pub.py (config multidoc2dial) keeps a user turn when the next turn is the agent's and its act
    is not respond_no_solution: a reply that asks back (query_condition) is a reference like any other."""
    dmv = {t.id: t for t in bench().load_tasks("dmv")}
    asks_back = dmv["0f1e2d3c4b5a69788796a5b4c3d2e1f0_1"]
    assert asks_back.reference == ["How old is he?"] and asks_back.metadata["agent_da"] == "query_condition"
    assert asks_back.metadata["gold_element_ids"] == [f"{PERMIT}::1"] and asks_back.metadata["n_history_turns"] == 0
    ssa = {t.id: t for t in bench().load_tasks("ssa")}
    # the new dialogue: turn 1 is answered with respond_no_solution (left out), turn 3 by a question (kept)
    assert sorted(ssa) == ["5555aaaa6666bbbb7777cccc8888dddd_3", "99990000aaaabbbbccccddddeeeeffff_1",
                           "99990000aaaabbbbccccddddeeeeffff_3"]
    kept = ssa["5555aaaa6666bbbb7777cccc8888dddd_3"]
    assert kept.reference == ["When do you want your benefits to start?"]
    assert "Agent: Sorry, the page does not say anything about that." in kept.question  # still in the history
    assert {t.metadata["agent_da"] for t in [*dmv.values(), *ssa.values()]} == {"respond_solution", "query_condition"}


def test_grouped_split_keeps_a_dialogue_on_one_side():
    b = bench()
    src, tasks = b.load_source("dmv"), b.load_tasks("dmv")
    group = {t.id: t.group for t in tasks}
    for sp in b.make_splits(src, tasks, [0, 1, 2]):
        assert {group[i] for i in sp.guidance_ids}.isdisjoint({group[i] for i in sp.test_ids})
        assert sp.guidance_ids and sp.test_ids


def test_seeded_selection_is_fixed_and_bounded():
    all_ids = [t.id for t in bench(n_tasks="all").load_tasks("dmv")]
    two = [t.id for t in bench(n_tasks="2").load_tasks("dmv")]
    assert len(two) == 2 and set(two) <= set(all_ids)
    assert two == [t.id for t in bench(n_tasks="2").load_tasks("dmv")]  # same draw in a new instance
    assert [t.id for t in bench().load_tasks("dmv")] == sorted(all_ids)  # 60 > 5 available: all of them
    with pytest.raises(ConfigError, match="n_tasks"):
        bench(n_tasks="many").load_tasks("dmv")


def test_dialogue_split_option():
    assert len(bench(dialogues="train").load_tasks("dmv")) == 1
    assert len(bench(dialogues="all").load_tasks("dmv")) == 6
    assert bench(dialogues="train").load_tasks("dmv")[0].metadata["dialogues"] == "train"
    with pytest.raises(ConfigError, match="dialogues"):
        bench(dialogues="test").load_tasks("dmv")


def test_heading_reference_maps_to_the_section_below():
    doc = json.loads((FIXTURES / "multidoc2dial" / "multidoc2dial_doc.json").read_text())["doc_data"]["dmv"][REG]
    _, span_map = document_sections("dmv", doc)
    assert span_map["2"] == f"{REG}::1"  # span 2 is the "Renew online" heading
    assert span_map["6"] == f"{REG}::3"


def test_missing_data_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "huggingface.co cannot be resolved")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    b = MultiDoc2Dial(data_dir=tmp_path)
    with pytest.raises(DataError, match=r"not available offline: huggingface.co cannot be resolved; no "
                                        r"multidoc2dial_doc.json in .* \(local files come first, this parquet "
                                        r"conversion is the fallback\); `sourcebench data fetch multidoc2dial` puts "
                                        r"the official zip's files into DATA/multidoc2dial, or pass --data-dir$"):
        b.source_ids()
    st = b.data_status()
    assert st.state == "missing" and not st.present and "huggingface:IBM/multidoc2dial" in st.looked_in[-1]


def test_score_uses_the_judge_and_short_circuits_failures():
    b = bench()
    t = Task(id="x", source_id="dmv", question="q", reference=["r"])
    s = asyncio.run(b.score(t, Answer(text="", failed=True, failure_reason="context_overflow: too long")))
    assert s.failed and s.value == 0 and s.failure_reason.startswith("context_overflow")
    with pytest.raises(DataError, match="judge"):
        asyncio.run(b.score(t, Answer(text="an answer")))


def _parquet_layout(tmp_path: Path) -> Path:
    """The fixture rewritten as the Hub's parquet conversion: spans as lists, parent_titles as Python-literal
    strings, each document row repeated (the loading script yields it once per key), no dialogue domain column."""
    import datasets

    docs = json.loads((FIXTURES / "multidoc2dial" / "multidoc2dial_doc.json").read_text())["doc_data"]
    doc_rows = []
    for dom, by_id in docs.items():
        for doc_id, d in by_id.items():
            spans = [{**sp, "parent_titles": str(sp["parent_titles"])} for sp in d["spans"].values()]
            row = {"domain": dom, "doc_id": doc_id, "title": d["title"], "doc_text": d["doc_text"], "spans": spans,
                   "doc_html_ts": d["doc_html_ts"], "doc_html_raw": d["doc_html_raw"]}
            doc_rows += [row, row]
    root = tmp_path / "hub"
    (root / "document_domain" / "train").mkdir(parents=True)
    datasets.Dataset.from_list(doc_rows).to_parquet(str(root / "document_domain" / "train" / "0000.parquet"))
    for split in ("train", "validation"):
        dials = json.loads((FIXTURES / "multidoc2dial" / f"multidoc2dial_dial_{split}.json").read_text())["dial_data"]
        rows = [{"dial_id": d["dial_id"], "turns": d["turns"]} for ds in dials.values() for d in ds]
        (root / "dialogue_domain" / split).mkdir(parents=True)
        datasets.Dataset.from_list(rows).to_parquet(str(root / "dialogue_domain" / split / "0000.parquet"))
    return root


def test_hub_parquet_conversion_gives_the_same_benchmark(tmp_path, monkeypatch):
    """The Hub path with the network replaced by local files in the parquet branch's layout."""
    root = _parquet_layout(tmp_path)
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "")
    monkeypatch.setattr("sourcebench.adapters.multidoc2dial.benchmark.parquet_url",
                        lambda repo, rev, path: str(root / path))
    hub = MultiDoc2Dial(data_dir=tmp_path / "empty")
    local = bench()
    assert hub.source_ids() == local.source_ids()
    assert hub.corpus()[2] == "huggingface:IBM/multidoc2dial@refs/convert/parquet"
    for dom in ("dmv", "ssa"):
        a, b = hub.load_source(dom), local.load_source(dom)
        assert [(e.id, e.title, e.text) for e in a.elements] == [(e.id, e.title, e.text) for e in b.elements]
        ta, tb = hub.load_tasks(dom), local.load_tasks(dom)
        assert [(t.id, t.question, t.reference, t.metadata["gold_element_ids"]) for t in ta] == \
               [(t.id, t.question, t.reference, t.metadata["gold_element_ids"]) for t in tb]


def test_local_zip_layout_subfolder(tmp_path):
    """The zip unpacks into a multidoc2dial/ folder: DATA/multidoc2dial/multidoc2dial/*.json is found too."""
    inner = tmp_path / "multidoc2dial" / "multidoc2dial"
    shutil.copytree(FIXTURES / "multidoc2dial", inner)
    assert MultiDoc2Dial(data_dir=tmp_path).source_ids() == ["dmv", "ssa"]
