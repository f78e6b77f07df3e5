"""``parity.port``: a torch model becomes its ``jax_impl.nn`` twin, with its weights, and the pair is checked.

- :func:`port` (also ``parity.port(model)``, the package itself is callable)
  returns the live twin, an ``nnx.Module`` holding the torch model's weights;
- :func:`port_source` returns the twin's Python source (``parity port -o``
  writes it), from which :func:`port` builds the live object too;
- :func:`check_port` compares twin and model: eval and train forward, BN
  buffers, gradients and one SGD step (:class:`~parity.port.check.PortCheck`);
- :class:`PortError` (a ``NotImplementedError``) names a node that cannot be
  translated, its target, its source line and the fallback.

See ``docs/port.md``.
"""

import importlib
import sys
import types

from parity.port.errors import PortError

# torch, jax and flax load on first use, so `parity --help` (which imports parity.port.cli) stays light.
_LAZY = {
    "PortCheck": "parity.port.check", "check_port": "parity.port.check", "port_source": "parity.port.codegen",
    "instantiate": "parity.port.live", "load_twin_class": "parity.port.live", "port": "parity.port.live",
}

__all__ = ["PortCheck", "PortError", "check_port", "instantiate", "load_twin_class", "port", "port_source"]


class _CallablePackage(types.ModuleType):
    # Importing parity.port binds the package as the attribute `parity.port`, which shadows any function of
    # that name; a callable package makes `parity.port(model, x)` and `parity.port.port(model, x)` the same.
    def __call__(self, torch_module, example_input=None):
        return self.port(torch_module, example_input)

    def __getattr__(self, name: str):
        if name in _LAZY:
            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallablePackage
