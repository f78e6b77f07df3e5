"""Which ``sqrt`` torch's optimizers are matched with: IEEE, MKL's AVX-512 kernel, or a table of torch's values.

torch's default CPU optimizers call ``Tensor.sqrt``, which on x86 is MKL
VML's ``vsSqrt``/``vdSqrt``: not correctly rounded on every CPU
(:mod:`jax_impl.optim._mkl_sqrt`, :mod:`jax_impl.optim._table_sqrt`).
The choice is global and read when an optimizer is built, because the
optimizer's compiled kernel bakes it in.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["get_sqrt_mode", "get_sqrt_table", "set_sqrt_mode", "set_sqrt_table", "torch_sqrt"]

_SQRT_MODES = ("ieee", "mkl-avx512", "table")
_sqrt_mode = "ieee"
_sqrt_table: Any = None  # float32[2**24]: torch.sqrt on [1, 4), for mode "table"
_packed_table: Any = None  # the same as _table_sqrt.pack_table's uint32[2**20] words, where it packs


def set_sqrt_mode(mode: str) -> None:
    """Chooses which ``sqrt`` torch is matched with, for optimizers built afterwards.

    - ``"ieee"`` (default): correctly rounded ``jnp.sqrt``. Matches torch on
      CUDA, on CPUs without AVX-512, with ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
      and ``fused=True`` CPU optimizers.
    - ``"mkl-avx512"``: bit-exact emulation of MKL VML's AVX-512 ``vsSqrt``/
      ``vdSqrt``, which torch's default CPU optimizers call on AVX-512 x86
      machines (0.6% of float32 results are 1 ULP below IEEE).

    - ``"table"``: float32 sqrt read from a table of torch's own values on
      [1, 4) (:func:`set_sqrt_table`), exact for any MKL path and CPU (e.g.
      AMD, where MKL's sqrt is neither of the above); float64 stays IEEE.

    ``parity.numerics.match_torch_sqrt()`` probes the installed torch and sets it.
    """
    global _sqrt_mode
    if mode not in _SQRT_MODES:
        raise ValueError(f"sqrt mode must be one of {_SQRT_MODES}, got {mode!r}")
    if mode == "table" and _sqrt_table is None:
        raise ValueError("sqrt mode 'table' needs set_sqrt_table(parity.numerics.torch_sqrt_table()) first")
    _sqrt_mode = mode


def set_sqrt_table(table: Any) -> None:
    """Registers torch's float32 sqrt on [1, 4) (``2**24`` values, see ``jax_impl.optim._table_sqrt``)."""
    global _sqrt_table, _packed_table
    from jax_impl.optim._table_sqrt import TABLE_SIZE, pack_table

    array = np.asarray(table)
    if array.shape != (TABLE_SIZE,) or array.dtype != np.float32:
        raise ValueError(f"a sqrt table is float32[{TABLE_SIZE}], got {array.dtype}{list(array.shape)}")
    _sqrt_table, _packed_table = array, pack_table(array)


def get_sqrt_mode() -> str:
    """The mode :func:`set_sqrt_mode` chose last (``"ieee"`` until then)."""
    return _sqrt_mode


def get_sqrt_table(packed: bool = False) -> Any:
    """The table :func:`set_sqrt_table` registered, or ``None``.

    ``packed=True``: the same table as two bits per value (``uint32[2**20]``, 4 MiB instead of 64), where
    every value is within one ULP of the correctly rounded root, else the values themselves. The
    optimizers compile this one into their steps (``jax_impl.optim._table_sqrt``); both give the same sqrt.
    """
    if packed and _packed_table is not None:
        return _packed_table
    return _sqrt_table


def torch_sqrt(x: jax.Array, mode: str | None = None, table: Any = None) -> jax.Array:
    """torch's CPU ``sqrt`` under ``mode`` (default: the current :func:`set_sqrt_mode`)."""
    if (mode or _sqrt_mode) == "table" and x.dtype == jnp.float32:
        from jax_impl.optim._table_sqrt import table_sqrt

        return table_sqrt(x, table if table is not None else get_sqrt_table(packed=True))
    if (mode or _sqrt_mode) == "mkl-avx512" and x.dtype in (jnp.float32, jnp.float64):
        from jax_impl.optim._mkl_sqrt import mkl_sqrt

        return mkl_sqrt(x)
    return jnp.sqrt(x)
