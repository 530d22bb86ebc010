"""Real-data loaders: Fashion-MNIST (full files or the shipped subset) and Oliver Twist."""

import gzip
import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import localization.datasets._real as real
from localization.datasets import FASHION_MNIST_CLASSES, data_home, load_fashion_mnist, load_oliver_twist

# The full files, when the run was given them (CI sets LOCALIZATION_DATA).
FULL = Path(os.environ.get("LOCALIZATION_DATA") or "/nonexistent")
HAVE_FULL = (FULL / "fashion-mnist" / "t10k-images-idx3-ubyte.gz").is_file()


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No LOCALIZATION_DATA and an empty cache folder: the loaders fall back to the shipped copies."""
    monkeypatch.delenv("LOCALIZATION_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _write_train_idx(folder, images, labels):
    """A raw (uncompressed) IDX pair of training images and labels in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(labels)
    (folder / "train-images-idx3-ubyte").write_bytes(
        (2051).to_bytes(4, "big") + b"".join(k.to_bytes(4, "big") for k in (n, 28, 28)) + images.tobytes()
    )
    (folder / "train-labels-idx1-ubyte").write_bytes((2049).to_bytes(4, "big") + n.to_bytes(4, "big") + bytes(labels))


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


@pytest.mark.skipif(not HAVE_FULL, reason="LOCALIZATION_DATA does not name a folder with the full data files")
def test_full_files_and_subset_agree():
    X, y, source = load_fashion_mnist(return_source=True)
    assert Path(source).resolve().parent.parent == FULL.resolve()
    X2, y2 = load_fashion_mnist(path=FULL)
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    assert X.shape == (10000, 784) and source.endswith("t10k-images-idx3-ubyte.gz")
    np.testing.assert_array_equal(np.bincount(y), [1000] * 10)
    with np.load(real.SUBSET_FILE) as z:
        np.testing.assert_array_equal(z["images"].reshape(2000, -1) / np.float32(255), X[z["index"]])
        np.testing.assert_array_equal(z["labels"], y[z["index"]])
    # Mean pixel value of the test set given in the data README (73.15 on 0..255).
    assert abs(X.mean() * 255 - 73.15) < 0.01
    assert load_oliver_twist(FULL) == load_oliver_twist(FULL / "oliver_twist.txt")
    digest = hashlib.sha256(load_oliver_twist(FULL).encode("utf-8")).hexdigest()
    assert digest == "ed6843e69f29aee6606a1fcdeae401d9c6131b2a7f308b912ffa789dbdcc30f5"
    with gzip.open(real.OLIVER_FILE, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == digest


def test_env_var_and_raw_idx(tmp_path, monkeypatch, offline):
    imgs = np.arange(3 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(3, 28, 28)
    _write_train_idx(tmp_path / "fashion-mnist", imgs, [4, 5, 6])
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


def test_lookup_order_path_then_env_then_cache(tmp_path, monkeypatch, offline):
    monkeypatch.setattr(real, "_SIZES", {"test": 10_000, "train": 1})
    img = np.zeros((1, 28, 28), dtype=np.uint8)
    cache = data_home()
    assert cache == tmp_path / "cache" / "localization-methods"
    _write_train_idx(cache, img, [1])  # directly in the folder, no fashion-mnist/
    assert load_fashion_mnist("train")[1].tolist() == [1]
    _write_train_idx(tmp_path / "env" / "fashion-mnist", img, [2])
    monkeypatch.setenv("LOCALIZATION_DATA", str(tmp_path / "env"))
    assert load_fashion_mnist("train")[1].tolist() == [2]
    _write_train_idx(tmp_path / "given", img, [3])
    assert load_fashion_mnist("train", path=tmp_path / "given")[1].tolist() == [3]
    # An explicit path is the only place searched.
    with pytest.raises(FileNotFoundError, match="path"):
        load_fashion_mnist("train", path=tmp_path / "cache")
    # Oliver Twist follows the same order, then the shipped copy.
    (cache / "oliver_twist.txt").write_text("from the cache", encoding="utf-8")
    assert load_oliver_twist() == "from the cache"
    monkeypatch.delenv("LOCALIZATION_DATA")
    assert load_oliver_twist() == "from the cache"


def test_nothing_is_searched_beside_the_working_directory(tmp_path, monkeypatch, offline):
    # A data folder in the parent of the working directory is not a place the library looks.
    _write_train_idx(tmp_path / "shared" / "data" / "fashion-mnist", np.zeros((1, 28, 28), np.uint8), [1])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(FileNotFoundError):
        load_fashion_mnist("train")


def test_missing_full_data_says_where_it_looked(tmp_path, monkeypatch, offline):
    with pytest.raises(FileNotFoundError) as e:
        load_fashion_mnist("train")
    msg = str(e.value)
    assert "LOCALIZATION_DATA (not set)" in msg and str(data_home()) in msg and "path" in msg
    monkeypatch.setenv("LOCALIZATION_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_fashion_mnist("all")
    # More test images than the shipped subset has: the same list.
    with pytest.raises(ValueError, match="nowhere") as e:
        load_fashion_mnist(n=5000)
    assert str(data_home()) in str(e.value)


def test_data_home_follows_the_platform(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data_home() == tmp_path / "localization-methods"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    expected = {"linux": tmp_path / ".cache", "darwin": tmp_path / "Library" / "Caches", "win32": tmp_path / "local"}
    for platform, base in expected.items():
        monkeypatch.setattr(sys, "platform", platform)
        assert data_home() == base / "localization-methods"
