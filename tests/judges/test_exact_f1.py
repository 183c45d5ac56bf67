"""PhantomWiki's answer-set scorer against official ``phantom_eval`` scores computed by hand.

Official: ``normalize_pred(s) = set(s.split(",") stripped and lowercased)``, empty items kept; the
gold list is ``",".join(true)``; precision = |P & T| / |P|, recall = |P & T| / |T|, F1 their harmonic
mean (0 when both are 0), EM = (P == T).
"""

from __future__ import annotations

import asyncio

import pytest

from sourcebench.adapters.phantomwiki.benchmark import AnswerSet, PhantomWiki
from sourcebench.harness.data import Answer, Task
from sourcebench.judges.exact_f1 import answer_set, exact_f1

# (prediction, gold list, official (em, precision, recall, f1)), each worked out from the sets
CASES = [
    # case and whitespace: {"alice", "bob"} both sides
    (" Alice , bob", ["alice", "Bob"], (1.0, 1.0, 1.0, 1.0)),
    # partial overlap: P {"alice", "carol"}, T {"alice", "bob"}
    ("alice, carol", ["alice", "bob"], (0.0, 0.5, 0.5, 0.5)),
    # trailing comma: P {"alice", "bob", ""}; precision 2/3, recall 1, F1 0.8
    ("Alice, Bob,", ["Alice", "Bob"], (0.0, 2 / 3, 1.0, 0.8)),
    # two commas in a row: P {"alice", "", "bob"}, the same as above
    ("alice,,bob", ["alice", "bob"], (0.0, 2 / 3, 1.0, 0.8)),
    # duplicates count once: P {"alice"}; T {"alice", "bob"}; F1 2*1*0.5/1.5
    ("alice, ALICE ,alice", ["alice", "bob"], (0.0, 1.0, 0.5, 2 / 3)),
    # duplicate gold items count once too
    ("alice", ["Alice", "alice "], (1.0, 1.0, 1.0, 1.0)),
    # empty prediction: P {""}, nothing in common
    ("", ["alice"], (0.0, 0.0, 0.0, 0.0)),
    # whitespace only is the empty item as well
    ("   ", ["alice", "bob"], (0.0, 0.0, 0.0, 0.0)),
    # a gold item with a comma is split: T {"smith", "john"}; P {"smith john"} shares nothing
    ("Smith John", ["Smith, John"], (0.0, 0.0, 0.0, 0.0)),
    # ... and the prediction written the same way matches it exactly
    ("smith,john", ["Smith, John"], (1.0, 1.0, 1.0, 1.0)),
    # gold with a trailing comma: T {"alice", ""}; P {"alice"}: precision 1, recall 1/2
    ("alice", ["alice,"], (0.0, 1.0, 0.5, 2 / 3)),
    # numbers are strings: "2" == " 2 ", but "2.0" is not "2"
    (" 2 ", ["2"], (1.0, 1.0, 1.0, 1.0)),
    ("2.0", ["2"], (0.0, 0.0, 0.0, 0.0)),
    # numerical lists: P {"6", "5", "0"}, T {"5", "6"}
    ("6,5,0", ["5", "6"], (0.0, 2 / 3, 1.0, 0.8)),
    # no separator but a space: one item, not two
    ("alice bob", ["alice", "bob"], (0.0, 0.0, 0.0, 0.0)),
]


@pytest.mark.parametrize("pred, gold, official", CASES)
def test_matches_hand_computed_official_scores(pred, gold, official):
    m = exact_f1(pred, gold)
    em, p, r, f1 = official
    assert m["em"] == em
    assert m["precision"] == pytest.approx(p)
    assert m["recall"] == pytest.approx(r)
    assert m["f1"] == pytest.approx(f1)


def test_sets_keep_the_empty_item():
    assert answer_set("a,") == {"a", ""}
    assert answer_set("") == {""}
    assert answer_set(["A ", "b,c"]) == {"a", "b", "c"}  # a list is joined with "," first, like the gold


def test_gold_given_as_text_or_list_is_the_same():
    assert exact_f1("a, b,", "A,B") == exact_f1("a, b,", ["A", "B"])


# (the model's structured answers, gold list, official F1 of the text an official agent would have written)
PATH_CASES = [
    (["Alice", "Bob"], ["alice", "bob"], 1.0),  # "Alice,Bob"
    (["Alice", "Bob", ""], ["alice", "bob"], 0.8),  # "Alice,Bob," (an empty answer is a trailing comma)
    (["Smith, John"], ["Smith", "John"], 1.0),  # "Smith, John"
    ([], ["alice"], 0.0),  # ""
    (["alice", "Alice"], ["alice"], 1.0),  # "alice,Alice"
]


@pytest.mark.parametrize("answers, gold, official_f1", PATH_CASES)
def test_structured_answer_to_text_to_score_matches_official(answers, gold, official_f1):
    bench = PhantomWiki()
    text = bench.answer_text(AnswerSet(answers=answers))
    task = Task(id="q", source_id="s", question="?", reference=gold)
    score = asyncio.run(bench.score(task, Answer(text=text)))
    assert score.value == pytest.approx(official_f1)
    assert score.value == pytest.approx(exact_f1(",".join(answers), ",".join(gold))["f1"])
