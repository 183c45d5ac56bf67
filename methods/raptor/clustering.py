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
- ARPACK's random restarts in UMAP's spectral start are seeded (``seeded_arpack_restarts``): on a
  component of identical points the official code's start changes from call to call.
- BLAS, OpenMP and numba run on one thread (``one_thread``), the k-means start of each mixture included:
  scikit-learn's k-means centres depend on its OpenMP thread count in the last bits, so with one
  thread per core (its default) the clusters could differ between machines.

How, not what (the clusters do not change): the mixtures are fitted by ``mixture.fit_mixture``,
scikit-learn's algorithm with the components batched; on a source of at least ``parallel_min_points``
leaves the independent steps (a BIC sweep's fits, the local steps, the re-clusterings) run in worker
processes, one pool for the whole tree, largest tasks first.

``umap`` is imported inside ``reduce_dimensions``: importing it costs seconds and its first fit pays
a numba compilation, which only the building of a tree should pay.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
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
    workers: int = 0  # worker processes for a large source; 0: one per CPU
    parallel_min_points: int = 4000  # leaves from which a tree starts worker processes


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
    with warnings.catch_warnings(), seeded_arpack_restarts(seed):
        warnings.simplefilter("ignore")  # n_jobs/random_state notice, spectral fallback notice
        reducer = umap.UMAP(
            n_neighbors=n_neighbors, n_components=n_components, metric="cosine", random_state=seed, n_jobs=1,
            init=init, precomputed_knn=knn,
        )
        return np.asarray(reducer.fit_transform(x), dtype=np.float64)


_ARPACK_LOCK = threading.Lock()


@contextmanager
def seeded_arpack_restarts(seed: int) -> Iterator[None]:
    """``scipy.sparse.linalg.eigsh`` with its random restart vectors drawn from ``seed`` meanwhile.

    UMAP's spectral start runs ARPACK from an all-ones vector and passes it no generator. On some
    graph components, regular ones (identical points: duplicated code or text gives a complete graph
    of equal weights, where that vector is an exact eigenvector) and small ones (a 20-point component
    of sphinx's leaves), the Lanczos iteration breaks down and ARPACK restarts from a vector of its
    own generator, unseeded: the start, and so the layout and the clusters, changed from call to call
    even in one process (lmcinnes/umap issue 1277).
    Where no restart happens the generator is never drawn from, so every other layout is unchanged.
    A lock keeps two threads' patches from interleaving; scipy without eigsh's ``rng`` is left as is.
    """
    import scipy.sparse.linalg as sla

    with _ARPACK_LOCK:
        original = sla.eigsh
        if "rng" not in inspect.signature(original).parameters:
            yield
            return

        def eigsh(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("rng", np.random.default_rng(seed))
            return original(*args, **kwargs)

        sla.eigsh = eigsh
        try:
            yield
        finally:
            sla.eigsh = original


Mapper = Callable[..., Iterable[Any]]  # ``map``, or an ordered process-pool ``map``


def largest_first(mapper: Mapper, fn: Callable[..., Any], sizes: Sequence[float], *args: Sequence[Any]) -> list[Any]:
    """``list(mapper(fn, *args))``, with the tasks handed out largest first (a pool's last task is then
    a small one, not the biggest) and the results taken back in the given order."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    out: list[Any] = [None] * len(order)
    for i, result in zip(order, mapper(fn, *[[a[i] for i in order] for a in args])):
        out[i] = result
    return out


def _fit_scored(x: np.ndarray, k: int, seed: int) -> tuple[float, Mixture]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # k-means ConvergenceWarning on tiny or degenerate inputs
        gm = fit_mixture(x, k, seed)
    return gm.bic(x), gm


def fit_best_mixture(x: np.ndarray, max_clusters: int, seed: int, mapper: Mapper = map) -> Mixture:
    """The Gaussian mixture with the lowest BIC among ``1 .. min(max_clusters, n) - 1`` components.

    The fits are independent (each seeded alike), so ``mapper`` may run them in other processes."""
    ks = list(range(1, max(2, min(max_clusters, len(x)))))
    fits = largest_first(mapper, _fit_scored, ks, [x] * len(ks), ks, [seed] * len(ks))
    bics = np.array([bic for bic, _ in fits])
    best = int(np.argmin(np.where(np.isnan(bics), np.inf, bics)))  # ties keep the smaller mixture
    return fits[best][1]


def soft_labels(x: np.ndarray, threshold: float, max_clusters: int, seed: int,
                mapper: Mapper = map) -> tuple[list[list[int]], int]:
    """Per point, the mixture components it joins (posterior > threshold; else its most likely one)."""
    gm = fit_best_mixture(x, max_clusters, seed, mapper)
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
    labels, k = soft_labels(reduced, params.threshold, params.max_clusters, params.seed, mapper)
    groups = _members(labels, k)
    big = [m for m in groups if len(m) > dim + 1]
    local = iter(largest_first(mapper, _local_pass, [len(m) for m in big], [x[m] for m in big], [params] * len(big)))
    clusters: list[list[int]] = []
    for members in groups:
        if len(members) <= dim + 1:
            clusters.append(members)
        else:
            clusters.extend([members[j] for j in m] for m in next(local))
    return clusters


@contextmanager
def worker_pool(params: ClusterParams, n_points: int) -> Iterator[Mapper | None]:
    """An ordered ``map`` over ``params.workers`` processes when a layer of ``n_points`` is worth them
    (at least ``params.parallel_min_points``), else ``None``.

    A tree opens one for all its layers, so each worker's start (imports, numba compilation: seconds)
    is paid once and the smaller upper layers use the warm workers too. The workers are spawned (not
    forked: this process has threads running), so a script that builds RAPTOR through the Python API
    on such a source needs the usual ``if __name__ == "__main__":`` guard; ``sourcebench`` has it.
    """
    workers = params.workers if params.workers > 0 else (os.cpu_count() or 1)
    if workers < 2 or n_points < params.parallel_min_points:
        yield None
        return
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_single_threaded) as pool:
        yield pool.map


def cluster_nodes(embeddings: np.ndarray, tokens: Sequence[int], params: ClusterParams,
                  mapper: Mapper | None = None) -> list[list[int]]:
    """Clusters of one layer (row indices), re-clustering any cluster over ``max_cluster_tokens``.

    Clusters come in a deterministic order (component order, depth first); a node can be in several.
    BLAS, OpenMP and numba run single-threaded meanwhile (``one_thread``): the mixtures are tiny, thread
    pools (BLAS, and OpenMP in the k-means start of each mixture) made the BIC sweep several times
    slower on a busy 2-core machine, and k-means's result depends on its thread count. The
    independent steps (a sweep's mixture fits, the local steps, the re-clusterings; each seeded as in
    one process: the same clusters) run through ``mapper`` when one is given (a ``worker_pool``), else
    through a pool of this call's own for a layer of at least ``params.parallel_min_points`` nodes;
    smaller layers would spend more on starting workers than they save. Embeddings stay float32
    (UMAP's own precision), not a float64 copy of the layer.
    """
    x = np.asarray(embeddings, dtype=np.float32)
    with one_thread():
        if mapper is not None:
            return _cluster_recursive(x, list(tokens), params, 0, mapper)
        with worker_pool(params, len(x)) as own:
            return _cluster_recursive(x, list(tokens), params, 0, own or map)


_WORKER_LIMITS: list[Any] = []  # set in a pool worker (its one-thread context, entered for good): 'am I a worker'


@contextmanager
def one_thread() -> Iterator[None]:
    """BLAS, OpenMP and numba on one thread meanwhile, with the libraries that bring their own
    runtimes loaded first: a ``threadpoolctl`` limit reaches only the runtimes already loaded, and
    scikit-learn's OpenMP (its k-means), loaded later by the first mixture fit, kept a second thread
    spinning, which made two processes' BIC sweeps 3.4 times slower side by side. numba's count is
    this thread's (UMAP's parallel helpers then reduce in one order, as in a worker)."""
    import numba
    import sklearn.cluster  # noqa: F401  (its OpenMP runtime)
    import umap  # noqa: F401  (numba, pynndescent, scipy's BLAS)
    from threadpoolctl import threadpool_limits

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        numba.set_num_threads(before)


def _single_threaded() -> None:
    """Pool worker start: BLAS, OpenMP and numba at one thread for the worker's life (the workers
    share the cores; more threads would only contend)."""
    limits = one_thread()
    limits.__enter__()
    _WORKER_LIMITS.append(limits)


def _cluster_recursive(x: np.ndarray, tokens: list[int], params: ClusterParams, depth: int,
                       mapper: Mapper = map) -> list[list[int]]:
    """A cluster holding every row is not re-clustered: with the same seed the same rows give the
    same clusters again (the official code recurses forever there)."""
    groups = global_local_clusters(x, params, mapper)
    again = {g for g, m in enumerate(groups) if sum(tokens[i] for i in m) > params.max_cluster_tokens
             and 1 < len(m) < len(x) and depth < params.max_depth}
    picked = [groups[g] for g in sorted(again)]
    subs = iter(largest_first(mapper, _cluster_recursive, [len(m) for m in picked], [x[m] for m in picked],
                              [[tokens[i] for i in m] for m in picked], [params] * len(picked),
                              [depth + 1] * len(picked)))
    out: list[list[int]] = []
    for g, members in enumerate(groups):
        if g in again:
            out.extend([members[j] for j in m] for m in next(subs))
        else:
            out.append(members)
    return out
