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

- UMAP gets its nearest neighbours from ``cosine_neighbours`` (exact, blocked matrix products)
  instead of computing them itself (official UMAP: exact below 4,096 points, from distances evaluated
  pair by pair through Python, and NN-descent's approximate ones above): the same neighbour sets, a
  fuzzy graph equal to float32 rounding, and minutes less on a large repository's leaves.

How, not what (the clusters do not change): the mixtures are fitted by ``mixture.fit_mixture``,
scikit-learn's algorithm with the components batched; a layer of at least ``parallel_min_points``
nodes runs its local steps and re-clusterings in worker processes.

``umap`` is imported inside ``reduce_dimensions``: importing it costs seconds and its first fit pays
a numba compilation, which only the building of a tree should pay.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .mixture import Mixture, fit_mixture


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
    # how, not what: the clusters are the same for any of these (not part of the method's config)
    workers: int = 0  # processes for a large layer's local steps; 0: one per CPU
    parallel_min_points: int = 8000


def cosine_neighbours(x: np.ndarray, k: int, block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``k`` nearest neighbours of every row by cosine distance (itself first, at distance 0).

    What UMAP computes itself below 4,096 points, from a full distance matrix evaluated pair by pair
    through a numba function called from Python (most of a small fit's time); above 4,096 it switches
    to approximate NN-descent, which on RAPTOR's 3,072-dimensional leaves of a large repository took
    minutes. Here: unit rows, one block of rows at a time against all (float32 matrix products, memory
    ``block x n``), ``argpartition`` for the ``k`` smallest; ties keep the lower index. The products may
    use every core (``cluster_nodes`` holds BLAS to one thread for the small fits); their partition of
    rows and columns across threads does not change a sum.
    """
    from threadpoolctl import threadpool_limits

    n = len(x)
    unit = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(unit, axis=1, keepdims=True)
    unit = unit / np.where(norms > 0, norms, 1)
    idx = np.empty((n, k), dtype=np.int32)
    dist = np.empty((n, k), dtype=np.float32)
    rows = np.arange(n)
    threads = 1 if _WORKER_LIMITS or n <= block else (os.cpu_count() or 1)  # a pool worker shares the cores
    with threadpool_limits(limits=threads, user_api="blas"):
        for start in range(0, n, block):
            stop = min(n, start + block)
            d = unit[start:stop] @ unit.T
            np.subtract(1.0, d, out=d)
            np.maximum(d, 0.0, out=d)
            d[rows[: stop - start], rows[start:stop]] = -1.0  # itself first, whatever the rounding
            part = np.argpartition(d, k - 1, axis=1)[:, :k]
            pd = np.take_along_axis(d, part, axis=1)
            order = np.lexsort((part, pd), axis=1)
            idx[start:stop] = np.take_along_axis(part, order, axis=1)
            dist[start:stop] = np.maximum(np.take_along_axis(pd, order, axis=1), 0.0)
    return idx, dist


def reduce_dimensions(x: np.ndarray, n_components: int, n_neighbors: int, seed: int, init: str) -> np.ndarray:
    """Seeded cosine UMAP of ``x`` to ``n_components`` dimensions (caller guarantees ``3 <= n``), on the
    exact cosine neighbours of ``cosine_neighbours``."""
    import umap  # lazy: seconds to import, numba compilation on first fit

    n = len(x)
    n_components = max(1, min(n_components, n - 2))
    n_neighbors = max(2, min(n_neighbors, n - 1))
    knn = cosine_neighbours(x, n_neighbors)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_jobs/random_state notice, spectral fallback notice
        reducer = umap.UMAP(
            n_neighbors=n_neighbors, n_components=n_components, metric="cosine", random_state=seed, n_jobs=1,
            init=init, precomputed_knn=knn,
        )
        return np.asarray(reducer.fit_transform(x), dtype=np.float64)


def fit_best_mixture(x: np.ndarray, max_clusters: int, seed: int) -> Mixture:
    """The Gaussian mixture with the lowest BIC among ``1 .. min(max_clusters, n) - 1`` components."""
    n = len(x)
    best, best_bic = None, np.inf
    for k in range(1, max(2, min(max_clusters, n))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # k-means ConvergenceWarning on tiny or degenerate inputs
            gm = fit_mixture(x, k, seed)
        bic = gm.bic(x)
        if bic < best_bic:  # strict: ties keep the smaller mixture, as argmin does
            best, best_bic = gm, bic
    assert best is not None
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


Mapper = Callable[..., Iterable[Any]]  # ``map``, or an ordered process-pool ``map``


def _local_pass(x: np.ndarray, params: ClusterParams) -> list[list[int]]:
    """The local step inside one global cluster (rows of ``x``): UMAP with 10 neighbours + mixture."""
    reduced = reduce_dimensions(x, params.reduction_dimension, params.local_neighbors, params.seed, params.umap_init)
    labels, k = soft_labels(reduced, params.threshold, params.max_clusters, params.seed)
    return _members(labels, k)


def global_local_clusters(x: np.ndarray, params: ClusterParams, mapper: Mapper = map) -> list[list[int]]:
    """One global + local clustering pass over the rows of ``x``: clusters as sorted index lists.

    The local steps are independent and each seeded, so ``mapper`` may run them in other processes;
    their results are taken back in component order, whatever order they finish in.
    """
    n = len(x)
    if n == 0:
        return []
    if n < 3:
        return [list(range(n))]
    dim = params.reduction_dimension
    init = params.umap_init if n > dim + 1 else "random"
    reduced = reduce_dimensions(x, min(dim, n - 2), int(np.sqrt(n - 1)), params.seed, init)
    labels, k = soft_labels(reduced, params.threshold, params.max_clusters, params.seed)
    groups = _members(labels, k)
    big = [m for m in groups if len(m) > dim + 1]
    local = iter(mapper(_local_pass, [x[m] for m in big], [params] * len(big)))
    clusters: list[list[int]] = []
    for members in groups:
        if len(members) <= dim + 1:
            clusters.append(members)
        else:
            clusters.extend([members[j] for j in m] for m in next(local))
    return clusters


def cluster_nodes(embeddings: np.ndarray, tokens: Sequence[int], params: ClusterParams) -> list[list[int]]:
    """Clusters of one layer (row indices), re-clustering any cluster over ``max_cluster_tokens``.

    Clusters come in a deterministic order (component order, depth first); a node can be in several.
    BLAS and OpenMP run single-threaded meanwhile: the mixtures are tiny, and thread pools (BLAS, and
    OpenMP in the k-means start of each mixture) made the BIC sweep several times slower on a busy
    2-core machine. A layer of at least ``params.parallel_min_points`` nodes spreads its local steps
    and re-clusterings over ``params.workers`` processes (each seeded as in one process: the same
    clusters); smaller layers would spend more on starting them (imports, numba compilation) than
    they save. The workers are spawned (not forked: this process has threads running), so a script
    that builds RAPTOR through the Python API on such a layer needs the usual
    ``if __name__ == "__main__":`` guard; ``sourcebench`` has it. Embeddings stay float32 (UMAP's own
    precision), not a float64 copy of the layer.
    """
    from threadpoolctl import threadpool_limits  # ships with scikit-learn

    x = np.asarray(embeddings, dtype=np.float32)
    workers = params.workers if params.workers > 0 else (os.cpu_count() or 1)
    with threadpool_limits(limits=1):
        if workers < 2 or len(x) < params.parallel_min_points:
            return _cluster_recursive(x, list(tokens), params, 0)
        ctx = multiprocessing.get_context("spawn")  # no fork of a process that has threads running
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_single_threaded) as pool:
            return _cluster_recursive(x, list(tokens), params, 0, pool.map)


_WORKER_LIMITS: list[Any] = []  # set in a pool worker (its one-thread limits, kept alive): 'am I a worker'


def _single_threaded() -> None:
    """Pool worker start: BLAS, OpenMP and numba at one thread for the worker's life (the workers
    share the cores; more threads would only contend)."""
    import numba
    from threadpoolctl import threadpool_limits

    _WORKER_LIMITS.append(threadpool_limits(limits=1))
    numba.set_num_threads(1)


def _cluster_recursive(x: np.ndarray, tokens: list[int], params: ClusterParams, depth: int,
                       mapper: Mapper = map) -> list[list[int]]:
    """A cluster holding every row is not re-clustered: with the same seed the same rows give the
    same clusters again (the official code recurses forever there)."""
    groups = global_local_clusters(x, params, mapper)
    again = {g for g, m in enumerate(groups) if sum(tokens[i] for i in m) > params.max_cluster_tokens
             and 1 < len(m) < len(x) and depth < params.max_depth}
    picked = [groups[g] for g in sorted(again)]
    subs = iter(mapper(_cluster_recursive, [x[m] for m in picked], [[tokens[i] for i in m] for m in picked],
                       [params] * len(picked), [depth + 1] * len(picked)))
    out: list[list[int]] = []
    for g, members in enumerate(groups):
        if g in again:
            out.extend([members[j] for j in m] for m in next(subs))
        else:
            out.append(members)
    return out
