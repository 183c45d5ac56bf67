from judges.exact_f1 import exact_f1


def test_sets_case_and_whitespace():
    m = exact_f1(" Alice , bob", ["alice", "Bob"])
    assert m == {"em": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_partial_overlap():
    m = exact_f1("alice, carol", ["alice", "bob"])
    assert m["em"] == 0.0 and m["precision"] == 0.5 and m["recall"] == 0.5 and m["f1"] == 0.5


def test_empty_prediction():
    assert exact_f1("", ["a"])["f1"] == 0.0
