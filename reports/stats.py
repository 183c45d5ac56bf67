"""Seeded statistics for comparing methods on the same tasks.

Pure functions over result rows (dicts with ``source``, ``seed``, ``task_id``, ``score`` and
optionally ``failed``), numpy/scipy only, so that every number in a report is reproducible from the
run folder and a seed. inspect-ai's own bootstrap is unseeded, which is why this module exists.

A row with ``failed: true`` scores 0 whatever its ``score`` field says: failures stay in the
denominator (docs/results-format.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from scipy import stats as _sps

AGGREGATION_RULE = (
    "accuracy = mean over split seeds of (mean over sources of (mean score over that source's "
    "test tasks)), so every source and every seed weighs the same; failed tasks score 0"
)

CI_METHOD = (
    "percentile bootstrap of the aggregated accuracy, resampling test task ids with replacement "
    "within each source and reusing the same resampled ids for every seed of that source"
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


def _pairs(rows_a: Iterable[Mapping[str, Any]], rows_b: Iterable[Mapping[str, Any]]):
    """Scores of A and B on the (source, seed, task_id) keys both have, in a stable order."""
    a = {(k[0], k[1], t): v for k, tasks in _cells(rows_a).items() for t, v in tasks.items()}
    b = {(k[0], k[1], t): v for k, tasks in _cells(rows_b).items() for t, v in tasks.items()}
    keys = sorted(set(a) & set(b), key=lambda k: tuple(sort_key(x) for x in k))
    return np.array([a[k] for k in keys], dtype=float), np.array([b[k] for k in keys], dtype=float)


def _sign_flip_p(diff: np.ndarray, n_resamples: int, seed: int) -> float:
    """Two-sided p of the paired sign-flip permutation test of sum(diff) (equivalently of the mean).

    Under H0 each pair's difference is equally likely to have either sign. With k differences the
    exact null has 2**k sign vectors: enumerated when 2**k <= n_resamples, else ``n_resamples`` random
    sign vectors from ``default_rng(seed)`` and p = (hits + 1) / (n_resamples + 1), which is never 0.
    Written out instead of ``scipy.stats.permutation_test`` (same test) because that one needs ~30 s
    for 10,000 pairs; here random signs come packed 8 to a byte and sums are one matrix product.
    """
    k = diff.size
    total = float(diff.sum())
    observed = abs(total)
    tol = 1e-9 * max(1.0, float(np.abs(diff).sum()))  # float round-off must not break ties
    if k < 63 and 2**k <= n_resamples:
        bits = ((np.arange(2**k)[:, None] >> np.arange(k)) & 1).astype(np.float64)
        sums = np.abs(2.0 * (bits @ diff) - total)  # sum(sign * d) with sign = 2 * bit - 1
        return float(np.mean(sums >= observed - tol))
    rng = np.random.default_rng(seed)
    hits = done = 0
    block = max(1, _BLOCK_CELLS // k)
    while done < n_resamples:
        b = min(block, n_resamples - done)
        packed = rng.integers(0, 256, size=(b, (k + 7) // 8), dtype=np.uint8)
        bits = np.unpackbits(packed, axis=1, count=k).astype(np.float64)
        hits += int(np.count_nonzero(np.abs(2.0 * (bits @ diff) - total) >= observed - tol))
        done += b
    return (hits + 1) / (n_resamples + 1)


def paired_test(
    rows_a: Iterable[Mapping[str, Any]],
    rows_b: Iterable[Mapping[str, Any]],
    *,
    seed: int = 0,
    n_resamples: int = 9999,
) -> dict[str, Any]:
    """Two-sided paired test of A vs B on the same (source, seed, task_id) items.

    Binary scores (all 0/1 on both sides): exact McNemar, i.e. a two-sided binomial test with p=0.5
    on the discordant pairs (``statistic`` = pairs where only A is right). Graded scores: paired
    sign-flip permutation test of the mean difference (``statistic``), seeded; exact when
    2**k <= n_resamples for k non-zero differences (see ``_sign_flip_p``). Zero differences are left
    out of the permutation because flipping them changes nothing.

    ``mean_diff`` is the mean of (A - B) over pairs, so positive means A is better.
    """
    a, b = _pairs(rows_a, rows_b)
    n = int(a.size)
    if n < 1:
        return {
            "test": None,
            "n_pairs": 0,
            "n_discordant": None,
            "statistic": None,
            "p_value": None,
            "mean_diff": None,
        }
    diff = a - b
    mean_diff = float(diff.mean())
    binary = bool(np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all())
    if binary:
        a_only = int(((a == 1) & (b == 0)).sum())
        b_only = int(((a == 0) & (b == 1)).sum())
        disc = a_only + b_only
        p = 1.0 if disc == 0 else float(_sps.binomtest(a_only, disc, 0.5).pvalue)
        return {
            "test": "mcnemar_exact",
            "n_pairs": n,
            "n_discordant": disc,
            "statistic": a_only,
            "p_value": p,
            "mean_diff": mean_diff,
            "n_a_only": a_only,
            "n_b_only": b_only,
        }
    nz = diff[diff != 0]
    p = 1.0 if nz.size == 0 else _sign_flip_p(nz, n_resamples, seed)
    return {
        "test": "paired_permutation",
        "n_pairs": n,
        "n_discordant": None,
        "statistic": mean_diff,
        "p_value": p,
        "mean_diff": mean_diff,
    }


def holm(pvalues: Mapping[str, float | None]) -> dict[str, float | None]:
    """Holm-Bonferroni step-down adjustment; ``None`` entries (no test) stay ``None`` and do not count.

    Controls the family-wise error over the methods compared with one baseline, without the
    independence assumption that Hochberg or Benjamini-Hochberg would need.
    """
    tested = sorted(((p, k) for k, p in pvalues.items() if p is not None), key=lambda x: x[0])
    m = len(tested)
    out: dict[str, float | None] = {k: None for k in pvalues}
    running = 0.0
    for i, (p, k) in enumerate(tested):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out
