"""Every per-question verdict of the APIBench AST evaluator against Gorilla's official scripts.

``data/apibench_official_verdicts.json`` holds the official verdicts on all 24 published response files
(14,200 lines), recorded from ``ast_eval_{th,hf,tf}.py`` with their bundled ``my-languages.so`` on
py-tree-sitter 0.20.1 (how: the file's ``how`` field). On py-tree-sitter 0.20.2 and later the official
scripts themselves give 14 other verdicts: those responses are prose mixed with code, so the parse tree,
and with it the sub-tree that is matched, comes from tree-sitter's error recovery, which changed in the C
runtime bundled with 0.20.2. The grammar is not the cause (the bundled grammar and the one of
tree-sitter-languages 1.5.0 give the same verdicts on all 14,200, on either runtime), nor is the
extraction of the API call. The evaluator pins the runtime of the published numbers, 0.20.1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sourcebench.judges.apibench_ast import (
    HUBS,
    APIDatabase,
    evaluate_file,
    evaluate_response,
    load_gold,
    parser_versions,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "apibench"
RESPONSES = DATA / "responses"
OFFICIAL = json.loads((Path(__file__).parent / "data" / "apibench_official_verdicts.json").read_text(encoding="utf-8"))
VERDICTS: dict[str, str] = {name: f["verdicts"] for name, f in OFFICIAL["files"].items()}
QUESTION_IDS: dict[str, list[int]] = {name: f["question_ids"] for name, f in OFFICIAL["files"].items()}
LETTER = {"correct": "c", "hallucination": "h", "neither": "n"}

# (file, question_id, official verdict on py-tree-sitter 0.20.1, official verdict on 0.20.2 to 0.21.3)
RUNTIME_SENSITIVE = [
    ("response_huggingface_Gorilla_FT_bm25.jsonl", 93, "neither", "hallucination"),
    ("response_huggingface_Gorilla_FT_bm25.jsonl", 595, "neither", "hallucination"),
    ("response_huggingface_Gorilla_FT_bm25.jsonl", 701, "neither", "hallucination"),
    ("response_huggingface_Gorilla_FT_bm25.jsonl", 908, "neither", "hallucination"),
    ("response_huggingface_Gorilla_FT_gpt_index.jsonl", 60, "neither", "hallucination"),
    ("response_huggingface_Gorilla_FT_oracle.jsonl", 56, "correct", "hallucination"),
    ("response_huggingface_Gorilla_FT_oracle.jsonl", 238, "correct", "hallucination"),
    ("response_huggingface_Gorilla_FT_oracle.jsonl", 377, "hallucination", "correct"),
    ("response_huggingface_Gorilla_RT_oracle.jsonl", 788, "hallucination", "neither"),
    ("response_tensorflowhub_Gorilla_FT_bm25.jsonl", 100, "neither", "hallucination"),
    ("response_tensorflowhub_Gorilla_FT_bm25.jsonl", 129, "neither", "hallucination"),
    ("response_tensorflowhub_Gorilla_RT_oracle.jsonl", 359, "neither", "hallucination"),
    ("response_tensorflowhub_Gorilla_FT_gpt_index.jsonl", 239, "hallucination", "correct"),
    ("response_tensorflowhub_Gorilla_FT_gpt_index.jsonl", 402, "hallucination", "correct"),
]


def _hub(name: str) -> str:
    return name.split("_")[1]


@pytest.fixture(scope="module")
def dbs() -> dict[str, APIDatabase]:
    if not DATA.is_dir():
        pytest.skip(f"APIBench data not available at {DATA}")
    return {hub: APIDatabase.load(hub, DATA) for hub in HUBS}


def _letter(row: dict) -> str:
    return "c" if row["correct"] else "h" if row["hallucination"] else "n"


# ----------------------------------------------------------------------------------------------
# the recorded official verdicts themselves (no data needed)


def test_recorded_verdicts_cover_the_24_files():
    assert len(VERDICTS) == 24 and sum(len(v) for v in VERDICTS.values()) == 14_200
    assert {_hub(n) for n in VERDICTS} == set(HUBS)
    assert all(set(v) <= {"c", "h", "n"} and len(v) == len(QUESTION_IDS[n]) for n, v in VERDICTS.items())


@pytest.mark.parametrize(
    "hub, n, accuracy, hallucination",
    [("torchhub", 186, 75.81, 16.13), ("huggingface", 904, 69.36, 10.95), ("tensorflowhub", 685, 83.80, 5.40)],
)
def test_recorded_verdicts_give_the_published_numbers(hub, n, accuracy, hallucination):
    v = VERDICTS[f"response_{hub}_Gorilla_FT_0_shot.jsonl"]
    assert len(v) == n
    assert round(100 * v.count("c") / n, 2) == accuracy
    assert round(100 * v.count("h") / n, 2) == hallucination


def test_runtime_sensitive_cases_are_the_recorded_ones():
    # the table below is the recorded data, and the later runtime's verdict is always a different one
    for name, qid, official, later in RUNTIME_SENSITIVE:
        assert VERDICTS[name][QUESTION_IDS[name].index(qid)] == LETTER[official] != LETTER[later]


# ----------------------------------------------------------------------------------------------
# the evaluator against them, on the real data


@pytest.mark.parametrize("name, qid, official, later", RUNTIME_SENSITIVE,
                         ids=[f"{n[9:-6]}-q{q}" for n, q, _, _ in RUNTIME_SENSITIVE])
def test_runtime_sensitive_verdicts(dbs, name, qid, official, later):
    hub = _hub(name)
    line = next(json.loads(x) for x in (RESPONSES / name).read_text(encoding="utf-8").splitlines()
                if json.loads(x)["question_id"] == qid)
    v = evaluate_response(line["text"], hub, dbs[hub], load_gold(hub, DATA)[qid - 1])
    got = "correct" if v.correct else "hallucination" if v.hallucination else "neither"
    assert got == official, (f"{name} q{qid}: {got}, official {official} ({later} is what py-tree-sitter >= 0.20.2 "
                             f"gives; installed: {parser_versions()})")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_every_verdict_matches_the_official_scripts(dbs, name):
    hub = _hub(name)
    rows, totals = evaluate_file(hub, RESPONSES / name, DATA, db=dbs[hub])
    official = VERDICTS[name]
    assert [r["question_id"] for r in rows] == QUESTION_IDS[name]
    differ = [f"q{r['question_id']}: {_letter(r)} (official {o})" for r, o in zip(rows, official, strict=True)
              if _letter(r) != o]
    assert not differ, f"{name}: {len(differ)} verdicts differ ({parser_versions()}): {', '.join(differ)}"
    assert (totals["n"], totals["correct"], totals["hallucination"]) == (
        len(official), official.count("c"), official.count("h"))
