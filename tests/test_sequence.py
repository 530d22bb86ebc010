"""Attention as a temporal self-local mean: oracles (dense NumPy, double loops, PyTorch when
installed), gradients, identities, estimators, bad input."""

import pickle
import threading
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.special import logsumexp

from localization import LocalizationWarning, _core, attention, attention_backward, local_mean, temporal_local_mean
from localization.kernels import PROFILES, Kernel, profile
from localization.sequence import HierarchicalLocalModel, TemporalLocalMean, block_backward, block_forward, init_block


def dense_attention(Q, K, V, mask=None, window=None, decay=None, scale=None):
    """softmax(QKᵀ·scale + log K_position)V with a T×T matrix; empty rows give 0 and lse −inf."""
    T, d = Q.shape[-2:]
    scale = 1 / np.sqrt(d) if scale is None else scale
    S = Q @ np.swapaxes(K, -1, -2) * scale
    t, s = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = np.ones((T, T), bool)
    if isinstance(mask, str):
        allowed &= s <= t
    if window is not None:
        allowed &= np.abs(t - s) < window
    allowed = np.broadcast_to(allowed, S.shape)
    if mask is not None and not isinstance(mask, str):
        allowed = allowed & mask
    if decay is not None:
        lam = np.broadcast_to(np.asarray(decay, float), Q.shape[:-2])[..., None, None]
        S = S - lam * np.abs(t - s)
    S = np.where(allowed, S, -np.inf)
    with np.errstate(invalid="ignore"):
        lse = logsumexp(S, axis=-1)
        P = np.exp(S - lse[..., None])
    P = np.where(np.isfinite(lse)[..., None], P, 0.0)
    return P @ V, lse


def rand(rng, *shape):
    return rng.normal(size=shape)


# ---------------------------------------------------------------------------------------------
# attention = dense softmax, for every position kernel


POSITIONS = [
    dict(),
    dict(mask="causal"),
    dict(window=5),
    dict(mask="causal", window=3),
    dict(decay=0.3),
    dict(mask="causal", decay=[0.0, 0.05, 0.5]),
    dict(window=40, decay=[[0.1], [0.7]]),
]


@pytest.mark.parametrize("T", [1, 7, 129, 300])
@pytest.mark.parametrize("pos", POSITIONS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "none")
def test_attention_equals_dense_softmax(T, pos):
    rng = np.random.default_rng(T)
    Q, K, V = rand(rng, 2, 3, T, 6), rand(rng, 2, 3, T, 6), rand(rng, 2, 3, T, 5)
    out, lse = attention(Q, K, V, return_lse=True, **pos)
    want, want_lse = dense_attention(Q, K, V, **pos)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-13, atol=1e-12)


def test_single_sequence_and_explicit_scale():
    rng = np.random.default_rng(1)
    Q, K, V = rand(rng, 20, 4), rand(rng, 20, 4), rand(rng, 20, 3)
    np.testing.assert_allclose(attention(Q, K, V, scale=0.7), dense_attention(Q, K, V, scale=0.7)[0], atol=1e-12)
    # a different value width
    np.testing.assert_allclose(attention(Q, K, rand(rng, 20, 9))[:, :3].shape, (20, 3))


def test_boolean_masks_broadcast_and_fully_masked_rows_are_zero():
    rng = np.random.default_rng(2)
    B, H, T = 2, 3, 140
    Q, K, V = rand(rng, B, H, T, 4), rand(rng, B, H, T, 4), rand(rng, B, H, T, 2)
    keep = rng.random((B, 1, 1, T)) < 0.8  # key padding, shared by the heads
    keep[0, ..., :50] = False  # with causality, steps 0..49 of batch 0 see nothing
    causal = np.tril(np.ones((T, T), bool))
    M = causal & keep
    out, lse = attention(Q, K, V, mask=M, return_lse=True, decay=[0.1, 0.2, 0.3])
    want, want_lse = dense_attention(Q, K, V, mask=M, decay=[0.1, 0.2, 0.3])
    np.testing.assert_allclose(out, want, atol=1e-12)
    assert np.all(out[0, :, :50] == 0) and np.all(np.isneginf(lse[0, :, :50]))
    np.testing.assert_allclose(lse[np.isfinite(want_lse)], want_lse[np.isfinite(want_lse)], atol=1e-12)
    # a per-head mask (H, T, T) and a key mask (…, 1, T) broadcast too
    Mh = rng.random((H, T, T)) < 0.5
    np.testing.assert_allclose(attention(Q, K, V, mask=Mh), dense_attention(Q, K, V, mask=Mh)[0], atol=1e-12)
    g = attention_backward(np.ones_like(out), Q, K, V, mask=M)
    assert all(np.all(np.isfinite(a)) for a in g[:3])
    assert np.all(g.dQ[0, :, :50] == 0)


def test_float32_matches_float64():
    rng = np.random.default_rng(3)
    Q, K, V = rand(rng, 4, 333, 32), rand(rng, 4, 333, 32), rand(rng, 4, 333, 16)
    a = attention(Q, K, V, mask="causal")
    b = attention(*(A.astype(np.float32) for A in (Q, K, V)), mask="causal")
    assert b.dtype == np.float32
    np.testing.assert_allclose(b, a, atol=2e-6)


@pytest.mark.parametrize("pos", [dict(mask="causal"), dict(mask="causal", decay=[0.0, 2.0, 40.0])], ids=["causal", "decay"])
def test_float32_wide_logits_underflow_and_rescale_like_float64(pos):
    # Logits spread over hundreds of nats: whole key blocks underflow to exactly 0 against the
    # running maximum (float32's exponential in the forward pass works in base 2, where the
    # underflow bound is −127 rather than −87), and the maximum jumps between blocks.
    rng = np.random.default_rng(11)
    T, d = 700, 16
    Q, K, V = rand(rng, 3, T, d), rand(rng, 3, T, d), rand(rng, 3, T, 8)
    K[:, ::97] *= 6.0
    Q32, K32, V32 = (A.astype(np.float32) for A in (Q, K, V))
    out, lse = attention(Q32, K32, V32, scale=3.0, return_lse=True, **pos)
    # The reference from the float32 inputs, in float64: only our rounding differs.
    want, want_lse = dense_attention(*(A.astype(np.float64) for A in (Q32, K32, V32)), scale=3.0, **pos)
    assert out.dtype == lse.dtype == np.float32
    # Logits of size ~100 carry float32 rounding of ~1e-5 into the weights.
    np.testing.assert_allclose(out, want, atol=5e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-5)


def test_bit_identical_for_any_number_of_threads_and_concurrent_calls():
    rng = np.random.default_rng(4)
    Q, K, V = (rand(rng, 3, 2, 300, 8).astype(np.float32) for _ in range(3))
    G = rand(rng, 3, 2, 300, 8).astype(np.float32)
    kw = dict(mask="causal", window=200, decay=[0.01, 0.2])
    ref = attention(Q, K, V, n_jobs=1, **kw)
    gref = attention_backward(G, Q, K, V, n_jobs=1, **kw)
    for n_jobs in (2, 3, -1):
        np.testing.assert_array_equal(attention(Q, K, V, n_jobs=n_jobs, **kw), ref)
        g = attention_backward(G, Q, K, V, n_jobs=n_jobs, **kw)
        for a, b in zip(g, gref):
            np.testing.assert_array_equal(a, b)
    results = [None] * 4

    def work(i):
        results[i] = attention(Q, K, V, n_jobs=2, **kw)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for r in results:
        np.testing.assert_array_equal(r, ref)


# ---------------------------------------------------------------------------------------------
# other content kernels: the double-loop definition


def double_loop(X, V, k, allowed, decay=0.0):
    T = len(X)
    out = np.full((T, V.shape[1]), np.nan)
    for t in range(T):
        num, den = np.zeros(V.shape[1]), 0.0
        for s in range(T):
            if allowed(t, s):
                w = k(np.linalg.norm(X[t] - X[s])) * np.exp(-decay * abs(t - s))
                num += w * V[s]
                den += w
        if den > 0:
            out[t] = num / den
    return out


def test_gaussian_content_with_causal_position_is_the_double_loop():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(150, 3)).cumsum(0) * 0.1
    h = 0.4
    gauss = lambda u: np.exp(-0.5 * (u / h) ** 2)  # noqa: E731
    got = temporal_local_mean(X, kernel="gaussian", bandwidth=h, position="causal")
    np.testing.assert_allclose(got, double_loop(X, X, gauss, lambda t, s: s <= t), rtol=0, atol=1e-12)
    got = temporal_local_mean(X, kernel="gaussian", bandwidth=h, position="causal", window=10)
    np.testing.assert_allclose(got, double_loop(X, X, gauss, lambda t, s: 0 <= t - s < 10), atol=1e-12)


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_with_window_and_decay(name):
    rng = np.random.default_rng(6)
    X, V = rng.normal(size=(2, 140, 2)), rng.normal(size=(2, 140, 3))
    h = 1.3
    k = lambda u: profile(name, u / h)  # noqa: E731
    with np.errstate(divide="ignore"):
        got = temporal_local_mean(X, V, kernel=name, bandwidth=h, window=20, decay=[0.0, 0.2])
    for b, lam in enumerate([0.0, 0.2]):
        want = double_loop(X[b], V[b], k, lambda t, s: abs(t - s) < 20, lam)
        np.testing.assert_allclose(got[b], want, atol=1e-12)


def test_zero_weight_steps_are_nan_with_a_warning_and_rules_of_thumb():
    X = np.array([[0.0], [10.0], [0.5], [20.0]])
    with pytest.warns(LocalizationWarning, match="temporal local mean"):
        out = temporal_local_mean(X, kernel="tophat", bandwidth=1.0, position="causal", exclude_self=True)
    assert np.isnan(out[0, 0]) and np.isnan(out[1, 0]) and out[2, 0] == 0.0
    # per-feature bandwidths and rules of thumb divide the features before the kernel
    rng = np.random.default_rng(7)
    Y = rng.normal(size=(60, 2)) * [1.0, 10.0]
    a = temporal_local_mean(Y, kernel="gaussian", bandwidth=[0.5, 5.0])
    b = temporal_local_mean(Y / [0.5, 5.0], Y, kernel="gaussian", bandwidth=1.0)
    np.testing.assert_allclose(a, b, atol=1e-12)
    temporal_local_mean(Y, kernel="epanechnikov", bandwidth="scott")


def test_identity6_with_masks_attention_is_a_dot_kernel_local_mean():
    """softmax(QKᵀ/√d + mask)V = D⁻¹ (exp(QKᵀ/√d) ∘ M) V (SPEC identity 6 with a mask)."""
    rng = np.random.default_rng(8)
    T, d = 50, 8
    X, V = rng.normal(size=(T, d)), rng.normal(size=(T, 3))
    M = np.tril(np.ones((T, T), bool)) & (np.abs(np.subtract.outer(range(T), range(T))) < 12)
    E = np.exp(X @ X.T / np.sqrt(d)) * M
    lhs = attention(X, X, V, mask="causal", window=12)
    rhs = (E / E.sum(1, keepdims=True)) @ V
    np.testing.assert_allclose(lhs, rhs, atol=1e-12)
    tlm = temporal_local_mean(X, V, kernel=Kernel("dot", temperature=np.sqrt(d)), position="causal", window=12)
    np.testing.assert_allclose(tlm, rhs, atol=1e-12)
    # without positions, the engine's dot-kernel local mean is the same operation
    full = local_mean(X, X, V, kernel=Kernel("dot", temperature=np.sqrt(d)))
    np.testing.assert_allclose(attention(X, X, V), full, atol=1e-12)
    # with projections, self-attention attention(XW_q, XW_k, XW_v) is the temporal self-local
    # mean of the values XW_v under K(x_t, x_s) = exp(x_t W_q · x_s W_k / √d), each step over
    # the positions its mask allows: one engine local mean per step
    Wq, Wk, Wv = rng.normal(size=(3, d, d)) / np.sqrt(d)
    got = attention(X @ Wq, X @ Wk, X @ Wv, mask="causal", window=12)
    dot = Kernel("dot", temperature=np.sqrt(d))
    for t in range(T):
        seen = np.flatnonzero(M[t])
        np.testing.assert_allclose(got[t], local_mean((X @ Wq)[t : t + 1], (X @ Wk)[seen], (X @ Wv)[seen], kernel=dot)[0], atol=1e-12)
    est = TemporalLocalMean(position="causal", window=12, W_q=Wq, W_k=Wk, W_v=Wv, W_o=np.eye(d)).fit(X)
    np.testing.assert_allclose(est.transform(X), got, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# gradients


def _fd(f, A, idx, eps=1e-6):
    A1, A2 = A.copy(), A.copy()
    A1[idx] += eps
    A2[idx] -= eps
    return (f(A1) - f(A2)) / (2 * eps)


@pytest.mark.parametrize("pos", POSITIONS[1:] + [dict(mask=np.random.default_rng(0).random((3, 1, 70)) < 0.7)], ids=str)
def test_gradients_equal_finite_differences(pos):
    rng = np.random.default_rng(9)
    Q, K, V, W = rand(rng, 2, 3, 70, 4), rand(rng, 2, 3, 70, 4), rand(rng, 2, 3, 70, 3), rand(rng, 2, 3, 70, 3)
    loss = lambda Q, K, V, **kw: float(np.sum(attention(Q, K, V, **{**pos, **kw}) * W))  # noqa: E731
    out, lse = attention(Q, K, V, return_lse=True, **pos)
    g = attention_backward(W, Q, K, V, out, lse, **pos)
    for _ in range(8):
        idx = tuple(rng.integers(0, n) for n in Q.shape)
        assert abs(g.dQ[idx] - _fd(lambda A: loss(A, K, V), Q, idx)) < 1e-6
        assert abs(g.dK[idx] - _fd(lambda A: loss(Q, A, V), K, idx)) < 1e-6
        idv = idx[:-1] + (idx[-1] % 3,)
        assert abs(g.dV[idv] - _fd(lambda A: loss(Q, K, A), V, idv)) < 1e-6
    if "decay" in pos:
        lam = np.asarray(pos["decay"], float)
        assert np.shape(g.d_decay) == lam.shape
        for idx in np.ndindex(lam.shape):
            if lam[idx] > 0:
                num, tol = _fd(lambda L: loss(Q, K, V, decay=L), lam, idx), 1e-6
            else:  # one-sided at the boundary λ = 0
                up = lam.copy()
                up[idx] += 1e-7
                num, tol = (loss(Q, K, V, decay=up) - loss(Q, K, V)) / 1e-7, 1e-4
            assert abs(np.asarray(g.d_decay)[idx] - num) < tol * (1 + abs(num))
    else:
        assert g.d_decay is None
    # recomputing the forward pass gives the same bits as passing its outputs
    g2 = attention_backward(W, Q, K, V, **pos)
    for a, b in zip(g[:3], g2[:3]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("T, window", [(300, 5), (513, 5), (513, 200)])
def test_window_gradients_where_a_key_group_has_no_queries(T, window):
    # A window without a causal mask leaves some key groups of a full query block with an
    # empty band of queries; the backward pass once indexed past the tile there (a panic).
    rng = np.random.default_rng(11)
    Q, K, V, W = rand(rng, T, 3), rand(rng, T, 3), rand(rng, T, 2), rand(rng, T, 2)
    loss = lambda Q, K, V: float(np.sum(attention(Q, K, V, window=window) * W))  # noqa: E731
    g = attention_backward(W, Q, K, V, window=window)
    for _ in range(6):
        idx = tuple(rng.integers(0, n) for n in Q.shape)
        assert abs(g.dQ[idx] - _fd(lambda A: loss(A, K, V), Q, idx)) < 1e-6
        assert abs(g.dK[idx] - _fd(lambda A: loss(Q, A, V), K, idx)) < 1e-6
        idv = idx[:-1] + (idx[-1] % 2,)
        assert abs(g.dV[idv] - _fd(lambda A: loss(Q, K, A), V, idv)) < 1e-6


def test_gradients_equal_torch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    B, H, T, d = 2, 4, 200, 16
    Q, K, V, G = (rand(rng, B, H, T, d) for _ in range(4))
    slopes = np.array([0.0, 0.02, 0.1, 0.5])
    tq, tk, tv = (torch.tensor(A, requires_grad=True) for A in (Q, K, V))
    lam = torch.tensor(slopes, requires_grad=True)
    dist = torch.tensor(np.subtract.outer(np.arange(T), np.arange(T)), dtype=torch.float64)
    bias = -lam[:, None, None] * dist.abs()
    bias = bias.masked_fill(dist < 0, float("-inf"))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=bias)
    (out * torch.tensor(G)).sum().backward()
    ours = attention(Q, K, V, mask="causal", decay=slopes)
    np.testing.assert_allclose(ours, out.detach().numpy(), atol=1e-12)
    g = attention_backward(G, Q, K, V, mask="causal", decay=slopes)
    np.testing.assert_allclose(g.dQ, tq.grad.numpy(), atol=1e-11)
    np.testing.assert_allclose(g.dK, tk.grad.numpy(), atol=1e-11)
    np.testing.assert_allclose(g.dV, tv.grad.numpy(), atol=1e-11)
    np.testing.assert_allclose(g.d_decay, lam.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_forward_equals_torch_sdpa_in_float32():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    Q, K, V = (rand(rng, 2, 8, 257, 64).astype(np.float32) for _ in range(3))
    for causal in (False, True):
        want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(A) for A in (Q, K, V)), is_causal=causal).numpy()
        np.testing.assert_allclose(attention(Q, K, V, mask="causal" if causal else None), want, atol=3e-6)


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_input_is_a_clear_error_naming_the_argument():
    rng = np.random.default_rng(12)
    Q, K, V = rand(rng, 2, 10, 4), rand(rng, 2, 10, 4), rand(rng, 2, 10, 3)
    with pytest.raises(ValueError, match="`K` has 9 time steps"):
        attention(Q, K[:, :9], V)
    with pytest.raises(ValueError, match="`V` has 9 time steps"):
        attention(Q, K, V[:, :9])
    with pytest.raises(ValueError, match="`K` has 3 features"):
        attention(Q, K[..., :3], V)
    with pytest.raises(ValueError, match="`K` has leading"):
        attention(Q, K[:1], V)
    with pytest.raises(ValueError, match="window"):
        attention(Q, K, V, window=0)
    with pytest.raises(ValueError, match="window"):
        attention(Q, K, V, window=2.5)
    # a window beyond 64 bits is no limit, not an error
    np.testing.assert_array_equal(attention(Q, K, V, window=2**70), attention(Q, K, V))
    with pytest.raises(ValueError, match="decay"):
        attention(Q, K, V, decay=-0.1)
    with pytest.raises(ValueError, match="decay"):
        attention(Q, K, V, decay=[0.1, 0.2, 0.3])
    for name, args in (("Q", (np.where(Q > 1, np.nan, Q), K, V)), ("K", (Q, np.where(K > 1, np.inf, K), V)), ("V", (Q, K, np.where(V > 1, np.nan, V)))):
        with pytest.raises(ValueError, match=f"`{name}` contains NaN"):
            attention(*args)
    with pytest.raises(ValueError, match="T = 0"):
        attention(Q[:, :0], K[:, :0], V[:, :0])
    with pytest.raises(ValueError, match="`Q` must have shape"):
        attention(Q[0, 0], K[0, 0], V[0, 0])
    with pytest.raises(TypeError, match="`Q` has dtype object"):
        attention(Q.astype(object), K, V)
    with pytest.raises(ValueError, match="mask"):
        attention(Q, K, V, mask="anti-causal")
    with pytest.raises(TypeError, match="boolean"):
        attention(Q, K, V, mask=np.ones((10, 10)))
    with pytest.raises(ValueError, match="mask"):
        attention(Q, K, V, mask=np.ones((10, 9), bool))
    with pytest.raises(ValueError, match="mask"):
        attention(Q, K, V, mask=np.ones((3, 10, 10), bool))
    with pytest.raises(ValueError, match="scale"):
        attention(Q, K, V, scale=np.nan)
    with pytest.raises(ValueError, match="grad_output"):
        attention_backward(V[:, :5], Q, K, V)
    with pytest.raises(ValueError, match="lse"):
        attention_backward(V, Q, K, V, V, np.zeros((2, 9)))
    with pytest.raises(ValueError, match="n_jobs"):
        attention(Q, K, V, n_jobs=0)
    with pytest.raises(ValueError, match="bandwidth"):
        temporal_local_mean(Q, bandwidth=0.0)
    with pytest.raises(ValueError, match="position"):
        temporal_local_mean(Q, position="future")
    with pytest.raises(ValueError, match="callable"):
        temporal_local_mean(Q, kernel=lambda u: np.exp(-u))
    # integers are converted; non-contiguous arrays are copied by the Python layer and refused
    # (with the argument's name) by the native one
    np.testing.assert_allclose(attention(Q.astype(int), K, V), attention(Q.astype(int).astype(float), K, V))
    Qs = np.asfortranarray(Q)
    np.testing.assert_array_equal(attention(Qs, K, V), attention(Q, K, V))
    with pytest.raises(ValueError, match="`Q` must be C-contiguous"):
        _core.temporal_forward(rand(rng, 2, 20, 4)[:, ::2], K, V)
    with pytest.raises(ValueError, match="`K`"):
        _core.temporal_forward(Q, K[:, :9].copy(), V)
    with pytest.raises(ValueError, match="`decay`"):
        _core.temporal_forward(Q, K, V, decay=np.array([1.0, -1.0]))
    with pytest.raises(TypeError):
        _core.temporal_forward(Q.astype(np.float32), K, V)


# ---------------------------------------------------------------------------------------------
# TemporalLocalMean


def test_temporal_local_mean_estimator_is_the_multi_head_formula():
    rng = np.random.default_rng(13)
    X = rng.normal(size=(3, 40, 6))
    H, k = 2, 3
    Wq, Wk, Wv, Wo = rng.normal(size=(6, H * k)), rng.normal(size=(6, H * k)), rng.normal(size=(6, H * 4)), rng.normal(size=(H * 4, 5))
    decay = [0.0, 0.3]
    tlm = TemporalLocalMean(n_heads=H, position="causal", decay=decay, W_q=Wq, W_k=Wk, W_v=Wv, W_o=Wo).fit(X)
    heads = []
    for h in range(H):
        q, kk, v = X @ Wq[:, h * k : (h + 1) * k], X @ Wk[:, h * k : (h + 1) * k], X @ Wv[:, h * 4 : (h + 1) * 4]
        heads.append(dense_attention(q, kk, v, mask="causal", decay=decay[h])[0])
    want = np.concatenate(heads, axis=-1) @ Wo
    np.testing.assert_allclose(tlm.transform(X), want, atol=1e-12)
    np.testing.assert_allclose(tlm.transform(X[1]), want[1], atol=1e-12)
    # a radial content kernel with default projections is the plain temporal self-local mean
    g = TemporalLocalMean(kernel="gaussian", bandwidth=0.8, window=5).fit(X)
    np.testing.assert_allclose(g.transform(X), temporal_local_mean(X, kernel="gaussian", bandwidth=0.8, window=5), atol=1e-12)
    assert pickle.loads(pickle.dumps(tlm)).transform(X[0]).shape == (40, 5)


def test_temporal_local_mean_fit_lowers_the_leave_one_out_loss():
    rng = np.random.default_rng(14)
    # a sequence whose step t resembles step t − 5: the best hollow kernel looks 5 steps back
    base = rng.normal(size=(5, 4))
    X = np.tile(base, (12, 1)) + 0.05 * rng.normal(size=(60, 4))
    tlm = TemporalLocalMean(n_heads=2, head_dim=4, max_iter=150, learning_rate=0.05, random_state=0).fit(X)
    assert tlm.loss_curve_[-1] < 0.2 * tlm.loss_curve_[0]
    assert tlm.n_iter_ == len(tlm.loss_curve_)
    # same seed, same fit
    again = TemporalLocalMean(n_heads=2, head_dim=4, max_iter=150, learning_rate=0.05, random_state=0).fit(X)
    np.testing.assert_array_equal(again.W_q_, tlm.W_q_)


# ---------------------------------------------------------------------------------------------
# HierarchicalLocalModel


def numpy_block(x, w, H, norm_first, activation, eps, causal):
    """An independent reference of one Transformer encoder block (dense softmax)."""

    def ln(z, g, b):
        mu = z.mean(-1, keepdims=True)
        var = ((z - mu) ** 2).mean(-1, keepdims=True)
        return (z - mu) / np.sqrt(var + eps) * g + b

    def sa(z):
        D = z.shape[-1]
        q, k, v = np.split(z @ w["self_attn.in_proj_weight"].T + w["self_attn.in_proj_bias"], 3, axis=-1)
        outs = []
        for h in range(H):
            sl = slice(h * D // H, (h + 1) * D // H)
            outs.append(dense_attention(q[..., sl], k[..., sl], v[..., sl], mask="causal" if causal else None)[0])
        return np.concatenate(outs, -1) @ w["self_attn.out_proj.weight"].T + w["self_attn.out_proj.bias"]

    def ff(z):
        from scipy.special import erf

        h = z @ w["linear1.weight"].T + w["linear1.bias"]
        a = np.maximum(h, 0) if activation == "relu" else 0.5 * h * (1 + erf(h / np.sqrt(2)))
        return a @ w["linear2.weight"].T + w["linear2.bias"]

    if norm_first:
        x = x + sa(ln(x, w["norm1.weight"], w["norm1.bias"]))
        return x + ff(ln(x, w["norm2.weight"], w["norm2.bias"]))
    x = ln(x + sa(x), w["norm1.weight"], w["norm1.bias"])
    return ln(x + ff(x), w["norm2.weight"], w["norm2.bias"])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_hierarchical_model_equals_a_numpy_transformer_block(norm_first, activation):
    rng = np.random.default_rng(15)
    D, H = 8, 2
    w = init_block(D, H, 16, rng)
    w = {k: v + 0.1 * rng.normal(size=v.shape) for k, v in w.items()}  # non-trivial biases and norms
    X = rng.normal(size=(3, 30, D))
    for causal in (False, True):
        hlm = HierarchicalLocalModel(weights=w, n_heads=H, norm_first=norm_first, activation=activation,
                                     position="causal" if causal else None).fit()
        want = numpy_block(X, w, H, norm_first, activation, 1e-5, causal)
        np.testing.assert_allclose(hlm.transform(X), want, atol=1e-12)
    # two layers = the block applied twice; a final norm applies last
    two = {**{f"layers.0.{k}": v for k, v in w.items()}, **{f"layers.1.{k}": v for k, v in w.items()}}
    two.update({"norm.weight": np.full(D, 2.0), "norm.bias": np.full(D, 0.5)})
    y = numpy_block(numpy_block(X, w, H, norm_first, activation, 1e-5, False), w, H, norm_first, activation, 1e-5, False)
    y = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5) * 2.0 + 0.5
    got = HierarchicalLocalModel(weights=two, n_heads=H, norm_first=norm_first, activation=activation).fit().transform(X)
    np.testing.assert_allclose(got, y, atol=1e-12)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_hierarchical_model_equals_torch_encoder(norm_first, activation):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    D, H, T = 32, 4, 70
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=64, dropout=0.0, activation=activation, batch_first=True,
                                         norm_first=norm_first),
        num_layers=2, norm=torch.nn.LayerNorm(D), enable_nested_tensor=False,
    ).eval()
    x = torch.randn(3, T, D)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T)
    with torch.no_grad():
        want = enc(x, mask=mask, is_causal=True).numpy()
    weights = {k: v.numpy() for k, v in enc.state_dict().items()}
    hlm = HierarchicalLocalModel(weights=weights, n_heads=H, norm_first=norm_first, activation=activation, position="causal").fit()
    got = hlm.transform(x.numpy())
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5)
    one = HierarchicalLocalModel(weights=enc.layers[0].state_dict(), n_heads=H, norm_first=norm_first, activation=activation).fit()
    with torch.no_grad():
        np.testing.assert_allclose(one.transform(x.numpy()), enc.layers[0](x).numpy(), atol=1e-5)


def test_block_backward_equals_finite_differences():
    rng = np.random.default_rng(16)
    D, H = 6, 2
    w = {k: v + 0.1 * rng.normal(size=v.shape) for k, v in init_block(D, H, 10, rng).items()}
    x, G = rng.normal(size=(2, 12, D)), rng.normal(size=(2, 12, D))
    for norm_first in (False, True):
        for act in ("relu", "gelu"):
            cfg = dict(n_heads=H, eps=1e-5, activation=act, norm_first=norm_first, pos=dict(causal=True, decay=np.array([0.1, 0.4])))
            y, cache = block_forward(x, w, cfg, cache=True)
            dx, gw, dl = block_backward(G, w, cfg, cache)
            f = lambda x_, w_=w, c=cfg: float(np.sum(block_forward(x_, w_, c) * G))  # noqa: E731
            for _ in range(5):
                idx = tuple(rng.integers(0, n) for n in x.shape)
                assert abs(dx[idx] - _fd(f, x, idx)) < 1e-6
            for name in ("self_attn.in_proj_weight", "linear1.weight", "norm1.weight", "norm2.bias", "self_attn.out_proj.bias"):
                idx = tuple(rng.integers(0, n) for n in w[name].shape)
                num = _fd(lambda A, n=name: f(x, {**w, n: A}), w[name], idx)
                assert abs(gw[name][idx] - num) < 1e-6, (name, norm_first, act)
            lam = cfg["pos"]["decay"]
            for h in range(H):
                num = _fd(lambda L: f(x, w, {**cfg, "pos": {**cfg["pos"], "decay": L}}), lam, (h,))
                assert abs(dl[h] - num) < 1e-6


def test_hierarchical_model_weights_are_checked():
    rng = np.random.default_rng(17)
    w = init_block(8, 2, 16, rng)
    bad = dict(w)
    bad["linear2.weight"] = bad["linear2.weight"][:, :3]
    with pytest.raises(ValueError, match="linear2.weight"):
        HierarchicalLocalModel(weights=bad, n_heads=2).fit()
    with pytest.raises(ValueError, match="lacks"):
        HierarchicalLocalModel(weights={k: v for k, v in w.items() if k != "norm2.bias"}, n_heads=2).fit()
    with pytest.raises(ValueError, match="n_heads"):
        HierarchicalLocalModel(weights=w, n_heads=3).fit()
    with pytest.raises(ValueError, match="does not use"):
        HierarchicalLocalModel(weights={**w, "extra": np.zeros(2)}, n_heads=2).fit()
    with pytest.raises(ValueError, match="features"):
        HierarchicalLocalModel(weights=w, n_heads=2).fit().transform(np.zeros((5, 7)))
    m = HierarchicalLocalModel(weights=w, n_heads=2).fit()
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(m)).transform(np.ones((4, 8))), m.transform(np.ones((4, 8))))


finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)
anyfloat = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lead=st.lists(st.integers(0, 3), max_size=2),
    T=st.integers(0, 5),
    d=st.integers(0, 3),
    p=st.integers(0, 3),
    data=st.data(),
    window=st.one_of(st.none(), st.integers(-2, 7)),
    decay=st.one_of(st.none(), anyfloat, st.lists(anyfloat, min_size=1, max_size=3)),
    causal=st.booleans(),
    kernel=st.sampled_from(["gaussian", "tophat", "cosine", "dot", "cauchy"]),
    h=st.one_of(anyfloat, st.floats(1e-300, 1e300)),
    jobs=st.sampled_from([None, 1, 2]),
)
def test_fuzz_sequence_api_never_panics(lead, T, d, p, data, window, decay, causal, kernel, h, jobs):
    elem = st.one_of(finite, anyfloat)
    Q = data.draw(arrays(np.float64, (*lead, T, d), elements=elem))
    K = data.draw(arrays(np.float64, (*lead, T, d), elements=elem))
    V = data.draw(arrays(np.float64, (*lead, T, p), elements=elem))
    M = data.draw(arrays(np.bool_, (T, T)))
    mask = "causal" if causal else M
    calls = [
        lambda: attention(Q, K, V, mask=mask, window=window, decay=decay, n_jobs=jobs),
        lambda: attention_backward(V, Q, K, V, mask=mask, window=window, decay=decay),
        lambda: temporal_local_mean(Q, V, kernel=kernel, bandwidth=h, window=window, decay=decay, mask=M),
        lambda: HierarchicalLocalModel(n_heads=1, position="causal" if causal else None, window=window).fit(Q).transform(K),
        lambda: TemporalLocalMean(max_iter=2, window=window).fit(Q).transform(K),
    ]
    for call in calls:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
        except (ValueError, TypeError):
            pass
        except BaseException as e:  # a PanicException derives from BaseException
            raise AssertionError(f"unexpected {type(e).__name__}: {e}") from e


def test_docstring_examples_run():
    import doctest

    from localization import language, sequence

    for module in (sequence, language):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_scores_that_could_overflow_are_refused_not_returned_as_zeros():
    """Finite inputs whose scores scale·q·k overflow the float type would reach the engine as
    ±inf (a silent all-zero output); they are refused, naming Q, in every entry point."""
    rng = np.random.default_rng(31)
    Q, K, V = rng.normal(size=(3, 2, 20, 64)).astype(np.float32)
    big = (3e18 * Q, 3e18 * K)
    for call in (
        lambda: attention(*big, V, mask="causal"),
        lambda: attention_backward(np.ones_like(V), *big, V, mask="causal"),
        lambda: temporal_local_mean(3e18 * Q, V, kernel="dot", position="causal"),
    ):
        with pytest.raises(ValueError, match="overflow") as e:
            call()
        assert e.value.parameter == "Q"
    # the same values in float64 are fine, and agree with the dense definition
    Q64, K64 = (3e18 * Q).astype(np.float64), (3e18 * K).astype(np.float64)
    out = attention(Q64, K64, V.astype(np.float64), mask="causal", scale=1e-36)
    np.testing.assert_allclose(out, dense_attention(Q64, K64, V.astype(np.float64), mask="causal", scale=1e-36)[0], atol=1e-12)
    with pytest.raises(TypeError, match="scale"):
        attention(Q, K, V, scale="a")


def test_estimator_steps_of_zero_weight_are_nan_with_a_warning():
    """A compact radial kernel with different query and key projections can leave a step with
    no weight: NaN and a warning, as temporal_local_mean gives, not a silent 0."""
    X = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 5.0], [2.0, 2.0]])
    Wq, Wk = np.eye(2), 10 * np.eye(2)
    est = TemporalLocalMean(kernel="tophat", bandwidth=1.0, position="causal", W_q=Wq, W_k=Wk, W_v=np.eye(2), W_o=np.eye(2)).fit(X)
    with pytest.warns(LocalizationWarning, match="zero total"):
        Y = est.transform(X)
    assert np.isnan(Y[1]).all() and np.isfinite(Y[0]).all()
