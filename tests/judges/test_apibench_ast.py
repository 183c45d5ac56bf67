"""The APIBench AST evaluator against the official Gorilla verdicts, on the real data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sourcebench.harness.errors import DataError
from sourcebench.judges.apibench_ast import (
    HUBS,
    APIDatabase,
    evaluate_file,
    evaluate_for_task,
    evaluate_response,
    extract_api_call,
    hub_paths,
    load_gold,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "apibench"
RESPONSES = DATA / "responses"

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"APIBench data not available at {DATA}")


@pytest.fixture(scope="module")
def dbs() -> dict[str, APIDatabase]:
    if not DATA.is_dir():
        pytest.skip(f"APIBench data not available at {DATA}")
    return {hub: APIDatabase.load(hub, DATA) for hub in HUBS}


@pytest.fixture(scope="module")
def golds() -> dict[str, list[dict]]:
    if not DATA.is_dir():
        pytest.skip(f"APIBench data not available at {DATA}")
    return {hub: load_gold(hub, DATA) for hub in HUBS}


def response_text(name: str, question_id: int) -> str:
    for line in (RESPONSES / name).read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        if obj["question_id"] == question_id:
            return obj["text"]
    raise AssertionError(f"question {question_id} not in {name}")


# ----------------------------------------------------------------------------------------------
# the published numbers


@needs_data
@pytest.mark.parametrize(
    "hub, n, accuracy, hallucination",
    [
        ("torchhub", 186, 75.81, 16.13),
        ("huggingface", 904, 69.36, 10.95),
        ("tensorflowhub", 685, 83.80, 5.40),
    ],
)
def test_published_gorilla_ft_zero_shot_numbers(dbs, hub, n, accuracy, hallucination):
    rows, totals = evaluate_file(hub, RESPONSES / f"response_{hub}_Gorilla_FT_0_shot.jsonl", DATA, db=dbs[hub])
    assert totals["n"] == n == len(rows)
    assert round(100 * totals["accuracy"], 2) == accuracy
    assert round(100 * totals["hallucination_rate"], 2) == hallucination
    assert totals["correct"] == sum(r["correct"] for r in rows)
    assert set(rows[0]) == {"question_id", "correct", "hallucination"}


@needs_data
def test_evaluate_file_loads_database_itself_and_denominator_is_response_lines():
    # TorchHub RT 0-shot responses never contain 'api_call': nothing correct, nothing hallucinated,
    # yet all 186 lines count.
    rows, totals = evaluate_file("torchhub", RESPONSES / "response_torchhub_Gorilla_RT_0_shot.jsonl", DATA)
    assert totals == {"n": 186, "correct": 0, "hallucination": 0, "accuracy": 0.0, "hallucination_rate": 0.0}
    assert len(rows) == 186


# ----------------------------------------------------------------------------------------------
# specific official verdicts


@needs_data
def test_genuine_hallucination(dbs, golds):
    # The model invents 'resnext101_32x48d_w10' under pytorch/vision: no database API matches.
    text = response_text("response_torchhub_Gorilla_FT_0_shot.jsonl", 5)
    v = evaluate_response(text, "torchhub", dbs["torchhub"], golds["torchhub"][4])
    assert (v.correct, v.hallucination, v.matched_api) == (False, True, None)
    assert "resnext101_32x48d_w10" in v.extracted


@needs_data
def test_official_hallucination_of_a_right_call_behind_a_stray_quote(dbs, golds):
    # The response names exactly the gold API (ultralytics/yolov5, yolov5s), but the extracted text
    # starts with a quote, so the parser sees a string followed by junk and no call of
    # torch.hub.load: the official evaluator calls it a hallucination, and so must we.
    text = response_text("response_torchhub_Gorilla_FT_0_shot.jsonl", 4)
    v = evaluate_response(text, "torchhub", dbs["torchhub"], golds["torchhub"][3])
    assert v.extracted == "'model = torch.hub.load('ultralytics/yolov5', 'yolov5s', pretrained=True)"
    assert golds["torchhub"][3]["api_call"] == (
        "torch.hub.load(repo_or_dir='ultralytics/yolov5', model='yolov5s', pretrained=True)")
    assert (v.correct, v.hallucination) == (False, True)


@needs_data
def test_torchhub_response_without_api_call_is_neither_but_counts(dbs, golds):
    name = "response_torchhub_Gorilla_FT_oracle.jsonl"
    text = response_text(name, 88)
    assert "api_call" not in text
    assert extract_api_call(text, "torchhub") is None
    v = evaluate_response(text, "torchhub", dbs["torchhub"], golds["torchhub"][87])
    assert (v.correct, v.hallucination, v.extracted) == (False, False, None)
    rows, totals = evaluate_file("torchhub", RESPONSES / name, DATA, db=dbs["torchhub"])
    row = next(r for r in rows if r["question_id"] == 88)
    assert (row["correct"], row["hallucination"]) == (False, False)
    assert totals["n"] == 186


@needs_data
def test_huggingface_and_tensorflow_parse_the_whole_text_without_api_call(dbs, golds):
    text = "summarizer = pipeline('summarization', model='facebook/bart-large-cnn')"
    assert extract_api_call(text, "huggingface") == text
    assert extract_api_call(text, "tensorflowhub") == text
    v = evaluate_response(text, "huggingface", dbs["huggingface"], golds["huggingface"][0])
    assert not v.hallucination
    assert "facebook/bart-large-cnn" in v.matched_api["api_call"]


@needs_data
def test_last_subtree_quirk_constructed(dbs, golds):
    # The response never calls torch.hub.load. No node has that callee, so every API's reference
    # arguments are looked up in the last sub-tree of the walk, here the string argument of print,
    # which happens to contain the repository and model of the first database API.
    db = dbs["torchhub"]
    assert db.records[0]["api_call"] == (
        "torch.hub.load(repo_or_dir='facebookresearch/pytorchvideo', model='slow_r50', pretrained=True)")
    text = ("{'domain': 'Video Classification', 'api_call': print('facebookresearch/pytorchvideo slow_r50'), "
            "'api_provider': 'PyTorch'}")
    assert extract_api_call(text, "torchhub") == "print('facebookresearch/pytorchvideo slow_r50')"
    gold = golds["torchhub"][0]
    assert gold["domain"] == "Video Classification"
    v = evaluate_response(text, "torchhub", db, gold)
    assert (v.correct, v.hallucination) == (True, False)
    assert v.matched_api["index"] == 0 and v.matched_api["api_name"] == "slow_r50"
    assert v.details["via_last_subtree"] is True
    assert "last sub-tree" in v.reason
    # With the two values in separate strings the last sub-tree holds only the first: no match.
    text2 = text.replace("pytorchvideo slow_r50'", "pytorchvideo', 'slow_r50'")
    v2 = evaluate_response(text2, "torchhub", db, gold)
    assert (v2.correct, v2.hallucination) == (False, True)


@needs_data
def test_last_subtree_quirk_on_real_response(dbs, golds):
    # Published response: the extracted text starts with a quote, so torch.hub.load is never a callee;
    # the fallback sub-tree still contains the Tacotron 2 arguments, which (first in file order)
    # match API #85, whose domain happens to equal the gold one (a vgg11 instruction).
    text = response_text("response_torchhub_Gorilla_FT_bm25.jsonl", 13)
    v = evaluate_response(text, "torchhub", dbs["torchhub"], golds["torchhub"][12])
    assert (v.correct, v.hallucination) == (True, False)
    assert v.matched_api["index"] == 85 and v.matched_api["api_name"] == "Tacotron 2"
    assert v.details["via_last_subtree"] is True
    assert "vgg11" in golds["torchhub"][12]["api_call"]


@needs_data
def test_correct_call_and_wrong_domain(dbs, golds):
    db = dbs["torchhub"]
    text = "{'api_call': torch.hub.load('facebookresearch/pytorchvideo', 'slow_r50', pretrained=True), 'api_provider': 'x'}"
    right = evaluate_response(text, "torchhub", db, golds["torchhub"][0])
    assert (right.correct, right.hallucination, right.details["via_last_subtree"]) == (True, False, False)
    other = next(g for g in golds["torchhub"] if g["domain"] != "Video Classification")
    wrong = evaluate_for_task(text, "torchhub", db, other)
    assert (wrong.correct, wrong.hallucination) == (False, False)
    assert wrong.matched_api["index"] == 0


@needs_data
def test_gold_may_be_the_whole_eval_record(dbs):
    rec = json.loads(hub_paths("torchhub", DATA)["eval"].read_text(encoding="utf-8").splitlines()[0])
    text = "{'api_call': torch.hub.load('facebookresearch/pytorchvideo', 'slow_r50'), 'api_provider': 'x'}"
    assert evaluate_response(text, "torchhub", dbs["torchhub"], rec).correct


# ----------------------------------------------------------------------------------------------
# step 1 and input errors (no real data needed)


def test_extract_api_call_window():
    assert extract_api_call("{'api_call': \"f(a)\", 'api_provider': 'p'}", "huggingface") == "\"f(a)"
    assert extract_api_call("<<<api_call>>>: hub.load('u')\n<<<api_provider>>>", "tensorflowhub") == "hub.load('u')"
    # no ')' after api_call: up to two characters before the end of the window
    assert extract_api_call("api_call: abcdef api_provider", "torchhub") == "abcdef"
    # no ':' : start two characters into the window
    assert extract_api_call("api_call xyf(1) api_provider", "torchhub") == "yf(1)"
    assert extract_api_call("no call here", "torchhub") is None
    with pytest.raises(DataError):
        extract_api_call("x", "pypi")


TH_RECORD = {"domain": "Video Classification", "api_name": "slow_r50",
             "api_call": "torch.hub.load(repo_or_dir='facebookresearch/pytorchvideo', model='slow_r50')"}


def test_database_from_records_and_errors(tmp_path):
    db = APIDatabase([TH_RECORD], "torchhub")
    v = evaluate_response("api_call: torch.hub.load('facebookresearch/pytorchvideo', 'slow_r50') api_provider",
                          "torchhub", db, {"domain": "Video Classification"})
    assert v.correct and v.matched_api["index"] == 0

    bad_json = tmp_path / "torchhub_api.jsonl"
    bad_json.write_text(json.dumps(TH_RECORD) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"torchhub_api\.jsonl:2"):
        APIDatabase.from_file(bad_json, "torchhub")

    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps(TH_RECORD) + "\n" + json.dumps({"api_call": "x(a)"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"missing\.jsonl:2: missing field\(s\) domain, api_name"):
        APIDatabase.from_file(missing, "torchhub")

    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({**TH_RECORD, "api_call": ""}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"odd\.jsonl:1: api_call"):
        APIDatabase.from_file(odd, "torchhub")

    with pytest.raises(DataError, match="unknown hub"):
        APIDatabase([TH_RECORD], "pypi")
    with pytest.raises(DataError, match="not found"):
        APIDatabase.from_file(tmp_path / "absent.jsonl", "torchhub")


def test_evaluate_file_rejects_bad_question_ids(tmp_path):
    (tmp_path / "torchhub_api.jsonl").write_text(json.dumps(TH_RECORD) + "\n", encoding="utf-8")
    (tmp_path / "torchhub_eval.json").write_text(json.dumps({"api_data": TH_RECORD}) + "\n", encoding="utf-8")
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps({"question_id": 1, "text": "api_call: torch.hub.load('facebookresearch/pytorchvideo', "
                                                        "'slow_r50') api_provider"}) + "\n"
                  + json.dumps({"question_id": 1}) + "\n", encoding="utf-8")
    _rows, totals = evaluate_file("torchhub", ok, tmp_path)
    assert totals == {"n": 2, "correct": 1, "hallucination": 0, "accuracy": 0.5, "hallucination_rate": 0.0}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question_id": 2, "text": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:1: question_id"):
        evaluate_file("torchhub", bad, tmp_path)


# ----------------------------------------------------------------------------------------------
# the paper-era TorchHub rule (the script before Gorilla's rewrite of 2023-06-03)


def test_paper_era_torchhub_rule_counts_a_response_without_api_call_as_hallucination(tmp_path, capsys):
    db = APIDatabase([TH_RECORD], "torchhub")
    gold = {"domain": "Video Classification"}
    no_marker = "Use the slow_r50 model from pytorchvideo to classify the clip."
    right = "api_call: torch.hub.load('facebookresearch/pytorchvideo', 'slow_r50') api_provider: PyTorch"
    wrong = "api_call: torch.hub.load('someone/else', 'nothing') api_provider: PyTorch"
    current = [evaluate_response(t, "torchhub", db, gold) for t in (no_marker, right, wrong)]
    paper = [evaluate_response(t, "torchhub", db, gold, torchhub_rule="paper") for t in (no_marker, right, wrong)]
    assert [(v.correct, v.hallucination) for v in current] == [(False, False), (True, False), (False, True)]
    assert [(v.correct, v.hallucination) for v in paper] == [(False, True), (True, False), (False, True)]
    assert "paper-era" in paper[0].reason and paper[0].details == {"torchhub_rule": "paper"}
    # the other hubs parse the whole text either way: the rule is TorchHub's only
    with pytest.raises(DataError, match="torchhub_rule 'old'"):
        evaluate_response(no_marker, "torchhub", db, gold, torchhub_rule="old")
    # the same through a responses file and the judge command
    (tmp_path / "torchhub_api.jsonl").write_text(json.dumps(TH_RECORD) + "\n", encoding="utf-8")
    (tmp_path / "torchhub_eval.json").write_text(json.dumps({"api_data": TH_RECORD}) + "\n", encoding="utf-8")
    resp = tmp_path / "responses.jsonl"
    resp.write_text("".join(json.dumps({"question_id": 1, "text": t}) + "\n" for t in (no_marker, right)),
                    encoding="utf-8")
    assert evaluate_file("torchhub", resp, tmp_path)[1]["hallucination"] == 0
    assert evaluate_file("torchhub", resp, tmp_path, torchhub_rule="paper")[1]["hallucination"] == 1
    from sourcebench.harness.cli import main

    args = ["judge", "apibench", "--hub", "torchhub", "--responses", str(resp), "--data-dir", str(tmp_path)]
    assert main([*args, "--torchhub-rule", "paper"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[0]) == {"question_id": 1, "correct": False, "hallucination": True}
    assert json.loads(out[-1]) == {"totals": {"n": 2, "correct": 1, "hallucination": 1, "accuracy": 0.5,
                                              "hallucination_rate": 0.5}, "torchhub_rule": "paper"}
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["hallucination"] is False


@needs_data
def test_paper_era_rule_on_the_published_torchhub_files():
    """The two rules differ on 188 of the 1,488 published TorchHub verdicts: all 186 of RT 0-shot (no
    response has an api_call) and 2 of FT oracle; the published FT 0-shot numbers are the same under both."""
    diffs = {}
    for f in sorted(RESPONSES.glob("response_torchhub_*.jsonl")):
        cur, _ = evaluate_file("torchhub", f, DATA)
        pap, totals = evaluate_file("torchhub", f, DATA, torchhub_rule="paper")
        diffs[f.name] = sum(a != b for a, b in zip(cur, pap))
        if f.name == "response_torchhub_Gorilla_FT_0_shot.jsonl":
            assert round(100 * totals["hallucination_rate"], 2) == 16.13
    assert sum(diffs.values()) == 188 and diffs["response_torchhub_Gorilla_RT_0_shot.jsonl"] == 186
