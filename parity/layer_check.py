"""Run a torch layer and its ``jax_impl.nn`` twin on the same input; measure forward and gradient agreement.

Used by the layer tests (tests/nn/modules) and docs/parity_layers.py.

Both modules are built after the same seed (``torch.manual_seed`` /
``jax_impl.data.manual_seed``): their parameters must come out bit-identical
(torch-identical init), so the comparison needs no weight copying. Errors are
``max |ours - torch| / max(|torch|, tiny)`` over each array, relative to the
array's scale: sums over many terms lose digits relative to the largest term.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

from jax_impl.data import manual_seed

__all__ = ["FWD_TOL", "GRAD_TOL", "assert_within", "build_pair", "compare_module", "rel_err"]

# Relative-error bars of a layer against torch (forward / gradients), per dtype: its reductions
# sum in another order than torch's, and a gradient goes through more of them than the forward.
FWD_TOL = {np.float32: 1e-5, np.float64: 1e-12}
GRAD_TOL = {np.float32: 1e-4, np.float64: 1e-10}


def rel_err(ours, want) -> float:
    ours, want = np.asarray(ours, np.float64), np.asarray(want, np.float64)
    assert ours.shape == want.shape, (ours.shape, want.shape)
    if want.size == 0:
        return 0.0
    scale = max(np.abs(want).max(), np.finfo(np.float64).tiny)
    return float(np.abs(ours - want).max() / scale)


def build_pair(seed: int, make_torch, make_jax, dtype):
    """Build both modules after the same seed; assert their parameters are bit-identical.

    ``make_torch(torch_dtype)`` and ``make_jax(jnp_dtype)`` build the modules;
    a float64 pair must be built inside ``jax.enable_x64(True)``.
    """
    torch.manual_seed(seed)
    t_mod = make_torch(torch.float64 if dtype == np.float64 else torch.float32)
    manual_seed(seed)
    j_mod = make_jax(jnp.float64 if dtype == np.float64 else jnp.float32)
    ours = {".".join(map(str, k)): np.asarray(v[...]) for k, v in nnx.to_flat_state(nnx.state(j_mod, nnx.Param))}
    theirs = {k: v.detach().numpy() for k, v in t_mod.named_parameters()}
    assert sorted(ours) == sorted(theirs)
    for k in theirs:
        assert ours[k].dtype == theirs[k].dtype, (k, ours[k].dtype, theirs[k].dtype)
        np.testing.assert_array_equal(ours[k], theirs[k], err_msg=f"torch-identical init of {k}")
    return t_mod, j_mod


def compare_module(t_mod, j_mod, x: np.ndarray, seed: int = 0, call_kwargs=None) -> dict[str, float]:
    """Forward and VJP (w.r.t. input and every parameter) of both modules; returns the relative errors."""
    call_kwargs = call_kwargs or {}
    dtype = x.dtype.type
    t_mod.zero_grad(set_to_none=True)  # torch accumulates .grad across backward calls
    tx = torch.tensor(x, requires_grad=True)
    t_out = t_mod(tx, **call_kwargs)
    # A stream of its own: drawn from `seed` alone it would equal the input of a shape-preserving
    # layer, and sum(f(x) * x) can have a near-zero gradient that inflates relative errors.
    ct = np.random.default_rng([seed, 1]).standard_normal(tuple(t_out.shape)).astype(dtype)
    (t_out * torch.tensor(ct)).sum().backward()

    # One forward on a copy, the gradient on the module itself: the module's state (BatchNorm
    # running statistics) then advances once, as torch's did.
    j_out = nnx.jit(lambda m, x: m(x, **call_kwargs))(nnx.clone(j_mod), jnp.asarray(x))
    errors = {"forward": rel_err(j_out, t_out.detach().numpy())}
    g_mod, g_x = nnx.jit(nnx.grad(lambda m, x: jnp.sum(m(x, **call_kwargs) * ct), argnums=(0, 1)))(
        j_mod, jnp.asarray(x)
    )
    errors["grad input"] = rel_err(g_x, tx.grad.numpy())
    flat = {".".join(map(str, k)): v[...] for k, v in nnx.to_flat_state(nnx.state(g_mod, nnx.Param))}
    for name, p in t_mod.named_parameters():
        errors[f"grad {name}"] = rel_err(flat[name], p.grad.numpy())
    return errors


def assert_within(errors: dict[str, float], dtype) -> None:
    for name, err in errors.items():
        bound = FWD_TOL[dtype] if name == "forward" else GRAD_TOL[dtype]
        assert err <= bound, f"{name}: rel err {err:.3g} > {bound:g} ({errors})"
