"""A 2-D convolution route through oneDNN, as torch's CPU ``conv2d`` computes it.

Three JAX primitives, each an XLA FFI custom call into
:class:`jax_impl._onednn.Convolution` that reads its operands and writes its
result in XLA's buffers (:mod:`jax_impl._xla_ffi`):

- ``onednn_conv2d(x, w)``: the forward ``y = conv(x, w)``;
- ``onednn_conv2d_input_grad(g, w)``: ``dx``, the transpose in ``x``;
- ``onednn_conv2d_weight_grad(x, g)``: ``dw``, the transpose in ``w``;
- ``onednn_conv2d_nhwc(z, w)``: the forward on a channels-last input, its
  result channels-last (forward only, for ``jax_impl.nn._channels_last``).

Each is bilinear, so each has the bilinear JVP and transposes into the
other two (``<conv(x, w), g> = <x, input_grad(g, w)> = <w, weight_grad(x, g)>``):
``jax.grad`` runs oneDNN's backward-data and backward-weights kernels, as
torch's autograd does, and forward mode, higher derivatives and ``vmap``
work too (``vmap`` folds a batched input into the conv's batch when the
other operand is shared, else maps over the batch).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jax_impl import _onednn, _onednn_native
from jax_impl.nn import _conv_xla
from jax_impl.nn._materialize import results_in_memory

__all__ = ["conv2d", "conv2d_input_grad", "conv2d_nhwc", "registered"]

_TARGETS = {"forward": "jax_impl_onednn_conv2d", "input_grad": "jax_impl_onednn_conv2d_input_grad",
            "weight_grad": "jax_impl_onednn_conv2d_weight_grad", "forward_nhwc": "jax_impl_onednn_conv2d_nhwc"}


def _geometry_array(geometry) -> np.ndarray:
    stride, pads, dilation = geometry
    return np.array([*stride, pads[0][0], pads[0][1], pads[1][0], pads[1][1], *dilation], np.int64)


def _geometry_of(values) -> tuple:
    v = [int(a) for a in values]
    return (v[0], v[1]), ((v[2], v[3]), (v[4], v[5])), (v[6], v[7])


def _convolution(kind: str, operands, results, attributes) -> tuple[_onednn.Convolution, str]:
    """The call's :class:`jax_impl._onednn.Convolution` and its step."""
    (a, b), (out,) = operands, results
    stride, pads, dilation = _geometry_of(attributes["geometry"])
    if kind == "forward":
        return _onednn.convolution(a.shape, b.shape, stride, pads, dilation), "forward"
    if kind == "forward_nhwc":
        n, h, w, c = a.shape
        return _onednn.convolution((n, c, h, w), b.shape, stride, pads, dilation, channels_last=True), "forward"
    if kind == "input_grad":
        return _onednn.convolution(out.shape, b.shape, stride, pads, dilation), "input_grad"
    return _onednn.convolution(a.shape, out.shape, stride, pads, dilation), "weight_grad"


def _kernel(kind: str):
    def run(operands, results, attributes) -> None:
        conv, step = _convolution(kind, operands, results, attributes)
        (a, b), (out,) = operands, results
        getattr(conv, step)(a.data, b.data, out.data)
    return run


def _program(kind: str):
    def program(operands, results, attributes):
        conv, step = _convolution(kind, operands, results, attributes)
        return conv.program(step)
    return program


@functools.cache
def registered() -> bool:
    """Whether the oneDNN custom calls are registered with XLA (oneDNN is available)."""
    if not _onednn.available():
        return False
    for kind, target in _TARGETS.items():
        _onednn_native.register_cpu_handler(target, _kernel(kind), _program(kind))
    return True


def _primitive(kind: str) -> Primitive:
    prim = Primitive(_TARGETS[kind].removeprefix("jax_impl_"))

    def abstract(a, b, *, geometry, out_shape):
        return jax.core.ShapedArray(out_shape, a.dtype)

    def lowering(ctx, a, b, *, geometry, out_shape):
        return jax.ffi.ffi_lowering(_TARGETS[kind])(ctx, a, b, geometry=_geometry_array(geometry))

    prim.def_abstract_eval(abstract)
    prim.def_impl(lambda a, b, **params: _jitted(kind, **params)(a, b))
    mlir.register_lowering(prim, lowering, platform="cpu")
    return prim


@functools.lru_cache(maxsize=256)
def _jitted(kind: str, *, geometry, out_shape):
    # Outside a trace (jax.grad without jit) each bind runs as its own small compiled call.
    return jax.jit(lambda a, b: _PRIMITIVES[kind].bind(a, b, geometry=geometry, out_shape=out_shape))


_PRIMITIVES = {kind: _primitive(kind) for kind in _TARGETS}
_forward, _input_grad, _weight_grad, _forward_nhwc = (
    _PRIMITIVES[k] for k in ("forward", "input_grad", "weight_grad", "forward_nhwc"))
# Each writes its result into its own XLA buffer: a BatchNorm reading it need not copy it first.
results_in_memory(*_PRIMITIVES.values())


def _bind(prim: Primitive, a, b, geometry, out_shape):
    return prim.bind(a, b, geometry=geometry, out_shape=tuple(out_shape))


# Transposes: <conv(x, w), g> = <x, input_grad(g, w)> = <w, weight_grad(x, g)>.
ad.defbilinear(
    _forward,
    lambda ct, x, w, *, geometry, out_shape: _bind(_input_grad, ct, w, geometry, x.aval.shape),
    lambda ct, x, w, *, geometry, out_shape: _bind(_weight_grad, x, ct, geometry, w.aval.shape),
)
ad.defbilinear(  # input_grad(g, w) = dx
    _input_grad,
    lambda ct, g, w, *, geometry, out_shape: _bind(_forward, ct, w, geometry, g.aval.shape),
    lambda ct, g, w, *, geometry, out_shape: _bind(_weight_grad, ct, g, geometry, w.aval.shape),
)
ad.defbilinear(  # weight_grad(x, g) = dw
    _weight_grad,
    lambda ct, x, g, *, geometry, out_shape: _bind(_input_grad, g, ct, geometry, x.aval.shape),
    lambda ct, x, g, *, geometry, out_shape: _bind(_forward, x, ct, geometry, g.aval.shape),
)


def _batch_rule(prim: Primitive, foldable: tuple[bool, bool]):
    """vmap: a batched operand whose partner is shared folds into the conv's batch (the input of the
    forward, the output gradient of the input gradient); anything else maps over the vmapped axis."""

    def rule(args, dims, *, geometry, out_shape):
        a, b = args
        da, db = dims
        for i, (arr, d, other_d) in enumerate(((a, da, db), (b, db, da))):
            if foldable[i] and d is not None and other_d is None:
                arr = jax.numpy.moveaxis(arr, d, 0)
                n, rest = arr.shape[0], arr.shape[1:]
                folded = arr.reshape((n * rest[0], *rest[1:]))
                pair = (folded, b) if i == 0 else (a, folded)
                out = _bind(prim, *pair, geometry, (n * out_shape[0], *out_shape[1:]))
                return out.reshape((n, *out_shape)), 0
        size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
        stacked = [jax.numpy.broadcast_to(x, (size, *x.shape)) if d is None
                   else jax.numpy.moveaxis(x, d, 0) for x, d in zip(args, dims)]
        return jax.lax.map(lambda ab: _bind(prim, *ab, geometry, out_shape), tuple(stacked)), 0

    return rule


batching.primitive_batchers[_forward] = _batch_rule(_forward, (True, False))
batching.primitive_batchers[_input_grad] = _batch_rule(_input_grad, (True, False))
batching.primitive_batchers[_weight_grad] = _batch_rule(_weight_grad, (False, False))
batching.primitive_batchers[_forward_nhwc] = _batch_rule(_forward_nhwc, (True, False))


def _checked_geometry(stride, pads, dilation) -> tuple:
    """The geometry as the primitives' hashable parameter; raises where oneDNN is not registered."""
    if not registered():
        raise RuntimeError("oneDNN is not available: install onednn-cpu-gomp (Linux x86-64) or leave "
                           "jax_impl.backends.mkldnn disabled")
    return tuple(stride), tuple(tuple(p) for p in pads), tuple(dilation)


def conv2d(x, w, stride, pads, dilation):
    """``conv(x, w)`` (NCHW float32 ``x``, OIHW ``w``, no bias) by oneDNN, forward and derivatives.

    Needs oneDNN (:func:`registered`) and the CPU backend.
    """
    geometry = _checked_geometry(stride, pads, dilation)
    out = _conv_xla.out_size(x.shape, w.shape, stride, pads, dilation)
    return _bind(_forward, x, w, geometry, (x.shape[0], w.shape[0], *out))


def conv2d_input_grad(g, w, x_shape, stride, pads, dilation):
    """The input gradient of ``conv(x, w)`` for an output gradient ``g``, ``x`` of shape ``x_shape``: torch's
    transposed conv of ``g`` with ``w`` (oneDNN's backward-data, as torch's deconvolution runs it), its
    derivatives oneDNN's forward conv (in ``g``) and weight gradient (in ``w``).

    Needs oneDNN (:func:`registered`) and the CPU backend.
    """
    geometry = _checked_geometry(stride, pads, dilation)
    return _bind(_input_grad, g, w, geometry, tuple(x_shape))


def conv2d_nhwc(z, w, stride, pads, dilation):
    """``conv(z, w)`` for a channels-last float32 ``z`` (``(N, H, W, C)``) and an OIHW ``w``, the result
    channels-last: oneDNN's forward on the arrays in place (no reorder of ``z`` or the result).

    Forward only: it has no derivative rule, and its caller (``jax_impl.nn._channels_last``) gives the
    tangent by the NCHW route. Needs oneDNN (:func:`registered`) and the CPU backend.
    """
    geometry = _checked_geometry(stride, pads, dilation)
    n, h, wd, c = z.shape
    out = _conv_xla.out_size((n, c, h, wd), w.shape, stride, pads, dilation)
    return _bind(_forward_nhwc, z, w, geometry, (n, *out, w.shape[0]))
