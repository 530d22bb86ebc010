"""Hopfield and ModernHopfield: identities 6 and 7, energy, capacity, API."""

import pickle

import numpy as np
import pytest
from scipy.special import logsumexp, softmax

from localization import local_mean
from localization.kernels import Kernel
from localization.memory import Hopfield, ModernHopfield


def bipolar(rng, shape):
    return rng.choice([-1.0, 1.0], size=shape)


def test_identity7_hopfield_update_is_sign_XtX_x():
    rng = np.random.default_rng(0)
    X = bipolar(rng, (7, 41))  # odd sizes: no zero fields
    S = bipolar(rng, (5, 41))
    net = Hopfield(update="synchronous", zero_diagonal=False).fit(X)
    H = S @ X.T @ X  # rows: (XᵀX x)ᵀ
    assert np.all(H != 0)
    np.testing.assert_array_equal(net.step(S), np.sign(H))
    # The same as the linear local mode: sign(Σᵢ (x·xᵢ) xᵢ).
    votes = np.stack([sum((s @ xi) * xi for xi in X) for s in S])
    np.testing.assert_array_equal(net.step(S), np.sign(votes))


def test_zero_field_keeps_state_and_zero_diagonal():
    X = np.array([[1.0, 1.0, -1.0, -1.0], [1.0, -1.0, 1.0, -1.0]])
    net = Hopfield(update="synchronous").fit(X)
    np.testing.assert_array_equal(np.diag(net.weights_), 0.0)
    np.testing.assert_allclose(net.weights_, net.weights_.T)
    s = np.array([[1.0, 1.0, 1.0, 1.0]])
    H = s @ net.weights_
    out = net.step(s)
    np.testing.assert_array_equal(out[H == 0], s[H == 0])


@pytest.mark.parametrize("N", [6, 12, 26])
@pytest.mark.parametrize("zero_diagonal", [True, False])
def test_identity6_attention_is_a_dot_kernel_local_mean(N, zero_diagonal):
    """softmax(QKᵀ/√d)V = D⁻¹exp(QKᵀ/√d)V, the engine's dot kernel with τ = √d."""
    rng = np.random.default_rng(N)
    d = N
    Q, K, V = rng.normal(size=(9, d)), rng.normal(size=(30, d)), rng.normal(size=(30, 4))
    ref = softmax(Q @ K.T / np.sqrt(d), axis=1) @ V
    got = local_mean(Q, K, V, kernel=Kernel("dot", temperature=np.sqrt(d)))
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)


def test_modern_hopfield_update_is_softmax_retrieval():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 16))
    S = rng.normal(size=(6, 16))
    beta = 0.7
    net = ModernHopfield(beta=beta).fit(X)
    ref = softmax(beta * S @ X.T, axis=1) @ X
    np.testing.assert_allclose(net.step(S), ref, rtol=0, atol=1e-10)
    # Several updates = the map iterated.
    net3 = ModernHopfield(beta=beta, max_iter=3, tol=0).fit(X)
    it = S
    for _ in range(3):
        it = softmax(beta * it @ X.T, axis=1) @ X
    out, n_iter = net3.recall(S, return_n_iter=True)
    assert n_iter == 3
    np.testing.assert_allclose(out, it, rtol=0, atol=1e-10)


def test_modern_hopfield_energy_and_huge_beta():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(15, 8))
    S = rng.normal(size=(4, 8))
    beta = 2.0
    net = ModernHopfield(beta=beta).fit(X)
    M2 = np.max((X**2).sum(1))
    ref = -logsumexp(beta * S @ X.T, axis=1) / beta + 0.5 * (S**2).sum(1) + np.log(15) / beta + 0.5 * M2
    np.testing.assert_allclose(net.energy(S), ref, rtol=1e-12)
    # The update never increases the energy (Ramsauer et al., concave-convex procedure).
    assert np.all(net.energy(net.step(S)) <= net.energy(S) + 1e-12)
    # β = 1e6: stabilised sums give the nearest pattern by dot product, not 0/0.
    big = ModernHopfield(beta=1e6).fit(X)
    np.testing.assert_array_equal(big.recall(S), X[np.argmax(S @ X.T, axis=1)])
    assert np.all(np.isfinite(big.energy(S)))


def test_async_energy_never_increases():
    rng = np.random.default_rng(3)
    N = 60
    X = bipolar(rng, (12, N))
    for zero_diagonal in (True, False):
        net = Hopfield(zero_diagonal=zero_diagonal).fit(X)
        s = bipolar(rng, (1, N))
        energies = [net.energy(s)[0]]
        for i in rng.permutation(N).tolist() * 3:  # three sweeps, one neuron at a time
            h = s[0] @ net.weights_[:, i]
            if h != 0:
                s[0, i] = np.sign(h)
            energies.append(net.energy(s)[0])
        assert np.all(np.diff(energies) <= 1e-12)
        # recall() ends at a fixed point of the asynchronous dynamics, with lower energy.
        out = net.recall(s)
        np.testing.assert_array_equal(Hopfield(zero_diagonal=zero_diagonal, update="synchronous").fit(X).step(out)[0] * 0 + out, out)
        H = out @ net.weights_
        assert np.all((H * out >= 0) | (H == 0))


def capacity_overlap(alpha, N=200, flip=0.1, seed=0):
    rng = np.random.default_rng(seed)
    P = int(alpha * N)
    X = bipolar(rng, (P, N))
    net = Hopfield(random_state=seed).fit(X)
    noisy = X * np.where(rng.random(X.shape) < flip, -1.0, 1.0)
    return net, np.mean(net.recall(noisy) * X, axis=1)


def test_capacity_about_014_N():
    net, ov = capacity_overlap(0.05)
    assert net.pattern_stable_.all() and np.all(ov == 1.0)
    _, ov = capacity_overlap(0.14)
    assert ov.mean() > 0.85  # near the 0.138·N limit: retrieval states still close to the patterns
    _, ov = capacity_overlap(0.3)
    assert ov.mean() < 0.6  # far beyond it: retrieval collapses


def test_binary_patterns_and_threshold():
    X01 = np.array([[1, 0, 1, 0, 1, 0], [1, 1, 1, 0, 0, 0]])
    a = Hopfield(random_state=0).fit(X01)
    b = Hopfield(random_state=0).fit(2 * X01 - 1)
    np.testing.assert_array_equal(a.weights_, b.weights_)
    np.testing.assert_array_equal(a.recall(X01), 2 * X01 - 1)


def test_hopfield_sync_iteration_counts_and_pickle():
    rng = np.random.default_rng(5)
    X = bipolar(rng, (4, 50))
    net = Hopfield(update="synchronous").fit(X)
    out, n_iter = net.recall(X, return_n_iter=True)
    np.testing.assert_array_equal(out, X)
    assert n_iter == 1 and net.n_iter_ == 1
    net2 = pickle.loads(pickle.dumps(net))
    np.testing.assert_array_equal(net2.recall(X), out)
    m = ModernHopfield(beta=3.0).fit(rng.normal(size=(10, 5)))
    Q = rng.normal(size=(3, 5))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(m)).recall(Q), m.recall(Q))


def test_modern_thread_invariance():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(700, 40))
    Q = rng.normal(size=(90, 40))
    a = ModernHopfield(beta=0.3, n_jobs=1).fit(X).recall(Q)
    b = ModernHopfield(beta=0.3, n_jobs=2).fit(X).recall(Q)
    np.testing.assert_array_equal(a, b)


def test_bad_input():
    X = np.ones((2, 3))
    with pytest.raises(ValueError, match="update"):
        Hopfield(update="random").fit(X)
    with pytest.raises(ValueError, match="max_iter"):
        Hopfield(max_iter=0).fit(X)
    with pytest.raises(ValueError, match="threshold"):
        Hopfield(threshold=np.nan).fit(X)
    with pytest.raises(ValueError, match="beta"):
        ModernHopfield(beta=0).fit(X)
    with pytest.raises(ValueError, match="beta"):
        ModernHopfield(beta=np.inf).fit(X)
    with pytest.raises(ValueError, match="tol"):
        ModernHopfield(tol=-1).fit(X)
    with pytest.raises(ValueError, match="NaN"):
        ModernHopfield().fit([[np.nan, 1.0]])
    with pytest.raises(ValueError, match="features"):
        Hopfield().fit(X).recall(np.ones((1, 4)))
    with pytest.raises(ValueError, match="features"):
        ModernHopfield().fit(X).recall(np.ones((1, 4)))


def test_fashion_mnist_retrieval():
    """Noisy Fashion-MNIST images: the modern network restores the stored image."""
    from localization.datasets import load_fashion_mnist

    X, _ = load_fashion_mnist(n=100)
    P = 2.0 * X.astype(np.float64) - 1.0  # pixels in [-1, 1]
    rng = np.random.default_rng(0)
    noisy = np.where(rng.random(P.shape) < 0.2, -P, P)  # 20% of the pixels inverted

    # Dot-product retrieval prefers patterns of large norm: centre and normalise first.
    def unit(A):
        A = A - P.mean(axis=0)
        return A / np.linalg.norm(A, axis=1, keepdims=True)

    out = ModernHopfield(beta=100.0).fit(unit(P)).recall(unit(noisy))
    idx = np.argmin(((out[:, None] - unit(P)[None]) ** 2).sum(-1), axis=1)
    assert np.mean(idx == np.arange(100)) > 0.95
