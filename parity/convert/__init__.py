"""Conversion of torch state (``state_dict`` s) to the JAX side and back.

Strict by design, as Hugging Face's ``modeling_flax_pytorch_utils`` is: every
missing or unexpected key, shape or dtype mismatch raises an error that names
the parameter and the key.
"""

from parity.convert.modules import load_torch_state_dict, module_state, tied_keys, to_torch_state_dict
from parity.convert.optim import (
    grouped_optimizer_state_from_torch,
    grouped_optimizer_state_to_torch,
    optimizer_state_from_torch,
    optimizer_state_to_torch,
)

__all__ = [
    "load_torch_state_dict",
    "module_state",
    "grouped_optimizer_state_from_torch",
    "grouped_optimizer_state_to_torch",
    "optimizer_state_from_torch",
    "optimizer_state_to_torch",
    "tied_keys",
    "to_torch_state_dict",
]
