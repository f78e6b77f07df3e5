"""InstanceNorm1d/2d/3d against torch: every combination of affine and track_running_stats, train then eval,
unbatched input; float64 forward, gradients and running statistics within 1e-12 (measured at most 1e-15:
the order of the float64 sums)."""

from __future__ import annotations

import itertools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as jnn
from parity.convert import to_torch_state_dict
from tests._tiers import slow_except

_SHAPES = {"InstanceNorm1d": (3, 4, 7), "InstanceNorm2d": (2, 4, 5, 3), "InstanceNorm3d": (2, 4, 3, 2, 3)}


@pytest.mark.parametrize("name", list(_SHAPES))
# Neither option and both in the default tier, one option alone in the slow tier (the default tier's time budget).
@pytest.mark.parametrize(("affine", "track"), slow_except(itertools.product([False, True], [False, True]),
                                                          {(False, False), (True, True)}, several=True))
def test_matches_torch_in_train_and_eval(name, affine, track):
    with jax.enable_x64(True):
        # A seed of the case's own, the same in every process (str hashes are salted per process).
        rng = np.random.default_rng(zlib.crc32(f"{name}-{affine}-{track}".encode()))
        theirs = getattr(torch.nn, name)(4, affine=affine, track_running_stats=track, momentum=0.3,
                                         dtype=torch.float64)
        ours = getattr(jnn, name)(4, affine=affine, track_running_stats=track, momentum=0.3, dtype=np.float64)
        if affine:
            w, b = rng.standard_normal(4), rng.standard_normal(4)
            with torch.no_grad():
                theirs.weight.copy_(torch.tensor(w))
                theirs.bias.copy_(torch.tensor(b))
            ours.weight[...] = jnp.asarray(w)
            ours.bias[...] = jnp.asarray(b)
        for step in range(2):
            x = rng.standard_normal(_SHAPES[name]) * 3 + 1
            t_x = torch.tensor(x, requires_grad=True)
            t_y = theirs(t_x)
            g = rng.standard_normal(t_y.shape)
            (t_y * torch.tensor(g)).sum().backward()
            graphdef, params, rest = nnx.split(ours, nnx.Param, ...)
            if step == 0:
                def loss(p, x, rest, g, graphdef=graphdef):
                    model = nnx.merge(graphdef, p, jax.tree.map(lambda v: v, rest))
                    y = model(x)
                    return jnp.sum(y * g), (y, nnx.state(model, nnx.Not(nnx.Param)))

                # Jitted: both steps share one compilation (eagerly, every op of both compiles on its own).
                value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))

            (_, (y, new_rest)), (g_p, g_x) = value_and_grad(params, jnp.asarray(x), rest, jnp.asarray(g))
            nnx.update(ours, new_rest)
            np.testing.assert_allclose(np.asarray(y), t_y.detach().numpy(), rtol=0, atol=1e-12)
            np.testing.assert_allclose(np.asarray(g_x), t_x.grad.numpy(), rtol=0, atol=1e-12)
            if affine:
                np.testing.assert_allclose(np.asarray(g_p["weight"][...]), theirs.weight.grad.numpy(), atol=1e-12)
                theirs.weight.grad = theirs.bias.grad = None
            for k, v in theirs.state_dict().items():
                if v.is_floating_point():
                    np.testing.assert_allclose(to_torch_state_dict(ours)[k].numpy(), v.numpy(), rtol=0, atol=1e-12)
        ours.eval()
        theirs.eval()
        x = rng.standard_normal(_SHAPES[name][1:])  # unbatched, in eval mode
        np.testing.assert_allclose(np.asarray(ours(jnp.asarray(x))), theirs(torch.tensor(x)).detach().numpy(),
                                   rtol=0, atol=1e-12)


def test_errors_are_torchs():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        jnn.InstanceNorm2d(3)(jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"expected input's size at dim=1 to match num_features \(3\)"):
        jnn.InstanceNorm1d(3, affine=True)(jnp.zeros((2, 4, 5)))


@pytest.mark.parametrize("name", list(_SHAPES))
def test_affine_without_bias_matches_torch(name):
    """torch's keyword-only ``bias=False``: ``weight`` only (torch's state-dict keys), the same numbers."""
    with jax.enable_x64(True):
        theirs = getattr(torch.nn, name)(4, affine=True, bias=False, dtype=torch.float64)
        ours = getattr(jnn, name)(4, affine=True, bias=False, dtype=np.float64)
        assert ours.bias is None and sorted(to_torch_state_dict(ours)) == sorted(theirs.state_dict()) == ["weight"]
        rng = np.random.default_rng(0)
        w, x = rng.standard_normal(4), rng.standard_normal(_SHAPES[name]) * 3 + 1
        g = rng.standard_normal(_SHAPES[name])
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(w))
        ours.weight[...] = jnp.asarray(w)
        t_x = torch.tensor(x, requires_grad=True)
        t_y = theirs(t_x)
        (t_y * torch.tensor(g)).sum().backward()
        y = ours(jnp.asarray(x))
        g_mod, g_x = nnx.grad(lambda m, x: jnp.sum(m(x) * g), argnums=(0, 1))(ours, jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(y), t_y.detach().numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(g_x), t_x.grad.numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(g_mod["weight"][...]), theirs.weight.grad.numpy(), rtol=0, atol=1e-12)
