"""Hand-checked numbers for the report statistics (reports/stats.py)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from sourcebench.reports.stats import (
    bootstrap_ci,
    holm,
    holm_by_family,
    holm_caption,
    macro_accuracy,
    paired_test,
    per_seed_accuracy,
)


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


def test_identical_comparison_is_not_a_result():
    # identical on every paired task (e.g. a stateless method against itself): no p, no interval, a reason
    res = paired_test(*_pair_rows([1, 0, 1, 1, 0], [1, 0, 1, 1, 0]))
    assert res["p_value"] is None and res["ci_lo"] is None and res["mean_diff"] == 0.0
    assert res["reason"] == "identical on every paired task"
    # fewer than 5 pairs: untested ("—"), though the difference itself is known
    few = paired_test(*_pair_rows([1, 1, 1], [0, 0, 0]))
    assert few["p_value"] is None and few["mean_diff"] == pytest.approx(1.0) and "fewer than 5" in few["reason"]


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


def test_holm_by_family_corrects_within_each_named_family_only():
    # family x: .01, .04 -> .02, .04; family y: .03 alone -> .03; family z untested
    adj, sizes = holm_by_family([0.01, 0.03, 0.04, None], ["x", "y", "x", "z"])
    assert adj == pytest.approx([0.02, 0.03, 0.04, None]) and sizes == [2, 1, 2, 0]
    pooled = holm({"a": 0.01, "b": 0.03, "c": 0.04})  # one family of three would give .03, .06, .06
    assert pooled == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    with pytest.raises(ValueError, match="2 p-values but 1 family"):
        holm_by_family([0.1, 0.2], ["x"])
    assert holm_caption("the methods compared with B on one benchmark", [2, 0, 3]) == (
        "p (Holm): Holm-Bonferroni over the methods compared with B on one benchmark, one family per backend "
        "and benchmark (m = 2-3 tested comparisons per family).")


# ------------------------------------------------------------------ paired test: the task is the unit

def _rows(spec: dict[tuple[str, str], dict[int, tuple[float, float]]]) -> tuple[list[dict], list[dict]]:
    """{(source, task): {seed: (score A, score B)}} -> rows of A and rows of B."""
    ra, rb = [], []
    for (src, t), seeds in spec.items():
        for seed, (a, b) in seeds.items():
            ra.append({"source": src, "seed": seed, "task_id": t, "score": a})
            rb.append({"source": src, "seed": seed, "task_id": t, "score": b})
    return ra, rb


def _as_row_units(rows: list[dict]) -> list[dict]:
    """Each (seed, task) row made a task of its own: the old pairing by (source, seed, task)."""
    return [{**r, "task_id": f"{r['seed']}/{r['task_id']}"} for r in rows]


def test_tasks_in_two_and_three_seeds_hand_computed():
    # Binary scores, one source. Differences A - B per seed, and their mean per task:
    #   t0 seeds 0, 1, 2: 1, 1, 0 -> 2/3     t1 seeds 0, 1: 1, 0 -> 1/2     t2 seeds 1, 2: 1, 0 -> 1/2
    #   t3 seed 0: -1 -> -1                  t4 seeds 0, 2: 1, 1 -> 1
    # statistic = mean of the 5 task means = (2/3 + 1/2 + 1/2 - 1 + 1) / 5 = (5/3) / 5 = 1/3.
    # Exact over the 2**5 = 32 sign patterns of |d| = {2/3, 1/2, 1/2, 1, 1} (sum 11/3): a pattern whose
    # minus-signed values sum to N has sum 11/3 - 2N, so |sum| >= 5/3 iff N <= 1 or N >= 8/3. N <= 1: {},
    # {2/3}, {1/2}, {1/2'}, {1}, {1'}, {1/2, 1/2'} = 7 patterns; N >= 8/3 are their complements, 7 more:
    # p = 14/32 = 0.4375.
    spec = {("s", "t0"): {0: (1, 0), 1: (1, 0), 2: (0, 0)}, ("s", "t1"): {0: (1, 0), 1: (0, 0)},
            ("s", "t2"): {1: (1, 0), 2: (0, 0)}, ("s", "t3"): {0: (0, 1)},
            ("s", "t4"): {0: (1, 0), 2: (1, 0)}}
    ra, rb = _rows(spec)
    res = paired_test(ra, rb)
    assert res["test"] == "paired_permutation" and res["exact"] and res["n_draws"] is None
    assert (res["n_pairs"], res["n_paired_rows"], res["n_sources"]) == (5, 10, 1)
    assert res["mean_diff"] == pytest.approx(1 / 3) and res["p_value"] == pytest.approx(14 / 32)
    # the same rows paired by (source, seed, task): 10 binary pairs, 6 where only A is right and 1 where only
    # B is: McNemar 2 * P(Bin(7, 1/2) <= 1) = 2 * 8/128 = 0.125, as if t0, t1, t2 and t4 were 9 questions
    old = paired_test(_as_row_units(ra), _as_row_units(rb))
    assert old["test"] == "mcnemar_exact" and old["p_value"] == pytest.approx(0.125)
    assert old["n_pairs"] == 10


def test_sources_are_strata_of_a_macro_statistic():
    # One seed, binary. Source A: one task, A right only (d = +1). Source B: four tasks, d = +1, +1, -1, 0.
    # Statistic = mean over sources of the source's mean difference = (1 + 1/4) / 2 = 5/8, i.e. per-task
    # contributions 1/2 (source A) and 1/8, 1/8, -1/8, 0 (source B). Flips of the four non-zero tasks,
    # 2**4 = 16 patterns, |c| = {1/2, 1/8, 1/8, 1/8} summing to 7/8: |sum| >= 5/8 iff the minus-signed
    # values sum to at most 1/8 ({} or one 1/8: 4 patterns) or at least 6/8 (their 4 complements): p = 8/16.
    spec = {("A", "a0"): {0: (1, 0)}, ("B", "b0"): {0: (1, 0)}, ("B", "b1"): {0: (1, 0)},
            ("B", "b2"): {0: (0, 1)}, ("B", "b3"): {0: (1, 1)}}
    res = paired_test(*_rows(spec))
    assert res["test"] == "paired_permutation" and res["exact"] and res["n_sources"] == 2
    assert res["mean_diff"] == pytest.approx(5 / 8) and res["p_value"] == pytest.approx(0.5)
    # pooled McNemar would weigh source B's tasks 4 times as much: 3 vs 1 discordant, 2 * 5/16 = 0.625
    pooled = paired_test(*_rows({("S", k[1]): v for k, v in spec.items()}))
    assert pooled["test"] == "mcnemar_exact" and pooled["p_value"] == pytest.approx(0.625)


def test_exact_null_matches_brute_force_enumeration():
    rng = np.random.default_rng(11)
    spec = {("s" + str(i % 2), f"t{i}"): {0: (float(rng.random()), float(rng.random()))} for i in range(12)}
    ra, rb = _rows(spec)
    res = paired_test(ra, rb)
    n = {s: sum(1 for k in spec if k[0] == s) for s in ("s0", "s1")}
    c = np.array([(v[0][0] - v[0][1]) / (2 * n[k[0]]) for k, v in spec.items()])
    patterns = itertools.product((1, -1), repeat=12)
    hits = sum(abs(np.dot(signs, c)) >= abs(c.sum()) - 1e-12 for signs in patterns)
    assert res["exact"] and res["p_value"] == pytest.approx(hits / 2**12)
    assert res["mean_diff"] == pytest.approx(c.sum())


def test_exact_up_to_20_distinct_tasks_then_seeded_draws():
    def graded(n):  # n tasks with distinct positive differences: only all-plus/all-minus reach the total
        return _rows({("s", f"t{i}"): {0: (0.5 + (i + 1) / 100, 0.5)} for i in range(n)})

    twenty = paired_test(*graded(20))
    assert twenty["exact"] and twenty["p_value"] == pytest.approx(2 / 2**20)
    more = paired_test(*graded(21), n_resamples=999, seed=3)
    assert not more["exact"] and more["n_draws"] == 999 and more["p_value"] == pytest.approx(1 / 1000)
    assert paired_test(*graded(21), n_resamples=999, seed=3) == more


def test_mcnemar_only_where_every_task_appears_once():
    one = {("s", f"t{i}"): {0: (a, b)} for i, (a, b) in enumerate([(1, 0)] * 7 + [(0, 1)] * 2 + [(1, 1)] * 3)}
    res = paired_test(*_rows(one))
    assert res["test"] == "mcnemar_exact" and res["n_discordant"] == 9 and res["statistic"] == 7
    assert res["p_value"] == pytest.approx(2 * (1 + 9 + 36) / 512)  # 2 * P(Bin(9, 1/2) <= 2)
    # the same answers under a second seed (a cached method): one task, two rows, no longer McNemar's
    # layout, but the per-task differences and so the exact sign-flip p are the same: Binomial(9, 1/2)
    twice = {k: {0: v[0], 1: v[0]} for k, v in one.items()}
    res2 = paired_test(*_rows(twice))
    assert res2["test"] == "paired_permutation" and res2["exact"] and res2["n_paired_rows"] == 24
    assert res2["p_value"] == pytest.approx(res["p_value"], rel=1e-12) and res2["n_pairs"] == 12


def test_quickstart_mechanism_task_level_p():
    # The README quickstart: --limit 8 on three split seeds = 24 rows of 19 distinct tasks; the two methods
    # differ (by F1) on 7 tasks, always in the same direction, and one of them is tested under two seeds
    # with the same answers. Task level: 7 non-zero task means, all positive, so only the all-plus and
    # all-minus patterns of 2**7 reach the observed sum: p = 2/128 = 0.0156 (printed "0.016").
    # Row level, the old pairing: 8 non-zero rows, p = 2/256 = 0.0078 (the "0.008").
    f1 = [0.4, 0.5, 0.25, 0.67, 0.8, 0.33, 0.6]  # hybrid_rag's F1 on the tasks where the two differ
    seeds_of = {f"t{i}": [i % 3] for i in range(19)}  # 19 tasks, one seed each ...
    for t in ("t0", "t1", "t2", "t3", "t4"):
        seeds_of[t].append((seeds_of[t][0] + 1) % 3)  # ... five of them under two seeds: 24 rows
    assert sum(map(len, seeds_of.values())) == 24 and all(
        sum(s in v for v in seeds_of.values()) == 8 for s in range(3))
    hy, no = [], []
    for i, (t, seeds) in enumerate(seeds_of.items()):
        score = f1[i - 4] if 4 <= i < 11 else 0.0  # t4 (two seeds) and t5 ... t10 differ
        for s in seeds:
            hy.append({"source": "u", "seed": s, "task_id": t, "score": score})
            no.append({"source": "u", "seed": s, "task_id": t, "score": 0.0})
    res = paired_test(hy, no)
    assert (res["n_pairs"], res["n_paired_rows"]) == (19, 24)
    assert res["exact"] and res["p_value"] == pytest.approx(2 / 2**7) and round(res["p_value"], 3) == 0.016
    old = paired_test(_as_row_units(hy), _as_row_units(no))
    assert old["p_value"] == pytest.approx(2 / 2**8) and round(old["p_value"], 3) == 0.008


def _cached_answers(n_tasks: int, binary: bool, seed: int) -> tuple[list[dict], list[dict]]:
    """Two methods whose answer to a task is the same under every seed that tests it (as for a method
    that does not learn from guidance, answering from the cache); tasks tested under 1-3 of 3 seeds."""
    rng = np.random.default_rng(seed)
    ra, rb = [], []
    for i in range(n_tasks):
        src = ("s1", "s2", "s3")[i % 3] if i % 7 else "s1"  # unequal sources
        a, b = (rng.random() < 0.6, rng.random() < 0.45) if binary else (rng.random(), rng.random() * 0.9)
        seeds = [s for s in range(3) if rng.random() < 0.6] or [int(rng.integers(3))]
        for s in seeds:
            ra.append({"source": src, "seed": s, "task_id": f"t{i}", "score": float(a)})
            rb.append({"source": src, "seed": s, "task_id": f"t{i}", "score": float(b)})
    return ra, rb


def _duplicate_seed(rows: list[dict], seed: int, new: int) -> list[dict]:
    return rows + [{**r, "seed": new} for r in rows if r["seed"] == seed]


def _split_seed(rows: list[dict], seed: int, new: int) -> list[dict]:
    """Seed ``seed``'s tasks divided between ``seed`` and ``new`` (every other task moves)."""
    ids = sorted({r["task_id"] for r in rows if r["seed"] == seed})
    moved = set(ids[::2])
    return [{**r, "seed": new} if r["seed"] == seed and r["task_id"] in moved else r for r in rows]


def _two_identical_seeds(rows: list[dict], seed: int, new: int) -> list[dict]:
    """Seed ``seed`` replaced by two seeds holding its rows (the same as duplicating it)."""
    return [r for r in rows if r["seed"] != seed] + [{**r, "seed": s} for r in rows if r["seed"] == seed
                                                     for s in (seed, new)]


@pytest.mark.parametrize("n_tasks,binary", [(14, True), (14, False), (300, True), (300, False)])
def test_replication_leaves_every_p_value_unchanged(n_tasks, binary):
    # small cases are exact, large ones sampled (same seed, same tasks, same draws)
    ra, rb = _cached_answers(n_tasks, binary, seed=n_tasks + binary)
    ref = paired_test(ra, rb, seed=4, n_resamples=2000)
    assert ref["p_value"] is not None and ref["n_paired_rows"] > ref["n_pairs"]
    for change in (_duplicate_seed, _split_seed, _two_identical_seeds):
        for s in range(3):
            got = paired_test(change(ra, s, 7), change(rb, s, 7), seed=4, n_resamples=2000)
            assert got["p_value"] == pytest.approx(ref["p_value"], rel=1e-9, abs=1e-12), (change.__name__, s)
            assert got["mean_diff"] == pytest.approx(ref["mean_diff"]) and got["n_pairs"] == ref["n_pairs"]
    # pairing by (source, seed, task), as before, moves with replication
    old = paired_test(_as_row_units(ra), _as_row_units(rb), seed=4, n_resamples=2000)
    dup = paired_test(_as_row_units(_duplicate_seed(ra, 0, 7)), _as_row_units(_duplicate_seed(rb, 0, 7)),
                      seed=4, n_resamples=2000)
    assert dup["p_value"] != pytest.approx(old["p_value"], rel=1e-3)


def test_splitting_a_seed_leaves_p_unchanged_whatever_the_answers():
    # answers that differ between seeds: moving some of a seed's tasks to a new seed keeps every task's pairs
    rng = np.random.default_rng(5)
    ra, rb = [], []
    for i in range(40):
        for s in range(3):
            if rng.random() < 0.7:
                key = {"source": f"s{i % 2}", "seed": s, "task_id": i}
                ra.append({**key, "score": float(rng.random() < 0.5)})
                rb.append({**key, "score": float(rng.random() < 0.4)})
    ref = paired_test(ra, rb, n_resamples=999)
    for s in range(3):
        got = paired_test(_split_seed(ra, s, 9), _split_seed(rb, s, 9), n_resamples=999)
        assert got["p_value"] == ref["p_value"] and got["mean_diff"] == pytest.approx(ref["mean_diff"])


def test_paired_value_difference_clusters_by_group_and_counts_each_task_once():
    """A per-task cost compared as Δ is: the source-stratified mean of per-task differences, its interval
    resampling whole groups, so copying every task as a perfectly correlated group-mate changes neither
    the estimate nor the interval; a task tested under two seeds counts once (its seeds averaged)."""
    from sourcebench.reports.stats import paired_value_difference

    costs = [120, 80, 300, 50, 260, 90, 400, 10, 150, 220]

    def rows(side: str, copies: int, seeds=(0,)) -> list[dict]:
        out = []
        for i, c in enumerate(costs):
            for k in range(copies):
                for sd in seeds:
                    v = 1000 if side == "ref" else 1000 - c
                    out.append({"source": "s", "seed": sd, "task_id": f"t{i}-{k}", "group": f"g{i}", "cost": v})
        return out

    value = lambda r: r["cost"]
    one = paired_value_difference(rows("ref", 1), rows("m", 1), value, seed=3)
    three = paired_value_difference(rows("ref", 3), rows("m", 3), value, seed=3)
    assert one["mean_diff"] == pytest.approx(sum(costs) / len(costs)) == pytest.approx(three["mean_diff"])
    assert (one["mean_a"], one["mean_b"]) == (pytest.approx(1000.0), pytest.approx(1000 - 168.0))
    assert one["n_groups"] == three["n_groups"] == 10 and three["n_pairs"] == 30
    assert (one["ci_lo"], one["ci_hi"]) == (pytest.approx(three["ci_lo"]), pytest.approx(three["ci_hi"]))
    assert one["ci_lo"] < 168 < one["ci_hi"]
    two_seeds = paired_value_difference(rows("ref", 1, (0, 1)), rows("m", 1, (0, 1)), value, seed=3)
    assert two_seeds["n_pairs"] == 10 and two_seeds["mean_diff"] == pytest.approx(168.0)
    few = paired_value_difference(rows("ref", 1)[:4], rows("m", 1)[:4], value)
    assert few["ci_lo"] is None and "fewer than 5" in few["reason"] and few["mean_diff"] == pytest.approx(137.5)


def _grouped(diffs_by_group: list[list[float]], source: str = "s") -> tuple[list[dict], list[dict]]:
    """Baseline scores 1 in two seeds; the method's per-task difference d in {0, -0.5, -1} over them."""
    a, b = [], []
    for g, diffs in enumerate(diffs_by_group):
        for i, d in enumerate(diffs):
            for seed in (0, 1):
                wrong = d <= -1 or (d == -0.5 and seed == 0)
                key = {"source": source, "seed": seed, "task_id": f"g{g}t{i}", "group": f"g{g}"}
                a.append({**key, "score": 0.0 if wrong else 1.0})
                b.append({**key, "score": 1.0})
    return a, b


def test_delta_interval_agrees_with_p_with_few_groups():
    # the quickstart's shape: 19 paired tasks in 6 groups, 4 of them non-zero, all against the method;
    # the 2**4 sign patterns of the non-zero groups give p = 2/16 = 0.125, so 0 must be in the interval
    # (a cluster bootstrap of the same data gave [-20.0, -5.9] pp, excluding it)
    a, b = _grouped([[-1, 0, 0, 0], [-0.5, 0, 0, 0], [-0.5, 0, 0], [-0.5, 0, 0], [0, 0, 0], [0, 0]])
    t = paired_test(a, b)
    assert (t["n_pairs"], t["n_groups"], t["p_value"]) == (19, 6, pytest.approx(0.125))
    assert t["ci_lo"] < t["mean_diff"] < t["ci_hi"] and t["ci_lo"] <= 0.0 <= t["ci_hi"]
    # every shift outside the interval is rejected by the same test of the shifted differences, every
    # shift just inside is not (the inversion, checked against paired_test itself on shifted scores)
    def p_at(delta: float) -> float:
        return paired_test([{**r, "score": r["score"] - delta} for r in a], b)["p_value"]
    for end, outward in ((t["ci_lo"], -1), (t["ci_hi"], 1)):
        assert p_at(end + outward * 1e-6) < 0.05 <= p_at(end - outward * 1e-6)
    # six groups: all-same-sign patterns have p = 2/64, so both ends are finite; the lower end is where
    # the group means (-1/4, -1/8, -1/6, -1/6, 0, 0) make the shifted sum reach that tail
    assert t["ci_lo"] == pytest.approx(-0.25, abs=1e-6) and t["ci_hi"] == pytest.approx(0.0, abs=1e-6)


def test_delta_interval_is_unbounded_with_five_groups_and_never_a_number():
    # five groups: even an all-same-sign shift has p = 2/32 = 0.0625 > 0.05, so no δ is rejected
    a, b = _grouped([[-1, -1], [-1, -0.5], [-1], [-0.5, -1], [-1, -1, -1]])
    t = paired_test(a, b)
    assert t["p_value"] == pytest.approx(0.0625) and t["mean_diff"] < 0
    assert t["ci_lo"] is None and t["ci_hi"] is None
    assert "too few groups for a 95 % interval" in t["reason"] and "0.0625" in t["reason"]


def test_delta_interval_of_identical_group_means_is_no_result():
    # every group loses one of its two tasks: the test rejects every shift but Δ itself, a zero-width
    # interval, which is printed as "—" with why rather than as [-50.0, -50.0]
    a, b = _grouped([[-1, 0]] * 8)
    t = paired_test(a, b)
    assert t["mean_diff"] == pytest.approx(-0.5) and t["p_value"] == pytest.approx(2 / 2**8)
    assert t["ci_lo"] is None and "zero-width" in t["reason"]


def _random_comparison(rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
    a, b = [], []
    binary = rng.random() < 0.5
    for src in [f"S{k}" for k in range(int(rng.integers(1, 3)))]:
        n_groups = int(rng.integers(2, 9))
        seeds = (0,) if rng.random() < 0.5 else (0, 1)
        effect = rng.normal(0, 0.3)
        for g in range(n_groups):
            for i in range(int(rng.integers(1, 4))):
                for seed in seeds:
                    key = {"source": src, "seed": seed, "task_id": f"g{g}t{i}", "group": f"g{g}"}
                    pa, pb = np.clip(0.5 + effect, 0, 1), 0.5
                    sa = float(rng.random() < pa) if binary else float(np.clip(rng.normal(pa, 0.3), 0, 1))
                    sb = float(rng.random() < pb) if binary else float(np.clip(rng.normal(pb, 0.3), 0, 1))
                    a.append({**key, "score": sa})
                    b.append({**key, "score": sb})
    return a, b


def test_delta_interval_excludes_zero_iff_p_below_005_on_random_small_datasets():
    rng = np.random.default_rng(3)
    seen = {"sig": 0, "ns": 0, "unbounded": 0}
    for _ in range(150):
        a, b = _random_comparison(rng)
        t = paired_test(a, b)
        if t["p_value"] is None:
            continue
        if t["ci_lo"] is None:
            if "zero-width" in t["reason"]:
                continue
            assert "too few groups" in t["reason"] and t["p_value"] >= 0.05
            seen["unbounded"] += 1
            continue
        assert t["ci_lo"] <= t["mean_diff"] <= t["ci_hi"]
        excludes = t["ci_lo"] > 0 or t["ci_hi"] < 0
        assert excludes == (t["p_value"] < 0.05), t
        seen["sig" if excludes else "ns"] += 1
    assert min(seen.values()) >= 3, seen  # the property was exercised on every branch


def test_delta_interval_with_sampled_p_uses_the_same_draws():
    # 30 groups of distinct graded differences: too many outcomes to enumerate, p from 9,999 seeded draws
    rng = np.random.default_rng(5)
    diffs = rng.normal(0.08, 0.25, size=30)
    a = [{"source": "s", "seed": 0, "task_id": f"t{i}", "score": float(d)} for i, d in enumerate(diffs)]
    b = [{"source": "s", "seed": 0, "task_id": f"t{i}", "score": 0.0} for i in range(30)]
    t = paired_test(a, b, seed=11)
    assert t["exact"] is False and t["n_draws"] == 9999
    assert t["ci_lo"] <= t["mean_diff"] <= t["ci_hi"]
    assert (t["ci_lo"] > 0 or t["ci_hi"] < 0) == (t["p_value"] < 0.05)
    assert paired_test(a, b, seed=11) == t  # seeded: the same draws, the same interval
    # the end is where the shifted test (same seed, same draws) turns: rejected just outside
    def p_at(delta: float) -> float:
        return paired_test([{**r, "score": r["score"] - delta} for r in a], b, seed=11)["p_value"]
    assert p_at(t["ci_hi"] + 1e-6) < 0.05 <= p_at(t["ci_hi"] - 1e-6)


def test_docs_worked_example_delta_interval_is_unbounded():
    # docs/protocols.md "A worked example": three dialogues, p = 2/4; no shift can reach p < 2/8
    groups = {"t1": "g1", "t2": "g1", "t3": "g2", "t4": "g2", "t5": "g3", "t6": "g3"}
    method, base = [1, 1, 1, 0, 1, 0], [0, 0, 0, 0, 1, 0]
    rows = [[{"source": "s", "seed": 0, "task_id": t, "group": g, "score": float(x[i])}
             for i, (t, g) in enumerate(groups.items())] for x in (method, base)]
    t = paired_test(*rows)
    assert t["mean_diff"] == pytest.approx(0.5) and t["p_value"] == pytest.approx(0.5)
    assert t["ci_lo"] is None and t["ci_hi"] is None
    assert "too few groups for a 95 % interval (3 groups: the smallest attainable p is 0.25)" in t["reason"]
