"""Python XLA FFI handlers (jax_impl/_xla_ffi.py): operands, results and attributes in place; errors raise."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_impl import _xla_ffi

SEEN: dict = {}


def _scale(operands, results, attributes):
    (x,), (out,) = operands, results
    SEEN.update(shape=x.shape, dtype=x.dtype, attributes=attributes)
    n = int(np.prod(x.shape))
    src = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * n).from_address(x.data))
    dst = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * n).from_address(out.data))
    dst[:] = src * attributes["factors"][0] + attributes["offset"]


def _fail(operands, results, attributes):
    raise ValueError("the kernel refused")


_xla_ffi.register_cpu_handler("jax_impl_test_scale", _scale)
_xla_ffi.register_cpu_handler("jax_impl_test_fail", _fail)


def test_handler_reads_operands_and_attributes_and_writes_the_result():
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    call = jax.jit(lambda a: jax.ffi.ffi_call("jax_impl_test_scale", jax.ShapeDtypeStruct(a.shape, a.dtype))(
        a, factors=np.array([3, 4], np.int64), offset=np.float32(0.5)))
    np.testing.assert_array_equal(np.asarray(call(x)), np.asarray(x) * 3 + 0.5)
    assert SEEN["shape"] == (2, 3) and SEEN["dtype"] == np.float32
    np.testing.assert_array_equal(SEEN["attributes"]["factors"], [3, 4])
    assert SEEN["attributes"]["offset"] == 0.5


def test_an_exception_fails_the_computation_with_its_message():
    call = jax.ffi.ffi_call("jax_impl_test_fail", jax.ShapeDtypeStruct((2,), jnp.float32))
    with pytest.raises(Exception, match="the kernel refused"):
        jax.block_until_ready(call(jnp.ones(2)))
