"""One LSTM layer through oneDNN's LSTM primitive, as torch's CPU ``nn.LSTM`` runs it in float32.

torch's float32 CPU LSTM (``aten/src/ATen/native/mkldnn/RNN.cpp``,
``mkldnn_rnn_layer``) runs each layer and direction as one oneDNN LSTM
primitive: gates ``W_ih x_t + W_hh h_{t-1} + (b_ih + b_hh)`` (the two biases
summed first), gate order ``i, f, g, o``; training writes a workspace that the
backward primitive reads. This module calls the same primitive through XLA
FFI custom calls into :class:`jax_impl._onednn.LSTMLayer`:

- ``jax_impl_onednn_lstm_inference``: ``(x, h0, c0, w_ih, w_hh, bias) -> (y, hT, cT)``;
- ``jax_impl_onednn_lstm_forward``: the same and the workspace (reverse mode);
- ``jax_impl_onednn_lstm_backward``: the gradients of all six from the output gradients.

:func:`lstm_layer` is a ``jax.custom_vjp`` over them: ``jax.grad`` runs
oneDNN's backward, as torch's autograd does. Forward-mode derivatives
(``jax.jvp``) are not defined for it; ``jax_impl.backends.mkldnn`` disabled,
the layer is the ``lax.scan`` of ``jax_impl.nn._functional_rnn``, which has them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl import _onednn, _xla_ffi

__all__ = ["lstm_layer", "registered"]

_INFERENCE = "jax_impl_onednn_lstm_inference"
_FORWARD = "jax_impl_onednn_lstm_forward"
_BACKWARD = "jax_impl_onednn_lstm_backward"


def _shape(x, h0) -> tuple[int, int, int, int]:
    t, n, c = x.shape
    return t, n, c, h0.shape[1]


def _inference(operands, results, attributes) -> None:
    x, h0, c0, w_ih, w_hh, bias = operands
    layer = _onednn.lstm_layer(*_shape(x, h0), bool(attributes["reverse"]), False)
    layer.forward(x.data, h0.data, c0.data, w_ih.data, w_hh.data, bias.data, *(r.data for r in results))


def _forward(operands, results, attributes) -> None:
    x, h0, c0, w_ih, w_hh, bias = operands
    layer = _onednn.lstm_layer(*_shape(x, h0), bool(attributes["reverse"]), True)
    layer.forward(x.data, h0.data, c0.data, w_ih.data, w_hh.data, bias.data, *(r.data for r in results))


def _backward(operands, results, attributes) -> None:
    x, h0 = operands[:2]
    layer = _onednn.lstm_layer(*_shape(x, h0), bool(attributes["reverse"]), True)
    layer.backward(*(o.data for o in operands), *(r.data for r in results))


@functools.cache
def registered() -> bool:
    """Whether the oneDNN LSTM custom calls are registered with XLA (oneDNN is available)."""
    if not _onednn.available():
        return False
    for target, kernel in ((_INFERENCE, _inference), (_FORWARD, _forward), (_BACKWARD, _backward)):
        _xla_ffi.register_cpu_handler(target, kernel)
    return True


def _workspace(x, h0, reverse: bool) -> jax.ShapeDtypeStruct:
    """The forward's workspace as a float32 array (oneDNN's size for this shape, in 4-byte words)."""
    size = _onednn.lstm_layer(*_shape(x, h0), reverse, True).workspace_bytes
    return jax.ShapeDtypeStruct((max(1, -(-size // 4)),), jnp.float32)


def _outputs(x, h0) -> tuple[jax.ShapeDtypeStruct, ...]:
    t, n, _, hidden = _shape(x, h0)
    return (jax.ShapeDtypeStruct((t, n, hidden), x.dtype), jax.ShapeDtypeStruct((n, hidden), x.dtype),
            jax.ShapeDtypeStruct((n, hidden), x.dtype))


def _call(target: str, results, reverse: bool, *operands):
    return jax.ffi.ffi_call(target, results, vmap_method="sequential")(*operands, reverse=np.int64(reverse))


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _layer(x, h0, c0, w_ih, w_hh, bias, reverse):
    return tuple(_call(_INFERENCE, _outputs(x, h0), reverse, x, h0, c0, w_ih, w_hh, bias))


def _layer_fwd(x, h0, c0, w_ih, w_hh, bias, reverse):
    y, h_t, c_t, workspace = _call(_FORWARD, (*_outputs(x, h0), _workspace(x, h0, reverse)), reverse,
                                   x, h0, c0, w_ih, w_hh, bias)
    return (y, h_t, c_t), (x, h0, c0, w_ih, w_hh, bias, y, h_t, c_t, workspace)


def _layer_bwd(reverse, residuals, grads):
    x, h0, c0, w_ih, w_hh, bias = residuals[:6]
    # An output nobody differentiates comes back as a symbolic zero; oneDNN reads a zero array for it.
    grads = tuple(jnp.zeros(s.shape, s.dtype) if g is None else g for g, s in zip(grads, _outputs(x, h0)))
    shapes = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, h0, c0, w_ih, w_hh, bias))
    return tuple(_call(_BACKWARD, shapes, reverse, *residuals, *grads))


_layer.defvjp(_layer_fwd, _layer_bwd)


def lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse: bool = False):
    """One direction of one LSTM layer by oneDNN: ``(y (T, N, H), (hT, cT))`` for a time-first float32 ``x``
    ``(T, N, C)``, states ``(N, H)``, torch's weights ``(4H, C)``, ``(4H, H)`` and biases (either may be
    ``None``: zero), with torch's ``b_ih + b_hh`` rounded once.

    Needs oneDNN (:func:`registered`) and the CPU backend.
    """
    if not registered():
        raise RuntimeError("oneDNN is not available: install onednn-cpu-gomp (Linux x86-64) or leave "
                           "jax_impl.backends.mkldnn disabled")
    hidden4 = w_ih.shape[0]
    zeros = jnp.zeros((hidden4,), x.dtype)
    bias = (zeros if b_ih is None else b_ih) + (zeros if b_hh is None else b_hh)
    y, h_t, c_t = _layer(x, h0, c0, w_ih, w_hh, bias, bool(reverse))
    return y, (h_t, c_t)
