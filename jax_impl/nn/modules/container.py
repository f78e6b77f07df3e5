"""``torch.nn.Sequential``, ``ModuleList`` and ``ModuleDict`` with torch's child names.

Children live under the attribute names torch gives them (``"0"``, ``"1"``,
... or the keys of an ``OrderedDict``), so ``nnx.state(model)`` paths equal
torch's ``state_dict`` keys (``"0.weight"``) and conversion is key for key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from jax_impl.nn.modules.module import Module

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


class _Indexed(Module):
    """Children stored as attributes, their names kept in order in ``_names``."""

    _names: tuple[str, ...] = ()

    def _add(self, name: str, module) -> None:
        if not isinstance(name, str) or "." in name or name == "":
            raise KeyError(f'module name can\'t contain ".", got: {name}' if "." in str(name)
                           else f"module name should be a non-empty string, got {name!r}")
        setattr(self, name, module)
        if name not in self._names:
            self._names = (*self._names, name)

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator:
        return (getattr(self, name) for name in self._names)

    def _index(self, idx: int) -> str:
        n = len(self._names)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range")
        return self._names[idx % n]

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self._slice(self._names[idx])
        return getattr(self, self._index(idx))

    def __setitem__(self, idx: int, module) -> None:
        setattr(self, self._index(idx), module)

    def append(self, module):
        """Append ``module`` under the next integer name (torch's ``append``)."""
        self._add(str(len(self)), module)
        return self


class Sequential(_Indexed):
    """``torch.nn.Sequential(*modules)`` or ``Sequential(OrderedDict(name=module))``: calls children in order."""

    def __init__(self, *args) -> None:
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self._add(name, module)
        else:
            for i, module in enumerate(args):
                self._add(str(i), module)

    def _slice(self, names):
        # torch keeps the children's names in a sliced Sequential.
        return Sequential(OrderedDict((name, getattr(self, name)) for name in names))

    def __call__(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(_Indexed):
    """``torch.nn.ModuleList(modules=None)``: an indexable list of children named ``"0"``, ``"1"``, ..."""

    def __init__(self, modules: Iterable | None = None) -> None:
        for module in modules or ():
            self.append(module)

    def _slice(self, names):
        # torch renumbers a sliced ModuleList from 0.
        return ModuleList([getattr(self, name) for name in names])

    def extend(self, modules: Iterable):
        """Append every module of ``modules``."""
        for module in modules:
            self.append(module)
        return self


class ModuleDict(Module):
    """``torch.nn.ModuleDict(modules=None)``: children under string keys, in insertion order.

    Each child is an attribute named by its key, so ``nnx.state`` paths are torch's ``state_dict`` keys
    (``"blocks.encoder.weight"``).
    """

    _keys: tuple[str, ...] = ()

    def __init__(self, modules=None) -> None:
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str):
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, module) -> None:
        if not isinstance(key, str) or "." in key or key == "":
            raise KeyError(f'module name can\'t contain ".", got: {key}' if "." in str(key)
                           else f"module name should be a non-empty string, got {key!r}")
        if key not in self._keys and hasattr(self, key):  # a method or flag of the dict itself
            raise KeyError(f"attribute '{key}' already exists")
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        setattr(self, key, module)
        if key not in self._keys:
            self._keys = (*self._keys, key)

    def __delitem__(self, key: str) -> None:
        delattr(self, key)
        self._keys = tuple(k for k in self._keys if k != key)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def keys(self):
        """The keys in insertion order."""
        return list(self._keys)

    def values(self):
        """The children in insertion order."""
        return [getattr(self, key) for key in self._keys]

    def items(self):
        """``(key, child)`` pairs in insertion order."""
        return [(key, getattr(self, key)) for key in self._keys]

    def clear(self) -> None:
        """Remove every child."""
        for key in self._keys:
            delattr(self, key)
        self._keys = ()

    def pop(self, key: str):
        """Remove ``key`` and return its child."""
        module = self[key]
        del self[key]
        return module

    def update(self, modules) -> None:
        """Add ``(key, module)`` pairs from a mapping or an iterable of pairs."""
        pairs = modules.items() if hasattr(modules, "items") else modules
        for key, module in pairs:
            self[key] = module
