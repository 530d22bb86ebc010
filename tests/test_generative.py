"""LocalMeanDenoiser and LocalMeanDiffusion: Tweedie identity, memorisation, samplers, API."""

import pickle

import numpy as np
import pytest
from scipy.special import logsumexp

from localization.generative import LocalMeanDenoiser, LocalMeanDiffusion, sigma_schedule

SAMPLERS = ["euler", "ddim", "heun", "ancestral", "langevin"]


def bayes_posterior_mean(Xn, X, sigma, w=None):
    """E[z | x] for z ~ Σ wᵢ δ(xᵢ), x = z + σε, by brute-force Bayes in log space."""
    w = np.ones(len(X)) if w is None else np.asarray(w, float)
    d2 = ((Xn[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    log_post = np.log(w)[None, :] - d2 / (2 * sigma**2)
    post = np.exp(log_post - logsumexp(log_post, axis=1, keepdims=True))
    return post @ X


@pytest.mark.parametrize("sigma", [0.05, 0.3, 2.0])
@pytest.mark.parametrize("d", [2, 20])  # d = 20 takes the engine's matrix-product path
def test_identity5_tweedie_empirical_prior(sigma, d):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, d))
    Xn = X[:15] + sigma * rng.normal(size=(15, d))
    den = LocalMeanDenoiser(sigma=sigma).fit(X)
    np.testing.assert_allclose(den.denoise(Xn), bayes_posterior_mean(Xn, X, sigma), rtol=0, atol=1e-10)


def test_identity5_weighted_prior():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    w = rng.uniform(0.1, 3.0, 60)
    Xn = rng.normal(size=(10, 3))
    den = LocalMeanDenoiser(sigma=0.7).fit(X, sample_weight=w)
    np.testing.assert_allclose(den.denoise(Xn), bayes_posterior_mean(Xn, X, 0.7, w), rtol=0, atol=1e-10)


def test_score_function_is_gradient_of_log_noisy_density():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 2))
    sigma = 0.6
    Q = rng.normal(size=(7, 2))

    def log_p(Z):
        d2 = ((Z[:, None, :] - X[None]) ** 2).sum(-1)
        return logsumexp(-d2 / (2 * sigma**2), axis=1)

    eps = 1e-5
    grad = np.stack([(log_p(Q + eps * e) - log_p(Q - eps * e)) / (2 * eps) for e in np.eye(2)], axis=1)
    den = LocalMeanDenoiser(sigma=sigma).fit(X)
    np.testing.assert_allclose(den.score_function(Q), grad, rtol=1e-6, atol=1e-7)
    # Tweedie: m(x) = x + σ² ∇ log p̂_σ(x)
    np.testing.assert_allclose(den.denoise(Q), Q + sigma**2 * den.score_function(Q), atol=1e-12)


def test_denoiser_tiny_sigma_is_nearest_point_and_keeps_dtype():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 5)).astype(np.float32)
    Q = X[:6] + np.float32(0.01) * rng.normal(size=(6, 5)).astype(np.float32)
    out = LocalMeanDenoiser(sigma=1e-4).fit(X).denoise(Q)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, X[:6])


def test_denoiser_thread_invariance_and_pickle():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(500, 30))
    Q = rng.normal(size=(70, 30))
    a = LocalMeanDenoiser(sigma=2.0, n_jobs=1).fit(X).denoise(Q)
    b = LocalMeanDenoiser(sigma=2.0, n_jobs=2).fit(X).denoise(Q)
    np.testing.assert_array_equal(a, b)
    den = pickle.loads(pickle.dumps(LocalMeanDenoiser(sigma=2.0).fit(X)))
    np.testing.assert_array_equal(den.denoise(Q), a)


@pytest.mark.parametrize("sigma", [0, -1.0, np.nan, np.inf])
def test_denoiser_bad_sigma(sigma):
    with pytest.raises(ValueError, match="sigma"):
        LocalMeanDenoiser(sigma=sigma).fit(np.zeros((3, 2)))


def test_denoiser_bad_input():
    with pytest.raises(TypeError, match="sigma"):
        LocalMeanDenoiser(sigma="big").fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        LocalMeanDenoiser().fit([[0.0, np.nan]])
    with pytest.raises(ValueError):
        LocalMeanDenoiser().fit(np.zeros((0, 2)))
    den = LocalMeanDenoiser().fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="features"):
        den.denoise(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="zero"):
        LocalMeanDenoiser().fit(np.zeros((3, 2)), sample_weight=[0, 0, 0])
    with pytest.raises(ValueError, match="non-negative"):
        LocalMeanDenoiser().fit(np.zeros((3, 2)), sample_weight=[1, -1, 0])


def test_sigma_schedules():
    g = sigma_schedule(80.0, 0.002, 18, "geometric")
    k = sigma_schedule(80.0, 0.002, 18, "karras")
    for s in (g, k):
        assert s[0] == 80.0 and s[-1] == 0.002 and np.all(np.diff(s) < 0)
    np.testing.assert_allclose(np.diff(np.log(g)), np.log(0.002 / 80) / 17)
    # Karras spends more levels at small σ than the geometric schedule in the middle.
    assert k[9] < 80 and k[9] > g[9]
    with pytest.raises(ValueError, match="schedule"):
        sigma_schedule(1.0, 0.1, 5, "cosine")
    with pytest.raises(ValueError, match="sigma_min"):
        sigma_schedule(1.0, 2.0, 5)
    with pytest.raises(ValueError, match="n_steps"):
        sigma_schedule(1.0, 0.1, 1)


def two_clusters(n=100, seed=0):
    rng = np.random.default_rng(seed)
    return np.r_[rng.normal(-3, 0.3, size=(n, 2)), rng.normal(3, 0.3, size=(n, 2))]


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("schedule", ["geometric", "karras"])
def test_ideal_denoiser_memorises(sampler, schedule):
    X = two_clusters()
    # σ_min well below the nearest-neighbour spacing (~0.03): the last denoiser is the
    # nearest training point up to weights ~exp(-Δ²/2σ²). A sample can still end between
    # two training points closer to each other than a few σ_min, hence the O(σ_min) bound.
    gen = LocalMeanDiffusion(n_steps=30, sigma_min=1e-3, schedule=schedule, sampler=sampler, random_state=0).fit(X)
    S = gen.sample(40)
    nearest = np.sqrt(((S[:, None] - X[None]) ** 2).sum(-1)).min(axis=1)
    assert nearest.max() < 2e-3
    assert np.median(nearest) < 1e-9
    # ... and it samples both modes in about equal proportion (the sampler follows the prior).
    share = np.mean(S[:, 0] > 0)
    assert 0.2 < share < 0.8


def test_memorisation_as_sigma_min_shrinks():
    """Without the final denoising step the distance to the training set is O(σ_min)."""
    X = two_clusters(50)
    dist = []
    for smin in (1e-1, 1e-2, 1e-3):
        gen = LocalMeanDiffusion(n_steps=40, sigma_min=smin, final_denoise=False, random_state=0).fit(X)
        S = gen.sample(30)
        dist.append(np.sqrt(((S[:, None] - X[None]) ** 2).sum(-1)).min(axis=1).max())
    assert dist[0] > dist[1] > dist[2]
    assert dist[2] < 5e-3


def test_sampling_reproducible_and_trajectory():
    X = two_clusters(30)
    gen = LocalMeanDiffusion(n_steps=12, sampler="ancestral", random_state=3).fit(X)
    a = gen.sample(5)
    np.testing.assert_array_equal(a, gen.sample(5))
    b = gen.sample(5, random_state=4)
    assert not np.array_equal(a, b)
    S, traj = gen.sample(5, return_trajectory=True)
    assert traj.shape == (13, 5, 2)
    np.testing.assert_array_equal(traj[-1], S)
    gen2 = pickle.loads(pickle.dumps(gen))
    np.testing.assert_array_equal(gen2.sample(5), a)


def test_diffusion_bad_params():
    X = two_clusters(10)
    with pytest.raises(ValueError, match="sampler"):
        LocalMeanDiffusion(sampler="dpm").fit(X)
    with pytest.raises(ValueError, match="n_steps"):
        LocalMeanDiffusion(n_steps=1).fit(X)
    with pytest.raises(ValueError, match="langevin_step"):
        LocalMeanDiffusion(langevin_step=3.0).fit(X)
    with pytest.raises(ValueError, match="sigma_min"):
        LocalMeanDiffusion(sigma_max=1.0, sigma_min=2.0).fit(X)
    with pytest.raises(ValueError, match="n_samples"):
        LocalMeanDiffusion().fit(X).sample(0)


def test_diffusion_on_fashion_mnist_memorises():
    from localization.datasets import load_fashion_mnist

    X, _ = load_fashion_mnist(n=300)
    X = X.astype(np.float64)
    gen = LocalMeanDiffusion(n_steps=25, schedule="karras", random_state=0).fit(X)
    S = gen.sample(3)
    assert S.shape == (3, 784)
    nearest = np.sqrt(((S[:, None] - X[None]) ** 2).sum(-1)).min(axis=1)
    assert nearest.max() < 1e-6


def test_diffusion_thread_invariance_and_progress(capsys, instant_progress):
    X = two_clusters(400)
    a = LocalMeanDiffusion(n_steps=10, sampler="heun", random_state=0, n_jobs=1).fit(X).sample(50)
    b = LocalMeanDiffusion(n_steps=10, sampler="heun", random_state=0, n_jobs=2).fit(X).sample(50, progress=True)
    np.testing.assert_array_equal(a, b)
    assert "heun sampling" in capsys.readouterr().err


def test_concurrent_denoise_from_python_threads():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    X = rng.normal(size=(600, 20))
    Qs = [rng.normal(size=(50, 20)) for _ in range(6)]
    den = LocalMeanDenoiser(sigma=1.5).fit(X)
    serial = [den.denoise(Q) for Q in Qs]
    with ThreadPoolExecutor(3) as pool:
        parallel = list(pool.map(den.denoise, Qs))
    for s, p in zip(serial, parallel):
        np.testing.assert_array_equal(s, p)
