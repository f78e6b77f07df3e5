"""Helpers for the layer tests: torch and jax_impl twins of one layer, and their comparison."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jax_impl.random


def seed_both(seed: int) -> None:
    torch.manual_seed(seed)
    jax_impl.random.manual_seed(seed)


def variable(module, key: str):
    """The nnx variable behind a torch ``state_dict`` key (``layers.0.self_attn.in_proj_weight``)."""
    obj = module
    for part in key.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def load_state(jax_module, torch_module) -> None:
    """Copy torch's parameters and buffers into the jax module, key for key."""
    for key, value in torch_module.state_dict().items():
        variable(jax_module, key)[...] = jnp.asarray(value.detach().numpy())


def max_state_diff(jax_module, torch_module) -> float:
    """Largest absolute difference over torch's state-dict keys (shapes must agree)."""
    worst = 0.0
    for key, value in torch_module.state_dict().items():
        mine = np.asarray(variable(jax_module, key)[...])
        theirs = value.detach().numpy()
        assert mine.shape == theirs.shape, key
        worst = max(worst, float(np.max(np.abs(mine - theirs), initial=0.0)))
    return worst


def rel_err(mine, theirs) -> float:
    mine, theirs = np.asarray(mine, np.float64), np.asarray(theirs, np.float64)
    both_nan = np.isnan(mine) & np.isnan(theirs)
    assert np.array_equal(np.isnan(mine), np.isnan(theirs)), "NaN positions differ"
    mine, theirs = np.where(both_nan, 0, mine), np.where(both_nan, 0, theirs)
    scale = max(float(np.max(np.abs(theirs), initial=0.0)), 1e-300)
    return float(np.max(np.abs(mine - theirs), initial=0.0)) / scale


def input_grad(fn, *args):
    """Output of ``fn`` and the gradient of ``sum(out * fixed weights)`` w.r.t. every float argument.

    One forward pass (``jax.vjp``), so a call that draws dropout masks draws them once, as torch's.
    """
    floats = [i for i, a in enumerate(args) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating)]

    def of_floats(*fl):
        full = list(args)
        for i, a in zip(floats, fl):
            full[i] = a
        return fn(*full)

    out, vjp = jax.vjp(of_floats, *(args[i] for i in floats))
    weights = jnp.cos(jnp.arange(out.size, dtype=out.dtype)).reshape(out.shape)
    return out, vjp(jnp.where(jnp.isnan(out), 0, weights))


def torch_input_grad(fn, *args):
    """torch twin of :func:`input_grad` (``args`` are numpy arrays)."""
    ts = [torch.tensor(a, requires_grad=np.issubdtype(a.dtype, np.floating)) for a in args]
    out = fn(*ts)
    weights = torch.cos(torch.arange(out.numel(), dtype=out.dtype)).reshape(out.shape)
    loss = torch.where(torch.isnan(out), 0, out * weights).sum()
    loss.backward()
    return out.detach().numpy(), tuple(t.grad.numpy() for t in ts if t.requires_grad)
