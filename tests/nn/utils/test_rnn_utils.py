"""``nn.utils.rnn`` against torch: packing, padding and their inverses over a seeded grid of batch sizes,
lengths (with ties), trailing shapes, dtypes, ``batch_first``, ``enforce_sorted``, ``padding_value``,
``padding_side`` and ``total_length``; torch's errors for bad input.

Every result is a selection of input elements (or the padding value), so it must equal torch's bit for bit,
and so must the gradients through ``pack_padded_sequence`` / ``pad_packed_sequence`` (zeros and copies of the
output gradient).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.nn.utils import rnn as torch_rnn

from jax_impl.nn.utils import rnn as jax_rnn

_DTYPES = [(np.float64, torch.float64), (np.float32, torch.float32), (np.int64, torch.int64)]


def _equal(ours, theirs, what):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    ours = np.asarray(ours)
    assert ours.dtype == theirs.dtype, what
    np.testing.assert_array_equal(ours, theirs, err_msg=what)


def _case(seed):
    rng = np.random.default_rng(seed)
    batch, steps = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    trailing = tuple(int(n) for n in rng.integers(1, 4, int(rng.integers(0, 3))))
    lengths = rng.integers(1, steps + 1, batch)
    lengths[rng.integers(batch)] = steps
    lengths[rng.integers(batch)] = lengths[rng.integers(batch)]  # ties (stable sort); at times max < steps
    enforce_sorted = bool(rng.integers(2))
    if enforce_sorted:
        lengths = np.sort(lengths)[::-1].copy()
    np_dtype, torch_dtype = _DTYPES[int(rng.integers(len(_DTYPES)))]
    padding_value = [0.0, -1.5, 3.0, float("nan")][int(rng.integers(4 if np_dtype != np.int64 else 3))]
    total_length = None if rng.integers(2) else steps + int(rng.integers(0, 3))
    lengths_as = ["list", "numpy", "jax"][int(rng.integers(3))]
    return dict(rng=rng, batch=batch, steps=steps, trailing=trailing, lengths=lengths, np_dtype=np_dtype,
                torch_dtype=torch_dtype, batch_first=bool(rng.integers(2)), enforce_sorted=enforce_sorted,
                padding_value=padding_value, total_length=total_length, lengths_as=lengths_as,
                padding_side=["right", "left"][int(rng.integers(2))])


def _check(seed):
    c = _case(seed)
    rng, batch_first, lengths = c["rng"], c["batch_first"], c["lengths"]
    shape = (c["batch"], c["steps"]) if batch_first else (c["steps"], c["batch"])
    x = (rng.standard_normal(shape + c["trailing"]) * 10).astype(c["np_dtype"])
    our_lengths = {"list": lengths.tolist(), "numpy": lengths, "jax": jnp.asarray(lengths)}[c["lengths_as"]]
    theirs = torch_rnn.pack_padded_sequence(torch.tensor(x), torch.tensor(lengths), batch_first, c["enforce_sorted"])
    ours = jax_rnn.pack_padded_sequence(x, our_lengths, batch_first, c["enforce_sorted"])
    _equal(ours.data, theirs.data, "data")
    _equal(ours.batch_sizes, theirs.batch_sizes, "batch_sizes")
    for a, b, what in ((ours.sorted_indices, theirs.sorted_indices, "sorted_indices"),
                       (ours.unsorted_indices, theirs.unsorted_indices, "unsorted_indices")):
        assert (a is None) == (b is None), what
        if a is not None:
            _equal(a, b, what)

    for pad_first in (batch_first, not batch_first):
        kwargs = dict(batch_first=pad_first, padding_value=c["padding_value"], total_length=c["total_length"])
        t_padded, t_lengths = torch_rnn.pad_packed_sequence(theirs, **kwargs)
        padded, out_lengths = jax_rnn.pad_packed_sequence(ours, **kwargs)
        _equal(padded, t_padded, "pad_packed_sequence")
        _equal(out_lengths, t_lengths, "lengths")

    sequences = [x[b, :n] if batch_first else x[:n, b] for b, n in enumerate(lengths)]
    for a, b in zip(jax_rnn.unpack_sequence(ours), torch_rnn.unpack_sequence(theirs), strict=True):
        _equal(a, b, "unpack_sequence")
    t_padded = torch_rnn.pad_sequence([torch.tensor(s) for s in sequences], batch_first, c["padding_value"],
                                      c["padding_side"])
    padded = jax_rnn.pad_sequence(sequences, batch_first, c["padding_value"], c["padding_side"])
    _equal(padded, t_padded, "pad_sequence")
    if c["padding_side"] == "right":
        for a, b in zip(jax_rnn.unpad_sequence(padded, lengths, batch_first),
                        torch_rnn.unpad_sequence(t_padded, torch.tensor(lengths), batch_first), strict=True):
            _equal(a, b, "unpad_sequence")
    t_packed = torch_rnn.pack_sequence([torch.tensor(s) for s in sequences], c["enforce_sorted"])
    packed = jax_rnn.pack_sequence(sequences, c["enforce_sorted"])
    _equal(packed.data, t_packed.data, "pack_sequence")
    _equal(packed.batch_sizes, t_packed.batch_sizes, "pack_sequence batch_sizes")

    if c["np_dtype"] == np.float64:  # gradients through packing and padding: copies and zeros
        w = rng.standard_normal(x.shape)  # total_length=steps gives back the padded input's shape
        t_x = torch.tensor(x, requires_grad=True)
        t_out = torch_rnn.pad_packed_sequence(
            torch_rnn.pack_padded_sequence(t_x, torch.tensor(lengths), batch_first, c["enforce_sorted"]),
            batch_first, total_length=c["steps"])[0]
        (t_out * torch.tensor(w)).sum().backward()

        def loss(x):
            packed = jax_rnn.pack_padded_sequence(x, lengths, batch_first, c["enforce_sorted"])
            return jnp.sum(jax_rnn.pad_packed_sequence(packed, batch_first, total_length=c["steps"])[0] * w)

        _equal(jax.grad(loss)(jnp.asarray(x)), t_x.grad, "input grad")


# The default tier's seed: unsorted with ties, time-first, total_length, float64 gradients; the slow tier
# adds batch_first, lengths shorter than the padding, NaN padding, left padding, int64 and float32.
_FAST_SEEDS = {16}
# Of seeds 0-59, these 22 (a greedy cover starting from the default tier's) meet every pair of option values
# that the 60 meet: dtype, batch_first, enforce_sorted, padding_value, padding_side, total_length (none, equal
# to the steps, longer), how the lengths come (list, numpy, jax), lengths shorter than the steps, the number
# of trailing axes, batch 1 and one step. Each seed compiles its own eager shapes (about 0.5 s).
_SEEDS = [0, 5, 6, 10, 11, 14, 15, 16, 17, 24, 25, 29, 30, 32, 34, 36, 37, 38, 44, 52, 57, 58]


@pytest.mark.parametrize("seed", [pytest.param(s, marks=() if s in _FAST_SEEDS else pytest.mark.slow)
                                  for s in _SEEDS])
def test_grid_matches_torch(seed):
    with jax.enable_x64(True):
        _check(seed)


def _same_error(ours, theirs):
    with pytest.raises(Exception) as theirs_error:
        theirs()
    with pytest.raises(Exception) as ours_error:
        ours()
    assert type(ours_error.value) is type(theirs_error.value)
    assert str(ours_error.value) == str(theirs_error.value)


def test_errors_are_torchs():
    x = np.random.default_rng(0).standard_normal((4, 3, 2)).astype(np.float32)
    tx = torch.tensor(x)
    for lengths, enforce_sorted in [([2, 3, 1], True), ([3, 2, 0], True), ([3, 2, 0], False), ([3, 2], True),
                                    ([[3, 2, 1]], True), ([-1, 2, 1], False)]:
        _same_error(lambda: jax_rnn.pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted),
                    lambda: torch_rnn.pack_padded_sequence(tx, torch.tensor(lengths), enforce_sorted=enforce_sorted))
    _same_error(lambda: jax_rnn.pack_padded_sequence(np.zeros((4, 0, 2)), []),
                lambda: torch_rnn.pack_padded_sequence(torch.zeros(4, 0, 2), torch.tensor([], dtype=torch.int64)))
    _same_error(lambda: jax_rnn.pack_padded_sequence(np.zeros(4), [3]),
                lambda: torch_rnn.pack_padded_sequence(torch.zeros(4), [3]))
    packed, t_packed = jax_rnn.pack_padded_sequence(x, [4, 2, 1]), torch_rnn.pack_padded_sequence(tx, [4, 2, 1])
    _same_error(lambda: jax_rnn.pad_packed_sequence(packed, total_length=3),
                lambda: torch_rnn.pad_packed_sequence(t_packed, total_length=3))
    for shapes in [((2, 3), (3, 4)), ((2,), (3, 4)), ((2, 3), (3, 1, 3))]:
        sequences = [np.zeros(shape, np.float32) for shape in shapes]
        _same_error(lambda: jax_rnn.pad_sequence(sequences), lambda: torch_rnn.pad_sequence(
            [torch.tensor(s) for s in sequences]))
    broadcast = [np.zeros((2, 3), np.float32), np.arange(3.0).reshape(3, 1)]  # cast and broadcast, as copy_
    _equal(jax_rnn.pad_sequence(broadcast, padding_value=-1),
           torch_rnn.pad_sequence([torch.tensor(s) for s in broadcast], padding_value=-1), "broadcast")
    _same_error(lambda: jax_rnn.pad_sequence([]), lambda: torch_rnn.pad_sequence([]))
    _same_error(lambda: jax_rnn.pad_sequence(5), lambda: torch_rnn.pad_sequence(5))
    _same_error(lambda: jax_rnn.pad_sequence([x[0]], padding_side="middle"),
                lambda: torch_rnn.pad_sequence([tx[0]], padding_side="middle"))
    _same_error(lambda: jax_rnn.unpad_sequence(x, np.array([3, 1, 2, 1])),
                lambda: torch_rnn.unpad_sequence(tx.clone(), torch.tensor([3, 1, 2, 1])))
    _same_error(lambda: jax_rnn.PackedSequence(x), lambda: torch_rnn.PackedSequence(tx))
    # torch reads past the padded input here and packs rows that disagree with batch_sizes; refused instead.
    with pytest.raises(ValueError, match="at most the padded sequence length 4, but got a length of 5"):
        jax_rnn.pack_padded_sequence(x, [5, 2, 1])


def test_packed_sequence_and_invert_permutation():
    with jax.enable_x64(True):
        x = np.arange(12.0).reshape(4, 3)
        a = jax_rnn.PackedSequence(x, [2, 1, 1], [1, 0])
        b = jax_rnn.PackedSequence((x, np.array([2, 1, 1])), sorted_indices=np.array([1, 0]))
        t = torch_rnn.PackedSequence(torch.tensor(x), torch.tensor([2, 1, 1]), torch.tensor([1, 0]))
        for ours in (a, b):
            _equal(ours.batch_sizes, t.batch_sizes, "batch_sizes")
            _equal(ours.unsorted_indices, t.unsorted_indices, "unsorted_indices")
        perm = np.random.default_rng(0).permutation(7)
        _equal(jax_rnn.invert_permutation(perm), torch_rnn.invert_permutation(torch.tensor(perm)), "inverse")
        assert jax_rnn.invert_permutation(None) is None
        assert a.float().data.dtype == jnp.float32 and a.double() is a and a.long().data.dtype == jnp.int64
        # A pytree with data as its only leaf: the layout rides along as static structure.
        assert jax.tree.leaves(a) == [x]
        doubled = jax.jit(lambda p: p._replace(data=p.data * 2))(a)
        assert isinstance(doubled, jax_rnn.PackedSequence)
        _equal(doubled.data, 2 * x, "data")
        _equal(doubled.sorted_indices, a.sorted_indices, "sorted_indices")
