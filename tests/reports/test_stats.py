"""Hand-checked numbers for the report statistics (reports/stats.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from reports.stats import bootstrap_ci, holm, macro_accuracy, paired_test, per_seed_accuracy


def rows_from(table: dict[tuple[str, int], list[float]], **extra) -> list[dict]:
    """{(source, seed): [scores of tasks t0, t1, ...]} -> result rows."""
    return [
        {"source": src, "seed": seed, "task_id": f"t{i}", "score": s, **extra}
        for (src, seed), scores in table.items()
        for i, s in enumerate(scores)
    ]


def test_macro_accuracy_hand_computed():
    rows = rows_from(
        {
            ("A", 0): [1, 0, 1, 1],  # 3/4
            ("B", 0): [0, 1],  # 1/2   -> seed 0: 5/8
            ("A", 1): [0, 0, 1],  # 1/3
            ("B", 1): [1],  # 1     -> seed 1: 2/3
        }
    )
    assert per_seed_accuracy(rows) == pytest.approx({0: 5 / 8, 1: 2 / 3})
    assert macro_accuracy(rows) == pytest.approx(31 / 48)
    micro = np.mean([r["score"] for r in rows])
    assert macro_accuracy(rows) != pytest.approx(micro)  # the rule is macro, not a pooled mean


def test_failed_rows_score_zero_and_empty_is_nan():
    rows = rows_from({("A", 0): [1, 1]})
    rows[1]["failed"] = True  # a scored failure counts as 0 whatever its score field says
    assert macro_accuracy(rows) == pytest.approx(0.5)
    assert np.isnan(macro_accuracy([]))
    assert all(np.isnan(bootstrap_ci([], 10, 0)))


def _random_rows(n: int, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"source": f"s{i % 10}", "seed": i % 3, "task_id": i // 30, "score": float(rng.random() < 0.6)}
        for i in range(n)
    ]


def test_bootstrap_is_deterministic_and_contains_point_estimate():
    rows = _random_rows(3000)
    a = bootstrap_ci(rows, n_boot=500, seed=7)
    b = bootstrap_ci(rows, n_boot=500, seed=7)
    c = bootstrap_ci(rows, n_boot=500, seed=8)
    assert a == b
    assert a != c
    assert a[0] < macro_accuracy(rows) < a[1]
    assert a[1] - a[0] < 0.1


def test_bootstrap_degenerate_and_joint_resampling_across_seeds():
    assert bootstrap_ci(rows_from({("A", 0): [1, 1, 1], ("A", 1): [1, 1]}), 200, 0) == (1.0, 1.0)
    # Task i scores x on seed 0 and 1 - x on seed 1: if the same ids are drawn for both seeds (the
    # documented choice), every resample averages to exactly 0.5; independent draws would not.
    x = [1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1]
    rows = rows_from({("A", 0): x, ("A", 1): [1 - v for v in x]})
    lo, hi = bootstrap_ci(rows, 500, 0)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)


def test_bootstrap_is_fast_on_10000_rows():
    rows = _random_rows(10_000)
    bootstrap_ci(rows[:50], 10, 0)  # warm up imports
    t = time.process_time()
    bootstrap_ci(rows, n_boot=2000, seed=0)
    assert time.process_time() - t < 2.0  # typically ~0.2 s; generous for loaded CI machines


def _pair_rows(a: list[float], b: list[float]):
    ra = [{"source": "s", "seed": 0, "task_id": i, "score": v} for i, v in enumerate(a)]
    rb = [{"source": "s", "seed": 0, "task_id": i, "score": v} for i, v in enumerate(b)]
    return ra, rb


def test_mcnemar_exact_hand_case():
    # 8 pairs where only A is right, 2 where only B is, 5 concordant
    a = [1] * 8 + [0] * 2 + [1] * 3 + [0] * 2
    b = [0] * 8 + [1] * 2 + [1] * 3 + [0] * 2
    res = paired_test(*_pair_rows(a, b))
    assert res["test"] == "mcnemar_exact"
    assert res["n_pairs"] == 15 and res["n_discordant"] == 10 and res["statistic"] == 8
    assert res["p_value"] == pytest.approx(0.109375)  # 2 * P(Bin(10, .5) <= 2) = 2 * 56/1024
    assert res["mean_diff"] == pytest.approx(6 / 15)


def test_mcnemar_without_discordant_pairs_is_one():
    assert paired_test(*_pair_rows([1, 0, 1], [1, 0, 1]))["p_value"] == 1.0


def test_paired_permutation_on_graded_scores():
    # non-zero differences +0.5, +0.25, +0.5, +0.75: exact over 2**4 sign vectors, only the all-plus
    # and all-minus ones reach |sum| = 2.0, so p = 2/16; the zero difference does not matter
    a, b = [1, 0.5, 0.75, 1, 0.3], [0.5, 0.25, 0.25, 0.25, 0.3]
    res = paired_test(*_pair_rows(a, b))
    assert res["test"] == "paired_permutation"
    assert res["p_value"] == pytest.approx(0.125)
    assert res["mean_diff"] == pytest.approx(0.4)
    assert paired_test(*_pair_rows(b, a))["mean_diff"] == pytest.approx(-0.4)


def test_paired_permutation_randomised_is_seeded_and_sensible():
    rng = np.random.default_rng(3)
    a = rng.random(300)
    same = paired_test(*_pair_rows(list(a), list(rng.permutation(a))), seed=1)
    again = paired_test(*_pair_rows(list(a), list(rng.permutation(a))), seed=1)
    assert 0 < same["p_value"] <= 1 and 0 < again["p_value"] <= 1
    better = paired_test(*_pair_rows(list(np.minimum(a + 0.2, 1.0)), list(a)), seed=1)
    assert better["p_value"] == pytest.approx(1 / 10_000)  # never 0 for a sampled null
    r1 = paired_test(*_pair_rows(list(a), list(a[::-1])), seed=5)
    r2 = paired_test(*_pair_rows(list(a), list(a[::-1])), seed=5)
    assert r1 == r2


def test_pairs_only_on_shared_keys_and_none_without_pairs():
    ra, rb = _pair_rows([1, 1, 0], [0, 1, 0])
    rb[0]["seed"] = 1  # no longer pairs with A's task 0
    assert paired_test(ra, rb)["n_pairs"] == 2
    res = paired_test(ra, [])
    assert res["n_pairs"] == 0 and res["p_value"] is None


def test_holm_hand_case():
    adj = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": None})
    # sorted: a .01*3 = .03; c .03*2 = .06; b .04*1 = .04 -> monotone max .06
    assert adj == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06, "d": None})
    assert holm({"x": 0.6, "y": 0.9}) == pytest.approx({"x": 1.0, "y": 1.0})
    assert holm({}) == {}
