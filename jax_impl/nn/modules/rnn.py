"""``torch.nn.RNN``, ``LSTM``, ``GRU`` and their cells as ``flax.nnx`` modules.

Parameters carry torch's names and shapes (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``,
``bias_hh_l0``, ``weight_hr_l0`` with ``proj_size``, ``_reverse`` for the second direction), registered in
torch's order, and are initialised as torch's ``reset_parameters``: every parameter
``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))`` in that order, so with ``rngs=None`` the weights are torch's
numbers after the same seed. The arithmetic is torch's CPU cells' (:mod:`jax_impl.nn._functional_rnn`), one
``jax.lax.scan`` per layer and direction; between layers, in training, dropout with torch's masks on each
layer's time-first output.

A :class:`~jax_impl.nn.utils.rnn.PackedSequence` input runs as torch's packed kernels: each layer's input
projection over the packed rows, then a scan over the padded layout that leaves a sequence's state unchanged
past its length, so ``h_n`` (``c_n``) holds each sequence's state after its last element and the reverse
direction starts at each sequence's own last element; between layers, dropout on the packed rows (torch's
masks). The output is a ``PackedSequence`` with the input's ``batch_sizes`` and permutations; ``hx`` and the
returned states are in the caller's batch order (``sorted_indices`` / ``unsorted_indices`` applied).
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jax_impl.nn import _functional_rnn as R
from jax_impl.nn import functional as F
from jax_impl.nn import init
from jax_impl.nn.modules._utils import factory_dtype, init_key
from jax_impl.nn.modules.module import Module
from jax_impl.nn.utils.rnn import PackedSequence

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_CELLS = {"LSTM": R.lstm_cell, "GRU": R.gru_cell, "RNN_TANH": R.rnn_tanh_cell, "RNN_RELU": R.rnn_relu_cell}


def _uniform_parameters(module: Module, names: list[str], shapes: list[tuple[int, ...]], hidden_size: int,
                        dtype: Any, rngs: nnx.Rngs | None) -> None:
    """torch's ``reset_parameters``: each parameter in registration order ``U(-stdv, stdv)``."""
    stdv = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
    for name, shape in zip(names, shapes, strict=True):
        setattr(module, name, nnx.Param(init.uniform_(init_key(rngs), shape, dtype, -stdv, stdv)))


def _select_batch(h: jax.Array, indices: Any) -> jax.Array:
    """torch's ``index_select(1, indices)`` of a hidden state (its errors for a bad index or rank)."""
    if h.ndim < 2:
        n = max(h.ndim, 1)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got 1)")
    bad = [int(i) for i in indices if not 0 <= i < h.shape[1]]
    if bad:
        raise RuntimeError(f"INDICES element is out of DATA bounds, id={bad[0]} axis_dim={h.shape[1]}")
    return jnp.take(h, indices, axis=1)


class RNNBase(Module):
    """torch's ``RNNBase``: the layers, directions and parameters shared by :class:`RNN`, :class:`LSTM`,
    :class:`GRU` (torch's constructor checks and messages)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None, *, rngs: nnx.Rngs | None = None) -> None:
        dtype = factory_dtype(device, dtype)
        if not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                             "being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", stacklevel=2)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: {type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: {type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        names, shapes, self._all_weights = [], [], []
        for layer in range(num_layers):
            for direction in range(2 if bidirectional else 1):
                layer_input = input_size if layer == 0 else real_hidden * (2 if bidirectional else 1)
                suffix = "_reverse" if direction == 1 else ""
                group = [(f"weight_ih_l{layer}{suffix}", (gate_size, layer_input)),
                         (f"weight_hh_l{layer}{suffix}", (gate_size, real_hidden))]
                if bias:
                    group += [(f"bias_ih_l{layer}{suffix}", (gate_size,)), (f"bias_hh_l{layer}{suffix}", (gate_size,))]
                if proj_size > 0:
                    group += [(f"weight_hr_l{layer}{suffix}", (proj_size, hidden_size))]
                names += [n for n, _ in group]
                shapes += [s for _, s in group]
                self._all_weights.append([n for n, _ in group])
        _uniform_parameters(self, names, shapes, hidden_size, dtype, rngs)

    def _weights(self, layer: int, direction: int) -> list[jax.Array | None]:
        """``(w_ih, w_hh, b_ih, b_hh[, w_hr])`` of one layer and direction (biases ``None`` without bias)."""
        suffix = "_reverse" if direction == 1 else ""
        get = lambda name: getattr(self, f"{name}_l{layer}{suffix}")[...]  # noqa: E731
        weights = [get("weight_ih"), get("weight_hh"), *((get("bias_ih"), get("bias_hh")) if self.bias else
                                                         (None, None))]
        return weights + ([get("weight_hr")] if self.proj_size > 0 else [])

    def _run(self, input: jax.Array, hx: Any, layout: R.PackedLayout | None = None) -> tuple[jax.Array, Any]:
        """The stacked layers over a time-first, batched input (with ``layout``: packed rows ``(total, H_in)``);
        ``hx`` per layer-direction (an LSTM's ``(h, c)``)."""
        cell = _CELLS[self.mode]
        directions = 2 if self.bidirectional else 1
        x, finals = input, []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                state = (hx[0][index], hx[1][index]) if self.mode == "LSTM" else hx[index]
                weights, reverse = self._weights(layer, direction), direction == 1
                if layout is None:
                    out, final = R.recurrent_layer(cell, x, state, weights, reverse=reverse)
                else:
                    out, final = R.packed_recurrent_layer(cell, x, layout, state, weights, reverse=reverse)
                outputs.append(out)
                finals.append(final)
            x = outputs[0] if directions == 1 else jnp.concatenate(outputs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        if self.mode == "LSTM":
            return x, (jnp.stack([f[0] for f in finals]), jnp.stack([f[1] for f in finals]))
        return x, jnp.stack(finals)

    def _hidden_shapes(self, batch: int) -> list[tuple[int, int, int]]:
        layers = self.num_layers * (2 if self.bidirectional else 1)
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        shapes = [(layers, batch, real_hidden)]
        return shapes + [(layers, batch, self.hidden_size)] if self.mode == "LSTM" else shapes

    def _forward_packed(self, input: PackedSequence, hx: Any) -> tuple[PackedSequence, Any]:
        """torch's packed forward: ``hx`` permuted by ``sorted_indices``, the states back by ``unsorted_indices``."""
        data = jnp.asarray(input.data)
        if data.ndim != 2:
            raise RuntimeError(f"input must have 2 dimensions, got {data.ndim}")
        if data.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {data.shape[-1]}")
        layout = R.packed_layout(input.batch_sizes)
        shapes = self._hidden_shapes(layout.mask.shape[1])
        if hx is None:
            states = [jnp.zeros(shape, data.dtype) for shape in shapes]
        else:
            states = [jnp.asarray(h) for h in (hx if self.mode == "LSTM" else (hx,))]
            if input.sorted_indices is not None:  # permuted before the check, as torch does
                states = [_select_batch(h, input.sorted_indices) for h in states]
            for k, (h, shape) in enumerate(zip(states, shapes, strict=True)):
                if h.shape != shape:
                    what = f"hidden[{k}] size" if self.mode == "LSTM" else "hidden size"
                    raise RuntimeError(f"Expected {what} {shape}, got {list(h.shape)}")
        output, h_n = self._run(data, tuple(states) if self.mode == "LSTM" else states[0], layout)
        if input.unsorted_indices is not None:
            h_n = (tuple(jnp.take(h, input.unsorted_indices, axis=1) for h in h_n) if self.mode == "LSTM"
                   else jnp.take(h_n, input.unsorted_indices, axis=1))
        return PackedSequence._make((output, input.batch_sizes, input.sorted_indices, input.unsorted_indices)), h_n

    def __call__(self, input, hx=None):
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        input = jnp.asarray(input)
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        batched = input.ndim == 3
        if not batched:
            input = input[:, None]
        elif self.batch_first:
            input = jnp.swapaxes(input, 0, 1)
        n = input.shape[1]
        layers = self.num_layers * (2 if self.bidirectional else 1)
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        if hx is None:
            h0 = jnp.zeros((layers, n, real_hidden), input.dtype)
            hx = (h0, jnp.zeros((layers, n, self.hidden_size), input.dtype)) if self.mode == "LSTM" else h0
        elif not batched:
            hx = tuple(jnp.asarray(h)[:, None] for h in hx) if self.mode == "LSTM" else jnp.asarray(hx)[:, None]
        output, h_n = self._run(input, hx)
        if not batched:
            output = output[:, 0]
            h_n = tuple(h[:, 0] for h in h_n) if self.mode == "LSTM" else h_n[:, 0]
        elif self.batch_first:
            output = jnp.swapaxes(output, 0, 1)
        return output, h_n


class RNN(RNNBase):
    """``torch.nn.RNN``: ``h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` (``nonlinearity='relu'``: relu).

    Returns ``(output, h_n)``: ``output`` ``(L, N, D * H)`` (``batch_first``: ``(N, L, D * H)``), ``h_n``
    ``(D * num_layers, N, H)``; unbatched ``(L, H_in)`` inputs give unbatched results. A
    :class:`~jax_impl.nn.utils.rnn.PackedSequence` input gives a ``PackedSequence`` output and each sequence's
    state after its last element in ``h_n``.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, *, rngs: nnx.Rngs | None = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype, rngs=rngs)


class LSTM(RNNBase):
    """``torch.nn.LSTM`` (gates ``i, f, g, o``; ``proj_size`` projects ``h`` by ``weight_hr``).

    Returns ``(output, (h_n, c_n))``; ``hx`` is ``(h_0, c_0)`` or ``None`` (zeros).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None, *, rngs: nnx.Rngs | None = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype, rngs=rngs)


class GRU(RNNBase):
    """``torch.nn.GRU`` (gates ``r, z, n``; ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None, *, rngs: nnx.Rngs | None = None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         device, dtype, rngs=rngs)


class RNNCellBase(Module):
    """torch's ``RNNCellBase``: ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` initialised as torch's."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        dtype = factory_dtype(device, dtype)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else [])
        shapes = [(num_chunks * hidden_size, input_size), (num_chunks * hidden_size, hidden_size)]
        shapes += [(num_chunks * hidden_size,)] * (2 if bias else 0)
        _uniform_parameters(self, names, shapes, hidden_size, dtype, rngs)
        if not bias:
            self.bias_ih = self.bias_hh = None

    def _prepare(self, input, hx, states: int):
        input = jnp.asarray(input)
        if input.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        batched = input.ndim == 2
        x = input if batched else input[None]
        if hx is None:
            zeros = jnp.zeros((x.shape[0], self.hidden_size), x.dtype)
            hx = zeros if states == 1 else (zeros, zeros)
        elif not batched:
            hx = jnp.asarray(hx)[None] if states == 1 else tuple(jnp.asarray(h)[None] for h in hx)
        b_ih = None if self.bias_ih is None else self.bias_ih[...]
        igates = jnp.matmul(x, self.weight_ih[...].T) + (0 if b_ih is None else b_ih)
        b_hh = None if self.bias_hh is None else self.bias_hh[...]
        return batched, igates, hx, self.weight_hh[...], b_hh


class RNNCell(RNNCellBase):
    """``torch.nn.RNNCell``: ``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`` (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None, *, rngs: nnx.Rngs | None = None) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device, dtype, rngs=rngs)
        self.nonlinearity = nonlinearity

    def __call__(self, input, hx=None):
        batched, igates, h, w_hh, b_hh = self._prepare(input, hx, 1)
        if self.nonlinearity == "tanh":
            out = R.rnn_tanh_cell(igates, h, w_hh, b_hh)
        elif self.nonlinearity == "relu":
            out = R.rnn_relu_cell(igates, h, w_hh, b_hh)
        else:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return out if batched else out[0]


class LSTMCell(RNNCellBase):
    """``torch.nn.LSTMCell``: returns ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype, rngs=rngs)

    def __call__(self, input, hx=None):
        batched, igates, state, w_hh, b_hh = self._prepare(input, hx, 2)
        h, c = R.lstm_cell(igates, tuple(state), w_hh, b_hh)
        return (h, c) if batched else (h[0], c[0])


class GRUCell(RNNCellBase):
    """``torch.nn.GRUCell``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype, rngs=rngs)

    def __call__(self, input, hx=None):
        batched, igates, h, w_hh, b_hh = self._prepare(input, hx, 1)
        out = R.gru_cell(igates, h, w_hh, b_hh)
        return out if batched else out[0]
