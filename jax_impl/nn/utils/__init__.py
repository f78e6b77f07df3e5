"""torch.nn.utils counterparts: gradient clipping (:mod:`jax_impl.nn.utils.clip_grad`)."""

from jax_impl.nn.utils.clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)

__all__ = [
    "clip_grad_norm", "clip_grad_norm_", "clip_grad_value", "clip_grad_value_", "clip_grads_with_norm_",
    "get_total_norm",
]
