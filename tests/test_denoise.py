"""Tests of localization.denoise: bilateral filter, non-local means, SelfLocalMean."""

import math
import pickle

import numpy as np
import pytest

from localization import LocalizationWarning, _core
from localization.denoise import NonLocalMeans, SelfLocalMean, bilateral, nl_means, self_local_mean

skimage = pytest.importorskip("skimage")
from skimage.restoration import denoise_bilateral, denoise_nl_means  # noqa: E402


def _noisy(shape, seed=0, sigma=0.08):
    rng = np.random.default_rng(seed)
    rows, cols = shape[:2]
    yy, xx = np.mgrid[0:rows, 0:cols]
    clean = 0.3 + 0.4 * ((xx + yy) > (rows + cols) / 2) + 0.2 * np.sin(xx / 3.0)
    if len(shape) == 3:
        clean = np.stack([clean * (0.6 + 0.2 * c) for c in range(shape[2])], axis=-1)
    return np.clip(clean + sigma * rng.standard_normal(clean.shape), 0, 1)


# ----------------------------------------------------------------------------- non-local means

NLM_PARAMS = [
    dict(patch_size=7, patch_distance=11, h=0.07, sigma=0.08),
    dict(patch_size=5, patch_distance=4, h=0.1),
    dict(patch_size=4, patch_distance=3, h=0.03, sigma=0.02),  # even patch size → 5
    dict(patch_size=3, patch_distance=0, h=0.2),  # no search: the pixel itself
    dict(patch_size=9, patch_distance=2, h=0.5, sigma=0.1),  # patch larger than the search
]


@pytest.mark.parametrize("kw", NLM_PARAMS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nl_means_matches_skimage_gray(kw, dtype):
    img = _noisy((37, 29)).astype(dtype)
    ref = denoise_nl_means(img, fast_mode=False, **kw)
    got = nl_means(img, **kw)
    assert got.dtype == ref.dtype and got.shape == img.shape
    # Same operations in the same order: identical to the last bit in practice.
    assert np.max(np.abs(got - ref)) <= (1e-6 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("kw", NLM_PARAMS[:3])
@pytest.mark.parametrize("channels", [2, 3])
def test_nl_means_matches_skimage_multichannel(kw, channels):
    img = _noisy((23, 31, channels), seed=channels)
    ref = denoise_nl_means(img, fast_mode=False, channel_axis=-1, **kw)
    got = nl_means(img, **kw)
    assert got.shape == img.shape
    assert np.max(np.abs(got - ref)) <= 1e-6


def test_nl_means_small_image_reflects_like_skimage():
    img = _noisy((4, 5), seed=3)  # smaller than the patch: repeated reflection
    kw = dict(patch_size=7, patch_distance=3, h=0.1)
    assert np.max(np.abs(nl_means(img, **kw) - denoise_nl_means(img, fast_mode=False, **kw))) <= 1e-6


def _nl_means_direct(img, s, d, h, sigma):
    """The textbook formula, written independently with NumPy (exact exponential, no cut-off)."""
    img3 = img[:, :, None] if img.ndim == 2 else img
    rows, cols, nc = img3.shape
    o = s // 2
    pad = np.pad(img3, ((o, o), (o, o), (0, 0)), mode="reflect")
    a = (s - 1) / 4
    g = np.arange(-o, o + 1)
    w = np.exp(-(g[:, None] ** 2 + g[None, :] ** 2) / (2 * a * a))
    w = w / (nc * w.sum() * h * h)
    out = np.empty_like(img3)
    for i in range(rows):
        for j in range(cols):
            P = pad[i : i + s, j : j + s]
            num, den = np.zeros(nc), 0.0
            for a_ in range(max(0, i - d), min(rows, i + d + 1)):
                for b in range(max(0, j - d), min(cols, j + d + 1)):
                    Q = pad[a_ : a_ + s, b : b + s]
                    dist = np.sum(w[:, :, None] * ((P - Q) ** 2 - 2 * sigma**2))
                    k = math.exp(-max(dist, 0.0))
                    den += k
                    num += k * img3[a_, b]
            out[i, j] = num / den
    return out[:, :, 0] if img.ndim == 2 else out


@pytest.mark.parametrize("shape", [(9, 11), (8, 7, 3)])
def test_nl_means_exact_matches_direct_formula(shape):
    img = _noisy(shape, seed=5)
    got = nl_means(img, patch_size=5, patch_distance=3, h=0.15, sigma=0.05, exact=True)
    want = _nl_means_direct(img, 5, 3, 0.15, 0.05)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_nl_means_thread_invariance_and_constant_image():
    img = _noisy((40, 33, 3), seed=1)
    a = nl_means(img, patch_size=5, patch_distance=5, h=0.1, n_jobs=1)
    b = nl_means(img, patch_size=5, patch_distance=5, h=0.1, n_jobs=2)
    assert np.array_equal(a, b)
    const = np.full((10, 10), 0.25)
    np.testing.assert_allclose(nl_means(const, 3, 2, 0.1), const, atol=1e-15)


# ----------------------------------------------------------------------------- bilateral


def _skimage_spatial_lut(win_size, sigma):
    """scikit-image 0.26's spatial table as it is built (grid −⌈w/2⌉..⌊w/2⌋, w+1 values per row)
    and as its Cython loop reads it (row length w): returned as the w×w table actually used."""
    grid = np.arange(-win_size // 2, win_size // 2 + 1)
    rr, cc = np.meshgrid(grid, grid, indexing="ij")
    flat = np.exp(-0.5 * np.hypot(rr, cc) ** 2 / sigma**2).ravel()
    return np.ascontiguousarray(flat[: win_size * win_size].reshape(win_size, win_size))


@pytest.mark.parametrize("mode", ["constant", "edge", "symmetric", "reflect", "wrap"])
@pytest.mark.parametrize("shape", [(19, 23), (17, 13, 3)])
@pytest.mark.parametrize("sigma_spatial", [1.0, 1.6])
def test_bilateral_loop_matches_skimage_with_its_tables(mode, shape, sigma_spatial):
    """With scikit-image's own look-up tables our pixel loop gives its output exactly: same
    window, border handling, colour binning and normalisation."""
    img = _noisy(shape, seed=2)
    nc = 1 if img.ndim == 2 else img.shape[2]
    sigma_color, bins = 0.1, 10000
    ref = denoise_bilateral(img, sigma_color=sigma_color, sigma_spatial=sigma_spatial, bins=bins, mode=mode,
                            cval=0.2, channel_axis=None if nc == 1 else -1)
    win = max(5, 2 * int(math.ceil(3 * sigma_spatial)) + 1)
    r = (win - 1) // 2
    img3 = img[:, :, None] if nc == 1 else img
    pad = np.pad(img3, ((r, r), (r, r), (0, 0)), mode=mode, **({"constant_values": 0.2} if mode == "constant" else {}))
    max_value = img.max()
    lut = np.exp(-0.5 * np.linspace(0, max_value, bins, endpoint=False) ** 2 / sigma_color**2)
    got = _core.bilateral_filter(np.ascontiguousarray(np.moveaxis(pad, 2, 0)), _skimage_spatial_lut(win, sigma_spatial), 1.0,
                                 color_lut=lut, lut_scale=(bins // nc) / max_value)  # C integer division there
    got = got[:, :, 0] if nc == 1 else got
    assert np.max(np.abs(got - ref)) <= 1e-12


def test_skimage_spatial_table_is_not_the_documented_gaussian():
    """Why the public function cannot equal scikit-image exactly: its effective spatial weights
    (read off an impulse response) are not a centred Gaussian, while ours are."""
    img = np.zeros((21, 21))
    img[10, 10] = 1.0
    sk = denoise_bilateral(img, sigma_color=1e6, sigma_spatial=1.0, mode="edge")
    ours = bilateral(img, 1.0, 1e6, mode="edge")
    g = np.exp(-0.5 * np.arange(-3, 4) ** 2)
    kernel = np.outer(g, g)
    # Our impulse response is the Gaussian window (divided by each pixel's total weight).
    np.testing.assert_allclose(ours[7:14, 7:14] / ours[10, 10], kernel[::-1, ::-1], rtol=1e-9)
    assert not np.allclose(sk[7:14, 7:14] / sk[10, 10], kernel, rtol=0.1)


def _bilateral_direct(img, hx, hy, win, mode, cval=0.0):
    img3 = img[:, :, None] if img.ndim == 2 else img
    r = (win - 1) // 2
    pad = np.pad(img3, ((r, r), (r, r), (0, 0)), mode=mode, **({"constant_values": cval} if mode == "constant" else {}))
    out = np.empty_like(img3)
    for i in range(img3.shape[0]):
        for j in range(img3.shape[1]):
            win_ = pad[i : i + 2 * r + 1, j : j + 2 * r + 1]
            dy, dx = np.mgrid[-r : r + 1, -r : r + 1]
            k = np.exp(-(dy**2 + dx**2) / (2 * hx**2)) * np.exp(-np.sum((win_ - img3[i, j]) ** 2, axis=2) / (2 * hy**2))
            out[i, j] = np.tensordot(k, win_, axes=([0, 1], [0, 1])) / k.sum()
    return out[:, :, 0] if img.ndim == 2 else out


@pytest.mark.parametrize("shape", [(15, 12), (11, 9, 3)])
@pytest.mark.parametrize("mode", ["constant", "reflect", "wrap"])
def test_bilateral_matches_direct_formula(shape, mode):
    img = _noisy(shape, seed=4)
    got = bilateral(img, 1.3, 0.15, mode=mode, cval=0.5)
    want = _bilateral_direct(img, 1.3, 0.15, 2 * 4 + 1, mode, cval=0.5)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_bilateral_large_bins_close_to_skimage_gray_when_tables_agree():
    """Where scikit-image's spatial table is harmless (a flat spatial kernel, huge sigma_spatial
    with an explicit window), the public function and denoise_bilateral with many bins agree
    to the binning error of its colour table."""
    img = _noisy((20, 20), seed=6)
    ref = denoise_bilateral(img, win_size=5, sigma_color=0.2, sigma_spatial=1e6, bins=1_000_000, mode="edge")
    got = bilateral(img, 1e6, 0.2, window_size=5, mode="edge")
    assert np.max(np.abs(got - ref)) < 1e-5


def test_bilateral_thread_invariance_and_dtypes():
    img = _noisy((37, 41, 3), seed=7)
    assert np.array_equal(bilateral(img, 2.0, 0.2, n_jobs=1), bilateral(img, 2.0, 0.2, n_jobs=2))
    f32 = bilateral(img.astype(np.float32), 2.0, 0.2)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, bilateral(img, 2.0, 0.2), atol=1e-5)
    u8 = (img * 255).round().astype(np.uint8)
    np.testing.assert_allclose(bilateral(u8, 1.0, 0.1), bilateral(u8 / 255.0, 1.0, 0.1), atol=1e-15)
    const = np.full((6, 7), 0.5)
    assert np.array_equal(bilateral(const), const)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("fn", [bilateral, nl_means])
def test_bad_images(fn):
    with pytest.raises(ValueError, match="image"):
        fn(np.zeros(5))
    with pytest.raises(ValueError, match="image"):
        fn(np.zeros((2, 3, 4, 5)))
    with pytest.raises(ValueError, match="NaN"):
        fn(np.array([[0.0, np.nan], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="NaN"):
        fn(np.array([[0.0, np.inf], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="empty"):
        fn(np.zeros((0, 4)))
    with pytest.raises(TypeError, match="signed integer"):
        fn(np.zeros((4, 4), dtype=np.int16))
    with pytest.raises(TypeError, match="dtype"):
        fn(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(TypeError, match="dtype"):
        fn(np.zeros((4, 4), dtype=complex))


def test_bad_parameters():
    img = _noisy((8, 8))
    for kw in [dict(h=0), dict(h=-1), dict(h=np.nan), dict(sigma=-0.1), dict(patch_size=0), dict(patch_size=2.5),
               dict(patch_distance=-1)]:
        with pytest.raises(ValueError):
            nl_means(img, **kw)
    for args, kw in [((0.0,), {}), ((1.0, -0.1), {}), ((1.0, 0.1), dict(mode="nearest")), ((1.0, 0.1), dict(window_size=0)),
                     ((np.inf,), {})]:
        with pytest.raises(ValueError):
            bilateral(img, *args, **kw)


def test_unsigned_and_bool_images_are_scaled_like_img_as_float():
    u8 = (_noisy((16, 16)) * 255).astype(np.uint8)
    ref = denoise_nl_means(u8, patch_size=3, patch_distance=2, h=0.1, fast_mode=False)
    assert np.max(np.abs(nl_means(u8, patch_size=3, patch_distance=2, h=0.1) - ref)) <= 1e-6
    b = np.eye(6, dtype=bool)
    assert nl_means(b, 3, 1, 0.5).dtype == np.float64


# ----------------------------------------------------------------------------- SelfLocalMean


def _slm_direct(X, Y, hx, hy, max_iter, tol, blurring=False):
    cur = Y.copy()
    ref = Y.copy()
    for it in range(1, max_iter + 1):
        dx = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1) / hx**2
        dy = ((cur[:, None, :] - ref[None, :, :]) ** 2).sum(-1) / hy**2
        K = np.exp(-0.5 * dx) * np.exp(-0.5 * dy)
        new = K @ ref / K.sum(1, keepdims=True)
        shift = np.max(np.abs(new - cur)) / hy
        cur = new
        if blurring:
            ref = cur.copy()
        if shift < tol:
            break
    return cur, it


@pytest.mark.parametrize("blurring", [False, True])
def test_self_local_mean_equals_direct_formula(blurring):
    rng = np.random.default_rng(0)
    X = rng.random((25, 2))
    Y = np.c_[X[:, 0] > 0.5, X[:, 1]] + 0.05 * rng.standard_normal((25, 2))
    with pytest.warns(LocalizationWarning, match="did not converge"):
        est = SelfLocalMean(spatial_bandwidth=0.3, range_bandwidth=0.4, max_iter=7, tol=0.0, blurring=blurring).fit(X, Y)
    want, _ = _slm_direct(X, Y, 0.3, 0.4, 7, 0.0, blurring)
    np.testing.assert_allclose(est.y_denoised_, want, rtol=0, atol=1e-10)
    assert est.n_iter_ == 7
    one = SelfLocalMean(spatial_bandwidth=0.3, range_bandwidth=0.4, max_iter=1).fit(X, Y)
    np.testing.assert_allclose(one.y_denoised_, _slm_direct(X, Y, 0.3, 0.4, 1, 0.0)[0], atol=1e-12)


def test_self_local_mean_reaches_a_fixed_point():
    rng = np.random.default_rng(1)
    X = np.linspace(0, 1, 60)[:, None]
    y = (X[:, 0] > 0.5) + 0.05 * rng.standard_normal(60)
    est = SelfLocalMean(spatial_bandwidth=0.1, range_bandwidth=0.2, max_iter=500, tol=1e-10).fit(X, y)
    assert est.converged_ and est.n_iter_ < 500
    # One more step of the map leaves the result where it is.
    step, _ = _slm_direct(X, y[:, None], 0.1, 0.2, 1, 0.0)
    again = SelfLocalMean(spatial_bandwidth=0.1, range_bandwidth=0.2, max_iter=1)
    # The map at ŷ with references y: evaluate it directly.
    dx = (X - X.T) ** 2 / 0.01
    dy = (est.y_denoised_[:, None] - y[None, :]) ** 2 / 0.04
    K = np.exp(-0.5 * (dx + dy))
    np.testing.assert_allclose(K @ y / K.sum(1), est.y_denoised_, atol=1e-8)
    assert np.abs(est.y_denoised_ - (X[:, 0] > 0.5)).max() < 0.05
    assert step.shape == (60, 1) and again.max_iter == 1
    yd, n_iter = self_local_mean(X, y, spatial_bandwidth=0.1, range_bandwidth=0.2, max_iter=500, tol=1e-10)
    np.testing.assert_array_equal(yd, est.y_denoised_)
    assert n_iter == est.n_iter_


def test_self_local_mean_predict_and_threads_and_pickle():
    rng = np.random.default_rng(2)
    X = rng.random((80, 1))
    y = np.sign(X[:, 0] - 0.5) + 0.1 * rng.standard_normal(80)
    a = SelfLocalMean(spatial_bandwidth=0.1, range_bandwidth=0.5, n_jobs=1).fit(X, y)
    b = SelfLocalMean(spatial_bandwidth=0.1, range_bandwidth=0.5, n_jobs=2).fit(X, y)
    assert np.array_equal(a.y_denoised_, b.y_denoised_)
    Xq = np.array([[0.1], [0.9]])
    np.testing.assert_allclose(a.predict(Xq), [-1, 1], atol=0.1)
    c = pickle.loads(pickle.dumps(a))
    assert np.array_equal(c.predict(Xq), a.predict(Xq))


def test_self_local_mean_bad_params():
    X, y = np.random.default_rng(0).random((10, 2)), np.arange(10.0)
    for kw in [dict(spatial_bandwidth=0), dict(range_bandwidth=-1), dict(spatial_bandwidth=[1.0]), dict(max_iter=0),
               dict(tol=-1), dict(kernel="knn")]:
        with pytest.raises(ValueError):
            SelfLocalMean(**kw).fit(X, y)
    with pytest.raises(ValueError):
        SelfLocalMean().fit(np.c_[X[:, :1], np.full(10, np.nan)], y)


def test_non_local_means_estimator():
    imgs = np.stack([_noisy((12, 10), seed=s).ravel() for s in range(3)])
    est = NonLocalMeans(patch_size=3, patch_distance=2, h=0.1, image_shape=(12, 10)).fit(imgs)
    out = est.transform(imgs)
    for row, o in zip(imgs, out):
        np.testing.assert_array_equal(o, nl_means(row.reshape(12, 10), 3, 2, 0.1).ravel())
    c = pickle.loads(pickle.dumps(est))
    assert np.array_equal(c.transform(imgs), out)
    with pytest.raises(ValueError, match="image_shape"):
        NonLocalMeans(image_shape=(5, 5)).fit(imgs)


def test_concurrent_calls_from_python_threads():
    from concurrent.futures import ThreadPoolExecutor

    imgs = [_noisy((30, 30), seed=s) for s in range(4)]
    want = [(nl_means(z, 5, 4, 0.1), bilateral(z, 1.5, 0.2)) for z in imgs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda z: (nl_means(z, 5, 4, 0.1), bilateral(z, 1.5, 0.2)), imgs))
    for (a, b), (c, d) in zip(want, got):
        assert np.array_equal(a, c) and np.array_equal(b, d)
