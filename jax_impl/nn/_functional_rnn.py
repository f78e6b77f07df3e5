"""torch's recurrent cells and layers (``aten/src/ATen/native/RNN.cpp``, CPU) as pure functions.

Each cell is the arithmetic of torch's CPU cell, in its order:

- ``rnn_tanh_cell`` / ``rnn_relu_cell``: ``h' = act(W_hh h + b_hh + (W_ih x + b_ih))``;
- ``lstm_cell``: ``gates = (W_hh h + b_hh) + (W_ih x + b_ih)`` chunked as ``i, f, g, o``;
  ``c' = f * c + i * g`` (sigmoid, sigmoid, tanh, sigmoid), ``h' = o * tanh(c')``, then ``W_hr h'`` with a
  projection;
- ``gru_cell``: ``r = sigmoid(hh_r + ih_r)``, ``z = sigmoid(hh_z + ih_z)``,
  ``n = tanh(ih_n + r * hh_n)``, ``h' = (h - n) * z + n``.

A layer runs its cell over time with ``jax.lax.scan`` (compiled once, whatever the sequence length); the
input projections of every step are computed first, in one matrix product, as torch does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["gru_cell", "lstm_cell", "recurrent_layer", "rnn_relu_cell", "rnn_tanh_cell"]


def _linear(x: jax.Array, w: jax.Array, b: jax.Array | None) -> jax.Array:
    y = jnp.matmul(x, w.T)
    return y if b is None else y + b


def rnn_tanh_cell(igates: jax.Array, h: jax.Array, w_hh: jax.Array, b_hh: jax.Array | None) -> jax.Array:
    """``torch.nn.RNNCell(nonlinearity='tanh')`` given the input projection ``igates = W_ih x + b_ih``."""
    return jnp.tanh(_linear(h, w_hh, b_hh) + igates)


def rnn_relu_cell(igates: jax.Array, h: jax.Array, w_hh: jax.Array, b_hh: jax.Array | None) -> jax.Array:
    """``torch.nn.RNNCell(nonlinearity='relu')`` given the input projection."""
    return jax.nn.relu(_linear(h, w_hh, b_hh) + igates)


def lstm_cell(igates: jax.Array, state: tuple[jax.Array, jax.Array], w_hh: jax.Array, b_hh: jax.Array | None,
              w_hr: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """``torch.nn.LSTMCell`` (with ``proj_size``: ``weight_hr``) given the input projection; returns ``(h', c')``."""
    h, c = state
    gates = _linear(h, w_hh, b_hh) + igates
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    c_new = f * c + i * g
    h_new = o * jnp.tanh(c_new)
    return (h_new if w_hr is None else jnp.matmul(h_new, w_hr.T)), c_new


def gru_cell(igates: jax.Array, h: jax.Array, w_hh: jax.Array, b_hh: jax.Array | None) -> jax.Array:
    """``torch.nn.GRUCell`` given the input projection."""
    i_r, i_z, i_n = jnp.split(igates, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(_linear(h, w_hh, b_hh), 3, axis=-1)
    r = jax.nn.sigmoid(h_r + i_r)
    z = jax.nn.sigmoid(h_z + i_z)
    n = jnp.tanh(i_n + h_n * r)
    return (h - n) * z + n


def recurrent_layer(cell: Callable[..., Any], x: jax.Array, state: Any, weights: Sequence[jax.Array | None],
                    reverse: bool = False) -> tuple[jax.Array, Any]:
    """One direction of one layer over a ``(L, N, H_in)`` sequence: ``(outputs (L, N, H_out), final state)``.

    Args:
      cell: one of this module's cells.
      x: the layer's input, time first.
      state: the initial hidden state (an LSTM's ``(h, c)``).
      weights: ``(w_ih, w_hh, b_ih, b_hh)`` and, for an LSTM with projections, ``w_hr``.
      reverse: run from the last step to the first (the ``_reverse`` direction); outputs stay in time order.
    """
    w_ih, w_hh, b_ih, b_hh, *rest = weights
    igates = _linear(x, w_ih, b_ih)  # every step's input projection in one product, as torch precomputes it

    def step(carry, ig):
        new = cell(ig, carry, w_hh, b_hh, *rest)
        return new, (new[0] if isinstance(new, tuple) else new)

    final, outputs = jax.lax.scan(step, state, igates, reverse=reverse)
    return outputs, final
