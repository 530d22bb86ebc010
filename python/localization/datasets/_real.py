"""Real data: Fashion-MNIST and Oliver Twist.

Small copies ship inside the package (2,000 Fashion-MNIST test images, 200 per class, and
the whole novel gzip-compressed), so tests and demos work offline on a fresh machine. The
full files are read when they can be found, in this order:

1. the ``path`` argument (then nowhere else);
2. the folder named by the ``LOCALIZATION_DATA`` environment variable;
3. the user cache folder, :func:`data_home`: ``$XDG_CACHE_HOME/localization-methods`` when
   ``XDG_CACHE_HOME`` is set, else ``~/.cache/localization-methods`` (Linux),
   ``~/Library/Caches/localization-methods`` (macOS) or
   ``%LOCALAPPDATA%\\localization-methods`` (Windows);
4. the copies shipped with the package.

A folder qualifies if it holds the IDX files directly or in a ``fashion-mnist/`` sub-folder.
Nothing is downloaded. Asking for data that only the full files have (the training set, more
than the shipped test images) raises a ``FileNotFoundError`` listing the places searched.
"""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from .._validation import LocalizationError

DATA_DIR = Path(__file__).resolve().parent / "data"
SUBSET_FILE = DATA_DIR / "fashion_mnist_test_subset.npz"
OLIVER_FILE = DATA_DIR / "oliver_twist.txt.gz"

FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
_IDX = {"test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"), "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")}
_SIZES = {"test": 10_000, "train": 60_000}
#: The environment variable naming the folder with the full data files.
DATA_ENV = "LOCALIZATION_DATA"


def _read_idx(path, magic):
    """Read a (gzip-compressed or raw) IDX file: big-endian magic, dims, then uint8 data."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        raise ValueError(f"{path} is not an IDX file of the expected kind (magic {got}, expected {magic})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path} is truncated: {data.size} bytes of data for shape {tuple(dims)}")
    return data.reshape(dims)


def data_home() -> Path:
    """The user cache folder searched for the full data files (it need not exist).

    ``$XDG_CACHE_HOME/localization-methods`` when ``XDG_CACHE_HOME`` is set, else the
    platform's cache folder: ``~/.cache`` (Linux and other Unix), ``~/Library/Caches``
    (macOS), ``%LOCALAPPDATA%`` (Windows).

    Examples
    --------
    >>> from localization.datasets import data_home
    >>> data_home().name
    'localization-methods'
    """
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        if sys.platform == "win32":
            base = os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local"
        elif sys.platform == "darwin":
            base = Path.home() / "Library" / "Caches"
        else:
            base = Path.home() / ".cache"
    return Path(base) / "localization-methods"


def _candidates(path):
    """The folders searched, in order, each with how it was chosen (for error messages)."""
    if path is not None:
        return [(Path(path), "`path`")]
    out = []
    env = os.environ.get(DATA_ENV)
    if env:
        out.append((Path(env), DATA_ENV))
    out.append((data_home(), "the user cache folder"))
    return out


def _searched(path):
    """Where the full files were looked for, for an error message."""
    places = [f"{where} ({str(folder)!r})" for folder, where in _candidates(path)]
    if path is None and not os.environ.get(DATA_ENV):
        places.insert(0, f"{DATA_ENV} (not set)")
    return "; ".join(places)


def _find_idx(subset, path):
    images, labels = _IDX[subset]
    for base, _ in _candidates(path):
        for folder in (base, base / "fashion-mnist"):
            for suffix in (".gz", ""):
                img, lab = folder / (images + suffix), folder / (labels + suffix)
                if img.is_file() and lab.is_file():
                    return img, lab
    if path is not None:
        raise FileNotFoundError(f"no Fashion-MNIST {subset} IDX files ({images}[.gz]) in `path`={str(path)!r} or its fashion-mnist/ folder")
    return None


def _check_n(n, available, what, hint=""):
    if n is None:
        return available
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise LocalizationError(f"`n` must be a positive integer or None, got {n!r}", "n")
    if n > available:
        raise LocalizationError(f"`n`={n} exceeds the {available} images of {what}{hint}", "n")
    return int(n)


def load_fashion_mnist(subset: str = "test", n: int | None = None, path: str | os.PathLike[str] | None = None, *,
                       as_images: bool = False, return_source: bool = False) -> tuple[Any, ...]:
    """Fashion-MNIST images and labels (Zalando, MIT licence).

    Reads the full IDX files if they can be found (see the module docstring), else the
    2,000-image test subset shipped with the package (the first 200 test images of each
    class, in file order).

    Parameters
    ----------
    subset : {"test", "train", "all"}, default="test"
        ``"train"`` needs the full files (the package ships test images only); ``"all"``
        is the 60,000 training images followed by the 10,000 test images.
    n : int, optional
        Return only the first ``n`` images (all by default).
    path : str or Path, optional
        Folder with the IDX files (``.gz`` or raw), directly or in ``fashion-mnist/``.
    as_images : bool, default=False
        Return uint8 images of shape (n, 28, 28) instead of float32 rows in [0, 1].
    return_source : bool, default=False
        Also return where the data came from (a file path, or ``"shipped subset"``).

    Returns
    -------
    X : ndarray of shape (n, 784), float32 in [0, 1] (or (n, 28, 28) uint8)
    y : ndarray of shape (n,), int64 class codes 0..9 (names in ``FASHION_MNIST_CLASSES``)
    source : str
        Only with ``return_source=True``.

    Examples
    --------
    >>> from localization.datasets import load_fashion_mnist
    >>> X, y = load_fashion_mnist(n=100)
    >>> X.shape, X.dtype.name, int(y.max()) <= 9
    ((100, 784), 'float32', True)
    """
    if subset == "all":
        Xtr, ytr, src = load_fashion_mnist("train", None, path, as_images=as_images, return_source=True)
        Xte, yte = load_fashion_mnist("test", None, path, as_images=as_images)
        n = _check_n(n, len(ytr) + len(yte), "the Fashion-MNIST training and test sets")
        X, y = np.concatenate([Xtr, Xte])[:n], np.concatenate([ytr, yte])[:n]
        return (X, y, src) if return_source else (X, y)
    if subset not in _IDX:
        raise LocalizationError(f"`subset` must be 'test', 'train' or 'all', got {subset!r}", "subset")
    found = _find_idx(subset, path)
    if found is not None:
        n = _check_n(n, _SIZES[subset], f"the Fashion-MNIST {subset} set")
        images = _read_idx(found[0], 2051)[:n]
        labels = _read_idx(found[1], 2049)[:n]
        source = str(found[0])
    else:
        if subset == "train":
            raise FileNotFoundError(
                "the Fashion-MNIST training set is not shipped with the package and its IDX files "
                f"(train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz]) were not found; searched: {_searched(path)}. "
                f"Pass `path` or set {DATA_ENV} to the folder holding them (subset='test' works offline)"
            )
        with np.load(SUBSET_FILE) as z:
            images, labels = z["images"], z["labels"]
        n = _check_n(n, len(labels), "the shipped Fashion-MNIST subset",
                     f" (the full test set's IDX files were not found; searched: {_searched(path)})")
        images, labels = images[:n], labels[:n]
        source = "shipped subset"
    y = labels.astype(np.int64)
    X = images.copy() if as_images else images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)
    return (X, y, source) if return_source else (X, y)


def load_oliver_twist(path: str | os.PathLike[str] | None = None) -> str:
    """The text of Charles Dickens' *Oliver Twist* (Project Gutenberg eBook #730, public domain).

    Reads ``oliver_twist.txt`` from ``path`` (a file or a folder), else from the folder in
    ``LOCALIZATION_DATA`` or the user cache folder (:func:`data_home`) when it is there, else
    the gzip-compressed copy shipped with the package (the same text).

    Examples
    --------
    >>> from localization.datasets import load_oliver_twist
    >>> text = load_oliver_twist()
    >>> "OLIVER TWIST" in text[:2000]
    True
    """
    if path is not None:
        p = Path(path)
        p = p / "oliver_twist.txt" if p.is_dir() else p
        if not p.is_file():
            raise FileNotFoundError(f"no oliver_twist.txt at `path`={str(path)!r}")
        return p.read_text(encoding="utf-8")
    for base, _ in _candidates(None):
        p = base / "oliver_twist.txt"
        if p.is_file():
            return p.read_text(encoding="utf-8")
    with gzip.open(OLIVER_FILE, "rb") as f:
        return f.read().decode("utf-8")
