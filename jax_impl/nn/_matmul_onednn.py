"""A float32 matrix product through oneDNN, as torch's CPU ``mm`` computes it.

One JAX primitive, ``onednn_matmul(a, b)`` with ``transpose_a`` and
``transpose_b``, an XLA FFI custom call into :class:`jax_impl._onednn.Matmul`
that reads its operands and writes its result in XLA's buffers
(:mod:`jax_impl._xla_ffi`): ``C = op(A) @ op(B)``, each ``op`` a transpose or
not, given to oneDNN as strides (no copy). A second,
``onednn_matmul_bias(a, b, bias)``, adds a bias row inside oneDNN's kernel,
as torch's ``addmm`` adds it inside its GEMM: the sums are written once,
where a separate ``+ bias`` reads and writes the whole product again (on a
language model's 10,000-word decoder, a 45 MB pass). Its derivatives are
the bilinear primitive's plus the bias's (a sum over rows).

It is bilinear, and each of its transposes is the same product with other
transposes (for ``C = A @ B``: ``dA = G @ B^T``, ``dB = A^T @ G``), so
``jax.grad`` runs oneDNN's kernel three times per product, as torch's
autograd runs its GEMM; forward mode, higher derivatives and ``vmap`` work
too (``vmap`` folds a batched left operand into its rows when the right one
is shared, else maps over the batch).

Why: XLA:CPU's dots (YNNPACK's or Eigen's) run the shapes of a transformer's
linear layers at 60-80% of torch's GEMM speed, their weight gradients
(``G^T @ X``) at about half; oneDNN's kernels run them at torch's, and for
most shapes give torch's result bit for bit.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jax_impl import _onednn, _onednn_native
from jax_impl.nn._materialize import results_in_memory

__all__ = ["matmul", "matmul_bias", "registered"]

_TARGET = "jax_impl_onednn_matmul"
_TARGET_BIAS = "jax_impl_onednn_matmul_bias"


def _of_call(operands, results, attributes) -> _onednn.Matmul:
    """The call's cached :class:`jax_impl._onednn.Matmul`."""
    (a, _, *bias), (out,) = operands, results
    transpose_a, transpose_b = (bool(v) for v in attributes["transposes"])
    m, n = out.shape
    k = a.shape[0] if transpose_a else a.shape[1]
    return _onednn.matmul(m, k, n, transpose_a, transpose_b, bool(bias))


def _kernel(operands, results, attributes) -> None:
    (a, b, *bias), (out,) = operands, results
    _of_call(operands, results, attributes)(a.data, b.data, out.data, *(x.data for x in bias))


def _program(operands, results, attributes):
    return _of_call(operands, results, attributes).program()


@functools.cache
def registered() -> bool:
    """Whether the oneDNN matmul custom calls are registered with XLA (oneDNN is available)."""
    if not _onednn.available():
        return False
    _onednn_native.register_cpu_handler(_TARGET, _kernel, _program)
    _onednn_native.register_cpu_handler(_TARGET_BIAS, _kernel, _program)
    return True


def _shape(a_shape, b_shape, transpose_a: bool, transpose_b: bool) -> tuple[int, int]:
    return (a_shape[1] if transpose_a else a_shape[0]), (b_shape[0] if transpose_b else b_shape[1])


_matmul = Primitive("onednn_matmul")


def _abstract(a, b, *, transpose_a, transpose_b):
    return jax.core.ShapedArray(_shape(a.shape, b.shape, transpose_a, transpose_b), a.dtype)


def _lowering(ctx, a, b, *, transpose_a, transpose_b):
    transposes = np.array([int(transpose_a), int(transpose_b)], np.int64)
    return jax.ffi.ffi_lowering(_TARGET)(ctx, a, b, transposes=transposes)


@functools.lru_cache(maxsize=256)
def _jitted(transpose_a: bool, transpose_b: bool):
    # Outside a trace (jax.grad without jit) each bind runs as its own small compiled call.
    return jax.jit(lambda a, b: _bind(a, b, transpose_a, transpose_b))


_matmul.def_abstract_eval(_abstract)
_matmul.def_impl(lambda a, b, *, transpose_a, transpose_b: _jitted(transpose_a, transpose_b)(a, b))
mlir.register_lowering(_matmul, _lowering, platform="cpu")
# It writes its result into its own XLA buffer: a consumer that reads it several times need not copy it.
results_in_memory(_matmul)


def _bind(a, b, transpose_a: bool, transpose_b: bool):
    return _matmul.bind(a, b, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def _transpose_a(ct, a, b, *, transpose_a, transpose_b):
    # C = op(A) op(B): d op(A) = G op(B)^T; stored transposed, dA = op(B) G^T.
    if transpose_a:
        return _bind(b, ct, transpose_b, True)
    return _bind(ct, b, False, not transpose_b)


def _transpose_b(ct, a, b, *, transpose_a, transpose_b):
    # d op(B) = op(A)^T G; stored transposed, dB = G^T op(A).
    if transpose_b:
        return _bind(ct, a, True, transpose_a)
    return _bind(a, ct, not transpose_a, False)


ad.defbilinear(_matmul, _transpose_a, _transpose_b)


def _batch_rule(args, dims, *, transpose_a, transpose_b):
    """vmap: a batched, untransposed left operand with a shared right one folds into the rows; anything
    else maps over the vmapped axis."""
    (a, b), (da, db) = args, dims
    if da is not None and db is None and not transpose_a:
        a = jax.numpy.moveaxis(a, da, 0)
        n, m = a.shape[:2]
        out = _bind(a.reshape(n * m, a.shape[2]), b, False, transpose_b)
        return out.reshape(n, m, out.shape[1]), 0
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    stacked = [jax.numpy.broadcast_to(x, (size, *x.shape)) if d is None else jax.numpy.moveaxis(x, d, 0)
               for x, d in zip(args, dims)]
    return jax.lax.map(lambda ab: _bind(*ab, transpose_a, transpose_b), tuple(stacked)), 0


batching.primitive_batchers[_matmul] = _batch_rule


_matmul_bias = Primitive("onednn_matmul_bias")


def _bias_lowering(ctx, a, b, bias, *, transpose_a, transpose_b):
    transposes = np.array([int(transpose_a), int(transpose_b)], np.int64)
    return jax.ffi.ffi_lowering(_TARGET_BIAS)(ctx, a, b, bias, transposes=transposes)


@functools.lru_cache(maxsize=256)
def _jitted_bias(transpose_a: bool, transpose_b: bool):
    return jax.jit(lambda a, b, bias: _bind_bias(a, b, bias, transpose_a, transpose_b))


def _bind_bias(a, b, bias, transpose_a: bool, transpose_b: bool):
    return _matmul_bias.bind(a, b, bias, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def _bias_jvp(primals, tangents, *, transpose_a, transpose_b):
    a, b, bias = primals
    da, db, dbias = (ad.instantiate_zeros(t) if type(t) is not ad.Zero else None for t in tangents)
    terms = []
    if da is not None:
        terms.append(_bind(da, b, transpose_a, transpose_b))
    if db is not None:
        terms.append(_bind(a, db, transpose_a, transpose_b))
    out = _bind_bias(a, b, bias, transpose_a, transpose_b)
    if dbias is not None:
        terms.append(jax.numpy.broadcast_to(dbias, out.shape))
    tangent = functools.reduce(lambda x, y: x + y, terms) if terms else ad.Zero.from_primal_value(out)
    return out, tangent


def _bias_batch_rule(args, dims, *, transpose_a, transpose_b):
    """vmap: the bilinear product's rule, then the bias added (batched or not)."""
    (a, b, bias), (da, db, dbias) = args, dims
    if da is None and db is None:
        out = _bind(a, b, transpose_a, transpose_b)[None]
    else:
        out, _ = _batch_rule((a, b), (da, db), transpose_a=transpose_a, transpose_b=transpose_b)
    rows = jax.numpy.moveaxis(bias, dbias, 0)[:, None, :] if dbias is not None else bias
    return out + rows, 0


_matmul_bias.def_abstract_eval(lambda a, b, bias, **transposes: _abstract(a, b, **transposes))
_matmul_bias.def_impl(lambda a, b, bias, *, transpose_a, transpose_b: _jitted_bias(transpose_a, transpose_b)(
    a, b, bias))
mlir.register_lowering(_matmul_bias, _bias_lowering, platform="cpu")
results_in_memory(_matmul_bias)
ad.primitive_jvps[_matmul_bias] = _bias_jvp
batching.primitive_batchers[_matmul_bias] = _bias_batch_rule


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False):
    """``op(a) @ op(b)`` for 2-D float32 ``a`` and ``b`` by oneDNN, forward and derivatives.

    Needs oneDNN (:func:`registered`) and the CPU backend.
    """
    _require()
    return _bind(a, b, transpose_a, transpose_b)


def matmul_bias(a, b, bias, transpose_a: bool = False, transpose_b: bool = False):
    """``op(a) @ op(b) + bias`` for 2-D float32 ``a`` and ``b`` and a 1-D ``bias`` (one value per column),
    the bias added inside oneDNN's kernel; forward and derivatives.

    Needs oneDNN (:func:`registered`) and the CPU backend.
    """
    _require()
    return _bind_bias(a, b, bias, transpose_a, transpose_b)


def _require() -> None:
    if not registered():
        raise RuntimeError("oneDNN is not available: install onednn-cpu-gomp (Linux x86-64) or leave "
                           "jax_impl.backends.mkldnn disabled")
