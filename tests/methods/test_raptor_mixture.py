"""RAPTOR's batched Gaussian mixture and exact cosine neighbours against scikit-learn's own (fast, no UMAP)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import pairwise_distances
from sklearn.mixture import GaussianMixture

from sourcebench.methods.raptor.clustering import cosine_neighbours
from sourcebench.methods.raptor.mixture import fit_mixture


def _blobs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 10)) + rng.integers(0, 4, size=(n, 1)) * 3.0  # 10-d, as UMAP's output


@pytest.mark.parametrize(("n", "seed"), [(12, 0), (40, 1), (150, 2), (600, 3)])
def test_fit_mixture_equals_scikit_learn(n: int, seed: int) -> None:
    x = _blobs(n, seed)
    for k in sorted({1, 2, 5, min(11, n - 1), min(49, n - 1)}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = GaussianMixture(n_components=k, random_state=224).fit(x)
            ours = fit_mixture(x, k, 224)
        assert ours.n_components == k
        assert ours.bic(x) == pytest.approx(ref.bic(x), rel=1e-8)
        np.testing.assert_allclose(ours.predict_proba(x), ref.predict_proba(x), atol=1e-7)
        np.testing.assert_allclose(ours.means, ref.means_, rtol=1e-7, atol=1e-9)
        assert ours.converged == ref.converged_


def test_fit_mixture_needs_as_many_points_as_components() -> None:
    with pytest.raises(ValueError, match="n_samples >= n_components"):
        fit_mixture(np.zeros((3, 2)), 4, 0)


@pytest.mark.parametrize("block", [7, 1024])
def test_cosine_neighbours_are_the_exact_ones(block: int) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(60, 32)).astype(np.float32)
    x[3] = x[2] * 5  # a duplicate direction: distance 0 to another point
    idx, dist = cosine_neighbours(x, 8, block=block)
    full = pairwise_distances(x.astype(np.float64), metric="cosine")
    assert idx.shape == dist.shape == (60, 8)
    assert (idx[:, 0] == np.arange(60)).all() and (dist[:, 0] == 0).all()  # itself first
    assert {int(idx[2, 1]), int(idx[3, 1])} == {2, 3}
    for i in range(60):
        expected = np.sort(full[i])[:8]
        np.testing.assert_allclose(np.sort(full[i][idx[i]]), expected, atol=1e-6)
        np.testing.assert_allclose(dist[i], full[i][idx[i]], atol=1e-6)
        assert (np.diff(dist[i]) >= 0).all()
