"""A barrier between a step's gradients and its optimizer update, for XLA:CPU.

XLA:CPU runs a step's independent operations at the same time on its worker
threads. A train step's optimizer update of one parameter depends only on
that parameter's gradient, so XLA starts it while the backward pass is
still computing the gradients below it: the update and the backward
pass's convolutions then share the cores, and a convolution that cuts its
work into one part per core (oneDNN's, torch's own kernels) waits for its
slowest part. torch's ``optimizer.step()`` runs after ``loss.backward()``
has finished; :func:`barrier` gives the compiled step the same order.

``lax.optimization_barrier`` does not: XLA:CPU removes it before it
schedules the operations. Here every array passes through one custom call
that does nothing (its results are its operands' buffers, so nothing is
copied), which XLA runs once all of them are computed and before any of
their users. Off the CPU the barrier lowers to nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jax_impl import _xla_ffi

__all__ = ["barrier"]

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
