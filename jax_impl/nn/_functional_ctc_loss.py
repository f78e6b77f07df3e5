"""``torch.nn.functional.ctc_loss``: torch's CPU kernel (``aten/src/ATen/native/LossCTC.cpp``) on jax arrays.

With ``l'`` the target with a blank before, between and after its labels
(``l'_s = blank`` for even ``s``, ``l_{s//2}`` for odd ``s``, ``S = 2L + 1``
states), the forward variables are, in log space,

    alpha_0(0) = lp_0[blank],  alpha_0(1) = lp_0[l'_1],  alpha_0(s > 1) = -inf
    alpha_t(s) = lse(alpha_{t-1}(s), alpha_{t-1}(s-1), alpha_{t-1}(s-2)) + lp_t[l'_s]

(the ``s-2`` term only where ``l'_{s-2} != l'_s``) and the loss is
``-lse(alpha_{T-1}(S-1), alpha_{T-1}(S-2))`` (``-alpha_{T-1}(0)`` for an empty
target). ``lse`` is torch's own order: ``m = max`` (0 when every term is
``-inf``), ``log(exp(a-m) + exp(b-m) + exp(c-m)) + m``, summed left to right.

The gradient is torch's hand-written backward, not autodiff of the forward:
the backward variables ``beta`` by the mirrored recursion, then per time step
and class ``c`` the log-sum ``lcab_t(c)`` of ``alpha_t(s) + beta_t(s)`` over the
states with ``l'_s = c`` (accumulated in descending ``s``, pairwise as torch),
and ``grad_t(c) = (exp(lp_t[c]) - exp(lcab_t(c) + nll - lp_t[c])) * g``; zero
for ``t >= input_length``, and for the whole sample when ``zero_infinity`` and
its loss is infinite.

Both recursions are a ``lax.scan`` over time, vectorised over the batch and
the states; the class collection is a scan over the states.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl.nn._loss_ops import get_enum, mean, true_divide

__all__ = ["ctc_loss"]

Array = jax.Array
_WHERE = "while checking arguments for ctc_loss_allocate_outputs"
_TORCH_DTYPE = {
    "bfloat16": "BFloat16", "float16": "Half", "int8": "Char", "uint8": "Byte", "int16": "Short",
    "int32": "Int", "int64": "Long", "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble",
}


def _lengths(value, name: str) -> Array:
    """Lengths as torch's ``ctc_loss(Tensor...)`` takes them: integral, flattened to a vector."""
    array = jnp.asarray(value)
    if not jnp.issubdtype(array.dtype, jnp.integer):
        raise RuntimeError(f"{name} must be integral")
    return array.reshape(-1).astype(jnp.int32)


def _concrete(*arrays) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def _check(log_probs: Array, targets: Array, il: Array, tl: Array, blank: int) -> None:
    """``ctc_loss_allocate_outputs``'s checks, in its order, with its messages."""
    if log_probs.ndim != 3:
        raise RuntimeError(
            f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional tensor for argument #1 "
            f"'log_probs' ({_WHERE})"
        )
    if not 1 <= targets.ndim <= 2:
        raise RuntimeError(
            f"Expected 1 to 2 dimensions, but got {targets.ndim}-dimensional tensor for argument #2 'targets' "
            f"({_WHERE})"
        )
    _, batch, labels = log_probs.shape
    if not 0 <= blank < labels:
        raise RuntimeError("blank must be in label range")
    if il.shape[0] != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if tl.shape[0] != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    if not _concrete(il, tl):
        return
    il_host, tl_host = np.asarray(il), np.asarray(tl)
    for length in tl_host:
        if length < 0:
            raise RuntimeError(
                f"Expected target_lengths to have value at least 0, but got value {length} ({_WHERE})"
            )
    if targets.ndim == 1:
        if targets.shape[0] != int(tl_host.sum()):
            raise RuntimeError(
                f"Expected tensor to have size {int(tl_host.sum())} at dimension 0, but got size "
                f"{targets.shape[0]} for argument #2 'targets' ({_WHERE})"
            )
    else:
        if targets.shape[0] != batch:
            raise RuntimeError(
                f"Expected tensor to have size {batch} at dimension 0, but got size {targets.shape[0]} for "
                f"argument #2 'targets' ({_WHERE})"
            )
        longest = int(tl_host.max(initial=0))
        if targets.shape[1] < longest:
            raise RuntimeError(
                f"Expected tensor to have size at least {longest} at dimension 1, but got size "
                f"{targets.shape[1]} for argument #2 'targets' ({_WHERE})"
            )
    for length in il_host:
        if length < 0:
            raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {length} ({_WHERE})")
        if length > log_probs.shape[0]:
            raise RuntimeError(
                f"Expected input_lengths to have value at most {log_probs.shape[0]}, but got value {length} "
                f"({_WHERE})"
            )


def _padded_targets(targets: Array, tl: Array) -> Array:
    """Targets as ``(N, W)`` rows: padded input as is, concatenated input cut at the running offsets.

    Concrete concatenated targets are cut on the host, so the compiled kernel
    sees one shape per longest target rather than one per total length.
    """
    if targets.ndim == 2:
        return targets
    if _concrete(targets, tl):
        host, lengths = np.asarray(targets), np.asarray(tl)
        rows = np.zeros((lengths.shape[0], int(lengths.max(initial=0))), np.int32)
        starts = np.cumsum(lengths) - lengths
        for i, (start, length) in enumerate(zip(starts, lengths)):
            rows[i, :length] = host[start:start + length]
        return jnp.asarray(rows)
    # Traced lengths: no target is longer than all of them together.
    width = targets.shape[0]
    if width == 0:
        return jnp.zeros((tl.shape[0], 0), jnp.int32)
    offsets = jnp.cumsum(tl) - tl
    index = jnp.clip(offsets[:, None] + jnp.arange(width, dtype=jnp.int32)[None, :], 0, width - 1)
    return targets[index]


def _extended(padded: Array, blank: Array, labels: int) -> Array:
    """``l'``: blank, l_0, blank, l_1, ..., blank; ``(N, 2W + 1)``.

    torch reads label values outside ``[0, C)`` from outside the row (no bound
    check); here they are clamped into it.
    """
    n, width = padded.shape
    ext = jnp.full((n, 2 * width + 1), blank, jnp.int32)
    ext = ext.at[:, 1::2].set(jnp.clip(padded.astype(jnp.int32), 0, labels - 1))
    return ext


def _shift(x: Array, by: int, fill) -> Array:
    """``x[:, s - by]`` along the state axis (``by < 0`` reads ``s + |by|``), ``fill`` outside."""
    pad = jnp.full((x.shape[0], abs(by)), fill, x.dtype)
    if by > 0:
        return jnp.concatenate([pad, x[:, :-by]], axis=1)
    return jnp.concatenate([x[:, -by:], pad], axis=1)


def _lse3(a: Array, b: Array, c: Array) -> Array:
    """torch's three-term log-add: ``m`` as its compare chain (0 if all ``-inf``), then one log of the sum."""
    m = a
    m = jnp.where(b > m, b, m)
    m = jnp.where(c > m, c, m)
    m = jnp.where(m == -jnp.inf, jnp.zeros((), a.dtype), m)
    return jnp.log(jnp.exp(a - m) + jnp.exp(b - m) + jnp.exp(c - m)) + m


def _alphas(lp_ext: Array, ext: Array, tl: Array) -> Array:
    """log alpha for every time step, ``(T, N, S)``; values past ``2 L + 1`` states or ``input_length`` unused."""
    neg = jnp.asarray(-jnp.inf, lp_ext.dtype)
    states = jnp.arange(ext.shape[1])
    skip = (states[None, :] > 1) & (_shift(ext, 2, -1) != ext)
    first = jnp.where(states[None, :] == 0, lp_ext[0], neg)
    first = jnp.where((states[None, :] == 1) & (tl[:, None] > 0), lp_ext[0], first)

    def step(prev, lp_t):
        la2 = _shift(prev, 1, neg)
        la3 = jnp.where(skip, _shift(prev, 2, neg), neg)
        new = _lse3(prev, la2, la3) + lp_t
        return new, new

    _, rest = lax.scan(step, first, lp_ext[1:])
    return jnp.concatenate([first[None], rest], axis=0)


def _nll(alphas: Array, il: Array, tl: Array) -> Array:
    n = alphas.shape[1]
    rows = jnp.arange(n)
    last = alphas[jnp.maximum(il - 1, 0), rows]  # (N, S)
    l1 = last[rows, 2 * tl]
    l2 = last[rows, jnp.maximum(2 * tl - 1, 0)]
    m = jnp.where(l1 < l2, l2, l1)  # std::max
    m = jnp.where(m == -jnp.inf, jnp.zeros((), m.dtype), m)
    two = jnp.log(jnp.exp(l1 - m) + jnp.exp(l2 - m)) + m
    nll = -jnp.where(tl == 0, last[:, 0], two)
    # input_length 0: log-likelihood 0 for an empty target (so -0.0), else -inf.
    empty = jnp.where(tl == 0, jnp.asarray(-0.0, nll.dtype), jnp.asarray(jnp.inf, nll.dtype))
    return jnp.where(il == 0, empty, nll)


def _betas(lp_ext: Array, ext: Array, il: Array, tl: Array) -> Array:
    """log beta, ``(T, N, S)``; ``-inf`` past ``input_length`` and past ``2 L + 1`` states."""
    neg = jnp.asarray(-jnp.inf, lp_ext.dtype)
    states = jnp.arange(ext.shape[1])[None, :]
    end = 2 * tl[:, None]
    in_target = states <= end
    two = (states < end - 1) & (_shift(ext, -2, -1) != ext)
    start = jnp.where((states == end) | ((states == end - 1) & (tl[:, None] > 0)), 0, 1)

    def step(nxt, xs):
        t, lp_t = xs
        lb2 = jnp.where(states < end, _shift(nxt, -1, neg), neg)
        lb3 = jnp.where(two, _shift(nxt, -2, neg), neg)
        rec = _lse3(nxt, lb2, lb3) + lp_t
        init = jnp.where(start == 0, lp_t, neg)
        t_rel = (il - 1 - t)[:, None]
        beta = jnp.where(t_rel == 0, init, jnp.where(t_rel > 0, rec, neg))
        beta = jnp.where(in_target, beta, neg)
        return beta, beta

    t_all = jnp.arange(lp_ext.shape[0])
    init_carry = jnp.full(lp_ext.shape[1:], neg)
    _, betas = lax.scan(step, init_carry, (t_all, lp_ext), reverse=True)
    return betas


def _collect(ab: Array, ext: Array, il: Array, tl: Array, labels: int, blank: Array) -> Array:
    """``lcab_t(c)``: log-sum of ``alpha + beta`` over the states of class ``c``, ``(T, N, C)``, torch's order."""
    neg = jnp.asarray(-jnp.inf, ab.dtype)
    t_len, n, s_len = ab.shape
    classes = jnp.arange(labels)

    def step(lcab, s):
        c = ext[:, s]  # (N,)
        x = ab[:, :, s]  # (T, N)
        cur = jnp.take_along_axis(lcab, jnp.broadcast_to(c[None, :, None], (t_len, n, 1)), axis=2)[..., 0]
        mx = jnp.where(cur < x, x, cur)  # std::max(lcab, log_alpha_beta)
        added = jnp.where(cur == -jnp.inf, x, jnp.log(jnp.exp(cur - mx) + jnp.exp(x - mx)) + mx)
        hit = (classes[None, :] == c[:, None]) & (s <= 2 * tl)[:, None]  # (N, C)
        return jnp.where(hit[None], added[..., None], lcab), None

    lcab, _ = lax.scan(step, jnp.full((t_len, n, labels), neg), jnp.arange(s_len - 1, -1, -1))
    # At t = input_length - 1 torch assigns the two final states instead of log-adding them.
    rows = jnp.arange(n)
    t_last = jnp.maximum(il - 1, 0)
    last = ab[t_last, rows]  # (N, S)
    row = jnp.full((n, labels), neg)
    row = jnp.where(classes[None, :] == blank, last[rows, 2 * tl][:, None], row)
    penultimate = ext[rows, jnp.maximum(2 * tl - 1, 0)]
    row = jnp.where((classes[None, :] == penultimate[:, None]) & (tl[:, None] > 0),
                    last[rows, jnp.maximum(2 * tl - 1, 0)][:, None], row)
    is_last = jnp.arange(t_len)[:, None] == (il - 1)[None, :]  # (T, N)
    return jnp.where(is_last[..., None], row[None], lcab)


@jax.custom_vjp
def _ctc_nll(log_probs: Array, ext: Array, il: Array, tl: Array, blank: Array, zero_infinity: Array) -> Array:
    """Per-sample negative log-likelihood ``(N,)`` of ``(T, N, C)`` log-probabilities.

    ``blank`` (int32) and ``zero_infinity`` (bool) are arrays, not static
    arguments, so one compilation serves every blank index and flag.
    """
    return _ctc_fwd(log_probs, ext, il, tl, blank, zero_infinity)[0]


def _gather_states(log_probs: Array, ext: Array) -> Array:
    return jnp.take_along_axis(log_probs, jnp.broadcast_to(ext[None], (log_probs.shape[0], *ext.shape)), axis=2)


def _ctc_fwd(log_probs, ext, il, tl, blank, zero_infinity):
    alphas = _alphas(_gather_states(log_probs, ext), ext, tl)
    nll = _nll(alphas, il, tl)
    return nll, (log_probs, ext, il, tl, blank, zero_infinity, alphas, nll)


def _ctc_bwd(res, g):
    log_probs, ext, il, tl, blank, zero_infinity, alphas, nll = res
    t_len, n, labels = log_probs.shape
    betas = _betas(_gather_states(log_probs, ext), ext, il, tl)
    ab = alphas + betas
    lcab = _collect(ab, ext, il, tl, labels, blank)
    # ctc_loss_backward_cpu_template: res = (exp(lp) - exp(res + nll - lp)) * gr.
    grad = (jnp.exp(log_probs) - jnp.exp(lcab + nll[None, :, None] - log_probs)) * g[None, :, None]
    live = (jnp.arange(t_len)[:, None] < il[None, :]) & ~(zero_infinity & (nll == jnp.inf))[None, :]
    grad = jnp.where(live[..., None], grad, jnp.zeros((), grad.dtype))
    return grad, None, None, None, None, None


_ctc_nll.defvjp(_ctc_fwd, _ctc_bwd)

@functools.partial(jax.jit, static_argnames=("reduction",))
def _ctc_loss(lp, padded, il, tl, blank, zero_infinity, reduction: str) -> Array:
    """Everything after the argument checks, compiled once per shape, dtype and reduction.

    Eager scans would recompile their bodies on every call; eager element-wise
    ops would compile one by one.
    """
    ext = _extended(padded, blank, lp.shape[2])
    nll = _ctc_nll(lp, ext, il, tl, blank, zero_infinity)
    nll = jnp.where(zero_infinity & (nll == jnp.inf), jnp.zeros((), nll.dtype), nll)
    if reduction == "mean":
        # ctc_loss_impl: (res / target_lengths.clamp_min(1)).mean()
        return mean(true_divide(nll, jnp.maximum(tl, 1).astype(nll.dtype)))
    if reduction == "sum":
        return jnp.sum(nll)
    return nll


def ctc_loss(
    log_probs: Array,
    targets: Array,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Array:
    """Connectionist Temporal Classification loss, torch's CPU algorithm (see the module docstring).

    Per sample ``nll_n = -log sum_{paths of l_n} prod_t lp_t[path_t]`` by the
    log-space alpha recursion; ``zero_infinity`` replaces infinite losses (no
    alignment fits the input length) by 0 and zeroes their gradient.
    ``'mean'`` is ``mean_n(nll_n / max(target_length_n, 1))``, ``'sum'`` is
    ``sum_n nll_n``. The gradient w.r.t. ``log_probs`` is torch's backward
    kernel: ``exp(lp) - exp(log(alpha beta) + nll - lp)`` per class, times the
    sample's output gradient.

    Args:
        log_probs: ``(T, N, C)`` or unbatched ``(T, C)`` log-probabilities, float32 or float64.
        targets: padded ``(N, S)`` (row ``n`` holds its first ``target_lengths[n]`` labels) or
            the labels of all samples concatenated, ``(sum(target_lengths),)``. Any numeric dtype
            (torch casts to long).
        input_lengths: ``(N,)`` or ``()`` integers, each ``<= T``.
        target_lengths: ``(N,)`` or ``()`` integers.
        blank: the blank label, in ``[0, C)``.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        zero_infinity: zero infinite losses and their gradients.

    Returns:
        ``(N,)`` losses for ``'none'`` (a scalar when unbatched), else a scalar.

    Raises:
        RuntimeError / ValueError / NotImplementedError: torch's checks with torch's messages (value
        checks on the lengths run only when they are concrete, not under ``jit``).
    """
    reduction = get_enum(reduction)
    il, tl = _lengths(input_lengths, "input_lengths"), _lengths(target_lengths, "target_lengths")
    lp = jnp.asarray(log_probs)
    batched = lp.ndim == 3
    if not batched:
        lp = lp[:, None] if lp.ndim >= 1 else lp[None]
    if lp.dtype not in (jnp.float32, jnp.float64):
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for '{_TORCH_DTYPE.get(lp.dtype.name, lp.dtype.name)}'")
    targets = jnp.asarray(targets)
    _check(lp, targets, il, tl, blank)
    loss = _ctc_loss(
        lp, _padded_targets(targets.astype(jnp.int32), tl), il, tl, jnp.asarray(blank, jnp.int32),
        jnp.asarray(bool(zero_infinity)), reduction=reduction,
    )
    return loss if batched or reduction != "none" else loss[0]
