"""Seeded statistics for comparing methods on the same tasks.

Pure functions over result rows (dicts with ``source``, ``seed``, ``task_id``, ``score`` and
optionally ``failed``), numpy/scipy only, so that every number in a report is reproducible from the
run folder and a seed. inspect-ai's own bootstrap is unseeded, which is why this module exists.

A row with ``failed: true`` scores 0 whatever its ``score`` field says: failures stay in the
denominator (docs/results-format.md).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as _sps

AGGREGATION_RULE = (
    "accuracy = mean over split seeds of (mean over sources of (mean score over that source's "
    "test tasks)), so every source and every seed weighs the same; failed tasks score 0"
)

CI_METHOD = (
    "design-effect Wilson score interval of the aggregated accuracy: the estimate's variance is the "
    "linearised (Taylor) variance of the source-stratified, group-clustered mean (within each source, the "
    "groups of tasks - a dialogue, an API, a story; a task without a group is its own - are the "
    "independent units, a task's rows of every split seed stay in its group), the effective number of "
    "units is p(1 - p) / variance, and the Wilson interval is taken at that size (plain Wilson for one "
    "source of ungrouped binary tasks and one seed); conditional on the fixed sources and on the learned "
    "artifacts of this run (a new learning run is not resampled)"
)

DELTA_METHOD = (
    "the tested statistic, the mean over sources of the mean per-task difference (method minus baseline; "
    "a task's difference is averaged over the split seeds where both scored it) on the tasks both sides "
    "scored, in points; its 95% interval is the paired test inverted (the shifts that test, subtracted from "
    "every difference, does not reject at 5%), so it excludes 0 exactly when the unadjusted p < 0.05; "
    "\"—\" with too few groups; conditional on the fixed sources and the learned artifacts"
)

# Largest number of matrix cells (resamples x tasks) materialised at once by the resampling loops.
_BLOCK_CELLS = 1 << 16  # small enough for the count matrix to stay in cache

Key = tuple[Any, Any]  # (source, seed)


def row_score(row: Mapping[str, Any]) -> float:
    """Score of one row in [0, 1]; a scored failure (or a missing score) counts as 0."""
    if row.get("failed"):
        return 0.0
    s = row.get("score")
    return 0.0 if s is None else float(s)


def sort_key(value: Any) -> tuple[int, Any]:
    """Order seeds/sources numerically when they are numbers, else as text, without mixing types."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


def _cells(rows: Iterable[Mapping[str, Any]]) -> dict[Key, dict[Any, float]]:
    """(source, seed) -> {task_id: score}; a repeated task in the same stratum keeps the last row."""
    out: dict[Key, dict[Any, float]] = {}
    for r in rows:
        out.setdefault((r["source"], r["seed"]), {})[r["task_id"]] = row_score(r)
    return out


def per_seed_accuracy(rows: Iterable[Mapping[str, Any]]) -> dict[Any, float]:
    """seed -> mean over sources of that source's mean score: the inner part of the macro rule."""
    by_seed: dict[Any, list[float]] = {}
    for (_, seed), tasks in _cells(rows).items():
        by_seed.setdefault(seed, []).append(sum(tasks.values()) / len(tasks))
    return {s: float(np.mean(by_seed[s])) for s in sorted(by_seed, key=sort_key)}


def macro_accuracy(rows: Iterable[Mapping[str, Any]]) -> float:
    """Accuracy by ``AGGREGATION_RULE``: sources weigh equally whatever their size, and so do seeds.

    Returns NaN for no rows.
    """
    seeds = per_seed_accuracy(rows)
    return float(np.mean(list(seeds.values()))) if seeds else math.nan


def bootstrap_ci(
    rows: Iterable[Mapping[str, Any]], n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``macro_accuracy`` (see ``CI_METHOD``).

    Why this resampling: sources are fixed by the benchmark (not sampled), so each source is its own
    stratum; within a source, the unit of sampling is the task. A task's scores under different split
    seeds are correlated (same question), so task ids are drawn once per source and that draw is used
    for every seed; resampling each (source, seed) independently would understate the variance.
    Seeds may test different subsets of a source's tasks: a drawn id absent from a seed's test side
    simply does not contribute to that seed (the stratum mean is over the drawn ids it has). A
    resample in which a whole seed receives no task is dropped.

    Vectorised: per source, resamples become a (resamples x tasks) count matrix, and stratum means are
    two matrix products with the per-seed score and presence vectors.
    Returns (nan, nan) for no rows.
    """
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    cells = _cells(rows)
    if not cells:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    seeds = sorted({k[1] for k in cells}, key=sort_key)
    col = {s: j for j, s in enumerate(seeds)}
    total = np.zeros((n_boot, len(seeds)))  # sum over sources of stratum means, per seed
    count = np.zeros((n_boot, len(seeds)))  # number of sources contributing, per seed
    for source in sorted({k[0] for k in cells}, key=sort_key):
        src_seeds = [s for s in seeds if (source, s) in cells]
        ids = sorted({t for s in src_seeds for t in cells[(source, s)]}, key=sort_key)
        pos = {t: i for i, t in enumerate(ids)}
        n = len(ids)
        scores = np.zeros((n, len(src_seeds)), dtype=np.float32)
        present = np.zeros((n, len(src_seeds)), dtype=np.float32)
        for j, s in enumerate(src_seeds):
            for t, v in cells[(source, s)].items():
                scores[pos[t], j] = v
                present[pos[t], j] = 1.0
        cols = [col[s] for s in src_seeds]
        block = max(1, _BLOCK_CELLS // n)
        for start in range(0, n_boot, block):
            b = min(block, n_boot - start)
            draws = rng.integers(0, n, size=(b, n), dtype=np.int32)
            draws += (np.arange(b, dtype=np.int32) * n)[:, None]  # row r counts into cells r*n .. r*n+n-1
            counts = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n).astype(np.float32)
            num = (counts @ scores).astype(np.float64)
            den = (counts @ present).astype(np.float64)
            ok = den > 0
            means = np.divide(num, den, out=np.zeros_like(num), where=ok)
            total[start : start + b, cols] += means
            count[start : start + b, cols] += ok
    with np.errstate(invalid="ignore", divide="ignore"):
        per_seed = total / count  # NaN where a seed got no task in this resample
    valid = ~np.isnan(per_seed).any(axis=1)
    if not valid.any():
        return (math.nan, math.nan)
    stat = per_seed[valid].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stat, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


# The sign-flip null distribution is computed exactly when it has at most this many distinct outcomes
# (see ``_exact_sign_flip_p``); 2**20 also covers every test with at most 20 non-zero tasks.
EXACT_MAX_OUTCOMES = 1 << 20
N_PERMUTATIONS = 9999  # random sign patterns when the null is too large to enumerate


def paired_test_caption(n_resamples: int, seed: int) -> str:
    """The paired test in words, for captions: its unit, its strata, its statistic and how p is found."""
    return (
        "two-sided paired test on the tasks both sides scored, clustered by group: each task's difference "
        "(method minus baseline) is averaged over the split seeds where both scored it, and the statistic "
        "(Δ) is the mean over sources of the mean per-task difference (sources weigh the same, as in the "
        "accuracy); p: cluster sign-flip (randomisation) test, the summed contribution of each group (a "
        "dialogue, an API, a story; a task without a group is its own) flipped as one within its source, so "
        "correlated group-mates are never counted as independent evidence; exact (every sign pattern) when "
        "the null has at most 1,048,576 outcomes (always for at most 20 non-zero groups), else "
        f"{n_resamples} random sign patterns (seed {seed}), p = (hits + 1) / ({n_resamples} + 1), shown with "
        "its Monte Carlo standard error; where every group is one task with one binary pair and the sources "
        "have equal numbers of tasks, this test is exact McNemar and is reported as such"
    )


def _group_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """The cluster of a row within its source: its ``group``, or the task itself when it has none."""
    g = row.get("group")
    return ("group", str(g)) if g not in (None, "") else ("task", row["task_id"])


def _task_groups(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, Any], tuple[Any, ...]]:
    """(source, task_id) -> its group key (the first one seen: a task belongs to one group)."""
    out: dict[tuple[Any, Any], tuple[Any, ...]] = {}
    for r in rows:
        out.setdefault((r["source"], r["task_id"]), _group_key(r))
    return out


def _task_differences(
    rows_a: Iterable[Mapping[str, Any]], rows_b: Iterable[Mapping[str, Any]]
) -> tuple[list[tuple[Any, Any]], list[np.ndarray], list[np.ndarray]]:
    """Paired tasks ``(source, task_id)`` in a stable order, with their A and B scores per shared seed.

    A task pairs on the split seeds where both sides scored it; seeds where only one side has it are
    left out of that task (nothing to pair), and a task with no shared seed is not a unit of the test.
    """
    ca, cb = _cells(rows_a), _cells(rows_b)
    per_task: dict[tuple[Any, Any], tuple[list[float], list[float]]] = {}
    for key in sorted(set(ca) & set(cb), key=lambda k: (sort_key(k[0]), sort_key(k[1]))):
        ta, tb = ca[key], cb[key]
        for t in sorted(set(ta) & set(tb), key=sort_key):
            xa, xb = per_task.setdefault((key[0], t), ([], []))
            xa.append(ta[t])
            xb.append(tb[t])
    tasks = sorted(per_task, key=lambda k: (sort_key(k[0]), sort_key(k[1])))
    return (tasks, [np.array(per_task[k][0]) for k in tasks], [np.array(per_task[k][1]) for k in tasks])


def _tasks_of(rows: Iterable[Mapping[str, Any]]) -> set[tuple[Any, Any]]:
    return {(r["source"], r["task_id"]) for r in rows}


def coverage_of(rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many distinct tasks each side scored and how many of them the other side lacks.

    A comparison where a side is missing tasks the other scored is still tested on the shared tasks,
    but the accuracies shown next to it are over different task sets: reports mark it (``INCOMPLETE``).
    """
    ta, tb = _tasks_of(rows_a), _tasks_of(rows_b)
    return {"n_tasks_a": len(ta), "n_tasks_b": len(tb), "a_missing": len(tb - ta), "b_missing": len(ta - tb)}


def _clusters(rows_a, rows_b):
    """Per-task differences with their source weights, grouped into clusters within sources.

    Returns (tasks, a_scores, b_scores, diff, weights, cluster index per task, cluster source list).
    """
    tasks, a_scores, b_scores = _task_differences(rows_a, rows_b)
    groups = _task_groups(list(rows_a))
    diff = np.array([float(np.mean(a - b)) for a, b in zip(a_scores, b_scores)])
    sources = [s for s, _ in tasks]
    n_of = {s: sources.count(s) for s in dict.fromkeys(sources)}
    weights = np.array([1.0 / (len(n_of) * n_of[s]) for s in sources])
    ckeys: dict[tuple[Any, ...], int] = {}
    cidx = np.array([ckeys.setdefault((t[0], *groups.get(t, ("task", t[1]))), len(ckeys)) for t in tasks],
                    dtype=np.int64)
    csource = [k[0] for k in ckeys]
    return tasks, a_scores, b_scores, diff, weights, cidx, csource


def _exact_sign_flip_p(c: np.ndarray) -> float | None:
    """Exact two-sided p of the sign-flip test of ``sum(c)`` over non-zero ``c``; None when too large.

    Under H0 each task's sign is + or - with probability 1/2, independently. Tasks with the same |c|
    (within round-off) form a group of k whose contribution is |c| * (2 * Binomial(k, 1/2) - k), so the
    null is the convolution of those scaled binomials: prod(k + 1) outcomes instead of 2**n patterns
    (k + 1 binomial terms for n binary one-seed tasks: McNemar's exact test).
    """
    mags = np.abs(c)
    scale = float(mags.sum())
    _, inverse, counts = np.unique(np.round(mags / scale, 12), return_inverse=True, return_counts=True)
    if math.prod(int(k) + 1 for k in counts) > EXACT_MAX_OUTCOMES:
        return None
    reps = np.bincount(inverse, weights=mags) / counts  # the group's |c|, averaged over its round-off
    values, probs = np.zeros(1), np.ones(1)
    for v, k in zip(reps, counts):
        j = np.arange(k + 1)
        values = (values[:, None] + (v * (2 * j - k))[None, :]).ravel()
        probs = (probs[:, None] * _sps.binom.pmf(j, k, 0.5)[None, :]).ravel()
    tol = 1e-9 * scale  # float round-off must not break ties
    return float(min(1.0, probs[np.abs(values) >= abs(float(c.sum())) - tol].sum()))


def paired_delta(rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Δ = the statistic ``paired_test`` tests (no test, no interval): cheap enough for every table cell."""
    tasks, _, _, diff, weights, _, _ = _clusters(rows_a, rows_b)
    return {"mean_diff": float((weights * diff).sum()) if tasks else None, "n_pairs": len(tasks),
            **coverage_of(rows_a, rows_b)}


MIN_PAIRS = 5  # fewer paired tasks than this: no test, no interval, "—" (nothing a paper could use)
POWER = 0.80
ALPHA = 0.05


def _bca_interval(stat: np.ndarray, est: float, jack: np.ndarray, level: float) -> tuple[float, float]:
    """Bias-corrected and accelerated percentile interval from bootstrap ``stat`` and jackknife ``jack``.

    BCa corrects the percentile interval's median bias (z0) and skew (a, from leave-one-cluster-out
    estimates), which is what makes the plain percentile interval under-cover at small n.
    """
    alpha = (1.0 - level) / 2.0
    below = (np.count_nonzero(stat < est) + 0.5 * np.count_nonzero(stat == est)) / stat.size
    z0 = float(_sps.norm.ppf(min(max(below, 1e-6), 1 - 1e-6)))
    d = jack.mean() - jack
    den = 6.0 * float((d**2).sum()) ** 1.5
    acc = float((d**3).sum()) / den if den > 0 else 0.0
    qs = []
    for z in (_sps.norm.ppf(alpha), _sps.norm.ppf(1 - alpha)):
        qs.append(float(_sps.norm.cdf(z0 + (z0 + z) / (1 - acc * (z0 + z)))))
    lo, hi = np.quantile(stat, qs)
    # a very discrete bootstrap distribution (few clusters) can push both BCa quantiles past the estimate;
    # the interval then reaches the estimate rather than exclude it
    return float(min(lo, est)), float(max(hi, est))


def _cluster_bootstrap(sums: np.ndarray, sizes: np.ndarray, csource: list[Any], n_boot: int, seed: int,
                       level: float) -> tuple[float, float]:
    """BCa interval of the source-stratified mean of per-task values from cluster sums and sizes.

    Within each source the clusters are drawn with replacement (the number of clusters fixed); a
    resample's source mean is (sum of drawn sums) / (sum of drawn sizes); sources weigh the same.
    """
    srcs = list(dict.fromkeys(csource))
    idx = {s: np.array([i for i, c in enumerate(csource) if c == s]) for s in srcs}
    est = float(np.mean([sums[idx[s]].sum() / sizes[idx[s]].sum() for s in srcs]))
    rng = np.random.default_rng(seed)
    stat = np.zeros(n_boot)
    for s in srcs:
        ys, ms = sums[idx[s]], sizes[idx[s]]
        g = ys.size
        block = max(1, _BLOCK_CELLS // g)
        for start in range(0, n_boot, block):
            b = min(block, n_boot - start)
            draws = rng.integers(0, g, size=(b, g))
            stat[start:start + b] += ys[draws].sum(axis=1) / ms[draws].sum(axis=1) / len(srcs)
    jack = []
    for s in srcs:  # leave one cluster out (a source with one cluster cannot lose it)
        ys, ms = sums[idx[s]], sizes[idx[s]]
        if ys.size < 2:
            continue
        rest = est - (ys.sum() / ms.sum()) / len(srcs)
        jack += list(rest + ((ys.sum() - ys) / (ms.sum() - ms)) / len(srcs))
    return _bca_interval(stat, est, np.array(jack) if jack else np.zeros(1), level)


class _ShiftedNull:
    """The sign-flip null of the shifted statistic, for every shift δ at once.

    Shifting every per-task difference by δ moves group g's contribution to ``gsum[g] - δ * gw[g]``
    (``gw``: the group's summed task weights, which add up to 1), so under a sign vector s the shifted
    statistic is A - δ B with A = s·gsum and B = s·gw, and the observed one is Δ - δ. Each sign outcome
    is stored once as (A, B, probability), which makes the test at any δ one vectorised comparison:
    exact (groups with the same (gsum, gw) form a binomial class, as in ``_exact_sign_flip_p``) when the
    null has at most ``EXACT_MAX_OUTCOMES`` outcomes, else ``n_resamples`` random sign vectors from
    ``default_rng(seed)``, packed 8 to a byte, over every group (a zero-sum group too, so that the
    reported p at δ = 0 and every shifted test see the same draws), shared by every δ; a sampled
    p = (hits + 1) / (n_resamples + 1), never 0.
    """

    def __init__(self, gsum: np.ndarray, gw: np.ndarray, n_resamples: int, seed: int):
        self.gsum, self.gw = gsum, gw
        self.total = float(gsum.sum())
        key = np.stack([np.round(gsum / max(float(np.abs(gsum).sum()), 1e-300), 12), np.round(gw, 12)], axis=1)
        _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
        inverse = np.asarray(inverse).ravel()
        self.exact = math.prod(int(k) + 1 for k in counts) <= EXACT_MAX_OUTCOMES
        if self.exact:
            reps_a = np.bincount(inverse, weights=gsum) / counts
            reps_b = np.bincount(inverse, weights=gw) / counts
            a, b, prob = np.zeros(1), np.zeros(1), np.ones(1)
            for va, vb, k in zip(reps_a, reps_b, counts):
                j = np.arange(k + 1)
                a = (a[:, None] + (va * (2 * j - k))[None, :]).ravel()
                b = (b[:, None] + (vb * (2 * j - k))[None, :]).ravel()
                prob = (prob[:, None] * _sps.binom.pmf(j, k, 0.5)[None, :]).ravel()
            self.a, self.b, self.prob, self.n_draws = a, b, prob, None
        else:
            k = gsum.size
            rng = np.random.default_rng(seed)
            a_parts, b_parts, done = [], [], 0
            block = max(1, _BLOCK_CELLS // k)
            while done < n_resamples:
                m = min(block, n_resamples - done)
                packed = rng.integers(0, 256, size=(m, (k + 7) // 8), dtype=np.uint8)
                bits = np.unpackbits(packed, axis=1, count=k).astype(np.float64)
                a_parts.append(2.0 * (bits @ gsum) - self.total)
                b_parts.append(2.0 * (bits @ gw) - float(gw.sum()))
                done += m
            self.a, self.b, self.prob, self.n_draws = np.concatenate(a_parts), np.concatenate(b_parts), None, n_resamples

    def p(self, delta: float) -> float:
        """Two-sided p of the test of the shifted differences d - δ, with the tie rule of the unshifted
        test (a pattern counts when it reaches the observed |statistic| less 1e-9 x the summed |contributions|)."""
        observed = abs(self.total - delta * float(self.gw.sum()))
        tol = 1e-9 * float(np.abs(self.gsum - delta * self.gw).sum())
        hit = np.abs(self.a - delta * self.b) >= observed - tol
        if self.prob is not None:
            return float(min(1.0, self.prob[hit].sum()))
        return (int(np.count_nonzero(hit)) + 1) / (self.n_draws + 1)


def _sign_flip_interval(null: _ShiftedNull, p0: float, level: float
                        ) -> tuple[float | None, float | None, str | None]:
    """Interval of Δ that inverts the cluster sign-flip test: every δ whose test of d - δ is not rejected.

    Each end is found by bisection between an accepted δ (Δ itself, where p = 1, or 0) and a rejected
    one (0, or just past the most extreme group mean, where every shifted contribution has one sign and
    p is the smallest the test can reach), all δ tested on one fixed set of sign vectors (``_ShiftedNull``).
    Whether 0 is inside is decided by ``p0``, the reported p, so the interval excludes 0 exactly when
    p0 < 1 - level. Returns (lo, hi, None), or (None, None, reason) when no δ can be rejected, or when
    every group has the same mean difference (the test then rejects every δ but Δ: a zero-width
    interval, which is no result).
    """
    alpha = round(1.0 - level, 12)
    gsum, gw = null.gsum, null.gw
    est = null.total / float(gw.sum())
    means = gsum / gw
    span = max(float(np.abs(means).max()), abs(est), 1e-12)
    if float(means.max() - means.min()) <= 1e-12 * span:
        return None, None, ("zero-width interval: every group has the same mean difference, so the test "
                            "rejects every other shift")

    def rejected(delta: float) -> bool:
        return (p0 if delta == 0.0 else null.p(delta)) < alpha

    ends: list[float] = []
    for side in (-1.0, 1.0):
        accepted = est
        reject_at: float | None = None
        if side * (0.0 - est) > 0:  # 0 lies on this side of the estimate
            if rejected(0.0):
                reject_at = 0.0
            else:
                accepted = 0.0
        if reject_at is None:
            far = (float(means.min()) if side < 0 else float(means.max())) + side * 1e-6 * span
            if side * (far - accepted) <= 0:
                far = accepted + side * 1e-6 * span
            if not rejected(far):
                smallest = null.p(far)
                return None, None, (f"interval —, too few groups for a {100 * level:g} % interval "
                                    f"({gsum.size} groups: the smallest attainable p is {smallest:.3g})")
            reject_at = far
        for _ in range(200):
            if abs(reject_at - accepted) <= 1e-10 * span:
                break
            mid = 0.5 * (accepted + reject_at)
            if mid in (accepted, reject_at):
                break
            if rejected(mid):
                reject_at = mid
            else:
                accepted = mid
        # an end at 0 up to the tie tolerance (1e-9 x the summed |contributions| blurs where a group's
        # contribution changes sign) is 0 itself when 0 is accepted: no "-0.0000" end beside p >= 0.05
        if accepted != 0.0 and abs(accepted) <= 1e-8 * span and not rejected(0.0):
            accepted = 0.0
        ends.append(accepted)
    return ends[0], ends[1], None


def min_detectable_effect(se: float | None, m: int = 1, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Smallest |Δ| detected with probability ``power`` by a two-sided test at level alpha / m.

    alpha / m is the threshold Holm applies to the smallest p of a family of m comparisons, the one a
    comparison must pass whatever the others show, so this is the effect the run can resolve after Holm.
    ``se`` is the standard deviation of the statistic under the sign-flip null (from the observed
    discordance: the root of the summed squared group contributions). None when se is 0 or unknown.
    """
    if se is None or not se > 0:
        return None
    z = _sps.norm.ppf(1 - alpha / (2 * max(1, m))) + _sps.norm.ppf(power)
    return float(z * se)


def paired_test(
    rows_a: Iterable[Mapping[str, Any]],
    rows_b: Iterable[Mapping[str, Any]],
    *,
    seed: int = 0,
    n_resamples: int = N_PERMUTATIONS,
    n_boot: int = 2000,
    level: float = 0.95,
    min_pairs: int = MIN_PAIRS,
) -> dict[str, Any]:
    """Two-sided paired comparison of A vs B on the tasks both scored (see ``paired_test_caption``).

    Why the task and its group: a task tested under several split seeds is one question, and the tasks
    of one group (the turns of a dialogue, the calls of an API) are correlated; pairing rows, or tasks
    of one group independently, would overstate the evidence. Each task's difference is the mean of
    A - B over the seeds where both scored it; ``mean_diff`` (Δ, the number reports show) = the mean
    over sources of the mean per-task difference in that source (positive: A is better). Sources are
    strata; within a source, the contributions weight x difference of a group's tasks are summed and
    each group's sum flips sign as one, so copying a task as perfectly correlated group-mates changes
    neither p nor the interval. ``ci_lo``/``ci_hi``: the ``level`` interval of Δ that inverts this very
    test (``_sign_flip_interval``: the δ whose test of d - δ is not rejected, on the same sign patterns),
    so it excludes 0 exactly when p < 1 - level; a bootstrap interval beside a sign-flip p disagreed with
    it when groups are few. None when every difference is 0, or, with a ``reason``, when too few groups
    leave no δ rejectable (an unbounded interval is printed "—", never as a number). ``null_se``: the
    standard deviation of Δ under the sign-flip null, the basis of ``min_detectable_effect``. ``n_boot``
    is accepted for callers' signatures and no longer used: nothing here is resampled.

    ``test`` is ``mcnemar_exact`` where every group is one task with one binary pair and all sources
    have equal numbers of paired tasks (then the null is Binomial(discordant, 1/2), exact McNemar,
    ``statistic`` = tasks where only A is right); otherwise ``paired_permutation`` with ``exact`` saying
    whether p was enumerated or drawn (``n_draws``, with ``p_mc_se`` its Monte Carlo standard error).
    With fewer than ``min_pairs`` paired tasks nothing is tested (``test`` None, ``reason`` says why); a
    caller with its own rule for small n (the harmful-entry protocol's detectability) lowers it.
    """
    rows_a, rows_b = list(rows_a), list(rows_b)
    cov = coverage_of(rows_a, rows_b)
    tasks, a_scores, b_scores, diff, weights, cidx, csource = _clusters(rows_a, rows_b)
    n = len(tasks)
    empty = {"test": None, "unit": "group", "n_pairs": n, "n_paired_rows": int(sum(a.size for a in a_scores)),
             "n_groups": len(csource), "n_sources": len(set(csource)), "n_discordant": None, "statistic": None,
             "p_value": None, "mean_diff": None, "exact": None, "n_draws": None, "p_mc_se": None,
             "ci_lo": None, "ci_hi": None, "null_se": None, **cov}
    if n < 1:
        return {**empty, "reason": "no paired task"}
    contrib = weights * diff  # the statistic is contrib.sum()
    mean_diff = float(contrib.sum())
    gsum = np.bincount(cidx, weights=contrib, minlength=len(csource))
    base = {**empty, "mean_diff": mean_diff, "null_se": float(np.sqrt((gsum**2).sum()))}
    if n < min_pairs:
        return {**base, "reason": f"fewer than {min_pairs} paired tasks"}
    if np.all(diff == 0):
        return {**base, "reason": "identical on every paired task"}
    null = _ShiftedNull(gsum, np.bincount(cidx, weights=weights, minlength=len(csource)), n_resamples, seed)

    def with_interval(out: dict[str, Any]) -> dict[str, Any]:
        lo, hi, why = _sign_flip_interval(null, out["p_value"], level)
        return {**out, "ci_lo": lo, "ci_hi": hi, **({"reason": why} if why else {})}

    sources = [s for s, _ in tasks]
    n_of = {s: sources.count(s) for s in dict.fromkeys(sources)}
    one_pair = all(a.size == 1 for a in a_scores)
    binary = all(bool(np.isin(x, (0.0, 1.0)).all()) for x in (*a_scores, *b_scores))
    if len(csource) == n and one_pair and binary and len(set(n_of.values())) == 1:
        a_only = int(np.count_nonzero(diff > 0))
        b_only = int(np.count_nonzero(diff < 0))
        disc = a_only + b_only
        p = float(_sps.binomtest(a_only, disc, 0.5).pvalue)
        return with_interval({**base, "test": "mcnemar_exact", "n_discordant": disc, "statistic": a_only,
                              "p_value": p, "exact": True, "n_a_only": a_only, "n_b_only": b_only})
    nz = gsum[gsum != 0]
    exact_p = 1.0 if nz.size == 0 else _exact_sign_flip_p(nz)
    # a sampled p is the shifted null's at δ = 0: the very draws the interval is inverted on
    p, exact = (exact_p, True) if exact_p is not None else (null.p(0.0), False)
    mc = None if exact else float(np.sqrt(p * (1 - p) / n_resamples))
    return with_interval({**base, "test": "paired_permutation", "statistic": mean_diff, "p_value": p,
                          "exact": exact, "n_draws": None if exact else n_resamples, "p_mc_se": mc})


def format_p(p: float | None, mc_se: float | None = None) -> str:
    """The one rule for printing p: three significant digits (0.0496 and 0.0504 stay apart), '<0.001'
    below 0.001, and a sampled p's Monte Carlo standard error in parentheses."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "—"
    text = "<0.001" if p < 0.001 else f"{p:#.3g}"
    return text + (f" (±{mc_se:.1g})" if mc_se else "")


def format_delta(d: float | None) -> str:
    """The one rule for printing Δ in points: signed, one decimal, no negative zero."""
    if d is None or (isinstance(d, float) and math.isnan(d)):
        return "—"
    r = round(float(d), 1)
    return f"{0.0 if r == 0 else r:+.1f}"


def format_delta_interval(d: float, lo: float | None, hi: float | None, reason: str | None = None) -> str:
    """Δ with its 95 % interval, or with why it has none (the leaderboard's and the paper tables' cell)."""
    out = format_delta(d)
    if lo is not None:
        return f"{out} [{format_delta(lo)}, {format_delta(hi)}]"
    return f"{out} ({reason})" if reason else out


def stars(p: float | None, comparable: bool = True) -> str:
    """Significance stars of a Holm-adjusted p; never for a degraded or incomplete comparison."""
    if p is None or not comparable:
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def wilson_interval(p_hat: float, n_eff: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p_hat`` at (effective) sample size ``n_eff``."""
    z = float(_sps.norm.ppf(1 - (1 - level) / 2))
    d = 1 + z * z / n_eff
    centre = (p_hat + z * z / (2 * n_eff)) / d
    half = z / d * math.sqrt(max(0.0, p_hat * (1 - p_hat)) / n_eff + z * z / (4 * n_eff * n_eff))
    return (max(0.0, centre - half), min(1.0, centre + half))


def linearised_variance(rows: Iterable[Mapping[str, Any]]) -> tuple[float, int]:
    """Taylor-linearised variance of ``macro_accuracy`` with groups as clusters within sources.

    Each row's influence is (score - its (source, seed) mean) x its weight in the macro rule; a group's
    influence is the sum over its rows (all seeds), and the variance is, per source, G / (G - 1) times
    the sum of squared group influences (the standard stratified cluster estimator). Returns the variance
    and the number of clusters.
    """
    rows = list(rows)
    cells = _cells(rows)
    groups = _task_groups(rows)
    seeds = {k[1] for k in cells}
    n_src = {sd: sum(1 for k in cells if k[1] == sd) for sd in seeds}
    infl: dict[tuple[Any, ...], float] = {}
    for (src, sd), tasks in cells.items():
        mean = sum(tasks.values()) / len(tasks)
        w = 1.0 / (len(seeds) * n_src[sd] * len(tasks))
        for t, v in tasks.items():
            key = (src, *groups[(src, t)])
            infl[key] = infl.get(key, 0.0) + w * (v - mean)
    var = 0.0
    for src in {k[0] for k in infl}:
        u = np.array([v for k, v in infl.items() if k[0] == src])
        if u.size > 1:
            var += u.size / (u.size - 1) * float(((u - u.mean()) ** 2).sum())
    return var, len(infl)


def accuracy_ci(rows: Iterable[Mapping[str, Any]], level: float = 0.95) -> tuple[float, float]:
    """Design-effect Wilson interval of ``macro_accuracy`` (``CI_METHOD``); (nan, nan) for no rows.

    The effective size is p(1 - p) / variance (``linearised_variance``); where the variance is 0 (every
    score equal within each source) it is the number of clusters, so 5/5 gives [56.6, 100], never a
    zero-width interval. Deterministic: no resampling, so the interval needs no seed.
    """
    rows = list(rows)
    if not rows:
        return (math.nan, math.nan)
    p_hat = macro_accuracy(rows)
    var, n_clusters = linearised_variance(rows)
    binomial = p_hat * (1 - p_hat)
    n_eff = binomial / var if var > 0 and binomial > 0 else float(n_clusters)
    return wilson_interval(min(1.0, max(0.0, p_hat)), max(1.0, n_eff), level)


def learning_sd(rows: Iterable[Mapping[str, Any]]) -> tuple[float | None, int]:
    """The between-seed (learning) component: sd over split seeds of the macro accuracy on the tasks
    that every seed tested, and their number.

    The seeds' test sets overlap (a task is tested under several seeds), so the plain sd of per-seed
    accuracies mixes test-subset variation with what learning from a different guidance split changes;
    on the common tasks only the latter (with the answering noise) remains. None for fewer than two
    seeds or no common task.
    """
    rows = list(rows)
    cells = _cells(rows)
    seeds = sorted({k[1] for k in cells}, key=sort_key)
    if len(seeds) < 2:
        return None, 0
    common = set.intersection(*({(r["source"], r["task_id"]) for r in rows if r["seed"] == sd} for sd in seeds))
    if not common:
        return None, 0
    acc = per_seed_accuracy([r for r in rows if (r["source"], r["task_id"]) in common])
    return float(np.std(list(acc.values()), ddof=1)), len(common)


def within_task_sd(rows: Iterable[Mapping[str, Any]]) -> tuple[float | None, int, int]:
    """The answering noise of repeated answers (``--epochs``): the mean over task rows of the sd (ddof 1)
    of the row's epoch scores, the number of rows it is over and the number of epochs (the most any row
    has). A row without epochs (one answer) has no within-task variation to show: (None, 0, 1) when no
    row has epochs; a failed row is left out (its score is 0 whatever its epochs gave).
    """
    sds, most = [], 1
    for r in rows:
        ep = r.get("epochs")
        if isinstance(ep, list) and len(ep) > 1 and not r.get("failed"):
            sds.append(float(np.std([float(e["score"]) for e in ep], ddof=1)))
            most = max(most, len(ep))
    return (float(np.mean(sds)) if sds else None), len(sds), most


PAIRED_VALUE_METHOD = (
    "the mean over sources of the mean per-task difference on the tasks both sides have (a task's difference "
    "averaged over the split seeds where both have it); 95% BCa cluster bootstrap: within each source (a "
    "stratum, not resampled) whole groups of tasks are drawn with replacement, each resample aggregated the "
    "same way"
)


def paired_value_difference(rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]],
                            value: Any, *, seed: int = 0, n_boot: int = 2000, level: float = 0.95,
                            min_pairs: int = MIN_PAIRS) -> dict[str, Any]:
    """A - B of any per-task number ``value(row)`` (a cost, not a score), paired and clustered exactly as
    Δ is (``PAIRED_VALUE_METHOD``): ``mean_diff``, each side's stratified mean on the paired tasks
    (``mean_a``, ``mean_b``: mean_a - mean_b = mean_diff), ``n_pairs``, ``n_groups`` and the interval
    (``ci_lo``, ``ci_hi``; None with a ``reason`` for fewer than ``min_pairs`` paired tasks or a
    zero-width interval, which is no result)."""
    def as_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{"source": r["source"], "seed": r["seed"], "task_id": r["task_id"], "group": r.get("group"),
                 "score": float(value(r))} for r in rows]

    tasks, a_scores, b_scores, diff, weights, cidx, csource = _clusters(as_rows(rows_a), as_rows(rows_b))
    out: dict[str, Any] = {"n_pairs": len(tasks), "n_groups": len(csource), "mean_diff": None, "mean_a": None,
                           "mean_b": None, "ci_lo": None, "ci_hi": None, "reason": None}
    if not tasks:
        return {**out, "reason": "no paired task"}
    out.update(mean_diff=float((weights * diff).sum()),
               mean_a=float(sum(w * float(np.mean(a)) for w, a in zip(weights, a_scores))),
               mean_b=float(sum(w * float(np.mean(b)) for w, b in zip(weights, b_scores))))
    if len(tasks) < min_pairs:
        return {**out, "reason": f"fewer than {min_pairs} paired tasks"}
    sizes = np.bincount(cidx, minlength=len(csource)).astype(float)
    dsum = np.bincount(cidx, weights=diff, minlength=len(csource))
    lo, hi = _cluster_bootstrap(dsum, sizes, csource, n_boot, seed, level)
    if not hi > lo:
        return {**out, "reason": "zero-width interval (the same difference on every resample)"}
    return {**out, "ci_lo": lo, "ci_hi": hi}


def holm(pvalues: Mapping[str, float | None]) -> dict[str, float | None]:
    """Holm-Bonferroni step-down adjustment of one family; ``None`` entries (no test) stay ``None`` and do
    not count.

    Controls the family-wise error over the family's comparisons without the independence assumption
    that Hochberg or Benjamini-Hochberg would need. Reports call ``holm_by_family``, which names the family.
    """
    tested = sorted(((p, k) for k, p in pvalues.items() if p is not None), key=lambda x: x[0])
    m = len(tested)
    out: dict[str, float | None] = {k: None for k in pvalues}
    running = 0.0
    for i, (p, k) in enumerate(tested):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


# The family every report corrects within: the leaderboard (one run folder = one backend) and the paper
# tables alike, so a comparison printed in both is corrected the same way.
HOLM_FAMILY = "one family per backend and benchmark"


def holm_by_family(
    pvalues: Sequence[float | None], families: Sequence[Hashable]
) -> tuple[list[float | None], list[int]]:
    """Holm within each family: ``families[i]`` names the family of ``pvalues[i]``.

    Returns the adjusted p-values and, per item, the size of its family (tested comparisons only). The
    leaderboard and the paper tables both use one family per (backend, benchmark) (``HOLM_FAMILY``), so
    a comparison printed in both gets its correction from the same kind of family.
    """
    if len(pvalues) != len(families):
        raise ValueError(f"holm_by_family: {len(pvalues)} p-values but {len(families)} family labels")
    groups: dict[Hashable, list[int]] = {}
    for i, fam in enumerate(families):
        groups.setdefault(fam, []).append(i)
    adjusted: list[float | None] = [None] * len(pvalues)
    sizes = [0] * len(pvalues)
    for idx in groups.values():
        adj = holm({str(i): pvalues[i] for i in idx})
        m = sum(pvalues[i] is not None for i in idx)
        for i in idx:
            adjusted[i], sizes[i] = adj[str(i)], m
    return adjusted, sizes


def holm_caption(family: str, sizes: Iterable[int]) -> str:
    """The caption sentence of a Holm correction: which comparisons a family spans, how many."""
    ms = sorted({m for m in sizes if m})
    if not ms:
        return f"p (Holm): Holm-Bonferroni over {family}, {HOLM_FAMILY}; no comparison was tested."
    span = f"{ms[0]}" if len(ms) == 1 else f"{ms[0]}-{ms[-1]}"
    return (f"p (Holm): Holm-Bonferroni over {family}, {HOLM_FAMILY} "
            f"(m = {span} tested comparisons per family).")
