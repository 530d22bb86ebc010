"""Benchmark: image self-local means against scikit-image, same process, same data.

    python benches/bench_denoise.py            # 256×256 crop of skimage.data.camera()
    python benches/bench_denoise.py --full     # 512×512 and an RGB image as well

Prints wall times (best of ``--repeat``) for ours (all threads and one thread) and for
scikit-image (single-threaded), the ratios, and the largest difference between the outputs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from skimage import data, img_as_float
from skimage.restoration import denoise_bilateral, denoise_nl_means

from localization import _core
from localization.denoise import bilateral, nl_means


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def row(name, ours, ours1, peer, diff):
    print(f"{name:<44s} ours {ours:8.3f}s  ours(1 thread) {ours1:8.3f}s  skimage {peer:8.3f}s  "
          f"ratio {peer / ours:6.1f}x  (1 thread {peer / ours1:5.1f}x)  max|diff| {diff:.1e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="also 512×512 gray and a 256×256 RGB image")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = [("gray", img_as_float(data.camera())[128:384, 128:384])]
    if args.full:
        cases.append(("gray", img_as_float(data.camera())))
        cases.append(("rgb", img_as_float(data.astronaut())[:256, 128:384]))
    print(f"threads: {_core.effective_n_jobs(None)}")
    for kind, clean in cases:
        noisy = np.clip(clean + 0.08 * rng.standard_normal(clean.shape), 0, 1)
        label = f"{kind} {noisy.shape[0]}x{noisy.shape[1]}"
        ca = -1 if kind == "rgb" else None
        kw = dict(patch_size=7, patch_distance=11, h=0.06, sigma=0.08)
        t_ours, a = best(lambda: nl_means(noisy, **kw), args.repeat)
        t_one, _ = best(lambda: nl_means(noisy, n_jobs=1, **kw), args.repeat)
        t_peer, b = best(lambda: denoise_nl_means(noisy, fast_mode=False, channel_axis=ca, **kw), 1)
        row(f"nl_means {label} (7, 11)", t_ours, t_one, t_peer, float(np.max(np.abs(a - b))))
        # Bilateral: the outputs differ by design (scikit-image's spatial table, see the docs);
        # the ratio compares equal window sizes and pixel counts.
        t_ours, a = best(lambda: bilateral(noisy, 2.0, 0.1), args.repeat)
        t_one, _ = best(lambda: bilateral(noisy, 2.0, 0.1, n_jobs=1), args.repeat)
        t_peer, b = best(lambda: denoise_bilateral(noisy, sigma_color=0.1, sigma_spatial=2.0, channel_axis=ca), args.repeat)
        row(f"bilateral {label} (h_x=2, 13x13 window)", t_ours, t_one, t_peer, float(np.max(np.abs(a - b))))


if __name__ == "__main__":
    main()
