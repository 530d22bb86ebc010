"""Build the Fashion-MNIST subset shipped inside the package (run once, from the repository root).

Takes the first 200 test images of each class (2,000 in all, in file order) from the full
IDX files and stores them, with their labels and their indices in the test set, as a
compressed ``.npz`` under ``python/localization/datasets/data/``, next to the MIT licence
text that must accompany any copy. Also stores Oliver Twist gzip-compressed.

    python scripts/make_fashion_subset.py [--source ../shared/data]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

import numpy as np

PER_CLASS = 200
OUT = Path(__file__).resolve().parents[1] / "python" / "localization" / "datasets" / "data"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="../shared/data", help="folder holding fashion-mnist/ and oliver_twist.txt")
    args = parser.parse_args(argv)
    src = Path(args.source)
    # The loader's own IDX reader, so the shipped subset is read and checked the same way.
    from localization.datasets._real import _read_idx

    images = _read_idx(src / "fashion-mnist" / "t10k-images-idx3-ubyte.gz", 2051)
    labels = _read_idx(src / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz", 2049)
    index = np.sort(np.concatenate([np.flatnonzero(labels == c)[:PER_CLASS] for c in range(10)]))
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "fashion_mnist_test_subset.npz", images=images[index], labels=labels[index], index=index)
    shutil.copyfile(src / "fashion-mnist" / "LICENSE", OUT / "FASHION_MNIST_LICENSE")
    text = (src / "oliver_twist.txt").read_bytes()
    # mtime=0 keeps the archive byte-identical across rebuilds.
    with open(OUT / "oliver_twist.txt.gz", "wb") as raw, gzip.GzipFile("oliver_twist.txt", "wb", 9, raw, mtime=0) as f:
        f.write(text)
    for p in sorted(OUT.iterdir()):
        print(f"{p.name}: {p.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
