"""Self-local means as generative models: the ideal denoiser and diffusion sampling.

For the empirical prior p = (1/N) Σᵢ δ(z − xᵢ) and Gaussian noise x = z + σε, Bayes' rule
gives the posterior mean

    E[z | x] = Σᵢ exp(−‖x − xᵢ‖²/2σ²) xᵢ / Σᵢ exp(−‖x − xᵢ‖²/2σ²) = m_σ(x),

the Gaussian self-local mean with bandwidth σ, and Tweedie's formula reads
m_σ(x) = x + σ² ∇ log p̂_σ(x) with p̂_σ the Gaussian KDE. So the optimal denoising
autoencoder of a finite training set is a local mean, and a diffusion model whose denoiser
is that ideal one needs no training at all — at the price of memorising the training set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING


import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._base import keeps_state_on_error
from ._progress import Progress
from ._validation import (COUNT, FLOAT_DTYPES, N_JOBS, POSITIVE, Integral, Interval, LocalizationError, Real, StrOptions,
                          check_allocation, check_number, check_positive_int, check_sample_weight, fit_context, validate_data)
from .engine import BoundKernel, ratio
from .kernels import Kernel

if TYPE_CHECKING:
    from ._typing import ArrayLike, FloatArray, SeedLike, Self


_SCHEDULES = ("geometric", "karras")
_SAMPLERS = ("euler", "ddim", "heun", "ancestral", "langevin")


class _LocalMeanPrior(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Shared: a stored training set and its Gaussian local mean at any σ."""

    def _fit(self, X, sample_weight):
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        self.X_fit_ = X
        self.sample_weight_ = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        # Zero-weight points carry no prior mass. They are dropped before the engine sees them:
        # its running maximum is taken over the kernel values alone, so a zero-weight point
        # nearest to a query would set the scale and let the others underflow (0/0).
        if self.sample_weight_ is None:
            self._support, self._support_w = X, None
        else:
            keep = self.sample_weight_ > 0
            self._support = np.ascontiguousarray(X[keep])
            self._support_w = np.ascontiguousarray(self.sample_weight_[keep])
        return X

    def _query(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return np.ascontiguousarray(X, dtype=self.X_fit_.dtype)

    def _denoise(self, Q, sigma):
        """m_σ(Q): one engine call (stabilised, so tiny σ gives the nearest training point)."""
        bk = BoundKernel(Kernel("gaussian", sigma), self._support, self._support_w)
        sums = bk.sums(Q, self._support, self._support_w, n_jobs=self.n_jobs)
        num, den = sums.num, sums.den
        return ratio(num, den, what="denoised value")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


class LocalMeanDenoiser(_LocalMeanPrior):
    """The ideal (Bayes-optimal, MMSE) denoiser of a training set: the Gaussian local mean.

    For x = z + σε with z drawn from the training points (the empirical prior, optionally
    weighted) and ε ~ N(0, I), the posterior mean is E[z | x] = m_σ(x) (Tweedie).

    Parameters
    ----------
    sigma : float, default=1.0
        Noise standard deviation σ = the Gaussian bandwidth.
    n_jobs : int, optional
        Threads; results do not depend on it.

    Attributes
    ----------
    X_fit_ : ndarray of shape (n_samples, n_features)
        The training set (the prior's support).
    sample_weight_ : ndarray or None
        Prior weights of the training points (uniform when None).

    Notes
    -----
    ``score_function(X)`` returns the score ∇ log p̂_σ(x) = (m_σ(x) − x)/σ² of the noisy
    density p̂_σ (the training set convolved with N(0, σ²I)). The method's specification calls it ``score``, but
    in scikit-learn ``score(X, y=None)`` must return one number (a goodness of fit), so the
    name ``score_function`` is used, as in :class:`localization.KernelDensity`; ``score`` is
    not defined here.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.generative import LocalMeanDenoiser
    >>> X = np.array([[0.0, 0.0], [4.0, 0.0]])
    >>> den = LocalMeanDenoiser(sigma=0.5).fit(X)
    >>> den.denoise([[0.3, 0.1]]).round(6).tolist()
    [[0.0, 0.0]]
    >>> den.score_function([[0.3, 0.1]]).round(3).tolist()
    [[-1.2, -0.4]]
    """

    _parameter_constraints = {"sigma": [POSITIVE], "n_jobs": N_JOBS}

    def __init__(self, sigma: float = 1.0, n_jobs: int | None = None) -> None:
        self.sigma = sigma
        self.n_jobs = n_jobs

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Store the training set (the empirical prior). Returns self."""
        self._fit(X, sample_weight)
        return self

    def denoise(self, X: ArrayLike) -> FloatArray:
        """The posterior mean E[z | x] = m_σ(x) for each row of the noisy ``X``."""
        return self._denoise(self._query(X), float(self.sigma))

    def transform(self, X: ArrayLike) -> FloatArray:
        """Same as :meth:`denoise` (so the denoiser can sit in a Pipeline)."""
        return self.denoise(X)

    def score_function(self, X: ArrayLike) -> FloatArray:
        """∇ log p̂_σ(x) = (m_σ(x) − x) / σ² (Tweedie), shape (n, n_features)."""
        Q = self._query(X)
        sigma = float(self.sigma)
        return (self._denoise(Q, sigma) - Q) / sigma**2


def sigma_schedule(sigma_max: float, sigma_min: float, n_steps: int, schedule: str = "geometric", rho: float = 7.0) -> FloatArray:
    """Noise levels σ_max = σ₀ > σ₁ > … > σ_{n−1} = σ_min.

    ``"geometric"``: equally spaced in log σ. ``"karras"``: σᵢ = (σ_max^{1/ρ} + i/(n−1)
    (σ_min^{1/ρ} − σ_max^{1/ρ}))^ρ (Karras et al. 2022), which spends more steps at small σ.

    Examples
    --------
    >>> from localization.generative import sigma_schedule
    >>> sigma_schedule(10.0, 0.1, 3).round(6).tolist()
    [10.0, 1.0, 0.1]
    """
    sigma_max = check_number(sigma_max, "sigma_max")
    sigma_min = check_number(sigma_min, "sigma_min")
    n_steps = check_positive_int(n_steps, "n_steps", minimum=2)
    check_allocation(8 * n_steps, "n_steps", f"{n_steps} noise levels")
    if sigma_min >= sigma_max:
        raise LocalizationError(f"`sigma_min`={sigma_min} must be smaller than `sigma_max`={sigma_max}", "sigma_min")
    if schedule == "geometric":
        return np.geomspace(sigma_max, sigma_min, n_steps)
    if schedule == "karras":
        rho = check_number(rho, "rho")
        t = np.linspace(0.0, 1.0, n_steps)
        s = (sigma_max ** (1 / rho) + t * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
        s[0], s[-1] = sigma_max, sigma_min
        return s
    raise LocalizationError(f"`schedule` must be one of {_SCHEDULES}, got {schedule!r}", "schedule")


class LocalMeanDiffusion(_LocalMeanPrior):
    """Diffusion sampling whose denoiser at every noise level is the ideal one, m_σ.

    Variance-exploding diffusion: x_σ = z + σε. Starting from x ~ N(x̄, σ_max² I) (x̄ the
    training mean), the sampler walks down the σ schedule using D(x; σ) = m_σ(x) (one
    engine call per step and sample batch). Samplers:

    ``"euler"`` (= ``"ddim"``)
        Deterministic probability-flow ODE dx/dσ = (x − D(x; σ))/σ, Euler steps:
        x ← D + (σ_{i+1}/σᵢ)(x − D). This is DDIM (η = 0) in the VE parametrisation.
    ``"heun"``
        The same ODE with Heun's second-order correction (EDM's sampler).
    ``"ancestral"``
        Stochastic: x ← D + (σ_down/σᵢ)(x − D) + σ_up ε with σ_up² = σ²_{i+1}(σᵢ² − σ²_{i+1})/σᵢ²
        and σ_down² = σ²_{i+1} − σ_up² (DDPM-like ancestral sampling).
    ``"langevin"``
        Annealed Langevin dynamics (Song & Ermon 2019): at each σᵢ, ``n_langevin`` steps of
        x ← x + (η/2)(D − x) + √η σᵢ ε, i.e. step size α = ησᵢ² on the score (D − x)/σᵢ².

    A last denoising step x ← D(x; σ_min) is applied when ``final_denoise=True``.

    Parameters
    ----------
    n_steps : int, default=50
        Number of noise levels.
    sigma_max : float or "auto", default="auto"
        "auto": twice the largest distance of a training point from the training mean, so
        the start distribution covers the data.
    sigma_min : float or "auto", default="auto"
        "auto": σ_max × 1e-3.
    schedule : {"geometric", "karras"}, default="geometric"
    rho : float, default=7.0
        Exponent of the Karras schedule.
    sampler : {"euler", "ddim", "heun", "ancestral", "langevin"}, default="euler"
    n_langevin : int, default=3
        Langevin steps per noise level (``sampler="langevin"``).
    langevin_step : float, default=0.2
        η of the Langevin steps, in (0, 2).
    final_denoise : bool, default=True
    random_state : int, RandomState or None
        Default randomness of :meth:`sample`.
    n_jobs : int, optional

    Attributes
    ----------
    sigmas_ : ndarray of shape (n_steps,)
        The noise levels used.
    mean_ : ndarray of shape (n_features,)

    Notes
    -----
    The ideal denoiser memorises: as σ → 0, m_σ(x) tends to the training point nearest x,
    so every sample ends (up to ~exp(−Δ²/2σ_min²) weights) on a training point. It generates
    new data only through a σ_min that is not small, or a denoiser that is not ideal. This is
    the localization view of why trained diffusion models generalise: they are *worse*
    local means.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.generative import LocalMeanDiffusion
    >>> X = np.random.default_rng(0).normal(size=(50, 2))
    >>> gen = LocalMeanDiffusion(n_steps=20, random_state=0).fit(X)
    >>> S = gen.sample(5)
    >>> S.shape
    (5, 2)
    >>> bool(np.min(np.linalg.norm(S[:, None] - X[None], axis=2), axis=1).max() < 1e-6)  # memorised
    True
    """

    _parameter_constraints = {
        "n_steps": [Interval(Integral, 2, None, closed="left")],
        "sigma_max": [POSITIVE, StrOptions({"auto"})],
        "sigma_min": [POSITIVE, StrOptions({"auto"})],
        "schedule": [StrOptions(set(_SCHEDULES))],
        "rho": [POSITIVE],
        "sampler": [StrOptions(set(_SAMPLERS))],
        "n_langevin": [COUNT],
        "langevin_step": [Interval(Real, 0, 2, closed="neither")],
        "final_denoise": ["boolean"],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
    }

    def __init__(
        self, n_steps: int = 50, sigma_max: float | str = "auto", sigma_min: float | str = "auto",
        schedule: str = "geometric", rho: float = 7.0, sampler: str = "euler", n_langevin: int = 3,
        langevin_step: float = 0.2, final_denoise: bool = True, random_state: SeedLike = None,
        n_jobs: int | None = None,
    ) -> None:
        self.n_steps = n_steps
        self.sigma_max = sigma_max
        self.sigma_min = sigma_min
        self.schedule = schedule
        self.rho = rho
        self.sampler = sampler
        self.n_langevin = n_langevin
        self.langevin_step = langevin_step
        self.final_denoise = final_denoise
        self.random_state = random_state
        self.n_jobs = n_jobs

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Store the training set and resolve the noise schedule. Returns self."""
        X = self._fit(X, sample_weight)
        w = None if self.sample_weight_ is None else self.sample_weight_.astype(np.float64)
        self.mean_ = np.average(X.astype(np.float64), axis=0, weights=w)
        if isinstance(self.sigma_max, str) and self.sigma_max == "auto":
            # Only points with prior mass count (zero weights must not change the model).
            support = X if w is None else X[w > 0]
            spread = float(np.sqrt(np.max(np.sum((support - self.mean_) ** 2, axis=1))))
            smax = 2.0 * spread if spread > 0 else 1.0
        else:
            smax = float(self.sigma_max)
        if isinstance(self.sigma_min, str) and self.sigma_min == "auto":
            smin = smax * 1e-3
        else:
            smin = float(self.sigma_min)
        self.sigmas_ = sigma_schedule(smax, smin, self.n_steps, self.schedule, self.rho)
        return self

    def denoise(self, X: ArrayLike, sigma: float) -> FloatArray:
        """The ideal denoiser D(x; σ) = m_σ(x) of the training set."""
        return self._denoise(self._query(X), check_number(sigma, "sigma"))

    def transform(self, X: ArrayLike) -> FloatArray:
        """Denoise ``X`` at σ_min (projects points onto the training set's neighbourhood)."""
        check_is_fitted(self)
        return self.denoise(X, self.sigmas_[-1])

    def sample(self, n_samples: int = 1, random_state: SeedLike = None, return_trajectory: bool = False,
               progress: bool = False) -> FloatArray | tuple[FloatArray, FloatArray]:
        """Draw ``n_samples`` points by running the sampler down the σ schedule.

        Parameters
        ----------
        n_samples : int, default=1
        random_state : int, RandomState or None
            Overrides the estimator's ``random_state`` for this call.
        return_trajectory : bool, default=False
            Also return the start and the state after each step (and after the final
            denoising), shape (n_steps + final_denoise, n_samples, n_features).
        progress : bool, default=False
            Show a progress bar over the noise levels (tqdm).

        Returns
        -------
        samples : ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        n_samples = check_positive_int(n_samples, "n_samples")
        dt = self.X_fit_.dtype
        d = self.X_fit_.shape[1]
        # The state, the denoised state and a noise draw, in float64.
        check_allocation(3 * 8 * n_samples * d, "n_samples", f"{n_samples} samples of {d} features")
        rng = check_random_state(self.random_state if random_state is None else random_state)
        sig = self.sigmas_
        x = self.mean_ + sig[0] * rng.standard_normal((n_samples, d))
        traj = [x.copy()] if return_trajectory else None

        def D(z, s):
            return self._denoise(np.ascontiguousarray(z, dtype=dt), s).astype(np.float64)

        with Progress(progress, f"{self.sampler} sampling", unit="level", total=len(sig) - 1) as bar:
            for i in range(len(sig) - 1):
                s, s_next = sig[i], sig[i + 1]
                if self.sampler in ("euler", "ddim"):
                    den = D(x, s)
                    x = den + (s_next / s) * (x - den)
                elif self.sampler == "heun":
                    den = D(x, s)
                    slope = (x - den) / s
                    x_e = x + (s_next - s) * slope
                    slope2 = (x_e - D(x_e, s_next)) / s_next
                    x = x + (s_next - s) * 0.5 * (slope + slope2)
                elif self.sampler == "ancestral":
                    den = D(x, s)
                    s_up = np.sqrt(s_next**2 * (s**2 - s_next**2) / s**2)
                    s_down = np.sqrt(s_next**2 - s_up**2)
                    x = den + (s_down / s) * (x - den) + s_up * rng.standard_normal(x.shape)
                else:  # annealed Langevin at level s_next
                    eta = float(self.langevin_step)
                    for _ in range(int(self.n_langevin)):
                        x = x + 0.5 * eta * (D(x, s_next) - x) + np.sqrt(eta) * s_next * rng.standard_normal(x.shape)
                if traj is not None:
                    traj.append(x.copy())
                bar.update()
        if self.final_denoise:
            x = D(x, sig[-1])
            if traj is not None:
                traj.append(x.copy())
        x = x.astype(dt, copy=False)
        if return_trajectory:
            return x, np.stack(traj).astype(dt, copy=False)
        return x
