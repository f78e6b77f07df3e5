"""A module's tensor computed before each call, as torch's forward pre-hooks compute it.

torch's ``spectral_norm`` and ``weight_norm`` (the hook forms) replace ``module.weight`` by a plain attribute
that a forward pre-hook recomputes from the module's own parameters and buffers before every ``forward``.
Here the module's class becomes a subclass of its own (one per class and set of names, so equal modules share
a class and a compiled program) in which each hooked name is a property computing the tensor, and whose
``__call__`` first runs each hook's ``before_call`` (spectral norm's power iteration in training mode).
A hook is a frozen dataclass (hashable, so it is static data of the module for ``nnx.jit``) with
``name``, ``before_call(module)`` and ``compute(module)``. Each subclass is named in this module by its base
class and names, and made again on first lookup of that name (PEP 562 ``__getattr__``), so such a module
pickles and unpickles in another process as a plain one does.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["add_hook", "hooks", "remove_hook"]

_CLASSES: dict[tuple[type, tuple[str, ...]], type] = {}


def hooks(module: Any) -> tuple:
    """The weight hooks registered on ``module``, in registration order."""
    return tuple(getattr(module, "_weight_hooks", ()))


def _base(module: Any) -> type:
    return getattr(type(module), "_unhooked_class", type(module))


def _computed(name: str) -> property:
    def compute(self):
        for hook in hooks(self):
            if hook.name == name:
                return hook.compute(self)
        raise AttributeError(name)

    return property(compute, doc=f"``{name}`` as the module's weight hook computes it before each call.")


_SEP = "__"


def _class_name(base: type, names: tuple[str, ...]) -> str:
    return _SEP.join(["Hooked", base.__module__.replace(".", "_o_"), base.__qualname__, *names])


def __getattr__(name: str) -> type:
    """A hooked class by its name (as pickle looks it up), made if this process has not made it yet."""
    parts = name.split(_SEP)
    if len(parts) < 4 or parts[0] != "Hooked":
        raise AttributeError(name)
    base = importlib.import_module(parts[1].replace("_o_", "."))
    for part in parts[2].split("."):
        base = getattr(base, part)
    return _hooked_class(base, tuple(parts[3:]))


def _hooked_class(base: type, names: tuple[str, ...]) -> type:
    key = (base, names)
    if key not in _CLASSES:
        def __call__(self, *args, **kwargs):
            for hook in hooks(self):
                hook.before_call(self)
            return base.__call__(self, *args, **kwargs)

        namespace = {name: _computed(name) for name in names}
        namespace.update(__call__=__call__, _unhooked_class=base, __module__=__name__,
                         __qualname__=_class_name(base, names), __doc__=base.__doc__)
        _CLASSES[key] = type(base)(base.__name__, (base,), namespace)
    return _CLASSES[key]


def _set_hooks(module: Any, new_hooks: tuple) -> None:
    base = _base(module)
    module._weight_hooks = new_hooks
    module.__class__ = _hooked_class(base, tuple(h.name for h in new_hooks)) if new_hooks else base
    if not new_hooks:
        del module._weight_hooks


def add_hook(module: Any, hook: Any) -> None:
    """Register ``hook`` on ``module``: ``module.<hook.name>`` is computed by it from then on."""
    _set_hooks(module, (*hooks(module), hook))


def remove_hook(module: Any, hook: Any) -> None:
    """Unregister ``hook``; ``module`` goes back to its own class when no hook is left."""
    _set_hooks(module, tuple(h for h in hooks(module) if h is not hook))
