"""torch's CPU MT19937 engine and its state bytes, in numpy (no torch).

torch's CPU generator (``aten/src/ATen/core/MT19937RNGEngine.h``) is the
reference MT19937 with ``init_genrand`` seeding, so numpy's ``MT19937`` bit
generator produces the same 32-bit words once its ``key``/``pos`` are set
from torch's fields. This module holds the pieces the public
:class:`jax_impl.random.Generator` is built from:

* the byte layout of ``CPUGeneratorImplState`` (``aten/src/ATen/CPUGeneratorImpl.cpp``)
  so states move between torch and us;
* the mapping between torch's ``(left_, next_)`` counters and numpy's ``pos``;
* vectorised versions of the two loops of ``randperm_cpu``
  (``aten/src/ATen/native/TensorFactories.cpp``);
* ``torch.multinomial``'s two CPU algorithms (``Distributions.cpp``,
  ``cpu/MultinomialKernel.cpp``);
* ``bernoulli_(p)``'s CPU kernel (``cpu/DistributionTemplates.h``).
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import threading

import numpy as np

# log1p(-u) of double uniforms with the C library's log1p, as torch's exponential_distribution takes it
# (NumPy's SIMD log1p differs from it in the last bit for ~7% of inputs).
from jax_impl.random._libm_loops import log1p_of_minus

MERSENNE_STATE_N = 624

# ``struct CPUGeneratorImplState { CPUGeneratorImplStateLegacy legacy_pod;
# float next_float_normal_sample; bool is_next_float_normal_sample_valid; }``
# with ``legacy_pod = {uint64 the_initial_seed; int left; int seeded;
# uint64 next; uint64 state[624]; double normal_x, normal_y, normal_rho;
# int normal_is_valid;}``, natural alignment (x86-64/aarch64, little endian).
STATE_DTYPE = np.dtype(
    {
        "names": [
            "the_initial_seed",
            "left",
            "seeded",
            "next",
            "state",
            "normal_x",
            "normal_y",
            "normal_rho",
            "normal_is_valid",
            "next_float_normal_sample",
            "is_next_float_normal_sample_valid",
        ],
        "formats": [
            "<u8",
            "<i4",
            "<i4",
            "<u8",
            ("<u8", (MERSENNE_STATE_N,)),
            "<f8",
            "<f8",
            "<f8",
            "<i4",
            "<f4",
            "u1",
        ],
        "offsets": [0, 8, 12, 16, 24, 5016, 5024, 5032, 5040, 5048, 5052],
        "itemsize": 5056,
    }
)
STATE_SIZE = STATE_DTYPE.itemsize  # 5056 == sizeof(CPUGeneratorImplState)

# randperm_cpu: "for small n, preserve old behavior" when n < (2^32 - 1) / 20.
RANDPERM_RANDOM64_THRESHOLD = (2**32 - 1) // 20  # 214,748,364
_SMALL_N = 256


def init_genrand(seed: int) -> dict:
    """numpy MT19937 state for ``mt19937_engine::init_with_uint32(seed)``.

    ``state[0] = seed & 0xffffffff``;
    ``state[j] = 1812433253 * (state[j-1] ^ (state[j-1] >> 30)) + j`` (mod 2^32),
    which is numpy's legacy ``RandomState(seed & 0xffffffff)`` seeding. Only the
    low 32 bits of the 64-bit seed matter. ``pos = 624``: the key is twisted
    before the first output, as torch's ``left_ == 1`` makes it.
    """
    return np.random.RandomState(seed & 0xFFFFFFFF).get_state(legacy=False)


def _seed_bitgen(bitgen: np.random.MT19937, seed: int) -> None:
    """Seed ``bitgen`` in place with :func:`init_genrand`'s state.

    ``MT19937._legacy_seeding`` is the very routine ``RandomState`` uses (and
    avoids building a ``RandomState``); fall back if a numpy lacks it.
    """
    legacy = getattr(bitgen, "_legacy_seeding", None)
    if legacy is not None:
        legacy(seed & 0xFFFFFFFF)
    else:
        bitgen.state = init_genrand(seed)


class Engine:
    """torch's ``mt19937_data_pod`` (seed, left, seeded, next, state) + draws.

    torch's engine decrements ``left_`` and regenerates the key when it hits
    zero, then reads ``state_[next_++]``; right after seeding ``left_ == 1``
    and ``next_ == 0`` (the key is not yet twisted). numpy's MT19937 twists
    when ``pos >= 624``, then reads ``key[pos++]``. For every state torch
    produces, ``pos == 625 - left_``, and ``next_ == pos`` except right after
    seeding (``next_ == 0``, ``pos == 624``); that ``next_`` is kept aside until
    the first draw. The numpy bit generator is the live state: draws cost one
    ``random_raw`` call, torch's fields are only assembled for ``get_state``.
    """

    __slots__ = ("_ahead", "_bitgen", "_last", "_lock", "_pending_next", "_successor", "seed")

    def __init__(self, seed: int) -> None:
        self._bitgen = np.random.MT19937(0)
        self._lock = threading.Lock()
        self._successor: dict[tuple[int, float], tuple[int, float]] = {}
        self._ahead = self._last = None
        self.reseed(seed)

    def _discard_ahead(self) -> None:
        """Any draw but :meth:`bernoulli`'s moves the stream: a mask drawn ahead no longer follows."""
        self._ahead = self._last = None

    def reseed(self, seed: int) -> None:
        self._discard_ahead()
        self.seed = seed
        _seed_bitgen(self._bitgen, seed)
        self._pending_next: int | None = 0

    def fields(self) -> tuple[np.ndarray, int, int]:
        """torch's ``(state_, left_, next_)``."""
        st = self._bitgen.state["state"]
        pos = int(st["pos"])
        nxt = pos if self._pending_next is None else self._pending_next
        return np.asarray(st["key"], dtype=np.uint32), MERSENNE_STATE_N + 1 - pos, nxt

    def set_fields(self, seed: int, key: np.ndarray, left: int, nxt: int) -> None:
        """Load torch's fields (``left_ + next_ == 625`` or ``next_ == 0`` as torch makes them)."""
        self._discard_ahead()
        self.seed = seed
        pos = MERSENNE_STATE_N + 1 - left
        self._bitgen.state = {
            "bit_generator": "MT19937",
            "state": {"key": np.asarray(key, dtype=np.uint32), "pos": pos},
        }
        self._pending_next = None if nxt == pos else nxt

    def raw(self, n: int) -> np.ndarray:
        """The next ``n`` outputs of ``engine_()`` as uint32."""
        return self.raw_words(n).astype(np.uint32)

    def raw_words(self, n: int) -> np.ndarray:
        """The next ``n`` outputs of ``engine_()``, each in a uint64 (numpy's ``random_raw``, no copy)."""
        self._discard_ahead()
        return self._words(n)

    def _words(self, n: int) -> np.ndarray:
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        self._pending_next = None
        return self._bitgen.random_raw(n)

    def bernoulli(self, n: int, p: float) -> np.ndarray:
        """:func:`bernoulli`: ``n`` draws kept where below ``p``; see the module's ``bernoulli``.

        A training step draws the same masks in the same order every step
        (each dropout layer's shape and ``p``), so after serving a mask of at
        least :data:`DRAW_AHEAD_MIN` elements the engine draws the one that
        followed it last time on a background thread, from a copy of the
        state, while the caller's computation goes on. If that is the next
        request, its mask and the copy's final state are taken; any other
        draw or seeding drops it. The stream is the same either way: the
        masks are the same draws from the same state.
        """
        key = (int(n), float(p))
        with self._lock:
            ahead, self._ahead = self._ahead, None
            if self._last is not None:
                self._successor[self._last] = key
            self._last = key
            masks = self._taken(ahead, key)
            mask = _bernoulli_bits(self._words_for(n), p) if masks is None else masks[0]
            following = self._successor.get(key)
            if following is not None and following[0] >= DRAW_AHEAD_MIN:
                self._start_ahead(following, (following,))
        return mask

    def bernoulli_many(self, requests: tuple[tuple[int, float], ...]) -> list[np.ndarray]:
        """:meth:`bernoulli` for each ``(n, p)`` of ``requests`` in turn: the same masks, from one draw of
        all their words.

        A jitted training step draws its dropout masks together before each
        call (:mod:`jax_impl.random.host_draws`), the same list every step. So
        after serving a list of at least :data:`DRAW_AHEAD_MIN` elements the
        engine draws the same list again on a background thread, from a copy of
        the state, while the step runs; if the next request is that list, its
        masks and the copy's final state are taken. Any other draw or seeding
        drops it: the stream is the same either way.
        """
        key = ("many", requests)
        total = sum(n for n, _ in requests)
        with self._lock:
            ahead, self._ahead = self._ahead, None
            self._last = None
            masks = self._taken(ahead, key)
            if masks is None:
                masks = _bernoulli_segments(self._words_for(total), requests)
            if total >= DRAW_AHEAD_MIN:
                self._start_ahead(key, requests)
        return masks

    def _taken(self, ahead: tuple | None, key: object):
        """What was drawn ahead for ``key`` (the engine then takes the copy's final state), else ``None``."""
        if ahead is None or ahead[0] != key:
            return None
        value, state = ahead[1].result()
        self._bitgen.state = state
        self._pending_next = None
        return value

    def _words_for(self, elements: int) -> np.ndarray:
        """The ``2 * elements`` words (two per ``random64()``) of bernoulli draws, from the live state."""
        if elements > 0:  # an empty draw leaves torch's fields as they are
            self._pending_next = None
        return _words32(self._bitgen, 2 * elements)

    def _start_ahead(self, key: object, requests: tuple[tuple[int, float], ...]) -> None:
        """The masks of ``requests`` drawn on the background thread from a copy of the state, kept for ``key``."""
        copy = np.random.MT19937(0)
        copy.state = self._bitgen.state
        self._ahead = (key, _background().submit(_draw_ahead, copy, requests))

    def raw64(self, n: int) -> np.ndarray:
        """``random64()`` x n: ``(first << 32) | second`` (``make64BitsFrom32Bits``)."""
        w = self.raw_words(2 * n)
        return (w[0::2] << np.uint64(32)) | w[1::2]


# Masks at least this large are drawn ahead (a dropout layer's; one element costs ~6 ns).
DRAW_AHEAD_MIN = 1 << 16
_BACKGROUND: list = [None, None]  # (pid, executor): a forked child starts its own thread


def _lowest_priority() -> None:
    # The draw ahead should only fill cores the step leaves idle: at normal priority it ran beside a
    # convolution and slowed it by as much as the draw saved.
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
        except (AttributeError, OSError):
            pass


def _background() -> concurrent.futures.ThreadPoolExecutor:
    if _BACKGROUND[0] != os.getpid():
        _BACKGROUND[:] = [os.getpid(), concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="jax_impl-rng", initializer=_lowest_priority)]
    return _BACKGROUND[1]


def _draw_ahead(bitgen: np.random.MT19937, requests: tuple[tuple[int, float], ...]
                ) -> tuple[list[np.ndarray], dict]:
    # numpy's draws and ufuncs release the GIL: this runs beside the caller's Python.
    return _bernoulli_segments(_words32(bitgen, 2 * sum(n for n, _ in requests)), requests), bitgen.state


def _bernoulli_segments(words: np.ndarray, requests: tuple[tuple[int, float], ...]) -> list[np.ndarray]:
    """:func:`_bernoulli_bits` of each request's ``2n`` words, taken from ``words`` in order."""
    masks, start = [], 0
    for n, p in requests:
        masks.append(_bernoulli_bits(words[start:start + 2 * n], p))
        start += 2 * n
    return masks


def _words32(bitgen: np.random.MT19937, n: int) -> np.ndarray:
    """The next ``n`` engine outputs as uint32: ``integers`` over the whole uint32 range takes exactly one
    ``next_uint32`` per value (no rejection, no buffering), the words ``random_raw`` gives, in half the memory."""
    if n <= 0:
        return np.empty(0, dtype=np.uint32)
    return np.random.Generator(bitgen).integers(0, 2**32, n, dtype=np.uint32)


def occurrences(values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Occurrence links of ``values`` (int64 in ``[0, n)``).

    Returns ``(prev, last)``: ``prev[i]`` is the largest m < i with
    ``values[m] == values[i]`` (else -1); ``last[v]`` is the largest m with
    ``values[m] == v`` (else -1). One sort of the unique keys
    ``value << 32 | index`` (several times faster than a stable argsort).
    """
    size = values.shape[0]
    if max(n, size) < 2**31:  # keys (value << 32 | index) fit in int64
        keys = values << 32
        keys |= np.arange(size, dtype=np.int64)
        keys.sort()
        sv = keys >> 32
        order = keys & 0xFFFFFFFF
    else:
        order = np.argsort(values, kind="stable")
        sv = values[order]
    same = sv[1:] == sv[:-1]
    prev = np.empty(size, dtype=np.int64)
    prev[order[0]] = -1
    prev[order[1:]] = np.where(same, order[:-1], -1)
    ends = np.ones(size, dtype=bool)
    np.logical_not(same, out=ends[:-1])
    last = np.full(n, -1, dtype=np.int64)
    group_ends = np.flatnonzero(ends)  # integer index: ~4x faster than a mask
    last[sv[group_ends]] = order[group_ends]
    return prev, last


def _resolve_chains(ptr: np.ndarray) -> np.ndarray:
    """Pointer jumping: follow ``ptr`` until fixed points (``ptr[k] == k``)."""
    while True:
        nxt = ptr[ptr]
        if np.array_equal(nxt, ptr):
            return ptr
        ptr = nxt


def randperm_swap(z: np.ndarray, n: int) -> np.ndarray:
    """``r = arange(n); for i < n-1: swap(r[i], r[i + z[i]])`` without the loop.

    Let ``p[i] = i + z[i]`` (``p[n-1] = n-1``) and ``A[k]`` the value at
    position k just before step k. Position j only changes at steps m < j with
    ``p[m] == j``, where it receives ``A[m]``. So ``A[k] = A[m]`` for the last
    such m (else ``k``) and ``r[i] = A[i]`` if ``p[i] == i``, else ``A[m]`` for
    the last m < i with ``p[m] == p[i]`` (else ``p[i]``). The ``A`` chains
    resolve by pointer jumping.
    """
    if n <= _SMALL_N:  # below this a plain loop beats the numpy passes
        r = list(range(n))
        for i, zi in enumerate(z.tolist()):
            j = i + zi
            r[i], r[j] = r[j], r[i]
        return np.array(r, dtype=np.int64)
    idx = np.arange(n, dtype=np.int64)
    p = idx.copy()
    p[: n - 1] += z.astype(np.int64)
    prev, last = occurrences(p, n)
    fixed = p == idx
    # last writer into position k by a step m < k: the last occurrence of the
    # value k in p, or the one before it when that is step k itself.
    writer = np.where(last == idx, prev, last)
    parent = np.where(writer >= 0, writer, idx)
    a = _resolve_chains(parent)
    src = np.where(prev >= 0, a[np.maximum(prev, 0)], p)
    return np.where(fixed, a, src)


def randperm_inside_out(z: np.ndarray, n: int) -> np.ndarray:
    """``for i < n: r[i] = r[z[i]]; r[z[i]] = i`` (``z[i] <= i``) without the loop.

    Position q's final value is the last step k with ``z[k] == q``; if none,
    it keeps ``B[q]``, the value copied in at step q: ``B[q] = m`` for the
    last m < q with ``z[m] == z[q]``, else ``B[z[q]]`` (chains resolved by
    pointer jumping; ``z[0] == 0`` ends every chain).
    """
    idx = np.arange(n, dtype=np.int64)
    z = z.astype(np.int64)
    prev, last = occurrences(z, n)
    terminal = (prev >= 0) | (z == idx)
    val = np.where(prev >= 0, prev, idx)
    ptr = np.where(terminal, idx, z)
    root = _resolve_chains(ptr)
    b = val[root]
    return np.where(last >= 0, last, b)


def uniform_double(engine: Engine, n: int) -> np.ndarray:
    """``uniform_real_distribution<double>(0, 1)`` x n: ``(random64() & (2**53-1)) * 2**-53``."""
    bits = engine.raw64(n) & np.uint64(2**53 - 1)
    return bits.astype(np.float64) * 2.0**-53


def _bernoulli_bits(words: np.ndarray, p: float) -> np.ndarray:
    """``uniform_double < p`` on ``2n`` engine words (uint32), one element per pair."""
    # (r & (2**53 - 1)) * 2**-53 < p  <=>  (r & (2**53 - 1)) < t = ceil(p * 2**53): scaling by a power of two
    # is exact, and for an integer left side "< p * 2**53" is "< ceil(p * 2**53)". With r = hi << 32 | lo (the
    # first word high) the left side is (hi & (2**21 - 1), lo), compared with (t >> 32, t & (2**32 - 1))
    # lexicographically: on the high parts, and on the low parts where the high parts tie (one pair in 2**21,
    # none to look at when the threshold's low part is 0, as for p = 0.5 or 0.75).
    threshold = math.ceil(p * 2.0**53)
    t_hi, t_lo = threshold >> 32, threshold & (2**32 - 1)
    hi = words[0::2] & np.uint32(2**21 - 1)
    keep = hi < np.uint32(t_hi)  # t_hi <= 2**21
    if t_lo:
        tie = np.flatnonzero(hi == np.uint32(t_hi))
        keep[tie] = words[1::2][tie] < np.uint32(t_lo)
    return keep


def bernoulli(engine: Engine, n: int, p: float) -> np.ndarray:
    """``bernoulli_distribution<double>(p)`` x n as a bool array: ``uniform_double < p``.

    ``templates::cpu::bernoulli_kernel`` (``native/cpu/DistributionTemplates.h``),
    torch's CPU ``bernoulli_(float p)``: one ``random64()`` per element in C
    order (``cpu_serial_kernel``, so no dependence on the thread count), kept
    where ``(r & (2**53 - 1)) * 2**-53 < p`` in double, whatever the tensor's dtype.
    """
    return engine.bernoulli(n, p)


def bernoulli_many(engine: Engine, requests: tuple[tuple[int, float], ...]) -> list[np.ndarray]:
    """:func:`bernoulli` for each ``(n, p)`` in turn (the same masks), drawn together."""
    return engine.bernoulli_many(tuple((int(n), float(p)) for n, p in requests))


def multinomial(
    engine: Engine, weights: np.ndarray, num_samples: int, replacement: bool
) -> np.ndarray:
    """``torch.multinomial`` on a 1-D CPU tensor (``Distributions.cpp`` ``multinomial_out``).

    * without replacement (or one sample): ``q = exponential_(1)`` per
      category, i.e. ``-log1p(-u)`` with ``u`` a double uniform, then
      ``argmax(w / q)`` (one sample) or ``topk(w / q, num_samples)``;
    * with replacement (``MultinomialKernel.cpp``): ``cum = cumsum(w) / sum``
      with the last bucket forced to 1, then per sample ``u`` (double
      uniform) and the first ``j`` with ``cum[j] >= u`` (lower bound).

    ``log1p`` is evaluated with the C library's ``math.log1p`` (numpy's SIMD
    ``log1p`` differs from it in the last bit for ~7% of inputs).
    """
    w = np.asarray(weights)
    if w.ndim != 1:
        raise RuntimeError(
            "prob_dist must be 1 dimensional (jax_impl supports 1-D only)"
        )
    if not np.issubdtype(w.dtype, np.floating):
        raise RuntimeError("multinomial only supports floating-point dtypes for input")
    n_categories = w.shape[0]
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > n_categories:
        raise RuntimeError(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
        )
    if n_categories > 2**24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    if not replacement or num_samples == 1:
        if not (np.all(w < np.inf) and np.all(w >= 0)):
            raise RuntimeError(
                "probability tensor contains either `inf`, `nan` or element < 0"
            )
        if w.sum() == 0:
            raise RuntimeError(
                "invalid multinomial distribution (sum of probabilities <= 0)"
            )
        u = uniform_double(engine, n_categories)
        q = (-log1p_of_minus(u)).astype(w.dtype)
        keys = w / q
        if num_samples == 1:
            return np.array([int(np.argmax(keys))], dtype=np.int64)
        return np.argsort(-keys, kind="stable")[:num_samples].astype(np.int64)
    if np.any(w < 0):
        raise RuntimeError(
            "invalid multinomial distribution (encountering probability entry < 0)"
        )
    if not np.all(np.isfinite(w)):
        raise RuntimeError(
            "invalid multinomial distribution (encountering probability entry = infinity or NaN)"
        )
    acc = np.float32 if w.dtype in (np.float16,) else w.dtype
    cum = np.cumsum(w.astype(acc))  # sequential, like the kernel's running sum
    total = cum[-1]
    if not total > 0:
        raise RuntimeError(
            "invalid multinomial distribution (sum of probabilities <= 0)"
        )
    cum = cum / total
    cum[-1] = 1
    u = uniform_double(engine, num_samples)
    return np.searchsorted(cum.astype(np.float64), u, side="left").astype(np.int64)


def multinomial_rows(engine: Engine, weights: np.ndarray, num_samples: int, replacement: bool) -> np.ndarray:
    """``torch.multinomial`` on a 2-D CPU tensor: ``(n_dist, num_samples)`` int64, each row a distribution.

    Without replacement (or one sample) torch draws ``exponential_(1)`` over the whole tensor at once, in C
    order, then ``argmax``/``topk`` of ``w / q`` per row; with replacement it goes row by row, each row's
    cumulative sum and then its samples (:func:`multinomial` on each row does both, in that order).
    """
    w = np.asarray(weights)
    if not replacement or num_samples == 1:
        if not (np.all(w < np.inf) and np.all(w >= 0)):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if w.shape[0] and np.any(w.sum(axis=1) == 0):
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not replacement and num_samples > w.shape[1]:
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        if num_samples <= 0:
            raise RuntimeError("cannot sample n_sample <= 0 samples")
        u = uniform_double(engine, w.size)
        q = (-log1p_of_minus(u)).astype(w.dtype).reshape(w.shape)
        keys = w / q
        if num_samples == 1:
            return np.argmax(keys, axis=1).astype(np.int64)[:, None]
        return np.argsort(-keys, axis=1, kind="stable")[:, :num_samples].astype(np.int64)
    return np.stack([multinomial(engine, row, num_samples, True) for row in w]) if len(w) else \
        np.empty((0, num_samples), np.int64)
