"""LocalSums: the engine's partial sums as a mergeable object (order, stability, pickling)."""

import pickle

import numpy as np
import pytest

import localization as L
from localization import LocalSums
from localization._sums import tree_reduce


def parts_of(Q, X, cuts, **kw):
    V = kw.pop("values", None)
    w = kw.pop("sample_weight", None)
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        out.append(LocalSums.compute(
            Q, X[a:b], None if V is None else V[a:b], sample_weight=None if w is None else w[a:b], **kw
        ))
    return out


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))


@pytest.fixture
def data(rng):
    X = rng.random((400, 2))
    return X, rng.random((30, 2)), np.sin(5 * X[:, 0]) + 2, rng.random(400) + 0.1


CUTS = [0, 1, 37, 200, 201, 400]


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tophat", "exponential"])
def test_reduced_parts_equal_the_whole(data, kernel):
    X, Q, y, w = data
    parts = parts_of(Q, X, CUTS, values=y, sample_weight=w, kernel=kernel, bandwidth=0.2)
    merged = LocalSums.reduce(parts)
    whole = L.local_mean(Q, X, y, kernel=kernel, bandwidth=0.2, sample_weight=w, return_weight=True)
    assert rel(merged.mean()[:, 0], whole[0]) < 1e-12
    assert rel(merged.total(), whole[1]) < 1e-12
    assert rel(merged.total(values=True)[:, 0], L.kernel_sum(Q, X, y, kernel=kernel, bandwidth=0.2, sample_weight=w)) < 1e-12
    assert rel(merged.log_total(), np.log(whole[1])) < 1e-12


def test_merge_is_commutative_bit_for_bit_and_associative_to_rounding(data):
    X, Q, y, w = data
    a, b, c = parts_of(Q, X, [0, 100, 250, 400], values=y, kernel="gaussian", bandwidth=0.05)
    for x, z in [(a.merge(b), b.merge(a)), (a.merge(c), c.merge(a))]:
        assert np.array_equal(x.num, z.num) and np.array_equal(x.den, z.den) and np.array_equal(x.log_scale, z.log_scale)
    left, right = a.merge(b).merge(c), a.merge(b.merge(c))
    assert rel(left.mean(), right.mean()) < 1e-15
    assert rel(left.total(), right.total()) < 1e-15


def test_reduction_order_is_fixed_and_arrival_order_changes_only_rounding(data, rng):
    X, Q, y, _ = data
    parts = parts_of(Q, X, [0, 50, 90, 200, 260, 300, 400], values=y, kernel="gaussian", bandwidth=0.1)
    first = LocalSums.reduce(parts)
    again = LocalSums.reduce(list(parts))
    assert np.array_equal(first.num, again.num) and np.array_equal(first.den, again.den)
    shuffled = LocalSums.reduce([parts[i] for i in rng.permutation(len(parts))])
    assert rel(shuffled.mean(), first.mean()) < 1e-15
    # The pairing: neighbours first, the odd one out joins last.
    assert tree_reduce("abcde", lambda u, v: f"({u}{v})") == "(((ab)(cd))e)"
    with pytest.raises(ValueError, match="at least one part"):
        LocalSums.reduce([])


def test_tiny_bandwidth_keeps_the_nearest_neighbour_limit_across_parts(data):
    X, Q, y, _ = data
    # exp(-u²/2) underflows for every pair (u ≥ 10⁴): the log-scale keeps the leading terms.
    h = 1e-6
    parts = parts_of(Q, X, CUTS, values=y, kernel="gaussian", bandwidth=h)
    merged = LocalSums.reduce(parts)
    assert np.all(merged.den > 0) and np.all(np.isfinite(merged.log_scale))
    m = merged.mean()[:, 0]
    assert np.all(np.isfinite(m))
    assert rel(m, L.local_mean(Q, X, y, kernel="gaussian", bandwidth=h)) < 1e-12
    nearest = L.NearestNeighbors(n_neighbors=1).fit(X).kneighbors(Q)[1][:, 0]
    assert np.allclose(m, y[nearest])
    assert rel(merged.log_total(), L.kernel_sum(Q, X, kernel="gaussian", bandwidth=h, log=True)) < 1e-12
    assert np.all(merged.total() == 0)  # the true sums underflow; their logs do not


def test_parts_that_reach_nothing_are_the_identity(data):
    X, Q, y, _ = data
    a = LocalSums.compute(Q, X, y, kernel="tophat", bandwidth=0.3)
    far = LocalSums.compute(Q, X + 100, y, kernel="tophat", bandwidth=0.3)
    assert np.all(far.den == 0)
    for m in (a.merge(far), far.merge(a), a.merge(LocalSums.zeros(len(Q), 1))):
        assert np.array_equal(m.num, a.num) and np.array_equal(m.den, a.den)
    # A query no part reaches stays undefined: NaN, never 0/0 noise.
    nothing = far.merge(LocalSums.zeros(len(Q), 1))
    with pytest.warns(L.LocalizationWarning):
        assert np.all(np.isnan(nothing.mean()))
    assert np.all(nothing.log_total() == -np.inf)
    # Gaussian sums whose scales differ by far more than the float range merge without 0/0.
    near = LocalSums.compute(Q[:1], X, y, kernel="gaussian", bandwidth=1e-3)
    way_off = LocalSums.compute(Q[:1], X + 50, y, kernel="gaussian", bandwidth=1e-3)
    assert np.array_equal(near.merge(way_off).mean(), near.mean())
    # An empty part has no scale of its own: it must not pull a tiny-bandwidth sum to 0.
    assert near.log_scale[0] < -100
    for m in (near.merge(LocalSums.zeros(1, 1)), LocalSums.zeros(1, 1).merge(near)):
        assert np.array_equal(m.num, near.num) and np.array_equal(m.log_scale, near.log_scale)
    weightless = LocalSums.compute(Q[:1], X, y, kernel="gaussian", bandwidth=1e-3, sample_weight=np.zeros(len(X)))
    assert np.array_equal(weightless.merge(near).mean(), near.mean())


def test_design_moments_merge(data):
    X, Q, y, _ = data
    parts = parts_of(Q, X, CUTS, values=y, kernel="gaussian", bandwidth=0.3, degree=2)
    merged = LocalSums.reduce(parts)
    whole = LocalSums.compute(Q, X, y, kernel="gaussian", bandwidth=0.3, degree=2)
    assert rel(merged.moments, whole.moments) < 1e-11
    assert rel(merged.cross, whole.cross) < 1e-11
    with pytest.raises(ValueError, match="design moments"):
        merged.merge(LocalSums.compute(Q, X, y, kernel="gaussian", bandwidth=0.3))


def test_float32_keeps_its_dtype_and_pickles(data):
    X, Q, y, _ = data
    a, b = parts_of(Q.astype(np.float32), X.astype(np.float32), [0, 150, 400], values=y.astype(np.float32), bandwidth=0.2)
    m = a.merge(b)
    assert m.num.dtype == np.float32 and m.den.dtype == np.float32
    assert rel(m.mean()[:, 0], L.local_mean(Q, X, y, bandwidth=0.2)) < 1e-5
    back = pickle.loads(pickle.dumps(m))
    assert np.array_equal(back.num, m.num) and np.array_equal(back.log_scale, m.log_scale)
    assert "n_queries=30" in repr(back)


def test_bad_input():
    with pytest.raises(ValueError, match="num of shape"):
        LocalSums(np.zeros(3), np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="both or neither"):
        LocalSums(np.zeros((3, 1)), np.zeros(3), np.zeros(3), moments=np.zeros((3, 1, 1)))
    a = LocalSums.zeros(3, 1)
    with pytest.raises(ValueError, match="different shapes"):
        a.merge(LocalSums.zeros(4, 1))
    with pytest.raises(TypeError, match="LocalSums"):
        a.merge((a.num, a.den, a.log_scale))
    # One part's weights may all be zero (others carry the weight); negative ones never.
    X = np.zeros((2, 1))
    assert LocalSums.compute(X, X, sample_weight=[0.0, 0.0]).den.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="non-negative"):
        LocalSums.compute(X, X, sample_weight=[-1.0, 1.0])


def test_docstring_examples_run():
    import doctest

    import localization._sums as mod

    assert doctest.testmod(mod, raise_on_error=False).failed == 0
