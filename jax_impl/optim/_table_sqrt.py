"""torch's float32 CPU ``sqrt`` from a table of its values on [1, 4): any MKL code path, any CPU.

MKL's vectorised ``vsSqrt`` (what torch's CPU ``sqrt`` calls) is not
correctly rounded, and which kernel runs depends on the CPU: on Intel
AVX-512 machines it is the rsqrt14 sequence that
:mod:`jax_impl.optim._mkl_sqrt` emulates; on AMD EPYC CPUs MKL takes an SSE
path built on the CPU's own ``rsqrtps`` table, whose values no document
specifies (17% of float32 results on [1, 4) differ from IEEE there).

All of these kernels are exactly scale-invariant, ``sqrt(4**k * x) ==
2**k * sqrt(x)`` for normal numbers (checked on 3 M inputs over the whole
exponent range, and at lengths 1 to 3 M: no dependence on the length or the
position in the array), so torch's sqrt is fully described by its 2**24
float32 values on [1, 4). ``parity.numerics.torch_sqrt_table()`` reads them
from the installed torch (``torch.sqrt`` of every float32 in [1, 4), one call,
64 MiB) and this module evaluates the table: split ``x = 4**k * t`` with
``t`` in [1, 4) (the unbiased exponent's parity picks [1, 2) or [2, 4)),
look ``sqrt(t)`` up, and add ``k`` to its exponent (exact). Zeros, negative
numbers, infinities, NaNs and subnormals (which XLA:CPU flushes to zero)
take ``jnp.sqrt``. One exception measured on AMD EPYC: in the top
half-binade [2**127, 2**128) 2048 of the 8.4 M values are 1 ULP apart from
the scaled table (MKL guards against overflow there); squared gradients of
an optimizer never reach 1.7e38.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["TABLE_SIZE", "table_sqrt"]

TABLE_SIZE = 1 << 24  # float32 values on [1, 4): bit patterns 0x3f800000 .. 0x407fffff


def table_sqrt(x: jax.Array, table: jax.Array | np.ndarray) -> jax.Array:
    """``sqrt(x)`` (float32) with torch's rounding, from ``table[i] = torch.sqrt(float32 bits 0x3f800000 + i)``."""
    bits = lax.bitcast_convert_type(x, jnp.int32)
    biased = (bits >> 23) & 0xFF
    exponent = biased - 127
    k = exponent >> 1  # floor(exponent / 2): x = 4**k * t, t in [1, 4)
    index = ((exponent & 1) << 23) | (bits & 0x7FFFFF)
    root = jnp.asarray(table).at[index].get(mode="promise_in_bounds")
    scaled = lax.bitcast_convert_type(lax.bitcast_convert_type(root, jnp.int32) + (k << 23), jnp.float32)
    special = (biased == 0) | (biased == 0xFF) | (bits < 0)  # zero/subnormal, inf/NaN, negative (sign bit)
    return jnp.where(special, jnp.sqrt(x), scaled)
