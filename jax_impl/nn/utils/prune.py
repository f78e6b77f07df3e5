"""``torch.nn.utils.prune``: pruning methods and their reparametrisation (a pruned tensor is its original
times a mask).

torch (``torch/nn/utils/prune.py``) moves the parameter ``weight`` to ``weight_orig``, keeps the mask as the
buffer ``weight_mask`` and, before every forward, sets ``weight = weight_mask.to(weight_orig.dtype) *
weight_orig``, so pruned entries get no gradient through ``weight``. A pruning method computes a mask from
importance scores (by default the tensor itself) on top of the mask already there; pruning a tensor again
computes the new mask on its entries (or channels) not pruned yet, torch's ``PruningContainer``:

- ``l1_unstructured``: the ``amount`` entries of smallest ``|t|`` (torch's CPU ``topk``, ties included);
- ``random_unstructured``: the ``amount`` entries of largest ``rand_like(t)`` on torch's global stream;
- ``ln_structured``: keeps the channels along ``dim`` of largest ``torch.norm(t, p=n)`` over the other
  dims;
- ``random_structured``: keeps the channels whose ``rand(channels)`` draw exceeds its ``amount``-th
  smallest;
- ``global_unstructured``: one method over the parameters concatenated (``parameters_to_vector``);
- ``custom_from_mask``, ``identity``: a mask you give, a mask of ones.

``amount`` is a count (an ``int``) or a fraction (a ``float`` in ``[0, 1]``, rounded as Python's
``round(amount * size)``). The random methods draw from :mod:`jax_impl.random`'s global generator, so after
``torch.manual_seed(s)`` and ``jax_impl.random.manual_seed(s)`` both prune the same entries.

One difference: torch's ``module.weight`` outside a forward is the tensor its last forward (or pruning call)
computed, so importance scores read after an optimizer step and before the next forward lag that step.
Here ``module.weight`` is always ``mask * orig`` of now: to compare such a loop with torch, run a forward
first (an evaluation) or pass ``importance_scores``.
"""

from __future__ import annotations

import abc
import dataclasses
import numbers
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax_impl import random as jrandom
from jax_impl import sorting
from jax_impl.nn.modules.module import Buffer
from jax_impl.nn.utils import _weight_hooks
from jax_impl.tensor_ops import torch_vector_norm

__all__ = [
    "BasePruningMethod", "CustomFromMask", "Identity", "L1Unstructured", "LnStructured", "Pruning",
    "PruningContainer", "RandomStructured", "RandomUnstructured", "custom_from_mask", "global_unstructured",
    "identity", "is_pruned", "l1_unstructured", "ln_structured", "random_structured", "random_unstructured",
    "remove",
]


@dataclasses.dataclass(frozen=True)
class Pruning:
    """torch's pruning pre-hook: ``module.<name> = <name>_mask * <name>_orig``."""

    name: str = "weight"

    def before_call(self, module: Any) -> None:
        """Nothing: the pruned tensor depends on the parameter and the mask alone."""

    def compute(self, module: Any):
        """``mask.astype(orig.dtype) * orig`` (torch's ``apply_mask``)."""
        orig = getattr(module, self.name + "_orig")[...]
        return getattr(module, self.name + "_mask")[...].astype(orig.dtype) * orig


def _pruning(module: Any, name: str) -> Pruning | None:
    for hook in _weight_hooks.hooks(module):
        if isinstance(hook, Pruning) and hook.name == name:
            return hook
    return None


def _value(x: Any) -> jax.Array:
    return x[...] if isinstance(x, nnx.Variable) else jnp.asarray(x)


def _size(shape) -> str:
    """A shape as torch prints one in these messages."""
    return f"torch.Size([{', '.join(map(str, shape))}])"


def _validate_pruning_amount_init(amount: Any) -> None:
    """torch's check at construction: a non-negative ``int`` or a ``float`` in ``[0, 1]``."""
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
            not isinstance(amount, numbers.Integral) and (float(amount) > 1.0 or float(amount) < 0.0)):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")


def _compute_nparams_toprune(amount: Any, tensor_size: int) -> int:
    """The number of units to prune: ``amount`` itself, or ``round(amount * tensor_size)``."""
    return amount if isinstance(amount, numbers.Integral) else round(amount * tensor_size)


def _check_k(count: Any, function: str) -> None:
    """torch passes the count on to ``topk``/``kthvalue``, which refuse a bool (``amount=True``)."""
    if isinstance(count, bool) and count:
        raise TypeError(f"{function}(): argument 'k' must be int, not bool")


def _validate_pruning_amount(amount: int, tensor_size: int) -> None:
    if amount > tensor_size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to prune={tensor_size}")


def _validate_structured_pruning(t: jax.Array) -> None:
    if t.ndim <= 1:
        raise ValueError("Structured pruning can only be applied to multidimensional tensors. Found tensor of "
                         f"shape {_size(t.shape)} with {t.ndim} dims")


def _validate_pruning_dim(t: jax.Array, dim: int) -> None:
    if dim >= t.ndim or dim < -t.ndim:
        raise IndexError(f"Invalid index {dim} for tensor of size {_size(t.shape)}")


def _compute_norm(t: jax.Array, n: Any, dim: int) -> jax.Array:
    """``torch.norm(t, p=n, dim=<every dim but dim>)``: a vector norm (``'fro'`` is the 2-norm over at most
    two dims); the nuclear norm is not provided."""
    dims = [d for d in range(t.ndim) if d != dim % t.ndim]
    if isinstance(n, str):
        if n == "fro" and len(dims) <= 2:
            return torch_vector_norm(t, 2, tuple(dims))
        if n == "nuc" and len(dims) == 2:
            raise NotImplementedError("ln_structured with n='nuc' (the nuclear norm: an SVD) is not provided")
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dims))}")
    return torch_vector_norm(t, 2.0 if n is None else n, tuple(dims))


class BasePruningMethod(abc.ABC):
    """torch's ``BasePruningMethod``: subclass it with ``PRUNING_TYPE`` (``'unstructured'``,
    ``'structured'`` with a ``dim`` attribute, or ``'global'``) and ``compute_mask``, then prune with
    ``YourMethod.apply(module, name, ...)``."""

    PRUNING_TYPE: str = "unstructured"
    _tensor_name: str | None = None

    @abc.abstractmethod
    def compute_mask(self, t: jax.Array, default_mask: jax.Array) -> jax.Array:
        """The mask for importance scores ``t``, on top of ``default_mask`` (ones if nothing is pruned yet)."""

    def apply_mask(self, module: Any) -> jax.Array:
        """``<name>_mask.astype(<name>_orig.dtype) * <name>_orig``."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {type(module).__name__} has to be pruned")
        return Pruning(self._tensor_name).compute(module)

    @classmethod
    def apply(cls, module: Any, name: str, *args: Any, importance_scores: Any = None,
              **kwargs: Any) -> BasePruningMethod:
        """Prune ``module.<name>`` by ``cls(*args, **kwargs)``, as torch's ``BasePruningMethod.apply``.

        The first pruning of a tensor moves the parameter to ``<name>_orig`` and adds the buffer
        ``<name>_mask``; a later one computes the new mask on the entries (channels) the stored mask keeps and
        replaces the buffer by it.

        Args:
          module: a ``jax_impl.nn`` layer holding ``<name>`` as an ``nnx.Param``, or pruned on it already.
          name: the parameter's name.
          *args: the method's arguments.
          importance_scores: scores of the parameter's shape (default: the tensor, ``mask * orig`` if pruned).
          **kwargs: the method's keyword arguments.

        Returns:
          The method, or a :class:`PruningContainer` ending with it if the tensor was pruned already (the
          earlier methods are not kept: their effect is the stored mask).
        """
        method = cls(*args, **kwargs)
        method._tensor_name = name
        hook = _pruning(module, name)
        if hook is None:
            if not hasattr(module, name):
                raise AttributeError(f"'{type(module).__name__}' object has no attribute '{name}'")
            orig = getattr(module, name)
            if not isinstance(orig, nnx.Param):
                raise ValueError(f"Parameter '{name}' of module {type(module).__name__} has to be pruned or be a "
                                 "parameter")
            current = orig[...]
            default_mask = jnp.ones_like(current)
        else:
            method = PruningContainer(method)
            current = getattr(module, name)
            default_mask = getattr(module, name + "_mask")[...]
        if importance_scores is None:
            importance_scores = current
        else:
            importance_scores = _value(importance_scores)
            if importance_scores.shape != current.shape:
                raise AssertionError(f"importance_scores should have the same shape as parameter {name} of "
                                     f"{type(module).__name__}, got {_size(importance_scores.shape)} vs "
                                     f"{_size(current.shape)}")
        mask = jnp.asarray(method.compute_mask(importance_scores, default_mask=default_mask))
        if hook is None:
            delattr(module, name)
            setattr(module, name + "_orig", orig)
            setattr(module, name + "_mask", Buffer(mask))
            _weight_hooks.add_hook(module, Pruning(name))
        else:
            setattr(module, name + "_mask", Buffer(mask))
        return method

    def prune(self, t: Any, default_mask: Any = None, importance_scores: Any = None) -> jax.Array:
        """``t * compute_mask(importance_scores or t, default_mask or ones)``."""
        t = _value(t)
        if importance_scores is not None:
            importance_scores = _value(importance_scores)
            if importance_scores.shape != t.shape:
                raise AssertionError("importance_scores should have the same shape as tensor t, got "
                                     f"{_size(importance_scores.shape)} vs {_size(t.shape)}")
        else:
            importance_scores = t
        default_mask = _value(default_mask) if default_mask is not None else jnp.ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module: Any) -> None:
        """Make the pruning permanent (:func:`remove` of this method's tensor)."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {type(module).__name__} has to be pruned before pruning can be removed")
        remove(module, self._tensor_name)


class PruningContainer(BasePruningMethod):
    """Pruning methods applied in turn to one tensor; the last one computes the new mask on what the mask
    before it keeps (torch's ``PruningContainer``)."""

    def __init__(self, *methods: BasePruningMethod) -> None:
        self._pruning_methods: tuple[BasePruningMethod, ...] = ()
        if len(methods) == 1:
            self._tensor_name = methods[0]._tensor_name
        for method in methods:
            self.add_pruning_method(method)

    def add_pruning_method(self, method: BasePruningMethod) -> None:
        """Append ``method``, which must prune the same tensor."""
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError(f"Can only add pruning methods acting on the parameter named '{self._tensor_name}' "
                             f"to PruningContainer {self}. Found '{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t: jax.Array, default_mask: jax.Array) -> jax.Array:
        """The last method's mask on the slice ``default_mask`` keeps, written into ``default_mask`` (in
        ``t``'s dtype): unstructured methods see the kept entries (flattened), structured ones the channels
        along their ``dim`` not wholly pruned, global ones everything."""
        method = self._pruning_methods[-1]
        mask = jnp.asarray(default_mask)
        new_mask = mask.astype(t.dtype)
        if method.PRUNING_TYPE == "unstructured":
            keep = np.flatnonzero(np.asarray(mask == 1))
            partial = method.compute_mask(t.reshape(-1)[keep], default_mask=mask.reshape(-1)[keep])
            return new_mask.reshape(-1).at[keep].set(jnp.asarray(partial).astype(new_mask.dtype)).reshape(t.shape)
        if method.PRUNING_TYPE == "structured":
            if not hasattr(method, "dim"):
                raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to have the attribute '
                                     "`dim` defined.")
            dim = method.dim + t.ndim if method.dim < 0 else method.dim
            if dim < 0:
                raise IndexError(f"Index is out of bounds for tensor with dimensions {t.ndim}")
            others = tuple(d for d in range(t.ndim) if d != dim)
            channels = np.flatnonzero(np.asarray(jnp.sum(mask, axis=others) != 0))
            index = (slice(None),) * dim + (channels,)
            partial = method.compute_mask(jnp.take(t, channels, axis=dim),
                                          default_mask=jnp.take(mask, channels, axis=dim))
            return new_mask.at[index].set(jnp.asarray(partial).astype(new_mask.dtype))
        if method.PRUNING_TYPE == "global":
            return jnp.asarray(method.compute_mask(t, default_mask=mask)).astype(new_mask.dtype)
        raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")


class Identity(BasePruningMethod):
    """Prunes nothing: torch's reparametrisation with a mask of ones."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t: jax.Array, default_mask: jax.Array) -> jax.Array:
        return default_mask


class _UnstructuredMethod(BasePruningMethod):
    """Prunes the ``amount`` entries :meth:`_pruned` picks (torch's unstructured methods share the rest)."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount: int | float) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount

    def _pruned(self, t: jax.Array, count: int) -> jax.Array:
        raise NotImplementedError

    def compute_mask(self, t: jax.Array, default_mask: jax.Array) -> jax.Array:
        count = _compute_nparams_toprune(self.amount, t.size)
        _validate_pruning_amount(count, t.size)
        mask = jnp.asarray(default_mask)
        if count == 0:
            return mask
        return mask.reshape(-1).at[self._pruned(t, count)].set(0).reshape(mask.shape)


class RandomUnstructured(_UnstructuredMethod):
    """Prunes the ``amount`` entries of largest ``rand_like(t)`` (torch's global stream, ``t``'s dtype)."""

    def _pruned(self, t: jax.Array, count: int) -> jax.Array:
        prob = jnp.asarray(jrandom.rand_like(t))  # drawn before topk can refuse the count, as torch's
        _check_k(count, "topk")
        return sorting.topk_indices(prob.reshape(-1), int(count))


class L1Unstructured(_UnstructuredMethod):
    """Prunes the ``amount`` entries of smallest ``|t|`` (torch's CPU ``topk(largest=False)``, ties
    included)."""

    def _pruned(self, t: jax.Array, count: int) -> jax.Array:
        _check_k(count, "topk")
        return sorting.topk_indices(jnp.abs(t).reshape(-1), int(count), largest=False)


def _structured_count(t: jax.Array, dim: int, amount: Any) -> tuple[int, Any]:
    """torch's structured checks, then ``(channels along dim, channels to prune)``."""
    _validate_structured_pruning(t)
    _validate_pruning_dim(t, dim)
    size = t.shape[dim]
    count = _compute_nparams_toprune(amount, size)
    _validate_pruning_amount(count, size)
    return size, count


def _channel_mask(t: jax.Array, dim: int, channels: Any) -> jax.Array:
    """Zeros of ``t``'s shape with ones at ``channels`` (indices or a boolean vector) along ``dim``."""
    index = (slice(None),) * (dim % t.ndim) + (jnp.asarray(channels),)
    return jnp.zeros_like(t).at[index].set(1)


class RandomStructured(BasePruningMethod):
    """Prunes ``amount`` channels along ``dim`` at random: those whose ``rand(channels)`` draw (float32, the
    global stream) is at most its ``amount``-th smallest."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: int | float, dim: int = -1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount
        self.dim = dim

    def compute_mask(self, t: jax.Array, default_mask: jax.Array) -> jax.Array:
        size, count = _structured_count(t, self.dim, self.amount)
        if count == 0:
            return default_mask
        prob = np.asarray(jrandom.rand(size))  # drawn before kthvalue can refuse the count, as torch's
        _check_k(count, "kthvalue")
        threshold = np.sort(prob)[count - 1]  # torch.kthvalue(prob, k).values
        mask = _channel_mask(t, self.dim, prob > threshold)
        return mask * jnp.asarray(default_mask).astype(mask.dtype)


class LnStructured(BasePruningMethod):
    """Prunes the ``amount`` channels along ``dim`` of smallest ``torch.norm(t, p=n)`` over the other dims
    (keeping torch's CPU ``topk`` of the largest)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: int | float, n: Any, dim: int = -1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount
        self.n = n
        self.dim = dim

    def compute_mask(self, t: jax.Array, default_mask: jax.Array) -> jax.Array:
        size, count = _structured_count(t, self.dim, self.amount)
        norm = _compute_norm(t, self.n, self.dim)
        keep = sorting.topk_indices(norm, int(size - count), largest=True)
        if count == 0:
            return default_mask
        mask = _channel_mask(t, self.dim, keep)
        return mask * jnp.asarray(default_mask).astype(mask.dtype)


class CustomFromMask(BasePruningMethod):
    """Prunes by a mask you give: ``default_mask * mask``."""

    PRUNING_TYPE = "global"

    def __init__(self, mask: Any) -> None:
        self.mask = _value(mask)

    def compute_mask(self, t: jax.Array, default_mask: jax.Array) -> jax.Array:
        if default_mask.shape != self.mask.shape:
            raise AssertionError(f"default_mask shape {_size(default_mask.shape)} must match self.mask shape "
                                 f"{_size(self.mask.shape)}")
        return default_mask * self.mask.astype(default_mask.dtype)


def identity(module: Any, name: str) -> Any:
    """Prune nothing, with torch's reparametrisation (``torch.nn.utils.prune.identity``): a mask of ones."""
    Identity.apply(module, name)
    return module


def random_unstructured(module: Any, name: str, amount: int | float) -> Any:
    """Prune ``amount`` of the entries of ``module.<name>`` not pruned yet, at random
    (``torch.nn.utils.prune.random_unstructured``; ``rand_like`` of them from the global stream)."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module: Any, name: str, amount: int | float, importance_scores: Any = None) -> Any:
    """Prune the ``amount`` entries of ``module.<name>`` not pruned yet of smallest ``|importance_scores|``
    (``torch.nn.utils.prune.l1_unstructured``)."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module: Any, name: str, amount: int | float, dim: int) -> Any:
    """Prune ``amount`` channels along ``dim`` of ``module.<name>`` at random
    (``torch.nn.utils.prune.random_structured``)."""
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module: Any, name: str, amount: int | float, n: Any, dim: int,
                  importance_scores: Any = None) -> Any:
    """Prune the ``amount`` channels along ``dim`` of ``module.<name>`` of smallest L``n`` norm
    (``torch.nn.utils.prune.ln_structured``; ``n`` as ``torch.norm``'s ``p``: a number, ``inf``, ``-inf``
    or ``'fro'``)."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters: Iterable, pruning_method: type, importance_scores: dict | None = None,
                        **kwargs: Any) -> None:
    """Prune the parameters ``(module, name)`` together: one unstructured method over their concatenation
    (``torch.nn.utils.prune.global_unstructured``), each then pruned by its slice of the mask.

    Args:
      parameters: ``(module, name)`` pairs.
      pruning_method: an unstructured :class:`BasePruningMethod` subclass (``L1Unstructured``, ...).
      importance_scores: ``{(module, name): scores}`` for the parameters not scored by their own values.
      **kwargs: the method's arguments (``amount``: over all the parameters together).

    Raises:
      TypeError: ``parameters`` not iterable, ``importance_scores`` not a dict, or a method that is not
        unstructured.
    """
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    parameters = list(parameters)
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    current = [_value(getattr(module, name)) for module, name in parameters]
    scores = jnp.concatenate([_value(importance_scores[(module, name)]).reshape(-1)
                              if (module, name) in importance_scores else value.reshape(-1)
                              for (module, name), value in zip(parameters, current)])
    default_mask = jnp.concatenate([
        (_value(getattr(module, name + "_mask")) if _pruning(module, name) is not None else jnp.ones_like(value))
        .reshape(-1) for (module, name), value in zip(parameters, current)])
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError('Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found method '
                        f"{pruning_method} of type {method.PRUNING_TYPE}")
    container = PruningContainer(method)
    final_mask = container.compute_mask(scores, default_mask)
    start = 0
    for (module, name), value in zip(parameters, current):
        custom_from_mask(module, name, final_mask[start:start + value.size].reshape(value.shape))
        start += value.size


def custom_from_mask(module: Any, name: str, mask: Any) -> Any:
    """Prune ``module.<name>`` by ``mask`` (0 prunes an entry), as ``torch.nn.utils.prune.custom_from_mask``.

    Args:
      module: a ``jax_impl.nn`` layer holding ``<name>`` as an ``nnx.Param``, or already pruned on it (the
        masks then multiply).
      name: the parameter's name.
      mask: an array of the parameter's shape.

    Returns:
      ``module`` with ``<name>_orig`` (the parameter), the buffer ``<name>_mask`` (in the parameter's dtype,
      as torch's default mask) and ``module.<name>`` computed before every call.

    Raises:
      AttributeError: no attribute ``name``.
      ValueError: ``name`` is not a parameter.
      AssertionError: a mask of another shape (torch's type and message).
    """
    CustomFromMask.apply(module, name, mask=mask)
    return module


def is_pruned(module: Any) -> bool:
    """Whether ``module`` or one of its submodules is pruned (``torch.nn.utils.prune.is_pruned``)."""
    return any(isinstance(hook, Pruning) for _, m in nnx.iter_graph(module) if isinstance(m, nnx.Module)
               for hook in _weight_hooks.hooks(m))


def remove(module: Any, name: str) -> Any:
    """Make the pruning permanent: ``<name>`` becomes a parameter holding the pruned values again."""
    hook = _pruning(module, name)
    if hook is None:
        raise ValueError(f"Parameter '{name}' of module {type(module).__name__} has to be pruned before pruning "
                         "can be removed")
    pruned = hook.compute(module)
    orig = getattr(module, name + "_orig")
    _weight_hooks.remove_hook(module, hook)
    delattr(module, name + "_orig")
    delattr(module, name + "_mask")
    orig[...] = pruned
    setattr(module, name, orig)
    return module
