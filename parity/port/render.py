"""Python source for the values in an fx node's arguments, and the names of the twin's local variables."""

from __future__ import annotations

import builtins
import keyword
import math

import torch
import torch.fx

from parity.port.errors import FALLBACK, PortError, node_description
from jax_impl.tensor_ops import HELPERS

__all__ = ["Renderer"]

# Names the generated module binds globally; a node named like one gets a trailing underscore.
_RESERVED = {"self", "F", "jnp", "math", "nn", "nnx", "OrderedDict", *HELPERS}


class Renderer:
    """Renders fx argument values as Python source for one graph, in one training mode.

    Attributes:
      mode: the ``training`` flag the graph was traced with; a ``training=``
        argument equal to it is rendered ``self.training``.
      helpers: the :mod:`jax_impl.tensor_ops` helpers used so far.
      node: the node being rendered (errors name it).
    """

    def __init__(self, mode: bool) -> None:
        self.mode = mode
        self.helpers: set[str] = set()
        self.node: torch.fx.Node | None = None
        self._names: dict[torch.fx.Node, str] = {}

    def var(self, node: torch.fx.Node) -> str:
        """The local variable holding ``node``'s value."""
        if node not in self._names:
            name = node.name
            if name in _RESERVED or keyword.iskeyword(name) or hasattr(builtins, name):
                name += "_"
            self._names[node] = name
        return self._names[node]

    def rename(self, node: torch.fx.Node, name: str) -> None:
        """Gives ``node``'s variable another name (a baked ``forward`` argument keeps torch's)."""
        self._names[node] = name

    def helper(self, name: str) -> str:
        """Marks a :mod:`jax_impl.tensor_ops` helper as used and returns its name."""
        self.helpers.add(name)
        return name

    def fail(self, why: str) -> PortError:
        """The error for the current node: what it is, where it comes from, why, and the fallback."""
        return PortError(f"cannot port {node_description(self.node)}: {why}. Fallback: {FALLBACK}")

    def __call__(self, value) -> str:
        if isinstance(value, torch.fx.Node):
            return self.var(value)
        if value is None or isinstance(value, (bool, str)):
            return repr(value)
        if isinstance(value, int):
            return repr(int(value))
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
        if value is Ellipsis:
            return "..."
        if isinstance(value, torch.Size):
            value = tuple(value)
        if isinstance(value, tuple):
            items = [self(v) for v in value]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if isinstance(value, list):
            return "[" + ", ".join(self(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self(k)}: {self(v)}" for k, v in value.items()) + "}"
        if isinstance(value, slice):
            return f"slice({self(value.start)}, {self(value.stop)}, {self(value.step)})"
        if isinstance(value, torch.device):
            return "None"  # jax places arrays itself; `x.to(device)` and `device=` are no-ops in the twin
        if isinstance(value, torch.dtype):
            return f"jnp.{str(value).removeprefix('torch.')}"
        raise self.fail(f"its argument {value!r} ({type(value).__name__}) has no JAX spelling")

    def index(self, value) -> str:
        """An indexing expression's inside: ``x[:, 0:1, ..., None]`` rather than ``slice(...)`` calls."""
        if isinstance(value, slice):
            parts = ["" if value.start is None else self(value.start), "" if value.stop is None else self(value.stop)]
            if value.step is not None:
                parts.append(self(value.step))
            return ":".join(parts)
        if isinstance(value, tuple) and value:
            return ", ".join(self.index(v) for v in value) + ("," if len(value) == 1 else "")
        return self(value)

    def training(self, value) -> str:
        """A ``training=`` argument: ``self.training`` where fx baked the traced mode in, else the value."""
        if isinstance(value, bool) and value == self.mode:
            return "self.training"
        return self(value)

    def call(self, function: str, args, kwargs) -> str:
        """``function(arg, ..., key=value, ...)`` with ``training`` values rendered by :meth:`training`."""
        parts = [self(a) for a in args]
        parts += [f"{k}={self.training(v) if k == 'training' else self(v)}" for k, v in kwargs.items()]
        return f"{function}({', '.join(parts)})"
