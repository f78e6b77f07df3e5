"""Package attributes imported on first use (PEP 562).

``torch_ref`` shares pure-Python pieces with ``jax_impl`` (LeNet's geometry,
the process launcher) and must not start jax by importing them; a package
whose ``__init__`` imported its jax modules eagerly would. Such packages
name their jax-backed attributes here instead, and the first access imports
the module that defines them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, origins: Mapping[str, str],
                    namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose names in ``origins`` come from other modules.

    Args:
      package: the package's ``__name__`` (for the error message).
      origins: attribute name -> the module that defines it.
      namespace: the package's ``globals()``; a name, once imported, is stored
        there, so later accesses are ordinary attribute lookups.
    """

    def __getattr__(name: str) -> Any:
        origin = origins.get(name)
        if origin is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(origin), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *origins})

    return __getattr__, __dir__
