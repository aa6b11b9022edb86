"""Images for paper e's image experiments: scikit-learn's digits or a user's .npz, and the split.

    data = load_images("digits")              # 1,797 8x8 digits (scikit-learn ships them offline)
    data = load_images("my.npz")              # arrays X (N, H, W) or (N, 1, H, W), y (N,)
    split = ssl_split(len(data), test_fraction=0.2, test_seed=0, proportion=0.05, split_seed=0)
    split.test, split.labelled, split.unlabelled   # indices into data

Pixels become x = 2v − 1 in [−1, 1], with v = pixel / 16 for digits (values 0..16), pixel / 255
for a uint8 array, the value itself for a float array (which must lie in [0, 1]). Labels are the
whole numbers 0..K−1, class k named "k". Anything else in a user's file is an InputError naming
the file (exit 2); the file is read with `allow_pickle=False` (never unpickled).

The split: a seeded held-out test set (`test_fraction` of the images, drawn by `test_seed` alone,
so every labelled proportion and split seed is tested on the same images); the rest is the
training pool, whose labelled set of proportion p is the first round(p · n) of one seeded
permutation (`data/ssl_split.py`'s nested split), so the 2 % set lies inside the 5 % set inside the
10 % set; the images of the pool outside it are the unlabelled ones.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from textebm.data.ssl_split import nested_split
from textebm.errors import InputError, TextebmError
from textebm.seeds import derive_seed

DIGITS = "digits"  # scikit-learn's digits: the default --data
MIN_SIDE = 4  # the network's two stride-2 convolutions need a few pixels


@dataclass(frozen=True)
class ImageData:
    """Images (N, H, W) float32 in [−1, 1], labels (N,) int64, class names, and where they came from."""

    images: Tensor
    labels: Tensor
    classes: list[str]
    source: str
    sha256: str  # of the pixels and labels as read (keys runs by content)

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.images.shape[1]), int(self.images.shape[2])


def _digest(x: np.ndarray, y: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (x, y):
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def load_images(data: str) -> ImageData:
    """`digits` (scikit-learn's) or an .npz file with arrays X and y (see the module doc)."""
    if data == DIGITS:
        # offline: the data ship with scikit-learn
        from sklearn.datasets import load_digits

        d = load_digits()
        x, y = d.images.astype(np.float32) / 16.0, d.target.astype(np.int64)  # (1797, 8, 8), (1797,)
        return _make(x, y, DIGITS, _digest(d.images, d.target))
    path = Path(data)
    if not path.is_file():
        raise TextebmError(f"--data {data}: no such file; pass `digits` or an .npz file with arrays X and y")
    import zipfile

    try:
        f = np.load(path, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):  # an .npy file: one array, no X and y
            raise InputError(path, "a single array (.npy); expected an .npz file of arrays X and y "
                                   "(numpy.savez(path, X=images, y=labels))")
        with f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(path, f"not a readable .npz file of arrays X and y ({e})") from None
    missing = [k for k in ("X", "y") if k not in arrays]
    if missing:
        raise InputError(path, f"has no array {' or '.join(missing)}; it holds {sorted(arrays) or 'nothing'} "
                               "(expected X: images (N, H, W), y: labels (N,))")
    x, y = arrays["X"], arrays["y"]
    if x.ndim == 4 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 3 or min(x.shape[1:], default=0) < MIN_SIDE or x.shape[0] < 1:
        raise InputError(path, f"X has shape {tuple(arrays['X'].shape)}; expected grey images (N, H, W) or "
                               f"(N, 1, H, W) with N >= 1 and H, W >= {MIN_SIDE}")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise InputError(path, f"y has shape {tuple(y.shape)}; expected one label per image, ({x.shape[0]},)")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise InputError(path, f"y must hold whole numbers 0..K-1 (class ids), got dtype {y.dtype}, "
                               f"smallest {y.min()}")
    if x.dtype == np.uint8:
        v = x.astype(np.float32) / 255.0
    elif np.issubdtype(x.dtype, np.floating):
        v = x.astype(np.float32)
        if not np.isfinite(v).all() or v.min() < 0 or v.max() > 1:
            raise InputError(path, f"X's values must lie in [0, 1] (or X be uint8 0..255), got "
                                   f"{np.nanmin(v):g}..{np.nanmax(v):g}" + ("" if np.isfinite(v).all() else
                                                                             " with non-finite values"))
    else:
        raise InputError(path, f"X has dtype {x.dtype}; expected uint8 (0..255) or floats in [0, 1]")
    return _make(v, y.astype(np.int64), str(path), _digest(x, y))


def _make(v: np.ndarray, y: np.ndarray, source: str, sha: str) -> ImageData:
    k = int(y.max()) + 1
    if k < 2:
        raise InputError(source, "y holds a single class; a classifier needs at least 2")
    images = torch.from_numpy(2.0 * v - 1.0).float()  # (N, H, W) in [-1, 1]
    return ImageData(images, torch.from_numpy(y), [str(c) for c in range(k)], source, sha)


def check_shape(data: ImageData, shape: tuple[int, int], model: str) -> None:
    """The model at `model` takes images of `shape`; refuse other ones, naming the data file."""
    if data.shape != tuple(shape):
        raise InputError(data.source, f"images are {data.shape[0]}x{data.shape[1]}, but the model {model} "
                                      f"takes {shape[0]}x{shape[1]}")


@dataclass(frozen=True)
class SSLSplit:
    """Indices into the images: the held-out test set, the labelled set, the unlabelled rest."""

    test: list[int]
    labelled: list[int]
    unlabelled: list[int]


def test_indices(n: int, test_fraction: float, test_seed: int) -> tuple[list[int], list[int]]:
    """(test, train) indices, each sorted: a seeded `test_fraction` of n held out."""
    order = list(range(n))
    random.Random(derive_seed(test_seed, "ssl-images", "test")).shuffle(order)
    n_test = round(test_fraction * n)
    if n_test < 1 or n_test >= n:
        raise TextebmError(f"--test-fraction {test_fraction:g} of {n:,} images leaves "
                           + ("no test image" if n_test < 1 else "no training image"))
    return sorted(order[:n_test]), sorted(order[n_test:])


def ssl_split(n: int, test_fraction: float, test_seed: int, proportion: float, split_seed: int) -> SSLSplit:
    """The split of the module doc; a proportion that leaves no labelled image is a TextebmError
    naming --labelled-proportion."""
    test, train = test_indices(n, test_fraction, test_seed)
    size = round(proportion * len(train))
    if size < 1:
        raise TextebmError(f"--labelled-proportion {proportion:g} of the {len(train):,} training images leaves no "
                           f"labelled image ({proportion * len(train):.2f}, rounded to 0); use a larger proportion")
    # the nested split's permutation depends on the number of items and the seed only; each image
    # is an item of its own (its index), so equal images are not merged
    split = nested_split([(i,) for i in range(len(train))], len(train), split_seed, proportions=(proportion,))
    labelled = split.labelled(proportion)
    return SSLSplit(test, [train[i] for i in labelled], [train[i] for i in split.order[len(labelled):]])
