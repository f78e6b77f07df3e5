"""``torch.nn.Sequential`` and ``torch.nn.ModuleList`` with torch's child names.

Children live under the attribute names torch gives them (``"0"``, ``"1"``,
... or the keys of an ``OrderedDict``), so ``nnx.state(model)`` paths equal
torch's ``state_dict`` keys (``"0.weight"``) and conversion is key for key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from jax_impl.nn.modules.module import Module

__all__ = ["ModuleList", "Sequential"]


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
