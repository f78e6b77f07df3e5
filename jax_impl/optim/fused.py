"""torch's ``fused=True`` CPU optimizers: ``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``, ``_fused_adagrad_``.

``torch.optim.Adam/AdamW/SGD/Adagrad(..., fused=True)`` on CPU run one ATen
kernel per parameter (``aten/src/ATen/native/cpu/Fused{Adam,SGD,Adagrad}Kernel.cpp``)
instead of the single-tensor sequence of ``add_``/``lerp_``/``addcmul_``. Its
arithmetic differs from the single-tensor path in three ways, reproduced here:

- ``sqrt`` is ``Vectorized::sqrt``/``std::sqrt``: the IEEE square root, not
  MKL's (``jax_impl.optim.set_sqrt_mode`` does not apply).
- Each parameter is a ``Vectorized`` loop over whole registers (16 float32 /
  8 float64 lanes with AVX-512, 8 / 4 with AVX2) and a scalar loop over the
  ``numel % lanes`` elements left. GCC (``-O3``, ``-ffp-contract=fast``)
  contracts products into FMAs in both, but ``a * b + c * d`` (Adam's second
  moment, SGD's momentum) is fused on the right product in the register loop
  and its code-generated 256-bit copy of the scalar loop, ``fma(c, d, a * b)``
  (as the single-tensor ``addcmul_``/``add_``), and on the left product in
  the scalar elements after that, ``fma(a, b, c * d)``. With AVX-512 the
  scalar loop's first ``r - r % 8`` float32 (``r - r % 4`` float64) elements
  are that 256-bit copy; with AVX2 it has none.
- Host scalars as the kernel computes them, in C++ compiled with the same
  contraction: AdamW's ``1 - lr * weight_decay`` and Adagrad's
  ``1 + (t - 1) * lr_decay`` are float64 FMAs (Python rounds the product
  first), ``std::sqrt(1 - beta2**t)`` (the single-tensor path's ``** 0.5``),
  the step read as float32.

torch's ``DEFAULT`` capability (``ATEN_CPU_CAPABILITY=default``) is compiled
without FMA: every product is rounded on its own. The capability is read as
torch reads it (:func:`torch_cpu_capability`), when the optimizer is built.
Measured against torch 2.13 on AVX-512, AVX2 and DEFAULT: bit-identical in
float32 and float64 (``tests/optim/test_fused.py``).
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl._cpuinfo import cpu_flags
from jax_impl.kernels import TorchOps, lerp_branch_of_one_minus
from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, torch_optimizer
from jax_impl.optim._transforms import adam_family_scalars, negate_if
from jax_impl.optim.adagrad import AdagradState
from jax_impl.optim.adam import AdamState
from jax_impl.optim.sgd import SGDState
from jax_impl.random.fma import fma64

__all__ = ["fused_adagrad", "fused_adam", "fused_sgd", "scalar_tail_size", "torch_cpu_capability"]

_CAPABILITIES = ("avx512", "avx2", "default")


def torch_cpu_capability() -> str:
    """The ATen CPU capability torch dispatches its kernels to: ``"avx512"``, ``"avx2"`` or ``"default"``.

    As ATen's ``compute_cpu_capability``: ``ATEN_CPU_CAPABILITY`` when set,
    else AVX-512 (AVX512VL, BW, DQ and FMA), else AVX2 (AVX2 and FMA), else
    the scalar ``default``. Non-x86 CPUs raise ``NotImplementedError``: their
    fused kernels (NEON/SVE registers) are not reproduced.
    """
    forced = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if forced.startswith("avx512") or forced == "amx":
        return "avx512"
    if forced in ("avx2", "default"):
        return forced
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise NotImplementedError(
            f"fused=True: torch's fused CPU kernels are reproduced for x86-64 (AVX-512, AVX2, default), "
            f"not for {platform.machine()}"
        )
    flags = cpu_flags()
    if {"avx512vl", "avx512bw", "avx512dq", "fma"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "default"


def scalar_tail_size(numel: int, itemsize: int, capability: str) -> int:
    """How many trailing elements of a parameter torch's fused kernel computes one at a time.

    The register loop covers ``numel - numel % lanes`` elements (``lanes`` =
    64 bytes / ``itemsize`` with AVX-512, 32 with AVX2). torch splits a tensor
    across threads in 64-byte cache lines, a multiple of the lanes, so only
    the last thread has a remainder. With AVX-512, GCC vectorizes that
    remainder loop with 256-bit registers, leaving ``r % (32 / itemsize)``
    scalar elements; the ``default`` capability has no FMA, so its elements
    all round alike (0 is returned).
    """
    if capability == "default":
        return 0
    register = (64 if capability == "avx512" else 32) // itemsize
    remainder = numel % register
    return remainder % (32 // itemsize)


class _FusedArith:
    """The products and sums of a fused kernel compiled for one capability.

    ``madd(a, b, c)`` is ``a * b + c`` as GCC emits it: one FMA with FMA
    (``c + a * b`` contracts under XLA as in :class:`~jax_impl.kernels.TorchOps`),
    the rounded product plus ``c`` without.
    """

    def __init__(self, ops: TorchOps, capability: str) -> None:
        self.ops = ops
        self.fma = capability != "default"
        self.capability = capability

    def madd(self, a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
        return c + a * b if self.fma else self.ops.rounded(a * b) + c

    def lerp(self, a: jax.Array, b: jax.Array, w: jax.Array, small_weight: bool | None) -> jax.Array:
        """``a.lerp(b, w)`` as the kernel writes it: ``fmadd(w, b - a, a)`` if ``|w| < 0.5`` else ``fmadd(w - 1, b - a, b)``."""
        if self.fma:
            return self.ops.lerp(a, b, w, small_weight)
        diff = b - a
        small = a + self.ops.rounded(w * diff)
        large = b + self.ops.rounded((w - 1) * diff)
        if small_weight is None:
            return jnp.where(jnp.abs(w) < 0.5, small, large)
        return small if small_weight else large

    def two_products(self, a: jax.Array, b: jax.Array, c: jax.Array, d: jax.Array) -> jax.Array:
        """``a * b + c * d`` of a register-loop element: ``fma(c, d, round(a * b))``."""
        return self.madd(c, d, self.ops.rounded(a * b))

    def two_products_scalar(self, a: jax.Array, b: jax.Array, c: jax.Array, d: jax.Array) -> jax.Array:
        """``a * b + c * d`` of a scalar-loop element: ``fma(a, b, round(c * d))``."""
        return self.madd(a, b, self.ops.rounded(c * d))


def _by_section(tail: int, body_fn: Callable[..., jax.Array], tail_fn: Callable[..., jax.Array],
                *arrays: jax.Array) -> jax.Array:
    """``body_fn`` on the leading elements (row-major), ``tail_fn`` on the last ``tail``; shape kept."""
    shape = arrays[0].shape
    n = arrays[0].size
    if tail == 0:
        return body_fn(*arrays)
    if tail == n:
        return tail_fn(*arrays)
    flat = [a.reshape(-1) for a in arrays]
    k = n - tail
    out = jnp.concatenate([body_fn(*(f[:k] for f in flat)), tail_fn(*(f[k:] for f in flat))])
    return out.reshape(shape)


def _host_madd(a: float, b: float, c: float, capability: str) -> float:
    """``a * b + c`` in float64 as the kernel's C++ computes it: one FMA where it is compiled with FMA."""
    if capability == "default":
        return a * b + c
    return float(fma64(np.float64(a), np.float64(b), np.float64(c)))


def _check_fused_leaf(p: jax.Array) -> None:
    if p.dtype not in (jnp.float32, jnp.float64):
        raise NotImplementedError(
            f"fused=True with {p.dtype} parameters: torch's float16/bfloat16 fused kernels (float32 opmath) "
            "are not reproduced"
        )


def _check_fused_flags(foreach: bool | None, differentiable: bool) -> None:
    """torch's constructor checks for ``fused=True``, in torch's order."""
    if differentiable:
        raise RuntimeError("`fused` does not support `differentiable`")
    if foreach:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def fused_adam(
    lr: Hyperparameter = 1e-3,
    betas: tuple[Hyperparameter, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
    *,
    foreach: bool | None = None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
    decoupled_weight_decay: bool = False,
    capability: str | None = None,
) -> TorchTransformation:
    r"""``torch.optim.Adam(..., fused=True)`` (``AdamW`` with ``decoupled_weight_decay``) on CPU, bit for bit.

    .. math::
        g &\leftarrow g + \lambda p \quad (\text{or } p \leftarrow p(1 - \gamma\lambda) \text{ if decoupled}) \\
        m &\leftarrow \operatorname{lerp}(m, g, 1-\beta_1), \qquad
        v \leftarrow \beta_2 v + (1-\beta_2) g^2 \\
        p &\leftarrow p + \frac{-\gamma/(1-\beta_1^t)\; m}{\sqrt{\max(\hat v_{t-1}, v) \text{ or } v}\,/\,
            \sqrt{1-\beta_2^t} + \epsilon}

    ``v`` is ``fma((1-β2) g, g, round(β2 v))`` in the register loop (as the
    single-tensor path) and ``fma(v, β2, round((1-β2) g · g))`` in the scalar
    tail (:func:`scalar_tail_size`); ``sqrt`` is IEEE; ``sqrt(1 - β2^t)`` is
    ``std::sqrt`` in float64; AdamW's ``1 - γλ`` is a float64 FMA. Hyperparameters are validated by
    :func:`jax_impl.optim.adam` before it dispatches here.

    Args:
      lr, betas, eps, weight_decay, amsgrad, maximize, decoupled_weight_decay:
        as :func:`jax_impl.optim.adam`.
      foreach, differentiable: torch refuses them with ``fused`` (``RuntimeError``).
      capturable: torch's fused kernel reads the step the same way either way
        (on CPU the step tensor lives on the parameter's device regardless), so
        both values give this result.
      capability: ``"avx512"``, ``"avx2"`` or ``"default"``; ``None`` reads
        the CPU (:func:`torch_cpu_capability`).
    """
    _check_fused_flags(foreach, differentiable)
    del capturable
    capability = _resolve_capability(capability)
    beta1, beta2 = betas
    small_weight = lerp_branch_of_one_minus(beta1)

    def host_scalars(step, h, sstate):
        t = float(step)  # the kernel reads its float32 step tensor as a double
        bias_correction1 = 1 - h["beta1"] ** t
        bias_correction2 = 1 - h["beta2"] ** t
        return {
            **adam_family_scalars(h),
            "decay": _host_madd(-h["lr"], h["weight_decay"], 1.0, capability),
            "bias_correction2_sqrt": math.sqrt(bias_correction2),
            "neg_step_size": -(h["lr"] / bias_correction1),
        }, {}

    def init_leaf(p):
        return _buffers.zeros_like(p), _buffers.zeros_like(p), _buffers.zeros_like(p) if amsgrad else None

    def update_leaf(ops, c, step, g, p, m, v, v_max):
        _check_fused_leaf(p)
        arith = _FusedArith(ops, capability)
        g = negate_if(maximize, g)
        if weight_decay != 0:
            if decoupled_weight_decay:
                p = ops.mul(p, c["decay"])
            else:
                g = arith.madd(p, c["weight_decay"], g)
        m = arith.lerp(m, g, c["one_minus_beta1"], small_weight)
        tail = scalar_tail_size(p.size, p.dtype.itemsize, capability)
        v = _by_section(
            tail,
            lambda v, g: arith.two_products(v, c["beta2"], ops.rounded(c["one_minus_beta2"] * g), g),
            lambda v, g: arith.two_products_scalar(v, c["beta2"], ops.rounded(c["one_minus_beta2"] * g), g),
            v, g,
        )
        if amsgrad:
            v_max = ops.maximum(v_max, v)
        denom = ops.div_scalar(jnp.sqrt(v_max if amsgrad else v), c["bias_correction2_sqrt"]) + c["eps"]
        return ops.addcdiv(p, m, denom, value=c["neg_step_size"]), m, v, v_max

    return torch_optimizer(
        state_cls=AdamState,
        hyper={"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
        converges=True,
    )


def fused_sgd(
    lr: Hyperparameter = 1e-3,
    momentum: Hyperparameter = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    *,
    maximize: bool = False,
    foreach: bool | None = None,
    differentiable: bool = False,
    capability: str | None = None,
) -> TorchTransformation:
    r"""``torch.optim.SGD(..., fused=True)`` on CPU, bit for bit.

    .. math::
        g &\leftarrow -g \text{ if maximize};\quad g \leftarrow g + \lambda\,p \text{ if } \lambda \ne 0 \\
        b &\leftarrow g \text{ (first step)},\quad b \leftarrow \mu b + (1-\tau) g \text{ (later)} \\
        g &\leftarrow g + \mu b \text{ if nesterov, else } b \\
        p &\leftarrow p - \gamma\, g

    ``μb + (1-τ)g`` is ``fma(g, 1-τ, round(μb))`` in the register loop (as
    the single-tensor ``mul_(μ).add_(g, alpha=1-τ)``) and
    ``fma(b, μ, round((1-τ)g))`` in the scalar tail (:func:`scalar_tail_size`):
    with ``τ = 0`` the tail's momentum is one rounding where the
    single-tensor path has two. Hyperparameters are validated by
    :func:`jax_impl.optim.sgd` before it dispatches here.

    Args:
      lr, momentum, dampening, weight_decay, nesterov, maximize: as :func:`jax_impl.optim.sgd`.
      foreach, differentiable: torch refuses them with ``fused`` (``RuntimeError``).
      capability: ``"avx512"``, ``"avx2"`` or ``"default"``; ``None`` reads the CPU.
    """
    _check_fused_flags(foreach, differentiable)
    capability = _resolve_capability(capability)
    use_momentum = callable(momentum) or momentum != 0

    def host_scalars(step, h, sstate):
        return {"neg_lr": -h["lr"], "momentum": h["momentum"], "one_minus_dampening": 1 - h["dampening"],
                "weight_decay": h["weight_decay"]}, {}

    def init_leaf(p):
        return (_buffers.zeros_like(p) if use_momentum else None,)

    def update_leaf(ops, c, step, g, p, buf):
        _check_fused_leaf(p)
        arith = _FusedArith(ops, capability)
        g = negate_if(maximize, g)
        if weight_decay != 0:
            g = arith.madd(p, c["weight_decay"], g)
        if use_momentum:
            tail = scalar_tail_size(p.size, p.dtype.itemsize, capability)
            later = _by_section(
                tail,
                lambda b, g: arith.two_products(b, c["momentum"], g, c["one_minus_dampening"]),
                lambda b, g: arith.two_products_scalar(b, c["momentum"], g, c["one_minus_dampening"]),
                buf, g,
            )
            buf = jnp.where(step == 1, g, later)  # is_first_step: the buffer is the gradient
            g = arith.madd(buf, c["momentum"], g) if nesterov else buf
        return arith.madd(g, c["neg_lr"], p), buf

    return torch_optimizer(
        state_cls=SGDState,
        hyper={"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("momentum_buffer",),
        step_dependent=False,
    )


def fused_adagrad(
    lr: Hyperparameter = 1e-2,
    lr_decay: float = 0.0,
    weight_decay: float = 0.0,
    initial_accumulator_value: float = 0.0,
    eps: float = 1e-10,
    foreach: bool | None = None,
    *,
    maximize: bool = False,
    differentiable: bool = False,
    capability: str | None = None,
) -> TorchTransformation:
    r"""``torch.optim.Adagrad(..., fused=True)`` on CPU, bit for bit.

    .. math::
        \tilde\gamma = \frac{\gamma}{1 + (t-1)\,\eta}, \qquad
        s \leftarrow s + g^2, \qquad
        p \leftarrow p - \frac{\tilde\gamma\, g}{\sqrt{s} + \epsilon}

    The register loop and the scalar tail round alike (one product per
    sum); the differences from the single-tensor path are the IEEE ``sqrt``
    (torch's single-tensor ``sqrt`` is MKL's) and ``1 + (t-1)η``, one float64
    FMA. Hyperparameters are validated
    by :func:`jax_impl.optim.adagrad` before it dispatches here.

    Args:
      lr, lr_decay, weight_decay, initial_accumulator_value, eps, maximize: as :func:`jax_impl.optim.adagrad`.
      foreach, differentiable: torch refuses them with ``fused`` (``RuntimeError``).
      capability: ``"avx512"``, ``"avx2"`` or ``"default"``; ``None`` reads the CPU.
    """
    _check_fused_flags(foreach, differentiable)
    capability = _resolve_capability(capability)

    def host_scalars(step, h, sstate):
        clr = h["lr"] / _host_madd(float(step) - 1.0, h["lr_decay"], 1.0, capability)
        return {"neg_clr": -clr, "eps": h["eps"], "weight_decay": h["weight_decay"]}, {}

    def init_leaf(p):
        return (_buffers.full_like(p, initial_accumulator_value),)

    def update_leaf(ops, c, step, g, p, state_sum):
        _check_fused_leaf(p)
        arith = _FusedArith(ops, capability)
        g = negate_if(maximize, g)
        if weight_decay != 0:
            g = arith.madd(p, c["weight_decay"], g)
        state_sum = arith.madd(g, g, state_sum)
        std = jnp.sqrt(state_sum) + c["eps"]
        return ops.addcdiv(p, g, std, value=c["neg_clr"]), state_sum

    return torch_optimizer(
        state_cls=AdagradState,
        hyper={"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("sum",),
        step_dependent=lr_decay != 0,
    )


def _resolve_capability(capability: Any) -> str:
    if capability is None:
        return torch_cpu_capability()
    if capability not in _CAPABILITIES:
        raise ValueError(f"capability must be one of {_CAPABILITIES}, got {capability!r}")
    return capability
