"""``torch.nn.utils.rnn``: packed sequences and padding of variable-length batches.

A :class:`PackedSequence` holds the steps of ``B`` sequences sorted longest first, time-major: at step ``t``
the ``batch_sizes[t]`` sequences still running, so ``data`` is ``(sum(lengths), *)``. As in torch,
``batch_sizes`` is a host array (torch: a CPU int64 tensor) and so are the lengths every function here takes
and returns (numpy int64; lists are accepted): a packed layout is a static structure that fixes the shapes,
so the lengths cannot be traced values. ``sorted_indices`` / ``unsorted_indices`` are host int64 arrays too.

Under ``jax.jit``: call :func:`pack_padded_sequence` / :func:`pack_sequence` with concrete lengths (outside
the jitted function, or with lengths closed over as constants). A :class:`PackedSequence` is a pytree whose
only leaf is ``data``; ``batch_sizes`` and the permutations are static, so passing one into a jitted function
compiles once per distinct layout. With lengths that vary per batch and must be traced, keep the padded batch
and a mask ``t < lengths[b]`` instead.

Divergences from torch, on bad input only: lengths longer than the padded input raise ``ValueError`` (torch
builds a ``PackedSequence`` whose ``data`` and ``batch_sizes`` disagree), and with ``enforce_sorted=False``
a ``lengths`` of the wrong size raises torch's batch-size error (torch then packs a subset of the columns).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.nn._functional_rnn import packed_layout, take_rows

__all__ = [
    "PackedSequence", "invert_permutation", "pack_padded_sequence", "pack_sequence", "pad_packed_sequence",
    "pad_sequence", "unpack_sequence", "unpad_sequence",
]


def _host_int64(values: Any, what: str) -> np.ndarray:
    """``values`` as a host int64 array; traced values cannot be a packed layout's structure."""
    try:
        return np.asarray(values).astype(np.int64)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError) as err:
        raise ValueError(f"{what} must be concrete host values (a list, numpy array or concrete array): a packed "
                         "sequence's layout fixes its shapes, so under jax.jit pass the lengths as static values "
                         "or use the padded batch with a mask") from err


def _index_or_none(indices: Any) -> np.ndarray | None:
    return None if indices is None else _host_int64(indices, "sorted_indices and unsorted_indices")


class _PackedSequenceFields(NamedTuple):
    data: Any
    batch_sizes: np.ndarray
    sorted_indices: np.ndarray | None
    unsorted_indices: np.ndarray | None


class PackedSequence(_PackedSequenceFields):
    """``torch.nn.utils.rnn.PackedSequence``: the packed ``data`` and its ``batch_sizes``.

    Built by :func:`pack_padded_sequence` / :func:`pack_sequence`, as in torch. ``PackedSequence(data,
    batch_sizes, sorted_indices)`` and ``PackedSequence((data, batch_sizes), sorted_indices=...)`` both work;
    a missing ``unsorted_indices`` is ``invert_permutation(sorted_indices)``.

    Attributes:
      data: ``(sum(lengths), *)`` the steps, time-major (a jax array).
      batch_sizes: ``(T,)`` host int64, the number of sequences at each step.
      sorted_indices: host int64 ``(B,)``, the original batch index of each packed sequence (``None`` when
        the input was sorted already, ``enforce_sorted=True``).
      unsorted_indices: host int64 ``(B,)``, its inverse permutation (``None`` likewise).
    """

    __slots__ = ()

    def __new__(cls, data: Any, batch_sizes: Any = None, sorted_indices: Any = None,
                unsorted_indices: Any = None) -> PackedSequence:
        sorted_indices = _index_or_none(sorted_indices)
        unsorted_indices = (invert_permutation(sorted_indices) if unsorted_indices is None
                            else _index_or_none(unsorted_indices))
        if batch_sizes is None:  # torch's PackedSequence((data, batch_sizes), sorted_indices=...)
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return tuple.__new__(cls, (data, _host_int64(batch_sizes, "batch_sizes"), sorted_indices, unsorted_indices))

    def to(self, dtype: Any) -> PackedSequence:
        """``data`` converted to ``dtype`` (``self`` when it has it already); the indices stay as they are."""
        if jnp.dtype(dtype) == self.data.dtype:
            return self
        return self._replace(data=jnp.asarray(self.data).astype(dtype))

    def double(self) -> PackedSequence:
        return self.to(jnp.float64)

    def float(self) -> PackedSequence:
        return self.to(jnp.float32)

    def half(self) -> PackedSequence:
        return self.to(jnp.float16)

    def long(self) -> PackedSequence:
        return self.to(jnp.int64)

    def int(self) -> PackedSequence:
        return self.to(jnp.int32)

    def short(self) -> PackedSequence:
        return self.to(jnp.int16)

    def char(self) -> PackedSequence:
        return self.to(jnp.int8)

    def byte(self) -> PackedSequence:
        return self.to(jnp.uint8)


def _flatten(sequence: PackedSequence):
    static = tuple(None if a is None else tuple(int(v) for v in a) for a in sequence[1:])
    return (sequence.data,), static


def _unflatten(static, children) -> PackedSequence:
    arrays = (None if a is None else np.asarray(a, np.int64) for a in static)
    return PackedSequence._make((children[0], *arrays))


# Only ``data`` is a leaf: the layout and permutations are static structure (jit compiles once per layout).
jax.tree_util.register_pytree_node(PackedSequence, _flatten, _unflatten)


def invert_permutation(permutation: Any) -> np.ndarray | None:
    """``torch.nn.utils.rnn.invert_permutation``: ``output[permutation[i]] = i`` (``None`` stays ``None``)."""
    if permutation is None:
        return None
    permutation = _host_int64(permutation, "permutation")
    output = np.empty_like(permutation)
    output[permutation] = np.arange(permutation.size, dtype=np.int64)
    return output


def _lengths_1d(lengths: Any) -> np.ndarray:
    lengths = _host_int64(lengths, "lengths")
    if lengths.ndim != 1:
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.ndim}D cpu Long "
                           "tensor")
    return lengths


def _batch_size(input: jax.Array, batch_first: bool) -> int:
    if input.ndim < 2:
        n = max(input.ndim, 1)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got 1)")
    return input.shape[0 if batch_first else 1]


def pack_padded_sequence(input: Any, lengths: Any, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """``torch.nn.utils.rnn.pack_padded_sequence``: pack a padded ``(T, B, *)`` batch (``batch_first``:
    ``(B, T, *)``) of sequences of the given ``lengths``.

    With ``enforce_sorted=True`` the lengths must be non-increasing; with ``False`` the batch is sorted by
    decreasing length first (stable, as torch's CPU sort) and ``sorted_indices`` records the order. Steps past
    a sequence's length are dropped. Checks and messages are those of torch's ``_pack_padded_sequence``.

    Args:
      input: the padded batch (at least 2-D).
      lengths: ``B`` host lengths (list, numpy or concrete array), converted to int64 as torch does.
      batch_first: whether ``input`` is ``(B, T, *)``.
      enforce_sorted: require sorted lengths instead of sorting.
    """
    input = jnp.asarray(input)
    lengths = _lengths_1d(lengths)
    batch = _batch_size(input, batch_first)
    steps = input.shape[1 if batch_first else 0]
    sorted_indices = None
    if not enforce_sorted:
        if lengths.shape[0] != batch:  # torch would index_select a subset of the columns here
            raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {lengths.shape[0]} "
                               f"(batch_size={batch})")
        sorted_indices = np.argsort(-lengths, kind="stable")
        lengths = lengths[sorted_indices]
    if input.size == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if lengths.shape[0] != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {lengths.shape[0]} "
                           f"(batch_size={batch})")
    if lengths[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if np.any(lengths[1:] > lengths[:-1]):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You "
                           "can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                           "sidestep this requirement if you do not need ONNX exportability.")
    if lengths[0] > steps:
        raise ValueError(f"Expected every length to be at most the padded sequence length {steps}, but got a "
                         f"length of {int(lengths[0])}")
    batch_sizes = (lengths[None, :] > np.arange(lengths[0], dtype=np.int64)[:, None]).sum(axis=1).astype(np.int64)
    layout = packed_layout(batch_sizes)
    step, column = np.divmod(layout.packed_index, batch)
    if sorted_indices is not None:
        column = sorted_indices[column]
    data = input[column, step] if batch_first else input[step, column]  # one gather from the caller's layout
    return PackedSequence(data, batch_sizes, sorted_indices, None)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[jax.Array, np.ndarray]:
    """``torch.nn.utils.rnn.pad_packed_sequence``: the inverse of :func:`pack_padded_sequence`.

    Returns ``(padded, lengths)``: ``padded`` ``(T, B, *)`` (``batch_first``: ``(B, T, *)``) with
    ``padding_value`` past each length, ``T`` the longest length or ``total_length``; ``lengths`` host int64.
    Both are in the original batch order (``unsorted_indices`` applied).

    Raises:
      ValueError: ``total_length`` shorter than the longest sequence (torch's message).
    """
    batch_sizes = np.asarray(sequence.batch_sizes, np.int64)
    max_seq_length = batch_sizes.shape[0]
    if total_length is not None:
        if total_length < max_seq_length:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {max_seq_length}")
        max_seq_length = total_length
    layout = packed_layout(batch_sizes)
    index, lengths = layout.padded_index, layout.lengths
    if max_seq_length > index.shape[0]:  # rows past every length: the out-of-range row reads the padding
        tail = np.full((max_seq_length - index.shape[0], index.shape[1]), int(batch_sizes.sum()), np.int64)
        index = np.concatenate([index, tail])
    if sequence.unsorted_indices is not None:
        unsorted = np.asarray(sequence.unsorted_indices, np.int64)
        index, lengths = index[:, unsorted], lengths[unsorted]
    return take_rows(jnp.asarray(sequence.data), index.T if batch_first else index, padding_value), lengths


def _broadcast_error(dest: tuple[int, ...], src: tuple[int, ...]) -> RuntimeError | None:
    """torch's ``copy_`` broadcasting error for copying a ``src``-shaped sequence into ``dest`` (or ``None``)."""
    for k in range(1, min(len(src), len(dest)) + 1):
        a, b = dest[-k], src[-k]
        if b not in (1, a):
            return RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b ({b}) at non-singleton "
                                f"dimension {max(len(dest), len(src)) - k}")
    if len(src) > len(dest):
        return RuntimeError(f"output with shape {list(dest)} doesn't match the broadcast shape "
                            f"{list(np.broadcast_shapes(dest, src))}")
    return None


def pad_sequence(sequences: Any, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> jax.Array:
    """``torch.nn.utils.rnn.pad_sequence``: stack sequences ``(L_i, *)`` into ``(T, B, *)`` (``batch_first``:
    ``(B, T, *)``), ``T = max L_i``, filling with ``padding_value`` on ``padding_side`` (``'right'``: after
    each sequence, ``'left'``: before it).

    The result has the first sequence's dtype and trailing shape; the others are cast and broadcast into it,
    as torch's ``copy_`` does (torch's errors when they do not fit).
    """
    if not isinstance(sequences, Iterable):
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg of type: "
                           f"{type(sequences)}")
    sequences = [jnp.asarray(s) for s in sequences]
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if any(s.ndim == 0 for s in sequences):
        raise RuntimeError("pad_sequence: every sequence needs a leading length dimension, but got a 0-D tensor")
    dtype, trailing = sequences[0].dtype, sequences[0].shape[1:]
    rows = []
    for s in sequences:
        error = _broadcast_error((s.shape[0], *trailing), s.shape)
        if error is not None:
            raise error
        s = s if s.dtype == dtype else s.astype(dtype)
        rows.append(s if s.shape[1:] == trailing else jnp.broadcast_to(s, (s.shape[0], *trailing)))
    lengths = np.array([s.shape[0] for s in rows], np.int64)
    max_len = int(lengths.max())
    # One gather from the concatenated rows: (B, T) positions, out of range (the padding) past each length.
    starts = np.cumsum(lengths) - lengths
    step = np.arange(max_len, dtype=np.int64)[None, :]
    offset = step if padding_side == "right" else step - (max_len - lengths[:, None])
    index = np.where((offset >= 0) & (offset < lengths[:, None]), starts[:, None] + offset, int(lengths.sum()))
    return take_rows(jnp.concatenate(rows), index if batch_first else index.T, padding_value)


def _split_rows(rows: jax.Array, lengths: np.ndarray) -> list[jax.Array]:
    return jnp.split(rows, np.cumsum(lengths)[:-1].tolist()) if len(lengths) else []


def unpad_sequence(padded_sequences: Any, lengths: Any, batch_first: bool = False) -> list[jax.Array]:
    """``torch.nn.utils.rnn.unpad_sequence``: the first ``lengths[b]`` steps of each sequence of a padded batch.

    (torch transposes a time-first input in place as a side effect; jax arrays are immutable, so the input is
    left as it is.)
    """
    padded = jnp.asarray(padded_sequences)
    lengths = _host_int64(lengths, "lengths").reshape(-1)
    batch, steps = (padded.shape[0], padded.shape[1]) if batch_first else (padded.shape[1], padded.shape[0])
    if len(lengths) != batch:  # torch's zip(..., strict=True) over the batch
        raise ValueError(f"zip() argument 2 is {'longer' if len(lengths) > batch else 'shorter'} than argument 1")
    lengths = np.clip(lengths, 0, steps)  # torch's mask ``arange(T) < length``
    column = np.repeat(np.arange(batch), lengths)
    step = np.concatenate([np.arange(n) for n in lengths]) if batch else np.zeros(0, np.int64)
    rows = padded[column, step] if batch_first else padded[step, column]  # one gather, then one split
    return _split_rows(rows, lengths)


def pack_sequence(sequences: Sequence[Any], enforce_sorted: bool = True) -> PackedSequence:
    """``torch.nn.utils.rnn.pack_sequence``: :func:`pad_sequence` then :func:`pack_padded_sequence`."""
    lengths = np.asarray([jnp.shape(v)[0] for v in sequences], np.int64)
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[jax.Array]:
    """``torch.nn.utils.rnn.unpack_sequence``: the list of sequences of a :class:`PackedSequence`, in their
    original order (torch's :func:`pad_packed_sequence` then :func:`unpad_sequence`, as one gather)."""
    layout = packed_layout(packed_sequences.batch_sizes)
    index, lengths = layout.padded_index.T, layout.lengths  # (B, T), sorted order
    if packed_sequences.unsorted_indices is not None:
        unsorted = np.asarray(packed_sequences.unsorted_indices, np.int64)
        index, lengths = index[unsorted], lengths[unsorted]
    valid = index[index < int(layout.mask.sum())]  # row-major: each sequence's steps in order, one by one
    return _split_rows(jnp.take(jnp.asarray(packed_sequences.data), valid, axis=0), lengths)
