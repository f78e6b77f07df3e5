"""Distance in units in the last place (ULP) between floating-point arrays.

The bit pattern of an IEEE float, read as a sign-magnitude integer and mapped
to a two's-complement "ordered" integer, increases monotonically with the
value. The ULP distance of ``a`` and ``b`` is the number of representable
values between them plus one: ``|ord(a) - ord(b)|``. In that ordering ``+0``
and ``-0`` are both 0 (distance 0), the smallest positive and negative
subnormals are 2 apart, and ``inf`` sits one step beyond the largest finite
value. NaNs have no place in the order; callers mask them first.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ordered_bits", "ulp_distance"]

_INT_TYPES = {2: np.int16, 4: np.int32, 8: np.int64}


def ordered_bits(x: np.ndarray) -> np.ndarray:
    """Maps floats to int64 so that integer order equals float order.

    ``+0`` and ``-0`` both map to 0; negative values map to negative integers.
    Works for float16, bfloat16, float32 and float64.
    """
    x = np.asarray(x)
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        raise TypeError(f"ordered_bits needs a floating-point array, got {x.dtype}")
    bits = np.ascontiguousarray(x).view(_INT_TYPES[x.dtype.itemsize]).astype(np.int64)
    sign_bit = np.int64(np.iinfo(_INT_TYPES[x.dtype.itemsize]).min)
    # Negative floats are sign-magnitude: -m has bits (sign_bit | m), which as
    # a signed integer is sign_bit + m. Its ordered value is -m = sign_bit - bits.
    return np.where(bits < 0, sign_bit - bits, bits)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise ULP distance of two arrays of the same floating dtype.

    Returns uint64 (float64 distances across zero can exceed 2**63). NaN
    positions give meaningless values; mask them before use.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance needs equal dtypes, got {a.dtype} and {b.dtype}")
    oa = ordered_bits(a)
    ob = ordered_bits(b)
    ua = oa.view(np.uint64)
    ub = ob.view(np.uint64)
    # Modular uint64 subtraction is exact because |oa - ob| < 2**64.
    return np.where(oa >= ob, ua - ub, ub - ua)
