"""A barrier between a step's gradients and its optimizer update, for XLA:CPU.

XLA:CPU runs a step's independent operations at the same time on its worker
threads. A train step's optimizer update of one parameter depends only on
that parameter's gradient, so XLA starts it while the backward pass is
still computing the gradients below it: the update and the backward
pass's convolutions then share the cores, and a convolution that cuts its
work into one part per core (oneDNN's, torch's own kernels) waits for its
slowest part. torch's ``optimizer.step()`` runs after ``loss.backward()``
has finished; :func:`after_all` gives the compiled step the same order.

``lax.optimization_barrier`` does not: XLA:CPU removes it before it
schedules the operations. Here every array goes to one custom call that
does nothing, which XLA runs once all of them are computed and before any
of their users. Off the CPU the call lowers to nothing.

Two forms, for two jobs:

- :func:`barrier` hands each array on as the call's result, an opaque
  buffer: XLA cannot see through it (a 2-D view stays 2-D, a value is
  computed once). Its results alias its operands, and XLA's copy insertion
  gives the call copies of some operands first (in ResNet-18's step, the
  reshaped dot results of its GEMM-routed weight gradients and BatchNorm's
  parameter gradients).
- :func:`after_all` only orders: the call reads every array and returns
  one scalar (the zero it is handed), and each array is passed on through a
  ``select`` on that scalar, which XLA fuses into the array's users. No
  array is copied. A train step's gradients take this form
  (``jax_impl.train``): through :func:`barrier`, a ResNet-18 step at small
  images copied its GEMM-routed weight gradients for the call
  (``docs/notes.md``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jax_impl import _xla_ffi

__all__ = ["after_all", "barrier"]

_TARGET = "jax_impl_barrier"

_barrier_p = Primitive("jax_impl_barrier")
_barrier_p.multiple_results = True
_barrier_p.def_impl(lambda *xs: list(xs))
_barrier_p.def_abstract_eval(lambda *avals: list(avals))


def _jvp(primals, tangents):
    return _barrier_p.bind(*primals), list(tangents)  # the tangents need no order


def _batch(args, dims):
    return _barrier_p.bind(*args), list(dims)


@functools.cache
def _registered() -> bool:
    _xla_ffi.register_cpu_no_op(_TARGET)
    return True


def _cpu_lowering(ctx, *args):
    _registered()
    aliases = {i: i for i in range(len(args))}
    return jax.ffi.ffi_lowering(_TARGET, operand_output_aliases=aliases)(ctx, *args)


ad.primitive_jvps[_barrier_p] = _jvp
batching.primitive_batchers[_barrier_p] = _batch
mlir.register_lowering(_barrier_p, lambda ctx, *args: list(args))
mlir.register_lowering(_barrier_p, _cpu_lowering, platform="cpu")

# ``after_all``'s call: operands ``(zero, *arrays)``, one result, ``zero``'s buffer. The same no-op target
# serves both forms: its results alias operands, and it reads nothing.
_after_all_p = Primitive("jax_impl_after_all")
_after_all_p.def_impl(lambda zero, *arrays: zero)
_after_all_p.def_abstract_eval(lambda zero, *arrays: zero)


def _after_all_jvp(primals, tangents):
    out = _after_all_p.bind(*primals)
    return out, ad.Zero(jax.typeof(out).to_tangent_aval())  # an integer: no tangent


def _after_all_batch(args, dims):
    return _after_all_p.bind(*args), None  # the scalar is not batched


def _after_all_cpu_lowering(ctx, zero, *arrays):
    _registered()
    return jax.ffi.ffi_lowering(_TARGET, operand_output_aliases={0: 0})(ctx, zero, *arrays)


ad.primitive_jvps[_after_all_p] = _after_all_jvp
batching.primitive_batchers[_after_all_p] = _after_all_batch
mlir.register_lowering(_after_all_p, lambda ctx, zero, *arrays: [zero])
mlir.register_lowering(_after_all_p, _after_all_cpu_lowering, platform="cpu")


def barrier(tree: Any) -> Any:
    """``tree`` unchanged, its arrays computed before any of them is used (on the CPU backend).

    Args:
      tree: a pytree of arrays (a step's gradients).

    Returns:
      The same values; under ``jit`` on XLA:CPU no operation that reads one
      of them starts before all of them are computed.
    """
    leaves, treedef = jax.tree.flatten(tree)
    if not leaves:
        return tree
    return jax.tree.unflatten(treedef, _barrier_p.bind(*leaves))


def after_all(tree: Any) -> Any:
    """``tree`` unchanged, no array of it read before all of them are computed (on the CPU backend).

    Unlike :func:`barrier`, nothing is copied and XLA sees each array as it
    is: ``x`` becomes ``select(done == 0, x, 0)``, where ``done`` is the
    zero that one custom call, reading every array, returns. XLA fuses the
    select into each user; ``done`` is always 0, so the values (every bit,
    NaNs and signed zeros included) are the arrays themselves.

    Args:
      tree: a pytree of arrays (a step's gradients).

    Returns:
      The same values; under ``jit`` on XLA:CPU no operation that reads one
      of them starts before all of them are computed.
    """
    leaves, treedef = jax.tree.flatten(tree)
    arrays = [x for x in leaves if jnp.result_type(x) != jax.dtypes.float0]  # float0: a tangent with no values
    if not arrays:
        return tree
    ready = _after_all_p.bind(jnp.zeros((), jnp.int32), *arrays) == 0

    def ordered(x: Any) -> Any:
        if jnp.result_type(x) == jax.dtypes.float0:
            return x
        return lax.select(jnp.broadcast_to(ready, jnp.shape(x)), x, jnp.zeros_like(x))

    return jax.tree.unflatten(treedef, [ordered(x) for x in leaves])
