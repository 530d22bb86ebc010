"""Associative memories as self-local modes and means.

* Classical Hopfield network: x ← sign(Σᵢ (x·xᵢ) xᵢ) = sign(XᵀX x) — a *linear* local mode,
  the stored patterns voting with the (signed) linear kernel K(x, xᵢ) = x·xᵢ.
* Modern (dense) Hopfield network (Ramsauer et al. 2020): x ← Xᵀ softmax(β X x) — the local
  mean of the patterns under the exponential dot-product kernel exp(x·xᵢ/τ), τ = 1/β, i.e.
  one attention step with the state as the query and the patterns as keys and values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._base import keeps_state_on_error
from ._validation import COUNT, FINITE, FLOAT_DTYPES, N_JOBS, NON_NEGATIVE, POSITIVE, StrOptions, fit_context, validate_data
from .engine import BoundKernel, ratio
from .kernels import Kernel

if TYPE_CHECKING:
    from ._typing import ArrayLike, FloatArray, SeedLike, Self


_UPDATES = ("synchronous", "asynchronous")


def _bipolar(X, threshold):
    """+1 where X > threshold, −1 elsewhere ({0,1} and {−1,1} patterns map to themselves)."""
    return np.where(X > threshold, 1.0, -1.0)


class Hopfield(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Classical Hopfield network with Hebbian weights W = XᵀX / n_features.

    The update x ← sign(W x) is the linear self-local mode sign(Σᵢ (x·xᵢ) xᵢ) over the stored
    patterns xᵢ. The energy E(x) = −½ xᵀWx never increases under asynchronous updates
    (one neuron at a time; a neuron whose field is exactly 0 keeps its state).

    Parameters
    ----------
    update : {"asynchronous", "synchronous"}, default="asynchronous"
        Asynchronous: neurons updated one at a time in a random order per sweep (converges
        to a fixed point). Synchronous: all at once, x ← sign(Wx) (may end in a 2-cycle).
    max_iter : int, default=100
        Maximum number of sweeps (asynchronous) or steps (synchronous).
    zero_diagonal : bool, default=True
        Remove self-connections (W_ii = 0), the usual Hopfield convention. With ``False``
        the update is exactly sign(XᵀX x) (identity 7 of docs/identities.md).
    threshold : float, default=0.0
        Inputs are binarised to +1 where X > threshold and −1 elsewhere, so bipolar (±1) and
        binary (0/1) patterns are both accepted as they are.
    random_state : int, RandomState or None
        Order of the asynchronous updates.

    Attributes
    ----------
    patterns_ : ndarray of shape (n_patterns, n_features)
        The stored bipolar patterns.
    weights_ : ndarray of shape (n_features, n_features)
        W (dense by nature: one weight per pair of neurons).
    n_iter_ : int
        Sweeps/steps the stored patterns needed to settle when recalled at fit time.
    pattern_stable_ : ndarray of shape (n_patterns,), bool
        Which stored patterns are fixed points of the network (capacity diagnostic:
        about 0.14·n_features random patterns can be stored).

    Examples
    --------
    >>> import numpy as np
    >>> from localization.memory import Hopfield
    >>> P = np.array([[1, -1, 1, -1, 1, -1], [1, 1, 1, -1, -1, -1]])
    >>> net = Hopfield(random_state=0).fit(P)
    >>> net.recall([[1, -1, 1, -1, 1, 1]]).astype(int).tolist()  # one bit flipped
    [[1, -1, 1, -1, 1, -1]]
    """

    _parameter_constraints = {
        "update": [StrOptions(set(_UPDATES))],
        "max_iter": [COUNT],
        "zero_diagonal": ["boolean"],
        "threshold": [FINITE],
        "random_state": ["random_state"],
    }

    def __init__(
        self, update: str = "asynchronous", max_iter: int = 100, zero_diagonal: bool = True, threshold: float = 0.0,
        random_state: SeedLike = None,
    ) -> None:
        self.update = update
        self.max_iter = max_iter
        self.zero_diagonal = zero_diagonal
        self.threshold = threshold
        self.random_state = random_state

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Store the patterns (binarised) and build the Hebbian weights. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        self.patterns_ = _bipolar(X, self.threshold)
        # Integer Hebbian counts (exact in float64): the dynamics only need signs of fields,
        # and exact integer fields make "a zero field keeps the state" and the incremental
        # field updates of the asynchronous sweep free of rounding.
        G = self.patterns_.T @ self.patterns_
        if self.zero_diagonal:
            np.fill_diagonal(G, 0.0)
        self._hebb = G
        self.weights_ = G / X.shape[1]
        settled, self.n_iter_ = self._run(self.patterns_.copy())
        self.pattern_stable_ = np.all(settled == self.patterns_, axis=1)
        return self

    def _state(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return _bipolar(X, self.threshold)

    def energy(self, X: ArrayLike) -> FloatArray:
        """E(x) = −½ xᵀWx for each (binarised) row of X."""
        S = self._state(X)
        return -0.5 * np.einsum("ij,ij->i", S @ self.weights_, S)

    def step(self, X: ArrayLike) -> FloatArray:
        """One synchronous update x ← sign(Wx) (a zero field keeps the current state)."""
        S = self._state(X)
        return self._sync(S)

    def _sync(self, S):
        H = S @ self._hebb
        return np.where(H > 0, 1.0, np.where(H < 0, -1.0, S))

    def recall(self, X: ArrayLike, return_n_iter: bool = False) -> FloatArray | tuple[FloatArray, int]:
        """Run the network from each row of X until a fixed point (or ``max_iter``).

        Returns the final states (and the number of sweeps/steps with ``return_n_iter``).
        """
        S, n_iter = self._run(self._state(X).copy())
        return (S, n_iter) if return_n_iter else S

    def _run(self, S):
        W = self._hebb
        n_iter = 0
        if self.update == "synchronous":
            for it in range(int(self.max_iter)):
                new = self._sync(S)
                n_iter = it + 1
                if np.array_equal(new, S):
                    break
                S = new
            return S, n_iter
        rng = check_random_state(self.random_state)
        n = S.shape[1]
        # Local fields of every state, kept up to date by rank-one corrections when a neuron
        # flips, so a sweep costs O(n_states·n) plus O(n) per flip instead of a full product
        # per neuron. W is symmetric: row i is column i, contiguous.
        H = S @ W
        for it in range(int(self.max_iter)):
            changed = False
            for i in rng.permutation(n):
                h = H[:, i]
                new = np.where(h > 0, 1.0, np.where(h < 0, -1.0, S[:, i]))
                flipped = np.flatnonzero(new != S[:, i])
                if flipped.size:
                    changed = True
                    H[flipped] += np.outer(new[flipped] - S[flipped, i], W[i])
                    S[flipped, i] = new[flipped]
            n_iter = it + 1
            if not changed:
                break
        return S, n_iter

    def transform(self, X: ArrayLike) -> FloatArray:
        """Same as :meth:`recall`."""
        return self.recall(X)


class ModernHopfield(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Modern (dense) Hopfield network: x ← Xᵀ softmax(β X x), a local mean of the patterns.

    Each update is one call of the local-mean engine with the dot-product kernel
    K(x, xᵢ) = exp(x·xᵢ/τ), τ = 1/β: x_new = Σᵢ K(x, xᵢ) xᵢ / Σᵢ K(x, xᵢ). Large β retrieves
    single patterns; small β averages (metastable states).

    Parameters
    ----------
    beta : float, default=1.0
        Inverse temperature β.
    max_iter : int, default=1
        Updates per recall (one update usually suffices at large β).
    tol : float, default=1e-10
        Stop early when ``max |Δx| < tol``.
    n_jobs : int, optional

    Attributes
    ----------
    patterns_ : ndarray of shape (n_patterns, n_features)
        The stored patterns (any real vectors).

    Examples
    --------
    >>> import numpy as np
    >>> from localization.memory import ModernHopfield
    >>> P = np.array([[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]])
    >>> net = ModernHopfield(beta=8.0).fit(P)
    >>> net.recall([[0.8, -0.6, 1.0, -0.2]]).round(4).tolist()
    [[1.0, -1.0, 1.0, -1.0]]
    """

    _parameter_constraints = {"beta": [POSITIVE], "max_iter": [COUNT], "tol": [NON_NEGATIVE], "n_jobs": N_JOBS}

    def __init__(self, beta: float = 1.0, max_iter: int = 1, tol: float = 1e-10, n_jobs: int | None = None) -> None:
        self.beta = beta
        self.max_iter = max_iter
        self.tol = tol
        self.n_jobs = n_jobs

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Store the patterns. Returns self."""
        self.patterns_ = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        return self

    def _bound(self):
        return BoundKernel(Kernel("dot", temperature=1.0 / float(self.beta)), self.patterns_)

    def _query(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return np.ascontiguousarray(X, dtype=self.patterns_.dtype)

    def step(self, X: ArrayLike) -> FloatArray:
        """One update Xᵀ softmax(β X x) for each row of X."""
        Q = self._query(X)
        sums = self._bound().sums(Q, self.patterns_, n_jobs=self.n_jobs)
        num, den = sums.num, sums.den
        return ratio(num, den, what="retrieved pattern")

    def recall(self, X: ArrayLike, return_n_iter: bool = False) -> FloatArray | tuple[FloatArray, int]:
        """Iterate :meth:`step` up to ``max_iter`` times (or until ``max |Δx| < tol``).

        Returns the final states (and the number of updates with ``return_n_iter``).
        """
        S, n_iter = self._run(self._query(X))
        return (S, n_iter) if return_n_iter else S

    def _run(self, S):
        bk = self._bound()
        n_iter = 0
        for it in range(int(self.max_iter)):
            sums = bk.sums(S, self.patterns_, n_jobs=self.n_jobs)
            num, den = sums.num, sums.den
            new = ratio(num, den, what="retrieved pattern").astype(S.dtype, copy=False)
            n_iter = it + 1
            done = np.max(np.abs(new - S)) < self.tol
            S = np.ascontiguousarray(new)
            if done:
                break
        return S, n_iter

    def transform(self, X: ArrayLike) -> FloatArray:
        """Same as :meth:`recall`."""
        return self.recall(X)

    def energy(self, X: ArrayLike) -> FloatArray:
        """E(x) = −β⁻¹ log Σᵢ exp(β x·xᵢ) + ½‖x‖² + β⁻¹ log N + ½ M², M = maxᵢ ‖xᵢ‖.

        The log-sum-exp is one stabilised engine call (it stays finite for huge β).
        """
        Q = self._query(X)
        beta = float(self.beta)
        lse = self._bound().sums(Q, None, n_jobs=self.n_jobs).log_total()
        P = self.patterns_.astype(np.float64)
        M2 = np.max(np.sum(P**2, axis=1))
        Qd = Q.astype(np.float64)
        return -lse / beta + 0.5 * np.sum(Qd**2, axis=1) + np.log(len(P)) / beta + 0.5 * M2
