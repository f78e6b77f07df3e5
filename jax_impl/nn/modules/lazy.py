"""torch's lazy modules (``torch/nn/modules/lazy.py``): parameters whose shapes the first call decides.

A lazy module holds :class:`UninitializedParameter` placeholders until its
first call; the call reads the shapes off the input (``initialize_parameters``),
materialises the parameters with torch's ``reset_parameters`` init, and turns
the module into its ``cls_to_become`` (``LazyConv2d`` becomes ``Conv2d``), as
torch's ``LazyModuleMixin._infer_parameters`` forward pre-hook does. With
``rngs=None`` the init draws from torch's global generator stream at that
first call, so the numbers equal torch's lazy module's after the same seed and
the same earlier draws.

The first call runs eagerly or inside ``nnx.jit`` (which carries the new
parameters out); under a plain ``jax.jit`` / ``jax.grad`` closing over the
module, flax refuses any module mutation, the materialisation included: call
the module once on a batch first.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jax_impl.nn.modules.module import Module

__all__ = ["LazyModuleMixin", "UninitializedParameter", "is_lazy"]


class UninitializedParameter(nnx.Param):
    """``torch.nn.UninitializedParameter``: a parameter whose shape is not known yet.

    It holds an empty ``(0,)`` array of the parameter's dtype, as torch's holds
    ``torch.empty(0)``; casting the module before its first call (torch's
    ``.to(dtype)``) casts the placeholder, and the parameter materialises in
    that dtype. Loading a state dict into it is not supported (torch
    materialises it from the checkpoint's shape): call the module once first.
    """

    @classmethod
    def empty(cls, dtype) -> UninitializedParameter:
        return cls(jnp.empty((0,), dtype))


def is_lazy(variable) -> bool:
    """``torch.nn.parameter.is_lazy``: whether ``variable`` is an :class:`UninitializedParameter`."""
    return isinstance(variable, UninitializedParameter)


class LazyModuleMixin(Module):
    """``torch.nn.modules.lazy.LazyModuleMixin`` for ``jax_impl.nn`` layers.

    A :class:`Module` subclass (listed first among a lazy layer's bases, as in
    torch), so the instance layout is the eager class's and the ``__class__``
    switch to ``cls_to_become`` is allowed.

    A subclass implements ``initialize_parameters(*args, **kwargs)`` (materialise
    every :class:`UninitializedParameter` from the first call's arguments) and
    calls :meth:`_infer_parameters` at the top of ``__call__``. After the first
    call the module's class becomes ``cls_to_become``, as torch's does.
    """

    cls_to_become: type | None = None

    def initialize_parameters(self, *args, **kwargs) -> None:
        """Materialise the parameters from the first call's arguments (torch's name and error)."""
        raise NotImplementedError(f"initialize_parameters is not implemented for {type(self).__name__}")

    def has_uninitialized_params(self) -> bool:
        """Whether any parameter is still an :class:`UninitializedParameter`."""
        return any(is_lazy(value) for value in vars(self).values())

    def _infer_parameters(self, *args, **kwargs) -> None:
        """torch's forward pre-hook: materialise, check, then become ``cls_to_become``.

        Inside a traced call (``nnx.jit``) the class stays: nnx carries the new
        parameters out to the caller's module but expects its node type
        unchanged. That module becomes ``cls_to_become`` at its next eager call;
        it computes the same either way.
        """
        if self.has_uninitialized_params():
            self.initialize_parameters(*args, **kwargs)
            if self.has_uninitialized_params():
                raise RuntimeError(f"module {type(self).__name__} has not been fully initialized")
        traced = any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs)))
        if self.cls_to_become is not None and not traced:
            self.__class__ = self.cls_to_become
