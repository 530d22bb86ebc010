"""Real-data loaders: Fashion-MNIST (full files or the shipped subset) and Oliver Twist."""

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest

import localization.datasets._real as real
from localization.datasets import FASHION_MNIST_CLASSES, load_fashion_mnist, load_oliver_twist

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
HAVE_SHARED = (SHARED / "fashion-mnist" / "t10k-images-idx3-ubyte.gz").is_file()


@pytest.fixture
def offline(monkeypatch):
    """Pretend no data folder exists: the loaders must fall back to the shipped copies."""
    monkeypatch.setattr(real, "_candidates", lambda path: [] if path is None else [Path(path)])


def test_shipped_subset(offline):
    X, y, source = load_fashion_mnist(return_source=True)
    assert source == "shipped subset"
    assert X.shape == (2000, 784) and X.dtype == np.float32
    assert X.min() >= 0 and X.max() <= 1 and X.max() == 1
    np.testing.assert_array_equal(np.bincount(y), [200] * 10)
    imgs, y2 = load_fashion_mnist(n=10, as_images=True)
    assert imgs.shape == (10, 28, 28) and imgs.dtype == np.uint8
    np.testing.assert_array_equal(imgs.reshape(10, -1) / np.float32(255), X[:10])
    np.testing.assert_array_equal(y2, y[:10])
    assert len(FASHION_MNIST_CLASSES) == 10
    with pytest.raises(FileNotFoundError, match="training set"):
        load_fashion_mnist("train")


def test_shipped_files_small_and_licensed():
    assert real.SUBSET_FILE.stat().st_size < 2_000_000
    assert "Zalando" in (real.DATA_DIR / "FASHION_MNIST_LICENSE").read_text()
    assert 250_000 < real.OLIVER_FILE.stat().st_size < 450_000


def test_oliver_twist_offline(offline):
    text = load_oliver_twist()
    assert len(text) == 893_157
    assert "OLIVER TWIST" in text[:3000] and "CHAPTER LIII." in text
    assert text.count("CHAPTER ") >= 53


@pytest.mark.skipif(not HAVE_SHARED, reason="full data folder not present")
def test_full_files_and_subset_agree():
    X, y, source = load_fashion_mnist(path=SHARED, return_source=True)
    assert X.shape == (10000, 784) and source.endswith("t10k-images-idx3-ubyte.gz")
    np.testing.assert_array_equal(np.bincount(y), [1000] * 10)
    with np.load(real.SUBSET_FILE) as z:
        np.testing.assert_array_equal(z["images"].reshape(2000, -1) / np.float32(255), X[z["index"]])
        np.testing.assert_array_equal(z["labels"], y[z["index"]])
    # Mean pixel value of the test set given in the data README (73.15 on 0..255).
    assert abs(X.mean() * 255 - 73.15) < 0.01
    assert load_oliver_twist(SHARED) == load_oliver_twist(SHARED / "oliver_twist.txt")
    digest = hashlib.sha256(load_oliver_twist(SHARED).encode("utf-8")).hexdigest()
    assert digest == "ed6843e69f29aee6606a1fcdeae401d9c6131b2a7f308b912ffa789dbdcc30f5"
    with gzip.open(real.OLIVER_FILE, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == digest


def test_env_var_and_raw_idx(tmp_path, monkeypatch):
    # Write a tiny raw (uncompressed) IDX pair in a fashion-mnist/ sub-folder.
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    imgs = np.arange(3 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(3, 28, 28)
    (folder / "train-images-idx3-ubyte").write_bytes(
        (2051).to_bytes(4, "big") + b"".join(k.to_bytes(4, "big") for k in (3, 28, 28)) + imgs.tobytes()
    )
    (folder / "train-labels-idx1-ubyte").write_bytes((2049).to_bytes(4, "big") + (3).to_bytes(4, "big") + bytes([4, 5, 6]))
    monkeypatch.setenv("LOCALIZATION_DATA", str(tmp_path))
    monkeypatch.setattr(real, "_SIZES", {"test": 10_000, "train": 3})
    X, y = load_fashion_mnist("train", as_images=True)
    np.testing.assert_array_equal(X, imgs)
    np.testing.assert_array_equal(y, [4, 5, 6])
    X2, _ = load_fashion_mnist("train", n=2, path=tmp_path)
    assert X2.shape == (2, 784)


def test_bad_arguments(tmp_path, offline):
    with pytest.raises(ValueError, match="subset"):
        load_fashion_mnist("validation")
    with pytest.raises(ValueError, match="`n`"):
        load_fashion_mnist(n=0)
    with pytest.raises(ValueError, match="exceeds"):
        load_fashion_mnist(n=2001)
    with pytest.raises(ValueError, match="`n`"):
        load_fashion_mnist(n=2.5)
    with pytest.raises(FileNotFoundError, match="path"):
        load_fashion_mnist(path=tmp_path)
    with pytest.raises(FileNotFoundError, match="path"):
        load_oliver_twist(tmp_path)
    bad = tmp_path / "fashion-mnist"
    bad.mkdir()
    (bad / "t10k-images-idx3-ubyte").write_bytes((1234).to_bytes(4, "big") + bytes(8))
    (bad / "t10k-labels-idx1-ubyte").write_bytes((2049).to_bytes(4, "big") + bytes(4))
    with pytest.raises(ValueError, match="magic"):
        load_fashion_mnist(path=tmp_path)
