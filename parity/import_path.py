"""``"package.module:attribute"`` import paths of configs and CLIs (user models, data loaders, factories).

Kept apart from :mod:`parity.models` so that processes that only need the
torch side (data-parallel torch ranks) import neither JAX nor flax for it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["import_object"]


def import_object(path: str, key: str) -> Any:
    """``"package.module:attribute"`` imported, the working directory first on ``sys.path`` (as ``python -m`` does).

    The checkout's root comes last, so the shipped configs' ``examples.*`` import from anywhere.

    Raises:
      ConfigError: naming ``key`` (the config key that gave ``path``) and why the import failed.
    """
    import importlib
    import os
    import sys

    from parity.config import ConfigError

    module_name, _, attribute = path.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isdir(os.path.join(checkout, "examples")) and checkout not in sys.path:
        sys.path.append(checkout)
    try:
        obj = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"cannot import {module_name!r} ({error}); is it on PYTHONPATH or in the working "
                          "directory?", path=key) from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"module {module_name!r} has no attribute {attribute!r}", path=key)
        obj = getattr(obj, part)
    return obj
