"""RAPTOR's clustering of one tree layer: UMAP + Gaussian mixtures, global then local, soft labels.

Algorithm (official defaults, parthsarthi03/raptor ``cluster_utils.py``):

1. global pass: UMAP to ``min(dim, n - 2)`` dimensions with ``floor(sqrt(n - 1))`` neighbours and
   cosine metric; a Gaussian mixture whose size is the lowest-BIC one among ``1 .. min(50, n) - 1``;
   a node joins every component whose posterior exceeds ``threshold`` (0.1);
2. local pass inside each global cluster: UMAP to ``dim`` dimensions with 10 neighbours and the same
   mixture step, unless the cluster has at most ``dim + 1`` nodes (then it stays one cluster);
3. a resulting cluster whose text exceeds ``max_cluster_tokens`` (3,500) is clustered again.

Guards and choices the official code lacks (listed as deviations of the method):

- every random step is seeded (UMAP ``random_state``, mixture ``random_state``) from one seed, and
  the lowest-BIC mixture of the sweep is the one used (the official code refits it with another seed);
- fewer than 3 points: one cluster, no UMAP (``n_components = n - 2`` would be < 1); the neighbour
  count is at least 2 (UMAP rejects 1) and below ``n``; tiny inputs (at most ``dim + 1`` points) use
  a random rather than spectral UMAP start, because the spectral start of very small graphs has
  degenerate eigenvalues and is not reproducible;
- a node with no posterior above the threshold joins its most likely component instead of being
  dropped from the next layer;
- a cluster that holds every node of the pass is not re-clustered (same seed, same result: the
  official code recurses forever there), and re-clustering is at most ``max_depth`` deep.

``umap`` is imported inside ``reduce_dimensions``: importing it costs seconds and its first fit pays
a numba compilation, which only the building of a tree should pay.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClusterParams:
    """Settings of one clustering pass (official defaults)."""

    reduction_dimension: int = 10
    threshold: float = 0.1
    max_clusters: int = 50
    local_neighbors: int = 10
    max_cluster_tokens: int = 3500
    umap_init: str = "spectral"
    seed: int = 224
    max_depth: int = 8  # re-clustering recursion bound (a guard; the official code has none)


def reduce_dimensions(x: np.ndarray, n_components: int, n_neighbors: int, seed: int, init: str) -> np.ndarray:
    """Seeded cosine UMAP of ``x`` to ``n_components`` dimensions (caller guarantees ``3 <= n``)."""
    import umap  # lazy: seconds to import, numba compilation on first fit

    n = len(x)
    n_components = max(1, min(n_components, n - 2))
    n_neighbors = max(2, min(n_neighbors, n - 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_jobs/random_state notice, spectral fallback notice
        reducer = umap.UMAP(
            n_neighbors=n_neighbors, n_components=n_components, metric="cosine", random_state=seed, n_jobs=1,
            init=init,
        )
        return np.asarray(reducer.fit_transform(x), dtype=np.float64)


def fit_best_mixture(x: np.ndarray, max_clusters: int, seed: int):
    """The Gaussian mixture with the lowest BIC among ``1 .. min(max_clusters, n) - 1`` components."""
    from sklearn.mixture import GaussianMixture

    n = len(x)
    best, best_bic = None, np.inf
    for k in range(1, max(2, min(max_clusters, n))):
        gm = GaussianMixture(n_components=k, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning on tiny or degenerate inputs
            gm.fit(x)
        bic = gm.bic(x)
        if bic < best_bic:  # strict: ties keep the smaller mixture, as argmin does
            best, best_bic = gm, bic
    return best


def soft_labels(x: np.ndarray, threshold: float, max_clusters: int, seed: int) -> tuple[list[list[int]], int]:
    """Per point, the mixture components it joins (posterior > threshold; else its most likely one)."""
    gm = fit_best_mixture(x, max_clusters, seed)
    probs = gm.predict_proba(x)
    labels = []
    for p in probs:
        joined = np.flatnonzero(p > threshold).tolist()
        labels.append(joined if joined else [int(np.argmax(p))])
    return labels, int(gm.n_components)


def _members(labels: list[list[int]], k: int) -> list[list[int]]:
    """Point indices per component, in component order; empty components are dropped."""
    out: list[list[int]] = [[] for _ in range(k)]
    for i, joined in enumerate(labels):
        for c in joined:
            out[c].append(i)
    return [m for m in out if m]


def global_local_clusters(x: np.ndarray, params: ClusterParams) -> list[list[int]]:
    """One global + local clustering pass over the rows of ``x``: clusters as sorted index lists."""
    n = len(x)
    if n == 0:
        return []
    if n < 3:
        return [list(range(n))]
    dim = params.reduction_dimension
    init = params.umap_init if n > dim + 1 else "random"
    reduced = reduce_dimensions(x, min(dim, n - 2), int(np.sqrt(n - 1)), params.seed, init)
    labels, k = soft_labels(reduced, params.threshold, params.max_clusters, params.seed)
    clusters: list[list[int]] = []
    for members in _members(labels, k):
        if len(members) <= dim + 1:
            clusters.append(members)
            continue
        sub = x[members]
        local = reduce_dimensions(sub, dim, params.local_neighbors, params.seed, params.umap_init)
        local_labels, local_k = soft_labels(local, params.threshold, params.max_clusters, params.seed)
        clusters.extend([members[j] for j in m] for m in _members(local_labels, local_k))
    return clusters


def cluster_nodes(embeddings: np.ndarray, tokens: Sequence[int], params: ClusterParams) -> list[list[int]]:
    """Clusters of one layer (row indices), re-clustering any cluster over ``max_cluster_tokens``.

    Clusters come in a deterministic order (component order, depth first); a node can be in several.
    BLAS and OpenMP run single-threaded meanwhile: the mixtures are tiny, and thread pools (BLAS, and
    OpenMP in the k-means start of each mixture) made the BIC sweep several times slower on a busy
    2-core machine.
    """
    from threadpoolctl import threadpool_limits  # ships with scikit-learn

    with threadpool_limits(limits=1):
        return _cluster_recursive(np.asarray(embeddings, dtype=np.float64), list(tokens), params, 0)


def _cluster_recursive(x: np.ndarray, tokens: list[int], params: ClusterParams, depth: int) -> list[list[int]]:
    """A cluster holding every row is not re-clustered: with the same seed the same rows give the
    same clusters again (the official code recurses forever there)."""
    out: list[list[int]] = []
    for members in global_local_clusters(x, params):
        size = sum(tokens[i] for i in members)
        if size > params.max_cluster_tokens and 1 < len(members) < len(x) and depth < params.max_depth:
            sub = _cluster_recursive(x[members], [tokens[i] for i in members], params, depth + 1)
            out.extend([members[j] for j in m] for m in sub)
        else:
            out.append(members)
    return out
