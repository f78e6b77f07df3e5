"""``torch.optim.Muon``: momentum orthogonalised by a bfloat16 Newton-Schulz iteration, for 2-D parameters."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.kernels import TorchOps, lerp_branch, lerp_branch_of_one_minus
from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, is_host_schedule, torch_optimizer
from jax_impl.cpu_reductions import divide, two_product, two_sum

__all__ = ["muon", "MuonState"]

# torch/optim/_muon.py's defaults (Keller Jordan's quintic coefficients).
EPS = 1e-7
DEFAULT_A = 3.4445
DEFAULT_B = -4.7750
DEFAULT_C = 2.0315
DEFAULT_NS_STEPS = 5


class MuonState(NamedTuple):
    count: jax.Array
    momentum_buffer: Any


def _adjust_lr_ratio(adjust_lr_fn: str | None, shape: tuple[int, ...]) -> float:
    """torch's ``_adjust_lr`` factor in Python float64: ``sqrt(max(1, A / B))`` or ``0.2 * sqrt(max(A, B))``."""
    a, b = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, a / b))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(a, b))
    return 1.0


def _bf16_norm(x: jax.Array) -> jax.Array:
    """``x.norm()`` of a bfloat16 tensor on CPU (torch's ``is_reduce_lastdim`` kernel), as bfloat16.

    The squares of bfloat16 values are exact in float32. Each 16-element
    ``Vectorized<BFloat16>`` is added to one 8-lane float32 accumulator as
    two halves, so lane ``j`` sums elements ``j, j + 8, ...`` of the first
    ``n - n % 16`` in order; then the lanes in order, then the rest one by one,
    then ``std::sqrt`` in float32, rounded to bfloat16.
    """
    v = x.reshape(-1).astype(jnp.float32)
    n = v.shape[0]
    if n == 1:
        return jnp.abs(x.reshape(-1)[0])
    body = n - n % 16
    total = jnp.zeros((), jnp.float32)
    if body:
        squares = (v[:body] * v[:body]).reshape(-1, 8)
        acc, _ = jax.lax.scan(lambda a, t: (a + t, None), jnp.zeros((8,), jnp.float32), squares)
        total = acc[0]
        for j in range(1, 8):
            total = total + acc[j]
    for i in range(body, n):
        total = total + v[i] * v[i]  # exact products: no FMA question
    return jnp.sqrt(total).astype(jnp.bfloat16)


def _to_bf16(hi: jax.Array, lo: jax.Array) -> jax.Array:
    """``hi + lo`` (``|lo|`` under half an ULP of ``hi``) rounded once to bfloat16, to nearest even.

    Rounding ``hi`` alone differs only where ``hi`` is exactly halfway
    between two bfloat16 values: there the sign of ``lo`` decides.
    """
    bits = jax.lax.bitcast_convert_type(hi, jnp.uint32)
    down = jax.lax.bitcast_convert_type(bits & jnp.uint32(0xFFFF0000), jnp.float32)  # toward zero
    up = jax.lax.bitcast_convert_type((bits & jnp.uint32(0xFFFF0000)) + jnp.uint32(0x10000), jnp.float32)  # away
    halfway = ((bits & jnp.uint32(0xFFFF)) == 0x8000) & (lo != 0)
    away = (lo > 0) == (hi > 0)
    return jnp.where(halfway, jnp.where(away, up, down), hi).astype(jnp.bfloat16)


def _bf16_addmm(ops: TorchOps, c: jax.Array, a: jax.Array, b: jax.Array, beta: float, alpha: float) -> jax.Array:
    """``torch.addmm(c, a, b, beta=beta, alpha=alpha)`` in bfloat16: ``beta * c + alpha * (a @ b)`` rounded once.

    The bfloat16 products are exact in float32 and summed in float32 (XLA's
    order, not oneDNN's); ``beta * c + alpha * P`` is then carried exactly as
    a float32 pair and rounded once to bfloat16, as torch's result is
    (measured: torch's bfloat16 ``mm``/``addmm`` equal the exactly computed
    value rounded once, but for about 1 element in 40000).
    """
    product = jnp.matmul(a, b, preferred_element_type=jnp.float32, precision=jax.lax.Precision.HIGHEST)
    if beta == 0.0 and alpha == 1.0:
        return product.astype(jnp.bfloat16)
    hi, lo = two_product(ops, jnp.broadcast_to(jnp.float32(alpha), product.shape), product)
    if beta != 0.0:
        chi, clo = two_product(ops, jnp.broadcast_to(jnp.float32(beta), product.shape), c.astype(jnp.float32))
        hi, err = two_sum(hi, chi)
        lo = ops.rounded(lo + clo) + err
        hi, lo = two_sum(hi, lo)
    return _to_bf16(hi, lo)


def zeropower_via_newtonschulz(ops: TorchOps, grad: jax.Array, ns_coefficients: tuple[float, float, float],
                               ns_steps: int, eps: float) -> jax.Array:
    r"""torch's ``_zeropower_via_newtonschulz``: the quintic Newton-Schulz iteration in bfloat16.

    ``X = bf16(G)`` (transposed when tall), ``X /= max(‖X‖, ε)``, then ``ns_steps`` times
    ``A = X Xᵀ; B = b A + c A A; X = a X + B X`` (``torch.addmm``), transposed back.
    """
    a, b, c = ns_coefficients
    x = grad.astype(jnp.float32).astype(jnp.bfloat16)  # torch rounds a float64 to float32, then to bfloat16
    norm = jnp.maximum(_bf16_norm(x).astype(jnp.float32), jnp.float32(eps)).astype(jnp.bfloat16)
    x = divide(ops, x.astype(jnp.float32), norm.astype(jnp.float32)).astype(jnp.bfloat16)
    tall = grad.shape[0] > grad.shape[1]
    if tall:
        x = x.T
    for _ in range(ns_steps):
        gram = _bf16_addmm(ops, x, x, x.T, 0.0, 1.0)
        gram_update = _bf16_addmm(ops, gram, gram, gram, b, c)
        x = _bf16_addmm(ops, x, gram_update, x, a, 1.0)
    return x.T if tall else x


def muon(
    lr: Hyperparameter = 1e-3,
    weight_decay: float = 0.1,
    momentum: float = 0.95,
    nesterov: bool = True,
    ns_coefficients: tuple[float, float, float] = (DEFAULT_A, DEFAULT_B, DEFAULT_C),
    eps: float = EPS,
    ns_steps: int = DEFAULT_NS_STEPS,
    adjust_lr_fn: str | None = None,
) -> TorchTransformation:
    r"""``torch.optim.Muon`` on its single-tensor CPU path (2-D parameters only).

    .. math::
        B &\leftarrow \operatorname{lerp}(B, g, 1 - \mu), \qquad
        \tilde B = \operatorname{lerp}(g, B, \mu) \text{ if nesterov else } B \\
        O &= \mathrm{NS}^{(a,b,c)}_k(\tilde B; \varepsilon) \text{ (bfloat16)}, \qquad
        p \leftarrow p (1 - \gamma\lambda) - \gamma' O

    with ``γ' = γ · sqrt(max(1, A/B))`` (``adjust_lr_fn`` ``None``/``"original"``)
    or ``γ · 0.2 · sqrt(max(A, B))`` (``"match_rms_adamw"``), Python float64.
    Everything but the bfloat16 matrix products is torch's arithmetic bit for
    bit; the products are float32 sums rounded once to bfloat16 as torch's
    are, but XLA adds in another order than torch's oneDNN kernel, which
    flips a bfloat16 rounding now and then (see docs/optimizers.md for the
    measured distance).

    Args:
      lr: γ (float or host schedule).
      weight_decay: λ, decoupled (``p *= 1 - γλ`` every step, as torch).
      momentum: μ.
      nesterov: use ``lerp(g, B, μ)`` instead of ``B``.
      ns_coefficients: (a, b, c) of the quintic iteration.
      eps: floor of the Frobenius norm the iteration starts by dividing by.
      ns_steps: iterations (< 100).
      adjust_lr_fn: ``None``/``"original"`` or ``"match_rms_adamw"``.
    """
    if not callable(lr) and not 0.0 <= lr:
        raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
    if not 0.0 <= momentum:
        raise ValueError(f"momentum should be >= 0 but is: {momentum}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
    if adjust_lr_fn is not None and adjust_lr_fn not in ["original", "match_rms_adamw"]:
        raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
    # torch raises these two at its first step; here when the optimizer is built.
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    if callable(lr) and not is_host_schedule(lr):
        raise NotImplementedError("muon: lr must be a float or a host schedule (torch's adjusted lr is float64 maths)")
    buffer_branch = lerp_branch_of_one_minus(momentum)
    nesterov_branch = lerp_branch(momentum)

    def host_scalars(step, h, sstate):
        return {"one_minus_momentum": 1 - momentum, "momentum": momentum, "decay": 1 - h["lr"] * weight_decay}, {}

    def init_leaf(p):
        if p.ndim != 2:
            raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter with size: "
                             f"torch.Size({list(p.shape)})")
        return (_buffers.zeros_like(p),)

    def neg_adjusted_lr(step: jax.Array, shape: tuple[int, ...], dtype: np.dtype) -> jax.Array:
        ratio = _adjust_lr_ratio(adjust_lr_fn, shape)
        if not callable(lr):
            return jnp.asarray(-(lr * ratio), dtype)
        return jax.pure_callback(lambda s: np.asarray(-(float(lr(int(s) - 1)) * ratio), dtype),
                                 jax.ShapeDtypeStruct((), dtype), step, vmap_method="sequential")

    def update_leaf(ops, c, step, g, p, buf):
        if g.ndim != 2:
            raise ValueError("Param gradient must be a 2D matrix")
        buf = ops.lerp(buf, g, c["one_minus_momentum"], buffer_branch)
        update = ops.lerp(g, buf, c["momentum"], nesterov_branch) if nesterov else buf
        ortho = zeropower_via_newtonschulz(ops, update, tuple(ns_coefficients), ns_steps, eps)
        p = ops.mul(p, c["decay"])
        return ops.add(p, ortho.astype(p.dtype), neg_adjusted_lr(step, p.shape, np.dtype(p.dtype))), buf

    return torch_optimizer(
        state_cls=MuonState,
        hyper={"lr": lr},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("momentum_buffer",),
        step_dependent=False,
    )
