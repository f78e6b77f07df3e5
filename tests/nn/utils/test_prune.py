"""jax_impl.nn.utils.prune against torch.nn.utils.prune: the reparametrisation with a given mask.

Two masks in a row (torch's PruningContainer multiplies them), the state dict keys and values (bit for bit:
the masks' products are exact), the pruned layer's output and its gradients (none through pruned entries;
float64 within 1e-12, float32 within 1e-5: the convolution's sums), and ``remove``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.utils.prune
from flax import nnx

from jax_impl import nn as jnn
from parity.convert import load_torch_state_dict, module_state


@pytest.mark.parametrize("dtype", [torch.float64, pytest.param(torch.float32, marks=pytest.mark.slow)])
def test_custom_masks_match_torch(dtype):
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        t = torch.nn.Conv2d(3, 4, 3, dtype=dtype)
        j = jnn.Conv2d(3, 4, 3, dtype=jnp.float64 if dtype == torch.float64 else jnp.float32)
        masks = [rng.random((4, 3, 3, 3)) < 0.7, rng.random((4, 3, 3, 3)) < 0.6]
        load_torch_state_dict(j, t.state_dict())
        torch.nn.utils.prune.identity(t, "bias")
        jnn.utils.prune.identity(j, "bias")
        for mask in masks:
            torch.nn.utils.prune.custom_from_mask(t, "weight", torch.from_numpy(mask))
        for mask in masks:
            jnn.utils.prune.custom_from_mask(j, "weight", mask)
        theirs, ours = t.state_dict(), module_state(j)
        assert sorted(theirs) == sorted(ours) == ["bias_mask", "bias_orig", "weight_mask", "weight_orig"]
        for key, value in theirs.items():
            np.testing.assert_array_equal(np.asarray(ours[key][...]), value.numpy(), err_msg=key)
        assert jnn.utils.prune.is_pruned(j)

        x = torch.randn(2, 3, 5, 5, dtype=dtype)
        (t(x) ** 2).sum().backward()
        np.testing.assert_allclose(np.asarray(j(jnp.asarray(x.numpy()))), t(x).detach().numpy(),
                                   rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)
        grads = nnx.grad(lambda m: (m(jnp.asarray(x.numpy())) ** 2).sum())(j)
        grad = np.asarray(grads["weight_orig"][...])
        assert not grad[~(masks[0] & masks[1])].any()  # no gradient through pruned entries, as torch's
        np.testing.assert_allclose(grad, t.weight_orig.grad.numpy(), rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                   atol=1e-5)

        torch.nn.utils.prune.remove(t, "weight")
        jnn.utils.prune.remove(j, "weight")
        assert type(j).__name__ == "Conv2d" and "weight" in module_state(j)
        np.testing.assert_array_equal(np.asarray(j.weight[...]), t.weight.detach().numpy())
        with pytest.raises(ValueError, match="has to be pruned before pruning can be removed"):
            jnn.utils.prune.remove(j, "weight")
