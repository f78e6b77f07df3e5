"""``torch.nn.functional.bilinear``: ``y = x1^T A x2 + b`` (``aten/src/ATen/native/Linear.cpp``, ``bilinear``).

torch flattens the inputs to ``(B, in1)`` and ``(B, in2)`` and calls
``_trilinear(x1, weight, x2, expand1=[1, 3], expand2=[0], expand3=[1, 2], sumdim=[2, 3], unroll_dim=1)``,
which loops over the output features ``k``::

    t_k = x1 @ weight[k]                 # (B, in2): a GEMM, rounded to the dtype
    output[:, k] += sum_j t_k[:, j] * x2[:, j]   # a batched dot (bmm), added to zeros

then reshapes to ``(*, out)`` and adds ``bias``. The same two products run
here, for all ``k`` at once: one contraction to ``t`` (rounded to the dtype,
as torch's GEMM output is), one batched dot per output, then the bias.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.nn import _precision

__all__ = ["bilinear"]

# c10's TypeMeta names, as torch's dtype-mismatch message prints them.
_CPP_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}


def _cpp_name(dtype) -> str:
    return _CPP_NAMES.get(jnp.dtype(dtype).name, jnp.dtype(dtype).name)


def _check(x1, x2, weight, bias) -> None:
    """aten ``bilinear``'s checks, in its order and words."""
    arrays = [("input1", x1), ("input2", x2), ("weight", weight)] + ([("bias", bias)] if bias is not None else [])
    if any(a.dtype != x1.dtype for _, a in arrays):
        listed = ", ".join(f"{name}: {_cpp_name(a.dtype)}" for name, a in arrays)
        raise RuntimeError(f"All tensors must have the same dtype, got {listed}")
    if x1.ndim != x2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {x1.ndim} and {x2.ndim}")
    for i in range(x1.ndim - 1):
        if x1.shape[i] != x2.shape[i]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: got {x1.shape[i]} and "
                               f"{x2.shape[i]}")
    if x1.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {x1.shape[-1]} but expected "
                           f"{weight.shape[1]}")
    if x2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {x2.shape[-1]} but expected "
                           f"{weight.shape[2]}")
    if bias is not None and bias.shape[0] != weight.shape[0]:
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.shape[0]} but expected "
                           f"{weight.shape[0]}")


def bilinear(input1: jax.Array, input2: jax.Array, weight: jax.Array, bias: jax.Array | None = None) -> jax.Array:
    """``torch.nn.functional.bilinear``: ``y[..., k] = sum_ij x1[..., i] weight[k, i, j] x2[..., j] + bias[k]``.

    Args:
      input1: ``(*, in1)``.
      input2: ``(*, in2)``, the same leading dimensions as ``input1``.
      weight: ``(out, in1, in2)``.
      bias: ``(out,)`` or ``None``.

    Returns:
      ``(*, out)``. The sums run in torch's two stages (``x1 @ weight[k]``,
      rounded, then its dot with ``x2``); mismatched dtypes or sizes raise
      ``RuntimeError`` with aten's messages.
    """
    x1, x2, w = jnp.asarray(input1), jnp.asarray(input2), jnp.asarray(weight)
    b = None if bias is None else jnp.asarray(bias)
    _check(x1, x2, w, b)
    lead = x1.shape[:-1]
    f1 = x1.reshape(-1, x1.shape[-1])
    f2 = x2.reshape(-1, x2.shape[-1])
    precision = _precision.matmul(x1.dtype)
    # t[k, j, b] = sum_i weight[k, i, j] x1[b, i]: torch's first sumproduct_pair, one GEMM per k.
    t = lax.dot_general(w, f1, (((1,), (1,)), ((), ())), precision=precision)  # (out, in2, B)
    # y[b, k] = sum_j x2[b, j] t[k, j, b]: the second sumproduct_pair, a bmm over b.
    y = lax.dot_general(f2, t, (((1,), (1,)), ((0,), (2,))), precision=precision)  # (B, out)
    y = y.reshape(*lead, w.shape[0])
    return y if b is None else y + b
