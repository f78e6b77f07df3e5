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

Packed sequences (torch's ``PackedLayer`` / ``ReversedPackedLayer``) run as a masked scan over the time-first
padded layout: at step ``t`` the cell's new state is kept only for the sequences with ``t < length``, the
others keep their state. Per element this is the arithmetic of torch's packed kernel, which at step ``t``
runs the cell on the first ``batch_sizes[t]`` rows only: a sequence's final state is its state after its
last element, and in the reverse direction each sequence starts from its initial state at its own last
element. The input projection is one product over the packed rows, as torch computes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["PackedLayout", "gru_cell", "lstm_cell", "pack_padded", "packed_layout", "packed_recurrent_layer",
           "pad_packed", "recurrent_layer", "rnn_relu_cell", "rnn_tanh_cell", "take_rows", "takes_onednn_lstm"]


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


def _scan(cell: Callable[..., Any], igates: jax.Array, state: Any, recurrent: Sequence[jax.Array | None],
          reverse: bool, mask: jax.Array | None = None) -> tuple[jax.Array, Any]:
    """The cell over the time axis of ``igates``; with ``mask`` ``(L, N)``, a row's state changes only where
    the mask is true (the outputs there are the cell's; elsewhere they are unused)."""

    def step(carry, inputs):
        ig, keep = inputs
        new = cell(ig, carry, *recurrent)
        if keep is not None:
            new = jax.tree.map(lambda n, old: jnp.where(keep[:, None], n, old), new, carry)
        return new, (new[0] if isinstance(new, tuple) else new)

    final, outputs = jax.lax.scan(step, state, (igates, mask), reverse=reverse)
    return outputs, final


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
    if cell is lstm_cell and takes_onednn_lstm(x, w_ih, w_hh, rest):
        from jax_impl.nn import _lstm_onednn  # imports jax's FFI: only when the route is taken

        return _lstm_onednn.lstm_layer(x, *state, w_ih, w_hh, b_ih, b_hh, reverse)
    igates = _linear(x, w_ih, b_ih)  # every step's input projection in one product, as torch precomputes it
    return _scan(cell, igates, state, (w_hh, b_hh, *rest), reverse)


def takes_onednn_lstm(x: jax.Array, w_ih: jax.Array, w_hh: jax.Array, rest: Sequence[jax.Array | None]) -> bool:
    """Whether an LSTM layer runs oneDNN's LSTM primitive (:mod:`~jax_impl.nn._lstm_onednn`), as torch's CPU
    LSTM does in float32 (``mkldnn_rnn_layer``): float32 input and weights on the CPU backend,
    ``jax_impl.backends.mkldnn`` enabled, a non-empty time-first input, no projections (``proj_size``), not
    packed. There the outputs and input gradients are torch's bit for bit (its bias ``b_ih + b_hh`` summed
    first), and a layer runs at torch's speed; the ``lax.scan`` runs everything else."""
    from jax_impl.backends import mkldnn

    return (not rest and x.ndim == 3 and x.size > 0 and jax.default_backend() == "cpu"
            and all(a.dtype == jnp.float32 for a in (x, w_ih, w_hh)) and mkldnn.is_enabled())


class PackedLayout(NamedTuple):
    """Where the rows of a packed sequence sit in the time-first padded layout ``(T, B)``.

    Built on the host from ``batch_sizes`` (a static structure: it fixes the shapes), by :func:`packed_layout`.

    Attributes:
      lengths: ``(B,)`` int64, each sequence's length (longest first, as packed).
      padded_index: ``(T, B)`` int64, the packed row of step ``t`` of sequence ``b``; the row count ``total``
        (one past the last row) where ``t >= lengths[b]``.
      packed_index: ``(total,)`` int64, the flat padded position ``t * B + b`` of each packed row.
      mask: ``(T, B)`` bool, ``t < lengths[b]``.
    """

    lengths: np.ndarray
    padded_index: np.ndarray
    packed_index: np.ndarray
    mask: np.ndarray


def packed_layout(batch_sizes: Any) -> PackedLayout:
    """The :class:`PackedLayout` of a packed sequence: packed row order is time-major, ``batch_sizes[t]``
    rows at step ``t`` (the first ``batch_sizes[t]`` sequences, which are the longest)."""
    batch_sizes = np.asarray(batch_sizes, np.int64).reshape(-1)
    steps = batch_sizes.shape[0]
    batch = int(batch_sizes[0]) if steps else 0
    column = np.arange(batch, dtype=np.int64)[None, :]
    mask = column < batch_sizes[:, None]
    offsets = np.cumsum(batch_sizes) - batch_sizes
    total = int(batch_sizes.sum())
    padded_index = np.where(mask, offsets[:, None] + column, total)
    packed_index = (np.arange(steps, dtype=np.int64)[:, None] * batch + column)[mask]  # row-major: packed order
    return PackedLayout(mask.sum(axis=0).astype(np.int64), padded_index, packed_index, mask)


def take_rows(data: jax.Array, index: np.ndarray, padding_value: Any = 0) -> jax.Array:
    """``data[index]`` along the first axis, ``padding_value`` (cast to ``data``'s dtype as torch's ``full``
    casts it) where ``index`` is out of range: one gather, whatever the layout."""
    with np.errstate(invalid="ignore"):
        fill = np.asarray(padding_value).astype(data.dtype)[()]  # a hashable scalar: take makes it static
    if fill != fill:  # NaN never equals the cached static value; take's default fill is NaN already
        fill = None
    return jnp.take(data, index, axis=0, mode="fill", fill_value=fill)


def pad_packed(data: jax.Array, layout: PackedLayout, padding_value: Any = 0) -> jax.Array:
    """Packed rows ``(total, *)`` to the padded ``(T, B, *)`` layout, ``padding_value`` past each length."""
    return take_rows(data, layout.padded_index, padding_value)


def pack_padded(padded: jax.Array, layout: PackedLayout) -> jax.Array:
    """The padded ``(T, B, *)`` layout to packed rows ``(total, *)``: the inverse of :func:`pad_packed`."""
    batch = layout.mask.shape[1]
    return padded[layout.packed_index // batch, layout.packed_index % batch]


def packed_recurrent_layer(cell: Callable[..., Any], data: jax.Array, layout: PackedLayout, state: Any,
                           weights: Sequence[jax.Array | None], reverse: bool = False) -> tuple[jax.Array, Any]:
    """One direction of one layer over packed rows ``(total, H_in)``: ``(packed outputs (total, H_out),
    final state)``, the final state of each sequence taken after its last element (``reverse``: after its
    first, having started from ``state`` at its last).

    Args:
      cell: one of this module's cells.
      data: the packed input rows.
      layout: the packed sequence's :class:`PackedLayout`.
      state: the initial hidden state ``(B, H)`` (an LSTM's ``(h, c)``), sequences in packed (sorted) order.
      weights: as :func:`recurrent_layer`.
      reverse: the ``_reverse`` direction.
    """
    w_ih, w_hh, b_ih, b_hh, *rest = weights
    igates = pad_packed(_linear(data, w_ih, b_ih), layout)  # projected over the packed rows, as torch does
    outputs, final = _scan(cell, igates, state, (w_hh, b_hh, *rest), reverse, jnp.asarray(layout.mask))
    return pack_padded(outputs, layout), final
