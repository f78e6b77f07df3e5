"""``torch.nn.utils.parametrize``: a module's tensor computed by modules from unconstrained originals.

``register_parametrization(module, "weight", p)`` moves ``module.weight`` to
``module.parametrizations.weight.original`` (``original0``, ``original1``, ... when ``p.right_inverse``
returns several tensors) and makes ``module.weight`` a property that calls the ``ParametrizationList``:
``p_n(...p_1(p_0(original)))``. The module's class becomes ``Parametrized<Class>``, a subclass made once per
class and set of names, as torch's; state dict keys are torch's (``parametrizations.weight.original``,
``parametrizations.weight.0._u``). Each access of the property runs the parametrizations, so one of them
that updates buffers in training mode (spectral norm's power iteration) does so on every access, as torch's.
torch's ``cached()`` context is not provided.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from flax import nnx

from jax_impl.nn.modules.container import ModuleDict, ModuleList
from jax_impl.nn.modules.module import Buffer

__all__ = ["ParametrizationList", "is_parametrized", "register_parametrization", "remove_parametrizations"]

_CLASSES: dict[tuple[type, tuple[str, ...]], type] = {}


def _value(x: Any):
    return x[...] if isinstance(x, nnx.Variable) else jnp.asarray(x)


def _right_inverse(modules, value):
    for module in reversed(modules):
        if hasattr(module, "right_inverse"):
            try:
                value = module.right_inverse(value)
            except NotImplementedError:
                pass
    return value


class ParametrizationList(ModuleList):
    """torch's ``ParametrizationList``: the parametrizations of one tensor and its original(s).

    Args:
      modules: the parametrizations, applied in order.
      original: the tensor's ``nnx.Param`` (or buffer): it becomes ``original``, holding
        ``right_inverse(value)`` (the parametrizations' ``right_inverse`` in reverse order, where defined); a
        ``right_inverse`` returning a sequence makes ``original0``, ``original1``, ... of the same kind.
      unsafe: skip the checks that the parametrized tensor keeps the original's shape and dtype.
    """

    def __init__(self, modules: Sequence, original: nnx.Variable, unsafe: bool = False) -> None:
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = original[...].shape, original[...].dtype
        new = _right_inverse(list(self), original[...])
        kind = type(original)
        if isinstance(new, (list, tuple)):
            self.is_tensor, self.ntensors = False, len(new)
            for i, value in enumerate(new):
                setattr(self, f"original{i}", kind(_value(value)))
        else:
            new = _value(new)
            if new.dtype != dtype:
                raise ValueError("When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                                 f"original.dtype: {dtype}\nright_inverse(original).dtype: {new.dtype}")
            self.is_tensor, self.ntensors = True, 1
            original[...] = new  # torch sets the original tensor in place and keeps it: the same variable
            self.original = original
        if not unsafe:
            z = self()
            if z.dtype != dtype:
                raise ValueError("Registering a parametrization may not change the dtype of the tensor, unless "
                                 f"`unsafe` flag is enabled.\nunparametrized dtype: {dtype}\n"
                                 f"parametrized dtype: {z.dtype}")
            if z.shape != shape:
                raise ValueError("Registering a parametrization may not change the shape of the tensor, unless "
                                 f"`unsafe` flag is enabled.\nunparametrized shape: {tuple(shape)}\n"
                                 f"parametrized shape: {tuple(z.shape)}")

    def right_inverse(self, value) -> None:
        """Set the original(s) to ``right_inverse(value)``, as assigning to the parametrized tensor does."""
        new = _right_inverse(list(self), _value(value))
        if self.is_tensor:
            self.original[...] = _value(new)
        else:
            for i, v in enumerate(new):
                getattr(self, f"original{i}")[...] = _value(v)

    def __call__(self):
        if self.is_tensor:
            x = self[0](self.original[...])
        else:
            x = self[0](*(getattr(self, f"original{i}")[...] for i in range(self.ntensors)))
        for module in list(self)[1:]:
            x = module(x)
        return x


def _property(name: str) -> property:
    def get(self):
        return self.parametrizations[name]()

    def set(self, value):
        self.parametrizations[name].right_inverse(value)

    return property(get, set, doc=f"``{name}``, computed by ``parametrizations.{name}`` on each access.")


def _parametrized_class(base: type, names: tuple[str, ...]) -> type:
    key = (base, names)
    if key not in _CLASSES:
        namespace = {name: _property(name) for name in names}
        namespace.update(_unparametrized_class=base, __module__=base.__module__,
                         __qualname__=f"Parametrized{base.__qualname__}", __doc__=base.__doc__)
        _CLASSES[key] = type(base)(f"Parametrized{base.__name__}", (base,), namespace)
    return _CLASSES[key]


def _set_class(module: Any) -> None:
    base = getattr(type(module), "_unparametrized_class", type(module))
    names = tuple(module.parametrizations) if is_parametrized(module) else ()
    module.__class__ = _parametrized_class(base, names) if names else base


def is_parametrized(module: Any, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has a parametrization (on ``tensor_name``, when given)."""
    parametrizations = getattr(module, "parametrizations", None)
    if not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else tensor_name in parametrizations


def register_parametrization(module: Any, tensor_name: str, parametrization: Any, *, unsafe: bool = False) -> Any:
    """Parametrize ``module.<tensor_name>`` by ``parametrization``, as ``torch.nn.utils.parametrize``'s.

    Args:
      module: a ``jax_impl.nn`` module holding ``tensor_name`` as an ``nnx.Param`` or buffer, or already
        parametrizing it (``parametrization`` is then appended to its list).
      tensor_name: the tensor's name.
      parametrization: a ``jax_impl.nn`` module called on the original(s); it may define
        ``right_inverse``. It is put in ``module``'s training mode.
      unsafe: skip the shape and dtype checks.

    Returns:
      ``module``, changed in place.

    Raises:
      ValueError: no parameter, buffer or parametrized tensor of that name, or a check failed.
    """
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            y = getattr(module, tensor_name)
            x = parametrization(y)
            if x.dtype != y.dtype:
                raise ValueError("Registering a parametrization may not change the dtype of the tensor, unless the "
                                 f"`unsafe` flag is enabled.\nmodule.{tensor_name}.dtype: {y.dtype}\n"
                                 f"parametrization(module.{tensor_name}).dtype: {x.dtype}")
            if x.shape != y.shape:
                raise ValueError("Registering a parametrization may not change the shape of the tensor, unless the "
                                 f"`unsafe` flag is enabled.\nmodule.{tensor_name}.shape: {tuple(y.shape)}\n"
                                 f"parametrization(module.{tensor_name}).shape: {tuple(x.shape)}")
        parametrizations = module.parametrizations[tensor_name]
        parametrizations.append(parametrization)
        parametrizations.unsafe |= unsafe
        return module
    original = getattr(module, tensor_name, None)
    if not isinstance(original, (nnx.Param, Buffer, nnx.BatchStat)):
        raise ValueError(f"Module '{type(module).__name__}' does not have a parameter, a buffer, or a parametrized "
                         f"element with name '{tensor_name}'")
    parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = parametrizations
    _set_class(module)
    return module


def remove_parametrizations(module: Any, tensor_name: str, leave_parametrized: bool = True) -> Any:
    """Remove the parametrizations on ``module.<tensor_name>``, as torch's.

    With ``leave_parametrized`` the tensor keeps its current parametrized value (in the original's variable,
    for a single original); otherwise it gets the original back.

    Raises:
      ValueError: the tensor is not parametrized, or ``leave_parametrized=False`` with several originals.
    """
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {type(module).__name__} does not have a parametrization on {tensor_name}")
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            original[...] = getattr(module, tensor_name)
    else:
        if not leave_parametrized:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is "
                             "parametrized in terms of a sequence of tensors.")
        original = type(parametrizations.original0)(getattr(module, tensor_name))
    del module.parametrizations[tensor_name]
    if not is_parametrized(module):
        del module.parametrizations
    _set_class(module)
    setattr(module, tensor_name, original)
    return module
