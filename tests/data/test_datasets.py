"""The embedded data sets: digits (offline, fixed split) and synthetic images, identical on both sides."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_ref.data as TD
from jax_impl.data import DataLoader, datasets
from parity.config import load_config


def test_digits_is_sklearns_and_splits_like_torch():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    full = datasets.digits(train=None)
    assert full.images.shape == (1797, 1, 8, 8) and full.images.dtype == np.float32
    np.testing.assert_array_equal(full.images[:, 0] * 16, bunch.images.astype(np.float32))
    np.testing.assert_array_equal(full.labels, bunch.target)
    for train in (True, False):
        ours, theirs = datasets.digits(train), TD.digits(train)
        assert len(ours) == len(theirs) == (1438 if train else 359)
        np.testing.assert_array_equal(ours.images, theirs.tensors[0].numpy())
        np.testing.assert_array_equal(ours.labels, theirs.tensors[1].numpy())
    # The fixed split is torch's random_split with a seeded generator.
    gen = torch.Generator().manual_seed(0)
    train_subset, _ = torch.utils.data.random_split(range(1797), [1438, 359], generator=gen)
    np.testing.assert_array_equal(datasets.digits(True).labels, bunch.target[list(train_subset.indices)])


def test_digits_read_without_sklearn_equal_load_digits(monkeypatch):
    from sklearn.datasets import load_digits

    from jax_impl.data import datasets as module

    bunch = load_digits()
    assert module._bundled_digits_csv() is not None  # the file scikit-learn ships, read directly
    for found in (True, False):  # the direct read, and load_digits where the file is missing
        if not found:
            monkeypatch.setattr(module, "_bundled_digits_csv", lambda: None)
        module._load_digits.cache_clear()
        images, target = module._load_digits()
        assert images.dtype == bunch.images.dtype and target.dtype == bunch.target.dtype
        np.testing.assert_array_equal(images, bunch.images)
        np.testing.assert_array_equal(target, bunch.target)
        assert not images.flags.writeable and not target.flags.writeable
    module._load_digits.cache_clear()


@pytest.mark.parametrize("shape, classes, seed", [((1, 8, 8), 10, 0), ((3, 5, 7), 4, 123), ((2,), 3, 9)])
def test_synthetic_draws_equal_torch(shape, classes, seed):
    ours = datasets.synthetic(50, shape, classes, seed)
    theirs = TD.synthetic(50, shape, classes, seed)
    np.testing.assert_array_equal(ours.images, theirs.tensors[0].numpy())
    np.testing.assert_array_equal(ours.labels, theirs.tensors[1].numpy())
    assert ours.images.dtype == np.float32 and ours.labels.dtype == np.int64


@pytest.mark.parametrize("config", ["configs/lenet_digits.yaml", "configs/resnet18_synthetic_adamw.yaml"])
def test_config_builders_give_identical_loaders(config):
    cfg = load_config(config, ["data.batch_size=50"])
    for train in (True, False):
        kw = dict(train=train, val_fraction=cfg.data.val_fraction, split_seed=cfg.data.split_seed)
        t_ds = TD.build_dataset(cfg.data.dataset, **kw)
        j_ds = datasets.build_dataset(cfg.data.dataset, **kw)
        t_loader = TD.build_dataloader(cfg.data, t_ds, seed=cfg.train.seed, train=train)
        j_loader = datasets.build_dataloader(cfg.data, j_ds, seed=cfg.train.seed, train=train)
        assert isinstance(j_loader, DataLoader)
        for (tx, ty), (jx, jy) in zip(t_loader, j_loader, strict=True):
            np.testing.assert_array_equal(np.asarray(jx), tx.numpy())
            np.testing.assert_array_equal(np.asarray(jy), ty.numpy())
