"""Transforms against torchvision's tensor code paths (torch_ref.data), same seeds -> same images."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import torch_ref.data as TD
from jax_impl.data import DataLoader, Generator, manual_seed
from jax_impl.data import transforms as T
from jax_impl.data.datasets import ArrayDataset

DRAWS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sides(pad) -> tuple[int, int, int, int]:
    """torchvision's padding argument as (left, top, right, bottom)."""
    if pad is None:
        return 0, 0, 0, 0
    if isinstance(pad, int):
        return pad, pad, pad, pad
    if len(pad) == 2:
        return pad[0], pad[1], pad[0], pad[1]
    return tuple(pad)


@DRAWS
# Reflect padding as large as the image, which torch refuses: in the height (first example), in the width (second).
@example(seed=0, h=4, w=4, c=1, pad=(1, 2, 3, 4), mode="reflect", p=0.0, pad_if_needed=False)
@example(seed=0, h=5, w=4, c=3, pad=(4, 1), mode="reflect", p=0.5, pad_if_needed=True)
@given(seed=st.integers(0, 2**31), h=st.integers(4, 12), w=st.integers(4, 12), c=st.sampled_from([1, 3]),
       pad=st.sampled_from([None, 0, 2, (1, 3), (1, 2, 3, 4)]), mode=st.sampled_from(["constant", "edge", "reflect"]),
       p=st.sampled_from([0.0, 0.3, 0.5, 1.0]), pad_if_needed=st.booleans())
def test_random_pipeline_draws_like_torchvision(seed, h, w, c, pad, mode, p, pad_if_needed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(6, h, w, c), dtype=np.uint8)
    size = (int(rng.integers(2, h + 1)), int(rng.integers(2, w + 3 if pad_if_needed else w + 1)))
    mean, std = rng.uniform(0, 1, c).tolist(), rng.uniform(0.2, 1, c).tolist()
    ours = T.Compose([T.ToTensor(), T.RandomCrop(size, pad, pad_if_needed, 0.5, mode), T.RandomHorizontalFlip(p),
                      T.Normalize(mean, std)])
    theirs = TD.Compose([TD.ToTensor(), TD.RandomCrop(size, pad, pad_if_needed, 0.5, mode),
                         TD.RandomHorizontalFlip(p), TD.Normalize(mean, std)])
    left, top, right, bottom = _sides(pad)
    if mode == "reflect" and (max(left, right) >= w or max(top, bottom) >= h):
        # torch's reflection padding needs each side smaller than its dimension (pad_if_needed's
        # extra padding never reaches it here: at most 2 on a side of at least 4).
        with pytest.raises(RuntimeError, match="Padding size should be less than") as want:
            theirs(images[0])
        with pytest.raises(RuntimeError) as got:
            ours(images[0])
        assert str(got.value) == str(want.value)
        return
    torch.manual_seed(seed)
    want = [theirs(img).numpy() for img in images]
    manual_seed(seed)
    got = [ours(img) for img in images]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_deterministic_transforms_match_torchvision():
    img = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    np.testing.assert_array_equal(T.ToTensor()(img), TD.ToTensor()(img).numpy())
    np.testing.assert_array_equal(T.ToTensor()(img[..., 0]), TD.ToTensor()(img[..., 0]).numpy())
    x = T.ToTensor()(img)
    np.testing.assert_array_equal(T.Normalize([0.1, 0.2, 0.3], [0.3, 0.2, 0.1])(x),
                                  TD.Normalize([0.1, 0.2, 0.3], [0.3, 0.2, 0.1])(torch.tensor(x)).numpy())
    with pytest.raises(TypeError, match="float tensor"):
        T.Normalize([0.0], [1.0])(img.transpose(2, 0, 1))
    with pytest.raises(ValueError, match="std evaluated to zero"):
        T.Normalize([0.0], [0.0])(x)
    with pytest.raises(ValueError, match="Required crop size"):
        T.RandomCrop(9)(x)


def test_explicit_generator_is_used():
    img = np.arange(2 * 8 * 8, dtype=np.float32).reshape(2, 8, 8)
    a = T.RandomCrop(4, generator=Generator(5))(img)
    g = torch.Generator().manual_seed(5)
    i = torch.randint(0, 5, (1,), generator=g).item()
    j = torch.randint(0, 5, (1,), generator=g).item()
    np.testing.assert_array_equal(a, img[:, i:i + 4, j:j + 4])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_with_random_transforms_yields_torchs_batches(num_workers):
    """Shuffle order, per-worker reseeding and per-sample random draws all line up with torch's DataLoader."""
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 1, (40, 1, 10, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 40)
    ours = ArrayDataset(images, labels, T.Compose([T.RandomCrop(8, padding=1), T.RandomHorizontalFlip()]))
    theirs = TD.TransformedDataset(torch.tensor(images), torch.tensor(labels),
                                   TD.Compose([TD.RandomCrop(8, padding=1), TD.RandomHorizontalFlip()]))
    t_loader = torch.utils.data.DataLoader(theirs, batch_size=6, shuffle=True, num_workers=num_workers,
                                           generator=torch.Generator().manual_seed(3))
    j_loader = DataLoader(ours, batch_size=6, shuffle=True, num_workers=num_workers, generator=Generator(3))
    # A training script's torch.manual_seed: in-process loading (num_workers=0) draws the crops and
    # flips from the global generators, which both frameworks seed non-deterministically at import.
    torch.manual_seed(0)
    manual_seed(0)
    for _ in range(2):  # two epochs
        t_batches, j_batches = list(t_loader), list(j_loader)
        assert len(t_batches) == len(j_batches) == 7
        for (tx, ty), (jx, jy) in zip(t_batches, j_batches):
            np.testing.assert_array_equal(np.asarray(jx), tx.numpy())
            np.testing.assert_array_equal(np.asarray(jy), ty.numpy())
