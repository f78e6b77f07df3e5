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
from the installed torch (``torch.sqrt`` of every float32 in [1, 4), in runs
of 2**20 inputs, 64 MiB in all) and this module evaluates the table: split
``x = 4**k * t`` with ``t`` in [1, 4) (the unbiased exponent's parity picks
[1, 2) or [2, 4)), look ``sqrt(t)`` up, and add ``k`` to its exponent
(exact). Zeros, negative numbers, infinities, NaNs and subnormals (which
XLA:CPU flushes to zero) take ``jnp.sqrt``. One exception measured on AMD
EPYC: in the top half-binade [2**127, 2**128) 2048 of the 8.4 M values are
1 ULP apart from the scaled table (MKL guards against overflow there);
squared gradients of an optimizer never reach 1.7e38.

Every value of such a table measured so far is within one ULP of the
correctly rounded root (on an AMD EPYC: 13.9 M equal, 1.64 M one ULP above,
1.24 M one ULP below), so :func:`pack_table` stores it as two bits per value,
``torch - IEEE + 1`` in ULPs, sixteen to a ``uint32`` word: 4 MiB where the
values take 64 MiB. The table is a constant of every compiled step that
takes a sqrt, and jax compresses such a step into its persistent
compilation cache: with the 64 MiB table, storing even a small step takes
seconds and loading it a third of a second (docs/mkl_sqrt.md). :func:`table_sqrt`
evaluates either form, with the same result bit for bit: the packed form
adds its code to XLA's correctly rounded ``sqrt`` of ``t``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["PACKED_SIZE", "TABLE_SIZE", "pack_table", "table_sqrt"]

TABLE_SIZE = 1 << 24  # float32 values on [1, 4): bit patterns 0x3f800000 .. 0x407fffff
_CODES_PER_WORD = 16  # two bits per value in a uint32
PACKED_SIZE = TABLE_SIZE // _CODES_PER_WORD
_ONE = 0x3F800000  # float32 bits of 1.0: table index 0
_PACK_RUN = 1 << 20  # values packed at a time


def pack_table(table: np.ndarray) -> np.ndarray | None:
    """The table as two bits per value (``uint32[2**20]``), or ``None`` if a value is more than one ULP
    from the correctly rounded root (then only the full table describes it).

    Value ``i`` is code ``(word[i // 16] >> (2 * (i % 16))) & 3``, equal to ``table[i]`` minus the correctly
    rounded ``sqrt(t_i)`` in ULPs, plus 1 (``t_i``: the float32 with bits ``0x3f800000 + i``).
    """
    values = np.ascontiguousarray(table, dtype=np.float32)
    if values.shape != (TABLE_SIZE,):
        raise ValueError(f"a sqrt table is float32[{TABLE_SIZE}], got {values.dtype}{list(values.shape)}")
    words = np.empty(PACKED_SIZE, np.uint32)
    shifts = 2 * np.arange(_CODES_PER_WORD, dtype=np.uint32)
    # In runs of 2**20 values: the temporaries stay a few MiB and are reused, where whole-table ones would
    # each fault in 64 MiB of fresh pages, at every process start that registers a table.
    for start in range(0, TABLE_SIZE, _PACK_RUN):
        inputs = (np.arange(start, start + _PACK_RUN, dtype=np.uint32) + _ONE).view(np.float32)
        # int32 differences of bit patterns: a value that wraps around (a negative one) lands far outside [-1, 1].
        delta = values[start:start + _PACK_RUN].view(np.int32) - np.sqrt(inputs).view(np.int32)
        if delta.min() < -1 or delta.max() > 1:
            return None
        codes = (delta + 1).view(np.uint32).reshape(-1, _CODES_PER_WORD)
        codes <<= shifts
        # The codes' bits do not overlap: the sum is their union.
        words[start // _CODES_PER_WORD:(start + _PACK_RUN) // _CODES_PER_WORD] = codes.sum(axis=1, dtype=np.uint32)
    return words


def _packed_root(index: jax.Array, packed: jax.Array | np.ndarray) -> jax.Array:
    """``table[index]`` from :func:`pack_table`'s words: XLA's sqrt of ``t`` (correctly rounded, as numpy's)
    moved by the stored code's ULPs."""
    word = jnp.asarray(packed).at[index >> 4].get(mode="promise_in_bounds")
    code = lax.bitcast_convert_type(word >> ((index & 15) * 2).astype(jnp.uint32), jnp.int32) & 3
    t = lax.bitcast_convert_type(index + _ONE, jnp.float32)
    return lax.bitcast_convert_type(lax.bitcast_convert_type(jnp.sqrt(t), jnp.int32) + code - 1, jnp.float32)


def table_sqrt(x: jax.Array, table: jax.Array | np.ndarray) -> jax.Array:
    """``sqrt(x)`` (float32) with torch's rounding, from ``table[i] = torch.sqrt(float32 bits 0x3f800000 + i)``,
    given as its ``float32[2**24]`` values or as :func:`pack_table`'s ``uint32[2**20]`` words."""
    bits = lax.bitcast_convert_type(x, jnp.int32)
    biased = (bits >> 23) & 0xFF
    exponent = biased - 127
    k = exponent >> 1  # floor(exponent / 2): x = 4**k * t, t in [1, 4)
    index = ((exponent & 1) << 23) | (bits & 0x7FFFFF)
    if np.shape(table) == (PACKED_SIZE,):
        root = _packed_root(index, table)
    else:
        root = jnp.asarray(table).at[index].get(mode="promise_in_bounds")
    scaled = lax.bitcast_convert_type(lax.bitcast_convert_type(root, jnp.int32) + (k << 23), jnp.float32)
    special = (biased == 0) | (biased == 0xFF) | (bits < 0)  # zero/subnormal, inf/NaN, negative (sign bit)
    return jnp.where(special, jnp.sqrt(x), scaled)
