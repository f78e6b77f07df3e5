"""``torch.autocast(device_type="cpu", dtype=torch.bfloat16)`` for ``jax_impl``: which ops run in bf16, which in float32.

torch's CPU autocast (``aten/src/ATen/autocast_mode.cpp``,
``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)``) sorts ops into three lists; an
op on no list runs in its inputs' dtype (``relu``, ``max_pool2d``,
``batch_norm``, ``softmax``, ``layer_norm`` on a bf16 tensor stay bf16):

- ``lower_precision_fp`` (:data:`LOWER_PRECISION_FP`): floating inputs other
  than float64 are cast to the autocast dtype, so the op computes and
  returns bf16 (``linear``, ``conv*``, ``matmul``, ``prelu``,
  ``scaled_dot_product_attention``, ...);
- ``fp32`` (:data:`FP32`): floating inputs other than float64 are cast to
  float32 (the losses, 3-d pooling, reflection/replication padding, ...);
- ``promote`` (:data:`PROMOTE`): inputs are cast to the widest floating dtype
  among them (``cat``, ``stack``, ``index_copy``).

The lists are the ops torch 2.13's dispatcher holds an ``AutocastCPU``
kernel for (``torch._C._dispatch_has_kernel_for_dispatch_key(op,
"AutocastCPU")``), sorted by the dtype each returns under autocast.

:func:`autocast` is a Python-level context: ``jax_impl.nn.functional``'s ops
read it while they are traced. A function jitted outside the context and
called inside it keeps its trace (as with any Python state jax traces);
enter the context inside the jitted function, as
``jax_impl.train.train_step(..., autocast=jnp.bfloat16)`` does. Parameters
stay float32: the casts are ops in the trace, so their gradients flow back
to float32 (torch's ``to_copy`` backward).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["FP32", "LOWER_PRECISION_FP", "PROMOTE", "autocast", "autocast_op", "cast_inputs", "get_autocast_dtype",
           "is_autocast_enabled"]

# aten op names (overload names dropped) of torch 2.13's AutocastCPU kernels, by cast policy.
LOWER_PRECISION_FP = frozenset({
    "_addmm_activation", "_convolution", "_native_multi_head_attention", "addbmm", "addmm", "baddbmm", "bmm",
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "linalg_vecdot", "linear", "matmul", "mkldnn_rnn_layer", "mm", "prelu", "scaled_dot_product_attention",
})
FP32 = frozenset({
    "_grid_sampler_2d_cpu_fallback", "_lu_with_info", "adaptive_avg_pool3d", "adaptive_max_pool3d", "avg_pool3d",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cdist", "cholesky", "cholesky_inverse",
    "cholesky_solve", "cosine_embedding_loss", "cross_entropy_loss", "ctc_loss", "fake_quantize_per_tensor_affine",
    "fft_fft", "fft_fft2", "fft_fftn", "fft_hfft", "fft_ifft", "fft_ifft2", "fft_ifftn", "fft_ihfft", "fft_irfft",
    "fft_irfft2", "fft_irfftn", "fft_rfft", "fft_rfft2", "fft_rfftn", "fractional_max_pool2d",
    "fractional_max_pool3d", "geqrf", "grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "hinge_embedding_loss",
    "huber_loss", "inverse", "kl_div", "l1_loss", "linalg_cholesky", "linalg_cholesky_ex", "linalg_cond",
    "linalg_eig", "linalg_eigh", "linalg_eigvals", "linalg_eigvalsh", "linalg_householder_product", "linalg_inv",
    "linalg_inv_ex", "linalg_lstsq", "linalg_matrix_rank", "linalg_qr", "linalg_solve", "linalg_svd",
    "linalg_svdvals", "linalg_tensorinv", "linalg_tensorsolve", "lu_solve", "margin_ranking_loss", "max_pool3d",
    "max_unpool2d", "max_unpool3d", "mse_loss", "multi_margin_loss", "multilabel_margin_loss",
    "multilabel_margin_loss_forward", "nanquantile", "nll_loss", "nll_loss2d", "orgqr", "ormqr", "pinverse",
    "poisson_nll_loss", "polar", "prod", "qr", "quantile", "reflection_pad1d", "reflection_pad2d",
    "replication_pad1d", "replication_pad2d", "replication_pad3d", "smooth_l1_loss", "soft_margin_loss", "stft",
    "svd", "trace", "triangular_solve", "triplet_margin_loss", "view_as_complex",
})
PROMOTE = frozenset({"cat", "index_copy", "stack"})

# torch's CPU autocast accepts these two lower-precision dtypes (torch/amp/autocast_mode.py).
_SUPPORTED = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


class _State(threading.local):
    def __init__(self) -> None:
        self.dtype: Any = None  # the active lower-precision dtype, None outside autocast


_state = _State()


@contextlib.contextmanager
def autocast(dtype: Any = jnp.bfloat16, enabled: bool = True) -> Iterator[None]:
    """``torch.autocast(device_type="cpu", dtype=dtype, enabled=enabled)`` for the ops traced inside.

    Args:
      dtype: the lower-precision dtype, ``jnp.bfloat16`` (torch's CPU default)
        or ``jnp.float16``.
      enabled: ``False`` turns autocast off inside (also inside an enclosing
        ``autocast``), as torch's ``enabled=False``.

    Raises:
      ValueError: ``dtype`` is neither bfloat16 nor float16 (torch's CPU
        autocast supports only these two).
    """
    dtype = jnp.dtype(dtype)
    if enabled and dtype not in _SUPPORTED:
        raise ValueError(f"CPU autocast supports bfloat16 and float16 only, got {dtype}")
    outer = _state.dtype
    _state.dtype = dtype if enabled else None
    try:
        yield
    finally:
        _state.dtype = outer


def is_autocast_enabled() -> bool:
    """``torch.is_autocast_enabled("cpu")``: whether ops traced now follow the autocast policy."""
    return _state.dtype is not None


def get_autocast_dtype() -> Any:
    """The active autocast dtype (``torch.get_autocast_dtype("cpu")`` while enabled), ``None`` outside autocast."""
    return _state.dtype


def _eligible(x: Any) -> bool:
    # torch's is_eligible: a defined floating tensor that is not float64 (autocast never touches float64).
    return (isinstance(x, (jnp.ndarray, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating)
            and x.dtype != jnp.float64)


def cast_inputs(op: str, *arrays: Any) -> tuple[Any, ...]:
    """``arrays`` cast as torch's CPU autocast casts the inputs of aten op ``op``; unchanged outside autocast.

    ``None``, Python scalars, integer arrays and float64 arrays pass through.
    ``op`` on none of the lists (:data:`LOWER_PRECISION_FP`, :data:`FP32`,
    :data:`PROMOTE`) casts nothing: it runs in its inputs' dtype.
    """
    target = _state.dtype
    if target is None:
        return arrays
    if op in LOWER_PRECISION_FP:
        to = target
    elif op in FP32:
        to = jnp.dtype(jnp.float32)
    elif op in PROMOTE:
        floats = [x.dtype for x in arrays if _eligible(x)]
        if not floats:
            return arrays
        to = jnp.result_type(*floats)
    else:
        return arrays
    return tuple(x.astype(to) if _eligible(x) and x.dtype != to else x for x in arrays)


def autocast_op(op: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorates a function that implements aten op ``op``: its array arguments (positional and keyword) are
    cast by :func:`cast_inputs` before it runs, as torch's ``AutocastCPU`` kernel casts the op's tensors."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def cast_then_run(*args: Any, **kwargs: Any) -> Any:
            if _state.dtype is None:
                return fn(*args, **kwargs)
            args = cast_inputs(op, *args)
            kwargs = dict(zip(kwargs, cast_inputs(op, *kwargs.values())))
            return fn(*args, **kwargs)

        return cast_then_run

    return decorate
