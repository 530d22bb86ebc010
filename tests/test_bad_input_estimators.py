"""Bad parameters of the estimators and helpers: a clear ValueError naming the argument,
checked before any work (sizes no machine could hold are refused before allocating)."""

import warnings

import numpy as np
import pytest

from localization import KernelDensity, MedoidShift, NearestNeighbors
from localization.denoise import NonLocalMeans, bilateral, nl_means
from localization.generative import LocalMeanDiffusion, sigma_schedule
from localization.kernels import log_normalization, profile

X = np.random.default_rng(0).random((30, 2))
IMG = np.random.default_rng(1).random((12, 14))
HUGE = 10**15  # would need petabytes


@pytest.mark.parametrize("radius", [-1.0, np.nan, -np.inf, "far"])
def test_nearest_neighbors_radius_is_checked_at_fit(radius):
    with pytest.raises((ValueError, TypeError), match="radius"):
        NearestNeighbors(radius=radius).fit(X)


@pytest.mark.parametrize("k", [31, 100])
def test_medoid_shift_more_neighbours_than_samples(k):
    with pytest.raises(ValueError, match="n_neighbors"):
        MedoidShift(bandwidth=0.5, n_neighbors=k).fit(X)
    MedoidShift(bandwidth=0.5, n_neighbors=30).fit(X)  # k = n is the dense definition


@pytest.mark.parametrize("rho", [-1.0, 0.0, np.nan, np.inf])
@pytest.mark.parametrize("schedule", ["geometric", "karras"])
def test_diffusion_rho_is_checked_whatever_the_schedule(rho, schedule):
    with pytest.raises(ValueError, match="rho"):
        LocalMeanDiffusion(rho=rho, schedule=schedule).fit(X)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_local_means_non_finite_input_and_shapes(bad):
    Xb = np.random.default_rng(2).random((3, 64))
    Xb[1, 5] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        NonLocalMeans(image_shape=(8, 8)).fit(Xb)
    with pytest.raises(ValueError, match="NaN|infinity"):
        NonLocalMeans(image_shape=(8, 8)).fit(np.abs(Xb) * 0).transform(Xb)
    for shape in [(8, bad), (bad, 8), (8, 8.5), (0, 64), (-8, -8), ("8", 8)]:
        with pytest.raises(ValueError, match="image_shape"):
            NonLocalMeans(image_shape=shape).fit(np.zeros((3, 64)))


def test_sizes_no_machine_could_hold_are_refused_up_front():
    kde = KernelDensity().fit(X)
    with pytest.raises(ValueError, match="n_samples.*GiB"):
        kde.sample(10**12)
    with pytest.raises(ValueError, match="n_steps"):
        LocalMeanDiffusion(n_steps=HUGE).fit(X)
    with pytest.raises(ValueError, match="n_steps"):
        sigma_schedule(1.0, 0.1, HUGE)
    with pytest.raises(ValueError, match="n_samples"):
        LocalMeanDiffusion(n_steps=3).fit(X).sample(HUGE)
    with pytest.raises(ValueError, match="window_size"):
        bilateral(IMG, window_size=HUGE)
    for h in (1e8, 1e300):  # the default window is 6h: refused by the argument that sets it
        with pytest.raises(ValueError, match="spatial_bandwidth"):
            bilateral(IMG, spatial_bandwidth=h)
    with pytest.raises(ValueError, match="patch_size"):
        nl_means(IMG, patch_size=HUGE)
    with pytest.raises(ValueError, match="patch_size"):
        NonLocalMeans(patch_size=HUGE, image_shape=(12, 14)).fit(IMG.reshape(1, -1))


def test_search_distance_beyond_the_image_is_the_whole_image():
    """The window is clipped to the image, so a huge patch_distance is the image size (fast)."""
    want = nl_means(IMG, patch_size=3, patch_distance=14, h=0.2)
    np.testing.assert_array_equal(nl_means(IMG, patch_size=3, patch_distance=HUGE, h=0.2), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("h", [1e-300, 1e-200, 1e-40])
def test_bilateral_vanishing_range_bandwidth_is_the_identity(dtype, h):
    """As h_y → 0 only pixels of the very same value are averaged: the image is unchanged."""
    img = IMG.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = bilateral(img, spatial_bandwidth=1.5, range_bandwidth=h)
    assert out.dtype == dtype and np.all(np.isfinite(out))
    np.testing.assert_allclose(out, img, rtol=0, atol=4 * np.finfo(dtype).eps)
    steps = np.repeat([[0.25] * 4 + [0.75] * 4], 5, axis=0).astype(dtype)
    np.testing.assert_allclose(bilateral(steps, range_bandwidth=h, mode="edge"), steps, atol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("d", [-1, 0, 2.5, np.nan, 10**30, "2"])
def test_log_normalization_dimension(d):
    with pytest.raises((ValueError, TypeError), match="`d`"):
        log_normalization("gaussian", d)


def test_profile_of_nan_is_an_error():
    with pytest.raises(ValueError, match="NaN"):
        profile("gaussian", [0.0, np.nan])
    assert profile("gaussian", [np.inf]).tolist() == [0.0]
