"""torch.nn.utils counterparts: gradient clipping (:mod:`jax_impl.nn.utils.clip_grad`) on torch's CPU norms
(:mod:`jax_impl.nn.utils.linalg_norm`); packed and padded sequences (:mod:`jax_impl.nn.utils.rnn`)."""

from jax_impl.nn.utils.clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)
from jax_impl.nn.utils import rnn
from jax_impl.nn.utils.linalg_norm import get_intra_op_threads, set_intra_op_threads, vector_norm, vector_norms

__all__ = [
    "clip_grad_norm", "clip_grad_norm_", "clip_grad_value", "clip_grad_value_", "clip_grads_with_norm_",
    "get_intra_op_threads", "get_total_norm", "rnn", "set_intra_op_threads", "vector_norm", "vector_norms",
]
