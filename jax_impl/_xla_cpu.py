"""XLA:CPU settings that jax_impl needs for torch parity, applied when ``jax_impl`` is imported.

jaxlib 0.10's XLA:CPU hands convolutions with more than 16 channels to
YNNPACK, whose weight-gradient convolutions are 7-20x slower than XLA's own
(Eigen) ones on these shapes (benchmarks/conv_speed.py); a whole train step
with them on measured ~4x slower for LeNet (batch 256) and ~1.25x for
ResNet-18 (batch 4, 224x224). So ``jax_impl`` switches YNNPACK convolutions
off with ``--xla_cpu_experimental_ynn_fusion_type=-individual_convolution``.
Their gradients are as accurate as Eigen's: a ResNet-18 step that differed
from torch by 9% with them was a ReLU mask flipping at a value closer to
zero than float32 rounding (see tests/models/test_models.py).

XLA reads ``XLA_FLAGS`` once, when the CPU backend starts, and aborts on
unknown flags: the flag is added only if the installed jaxlib knows it
(its name is in jaxlib's shared library), only if the user has not set it
themselves, and only before the backend has started; otherwise
:func:`configure_cpu` warns. ``JAX_IMPL_XLA_FLAGS=0`` leaves ``XLA_FLAGS``
untouched (YNNPACK stays on).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import mmap
import os
import sys
import warnings

__all__ = ["YNN_FLAG", "configure_cpu", "jaxlib_knows_flag", "ynn_convolutions_disabled"]

_FLAG_NAME = "xla_cpu_experimental_ynn_fusion_type"
YNN_FLAG = f"--{_FLAG_NAME}=-individual_convolution"


def _jaxlib_knows_flag() -> bool:
    return jaxlib_knows_flag(_FLAG_NAME)


@functools.cache
def jaxlib_knows_flag(name: str) -> bool:
    """Whether the installed jaxlib knows the XLA flag ``name`` (its name is in jaxlib's shared library).

    XLA aborts on an unknown flag in ``XLA_FLAGS``, so a flag is set only when this holds.
    """
    # find_spec locates jaxlib without importing it: importing jax_impl must not start jax.
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - jax always brings jaxlib
        return False
    needle = name.encode()
    for directory in spec.submodule_search_locations:
        for path in glob.glob(os.path.join(directory, "*.so")):
            if os.path.getsize(path) < 1 << 20:
                continue
            with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if data.find(needle) >= 0:
                    return True
    return False


def _backend_started() -> bool:
    # Only a process that imported jax can have started its backend; looking keeps jax unimported.
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(xla_bridge, "_backends", None))


def ynn_convolutions_disabled() -> bool:
    """Whether ``XLA_FLAGS`` (as this process set it) switches YNNPACK convolutions off."""
    return YNN_FLAG in os.environ.get("XLA_FLAGS", "").split()


def configure_cpu() -> bool:
    """Add :data:`YNN_FLAG` to ``XLA_FLAGS`` if jaxlib knows it and nobody chose otherwise.

    Returns:
      True when YNNPACK convolutions are (or will be, at backend start) off.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("JAX_IMPL_XLA_FLAGS", "1") == "0":
        return ynn_convolutions_disabled()  # the user keeps XLA's defaults
    if _FLAG_NAME in flags:
        return ynn_convolutions_disabled()  # the user's explicit choice stands
    if not _jaxlib_knows_flag():
        return False
    if _backend_started():
        warnings.warn(
            "jax's CPU backend started before jax_impl was imported, so XLA's YNNPACK convolutions stay on; "
            "their weight gradients make a LeNet train step ~4x slower. Import jax_impl "
            f"before running any jax computation, or set XLA_FLAGS={YNN_FLAG}.",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {YNN_FLAG}".strip()
    return True
