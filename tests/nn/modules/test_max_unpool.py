"""MaxUnpool1d/2d/3d and F.max_unpool*d against torch: max pooling's values and indices written back.

A seeded grid of shapes, kernels, strides (below the kernel: overlapping windows, so repeated indices, whose
values are equal), paddings, ``ceil_mode``, unbatched inputs and ``output_size`` (torch's default and the
sizes within ``stride`` of it) in float32 and float64: the output and the input gradient (torch's gather
backward, every repeated index receiving its gradient) equal torch's bit for bit, since no arithmetic is
involved but the gradient's copies; under ``jax.jit`` too. torch's messages for bad input.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl import nn as jnn
from jax_impl.nn import functional as JF

_DT = {torch.float32: jnp.float32, torch.float64: jnp.float64}


def _case(seed: int):
    rng = np.random.default_rng(seed)
    nd = 1 + seed % 3
    kernel = tuple(int(k) for k in rng.integers(1, 4, nd))
    stride = tuple(int(rng.integers(1, k + 1)) for k in kernel) if rng.random() < 0.6 else None
    padding = tuple(int(rng.integers(0, k // 2 + 1)) for k in kernel)
    ceil_mode = bool(rng.random() < 0.3)
    spatial = tuple(int(s) for s in rng.integers(max(kernel) + 2, 9 - nd, nd))
    batch = () if rng.random() < 0.25 else (int(rng.integers(1, 3)),)
    shape = (*batch, int(rng.integers(1, 4)), *spatial)
    dtype = torch.float64 if seed % 2 else torch.float32
    return rng, nd, kernel, stride, padding, ceil_mode, shape, dtype


# six seeds (each dimension twice) in the default tier, twelve more in the slow one
@pytest.mark.parametrize("seed", [*range(6), *(pytest.param(s, marks=pytest.mark.slow) for s in range(6, 18))])
def test_unpool_after_pool_matches_torch(seed):
    rng, nd, kernel, stride, padding, ceil_mode, shape, dtype = _case(seed)
    x = torch.from_numpy(np.round(rng.standard_normal(shape), 1)).to(dtype)  # rounded: tied maxima too
    pool = getattr(torch.nn, f"MaxPool{nd}d")(kernel, stride, padding, ceil_mode=ceil_mode, return_indices=True)
    values, indices = pool(x)
    t_unpool = getattr(torch.nn, f"MaxUnpool{nd}d")(kernel, stride, padding)
    j_unpool = getattr(jnn, f"MaxUnpool{nd}d")(kernel, stride, padding)
    stride_ = stride or kernel
    default = [(values.shape[-nd + d] - 1) * stride_[d] + kernel[d] - 2 * padding[d] for d in range(nd)]
    sizes = [None, list(x.shape[-nd:]), [s + int(rng.integers(-st + 1, st)) for s, st in zip(default, stride_)]]
    compared = []
    with jax.enable_x64(True):
        for size in sizes:
            v = values.detach().clone().requires_grad_(True)
            try:
                out = t_unpool(v, indices, output_size=size)
            except (RuntimeError, ValueError) as error:  # an output too small for the indices: the same error
                # torch reports the bad index one of its threads met; the message is torch's around it
                message = re.sub(r"index:\\ \d+", r"index:\\ \\d+", re.escape(str(error)))
                with pytest.raises(type(error), match=message):
                    j_unpool(jnp.asarray(values.detach().numpy()), jnp.asarray(indices.numpy()), output_size=size)
                continue
            w = torch.from_numpy(rng.standard_normal(out.shape)).to(dtype)
            (out * w).sum().backward()
            jv, ji, jw = jnp.asarray(v.detach().numpy()), jnp.asarray(indices.numpy()), jnp.asarray(w.numpy())
            ours = j_unpool(jv, ji, output_size=size)
            assert ours.dtype == _DT[dtype] and ours.shape == tuple(out.shape)
            np.testing.assert_array_equal(np.asarray(ours), out.detach().numpy())
            grad = jax.grad(lambda a: (j_unpool(a, ji, output_size=size) * jw).sum())(jv)
            np.testing.assert_array_equal(np.asarray(grad), v.grad.numpy())
            jitted = jax.jit(lambda a, i: j_unpool(a, i, output_size=size))(jv, ji)
            np.testing.assert_array_equal(np.asarray(jitted), out.detach().numpy())
            compared.append(size)
    assert compared  # at least one output size of each case is valid


def test_functional_with_stride_and_padding_matches_torch():
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
    values, indices = torch.nn.functional.max_pool2d(x, 3, 2, 1, return_indices=True)
    out = torch.nn.functional.max_unpool2d(values, indices, 3, 2, 1, output_size=x.shape)
    with jax.enable_x64(True):
        ours = JF.max_unpool2d(jnp.asarray(values.numpy()), jnp.asarray(indices.numpy()), 3, 2, 1,
                               output_size=x.shape)
        np.testing.assert_array_equal(np.asarray(ours), out.numpy())


def _errors(lib_unpool, tensor, long):
    return [
        lambda: lib_unpool(1)(tensor((1, 1, 4)), long(np.full((1, 1, 4), 9)), None),
        lambda: lib_unpool(2)(tensor((1, 1, 2, 2)), long(np.full((1, 1, 2, 2), -1)), None),
        lambda: lib_unpool(3)(tensor((1, 1, 2, 2, 2)), long(np.full((1, 1, 2, 2, 2), 99)), None),
        lambda: lib_unpool(2)(tensor((1, 1, 2, 2)), long(np.zeros((1, 1, 2, 3))), None),
        lambda: lib_unpool(1)(tensor((1, 1, 4)), long(np.zeros((1, 1, 5))), None),
        lambda: lib_unpool(2)(tensor((2, 2)), long(np.zeros((2, 2))), None),
        lambda: lib_unpool(3)(tensor((2, 2, 2)), long(np.zeros((2, 2, 2))), None),
        lambda: lib_unpool(2)(tensor((1, 1, 2, 2)), long(np.zeros((1, 1, 2, 2))), (9, 9)),
        lambda: lib_unpool(2)(tensor((1, 1, 2, 2)), long(np.zeros((1, 1, 2, 2))), (4,)),
        lambda: lib_unpool(2)(tensor((1, 1, 2, 2)), tensor((1, 1, 2, 2)), None),
    ]


def test_errors_are_torchs():
    def torch_unpool(nd):
        return lambda x, i, size: getattr(torch.nn.functional, f"max_unpool{nd}d")(x, i, 2, output_size=size)

    def jax_unpool(nd):
        return lambda x, i, size: getattr(JF, f"max_unpool{nd}d")(x, i, 2, output_size=size)

    theirs = _errors(torch_unpool, lambda s: torch.zeros(s), lambda a: torch.from_numpy(a.astype(np.int64)))
    ours = _errors(jax_unpool, lambda s: jnp.zeros(s), lambda a: jnp.asarray(a.astype(np.int32)))
    for torch_call, jax_call in zip(theirs, ours):
        with pytest.raises((RuntimeError, ValueError)) as expected:
            torch_call()
        message = str(expected.value).replace("torch.float32", "float32").replace("Float", "float32")
        with pytest.raises(expected.type, match=re.escape(message.split(" but got: ")[0])):
            jax_call()


@pytest.mark.parametrize("nd", [2, pytest.param(1, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_with_indices_functions_are_torchs(nd):
    """``F.max_pool*d_with_indices`` / ``F.adaptive_max_pool*d_with_indices`` (what ``return_indices=True``
    dispatches to) return values and indices whatever ``return_indices``, as torch's."""
    x = torch.from_numpy(np.random.default_rng(nd).standard_normal((2, 3) + (6,) * nd))
    with jax.enable_x64(True):
        for name, args in ((f"max_pool{nd}d_with_indices", (3, 2, 1)),
                           (f"adaptive_max_pool{nd}d_with_indices", (4,))):
            theirs = getattr(torch.nn.functional, name)(x, *args)
            ours = getattr(JF, name)(jnp.asarray(x.numpy()), *args)
            for a, b in zip(ours, theirs):
                np.testing.assert_array_equal(np.asarray(a), b.numpy(), err_msg=name)


def test_an_empty_batch_and_a_negative_output_size_are_torchs():
    values, indices = torch.nn.functional.max_pool2d(torch.randn(1, 2, 4, 4), 2, return_indices=True)
    out = torch.nn.functional.max_unpool1d(values[:0, :, 0], indices[:0, :, 0], 2)
    ours = JF.max_unpool1d(jnp.zeros((0, 2, 2)), jnp.zeros((0, 2, 2), jnp.int32), 2)
    assert ours.shape == tuple(out.shape) == (0, 2, 4)
    with pytest.raises(ValueError) as expected:
        torch.nn.functional.max_unpool2d(values, indices, 1, stride=1, padding=2)
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        JF.max_unpool2d(jnp.asarray(values.numpy()), jnp.asarray(indices.numpy()), 1, stride=1, padding=2)
