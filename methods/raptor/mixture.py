"""Full-covariance Gaussian mixtures fitted as scikit-learn fits them, with the components batched.

RAPTOR picks each clustering pass's mixture by a BIC sweep over 1 .. 49 components: thousands of
small fits per tree. scikit-learn's ``GaussianMixture`` loops over components in Python in every
E- and M-step (a Cholesky factor, a triangular solve and a covariance product per component), so on
RAPTOR's inputs (tens to thousands of 10-dimensional points) its time is interpreter overhead, not
arithmetic. ``fit_mixture`` runs the same algorithm with numpy's batched linear algebra: the same
k-means start (scikit-learn's ``KMeans`` with the same random state), the same EM updates,
regularisation, convergence test (``tol`` on the mean log-likelihood), final E-step, BIC and
posteriors; results agree with scikit-learn's to floating-point rounding
(``tests/methods/test_raptor_mixture.py`` compares them), several times faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

REG_COVAR = 1e-6  # GaussianMixture defaults
TOL = 1e-3
MAX_ITER = 100


@dataclass(frozen=True)
class Mixture:
    """A fitted mixture: what the BIC sweep and the soft labels need."""

    weights: np.ndarray  # (k,)
    means: np.ndarray  # (k, d)
    precisions_cholesky: np.ndarray  # (k, d, d), upper-triangular factors of the precisions
    converged: bool

    @property
    def n_components(self) -> int:
        return len(self.weights)

    def n_parameters(self) -> int:
        k, d = self.means.shape
        return int(k * d * (d + 1) / 2 + k * d + k - 1)

    def weighted_log_prob(self, x: np.ndarray) -> np.ndarray:
        """log p(x | component) + log weight, shape (n, k)."""
        p = self.precisions_cholesky
        d = x.shape[1]
        log_det = np.log(np.diagonal(p, axis1=1, axis2=2)).sum(axis=1)  # (k,)
        y = np.matmul(x[None, :, :], p) - np.matmul(self.means[:, None, :], p)  # (k, n, d)
        log_prob = np.einsum("knd,knd->nk", y, y)
        return -0.5 * (d * math.log(2 * math.pi) + log_prob) + log_det + np.log(self.weights)

    def log_prob_resp(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per point log p(x) and the log posteriors (n, k)."""
        w = self.weighted_log_prob(x)
        top = w.max(axis=1, keepdims=True)
        norm = (np.log(np.exp(w - top).sum(axis=1, keepdims=True)) + top)[:, 0]
        return norm, w - norm[:, None]

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.log_prob_resp(x)[1])

    def bic(self, x: np.ndarray) -> float:
        return float(-2 * self.log_prob_resp(x)[0].mean() * len(x) + self.n_parameters() * math.log(len(x)))


def _parameters(x: np.ndarray, resp: np.ndarray, reg_covar: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weights (normalised), means and precision Cholesky factors from responsibilities (the M-step)."""
    nk = resp.sum(axis=0) + 10 * np.finfo(resp.dtype).eps
    means = (resp.T @ x) / nk[:, None]
    k, d = means.shape
    cov = np.empty((k, d, d))
    if len(x) * k <= 50_000:  # small: one batched product (the loop's overhead would dominate)
        diff = x[None, :, :] - means[:, None, :]  # (k, n, d)
        np.matmul((diff * resp.T[:, :, None]).transpose(0, 2, 1), diff, out=cov)
    else:  # large: per component, as scikit-learn, without a (k, n, d) temporary
        for j in range(k):
            diff = x - means[j]
            np.matmul(resp[:, j] * diff.T, diff, out=cov[j])
    cov /= nk[:, None, None]
    cov[:, np.arange(d), np.arange(d)] += reg_covar
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError("Fitting the mixture model failed because some components have ill-defined empirical "
                         "covariance (for instance caused by singleton or collapsed samples).") from None
    eye = np.broadcast_to(np.eye(d), cov.shape)
    prec_chol = np.linalg.solve(chol, eye).transpose(0, 2, 1)
    return nk / nk.sum(), means, prec_chol


def fit_mixture(x: np.ndarray, n_components: int, seed: int, *, reg_covar: float = REG_COVAR,
                tol: float = TOL, max_iter: int = MAX_ITER) -> Mixture:
    """``GaussianMixture(n_components, random_state=seed).fit(x)``, batched over components."""
    from sklearn.cluster import KMeans

    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < max(2, n_components):
        raise ValueError(f"Expected n_samples >= n_components but got n_components = {n_components}, "
                         f"n_samples = {n}")
    rs = np.random.RandomState(seed)  # GaussianMixture: check_random_state(seed), then KMeans from it
    labels = KMeans(n_clusters=n_components, n_init=1, random_state=rs).fit(x).labels_
    resp = np.zeros((n, n_components))
    resp[np.arange(n), labels] = 1
    weights, means, prec = _parameters(x, resp, reg_covar)
    mix = Mixture(weights, means, prec, False)
    lower = -np.inf
    converged = False
    for _ in range(max_iter):
        prev = lower
        norm, log_resp = mix.log_prob_resp(x)
        weights, means, prec = _parameters(x, np.exp(log_resp), reg_covar)
        mix = Mixture(weights, means, prec, False)
        lower = float(norm.mean())
        if abs(lower - prev) < tol:
            converged = True
            break
    return Mixture(weights, means, prec, converged)
