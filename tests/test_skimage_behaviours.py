"""The behaviours scikit-image's own tests check for ``denoise_bilateral``,
``denoise_nl_means`` (skimage/restoration/tests/test_denoise.py) and ``quickshift``
(skimage/segmentation/tests/test_quickshift.py), asserted on our ``bilateral``, ``nl_means``
and ``QuickShift``. scikit-image no longer ships its tests, so these are our own tests of
the same behaviours; the differences in scope (no 3-D volumes, no channel_axis, NaN and
signed-integer images refused) are listed in docs/parity.md."""

import numpy as np
import pytest

from localization.cluster import QuickShift
from localization.denoise import bilateral, nl_means

skimage = pytest.importorskip("skimage")
from skimage import color, data, img_as_float  # noqa: E402
from skimage.metrics import peak_signal_noise_ratio  # noqa: E402
from skimage.segmentation import quickshift  # noqa: E402

CHECKER = img_as_float(data.checkerboard())
ASTRO = img_as_float(data.astronaut()[:128, :128])


def noisy_checkerboard(channels=False, seed=0):
    img = color.gray2rgb(CHECKER)[:50, :50] if channels else CHECKER[:50, :50].copy()
    img = img + 0.5 * img.std() * np.random.default_rng(seed).random(img.shape)
    return np.clip(img, 0, 1)


# ----------------------------------------------------------------------------- bilateral


@pytest.mark.parametrize("img", [np.zeros((50, 50)), -np.ones((50, 50)), np.full((10, 10), 5.0)])
def test_bilateral_leaves_constant_images_unchanged(img):
    np.testing.assert_array_equal(bilateral(img), img)


def test_bilateral_commutes_with_an_offset():
    img = np.ones((50, 50))
    img[2, 2] = 2
    np.testing.assert_allclose(bilateral(img), bilateral(img - 10) + 10, atol=1e-12)


@pytest.mark.parametrize("channels", [False, True])
def test_bilateral_smooths_more_with_wider_bandwidths(channels):
    img = noisy_checkerboard(channels)
    out1 = bilateral(img, spatial_bandwidth=10, range_bandwidth=0.1)
    out2 = bilateral(img, spatial_bandwidth=20, range_bandwidth=0.2)
    cell = (slice(30, 45), slice(5, 15))
    assert img[cell].std() > out1[cell].std() > out2[cell].std()


def test_bilateral_constant_border_does_not_darken_the_image():
    """Pixels padded with cval=0 are far in colour, so they get no weight."""
    img = img_as_float(data.chelsea())[100:200, 100:200]
    out = bilateral(img, spatial_bandwidth=10, range_bandwidth=0.1)
    assert np.count_nonzero(np.isclose(out, 0, atol=1e-3)) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bilateral_keeps_the_float_type(dtype):
    assert bilateral(noisy_checkerboard().astype(dtype), spatial_bandwidth=10, range_bandwidth=0.1).dtype == dtype


def test_bilateral_refuses_what_it_cannot_filter():
    with pytest.raises(ValueError, match="NaN"):  # scikit-image returns NaN
        bilateral(np.full((50, 50), np.nan))
    with pytest.raises(ValueError, match="2-D"):
        bilateral(np.ones((10, 10, 10, 10)))


# ----------------------------------------------------------------------------- non-local means


def noisy_square(sigma=0.3, seed=0, dtype=np.float64):
    img = np.zeros((40, 40))
    img[10:-10, 10:-10] = 1.0
    return (img + sigma * np.random.default_rng(seed).standard_normal(img.shape)).astype(dtype)


def test_nl_means_reduces_noise_with_and_without_sigma_in_both_precisions():
    img = noisy_square()
    for s in (0.3, 0.0):
        den = nl_means(img, 7, 5, 0.2, sigma=s)
        den32 = nl_means(img.astype(np.float32), 7, 5, 0.2, sigma=s)
        assert img.std() > den.std() and img.std() > den32.std()
        assert den32.dtype == np.float32
        np.testing.assert_allclose(den32, den, atol=1e-2)


@pytest.mark.parametrize("n_channels", [2, 3, 6])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nl_means_multichannel_raises_the_psnr(n_channels, dtype):
    img = np.concatenate([ASTRO[:50, :50]] * 2, axis=-1)[..., :n_channels].astype(dtype)
    sigma = 0.1
    imgn = np.clip(img + sigma * np.random.default_rng(1).standard_normal(img.shape), 0, 1).astype(dtype)
    for s in (sigma, 0.0):
        den = nl_means(imgn, 3, 5, h=0.75 * sigma, sigma=s)
        assert den.dtype == dtype
        assert peak_signal_noise_ratio(img, den, data_range=1.0) > peak_signal_noise_ratio(img, imgn, data_range=1.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("exact", [False, True])
def test_nl_means_tiny_h_averages_nothing(dtype, exact):
    img = noisy_square(dtype=dtype)
    np.testing.assert_allclose(nl_means(img, 7, 5, 0.01, exact=exact), img, rtol=1e-5, atol=1e-6)


def test_nl_means_dtypes_and_dimensions():
    assert nl_means(np.zeros((40, 40), dtype=np.uint8)).dtype == np.float64  # scaled as img_as_float
    assert nl_means(np.zeros((40, 40), dtype=np.float32)).dtype == np.float32
    with pytest.raises(ValueError, match="2-D"):  # 1-D signals and volumes are not images here
        nl_means(np.zeros(5))
    with pytest.raises(ValueError, match="2-D"):
        nl_means(np.zeros((5, 5, 5, 5)))


# ----------------------------------------------------------------------------- quickshift


def features(img, ratio=1.0, lab=True):
    """scikit-image's quickshift space: (ratio · colour, row, column)."""
    H, W = img.shape[:2]
    img = img.reshape(H, W, -1)
    col = color.rgb2lab(img) if lab else img
    rr, cc = np.mgrid[:H, :W]
    return np.c_[ratio * col.reshape(H * W, -1), rr.ravel(), cc.ravel()]


def skimage_window(kernel_size):
    return dict(window=np.ceil(3 * kernel_size), window_features=[-2, -1])


@pytest.mark.parametrize("window", [False, True])
def test_quickshift_grey_image_four_regions(window):
    rng = np.random.default_rng(1734481917)
    img = np.zeros((20, 21))
    img[:10, 10:] = 0.2
    img[10:, :10] = 0.4
    img[10:, 10:] = 0.6
    img += 0.05 * rng.standard_normal(img.shape)
    qs = QuickShift(bandwidth=2, max_dist=3, **(skimage_window(2) if window else {})).fit(features(img, lab=False))
    seg = qs.labels_.reshape(img.shape)
    assert len(np.unique(seg)) == 4
    for i in range(4):  # each segment is mostly one region
        assert np.histogram(img[seg == i], bins=[0, 0.1, 0.3, 0.5, 1])[0][i] > 20
    ref = quickshift(img, kernel_size=2, max_dist=3, rng=0, convert2lab=False, sigma=0)
    if window:
        np.testing.assert_array_equal(seg, ref)


def test_quickshift_colour_image_segments_and_oversegmentation():
    rng = np.random.default_rng(583428449)
    img = np.zeros((20, 21, 3))
    img[:10, :10, 0] = 1
    img[10:, :10, 1] = 1
    img[10:, 10:, 2] = 1
    img = np.clip(img + 0.01 * rng.standard_normal(img.shape), 0, 1)
    seg = QuickShift(bandwidth=10, max_dist=30).fit(features(img)).labels_.reshape(20, 21)
    assert len(np.unique(seg)) == 4
    np.testing.assert_array_equal(seg, quickshift(img, rng=0, max_dist=30, kernel_size=10, sigma=0))
    assert (seg[:10, :10] == 1).all() and (seg[10:, :10] == 3).all()
    assert (seg[:10, 10:] == 0).all() and (seg[10:, 10:] == 2).all()
    fine = QuickShift(bandwidth=1, max_dist=2, **skimage_window(1)).fit(features(img, lab=False)).labels_.reshape(20, 21)
    assert len(np.unique(fine)) > 10  # very oversegmented, yet no segment crosses a region edge
    assert (fine[9, :] != fine[10, :]).all() and (fine[:, 9] != fine[:, 10]).all()
