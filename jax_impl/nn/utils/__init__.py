"""torch.nn.utils counterparts: gradient clipping (:mod:`jax_impl.nn.utils.clip_grad`) on torch's CPU norms
(:mod:`jax_impl.nn.utils.linalg_norm`); packed and padded sequences (:mod:`jax_impl.nn.utils.rnn`); weight and
spectral normalisation as hooks (:mod:`jax_impl.nn.utils.weight_norm`, :mod:`jax_impl.nn.utils.spectral_norm`)
and as parametrizations (:mod:`jax_impl.nn.utils.parametrize`, :mod:`jax_impl.nn.utils.parametrizations`);
pruning masks (:mod:`jax_impl.nn.utils.prune`)."""

from jax_impl.nn.utils.clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)
from jax_impl.nn.utils import parametrizations, parametrize, prune, rnn
from jax_impl.nn.utils.linalg_norm import get_intra_op_threads, set_intra_op_threads, vector_norm, vector_norms
from jax_impl.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from jax_impl.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = [
    "clip_grad_norm", "clip_grad_norm_", "clip_grad_value", "clip_grad_value_", "clip_grads_with_norm_",
    "get_intra_op_threads", "get_total_norm", "parametrizations", "parametrize", "prune", "remove_spectral_norm",
    "remove_weight_norm", "rnn", "set_intra_op_threads", "spectral_norm", "vector_norm", "vector_norms",
    "weight_norm",
]
