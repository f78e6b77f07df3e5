"""torch tensor operations that have no one-call ``jax.numpy`` spelling, with torch's semantics.

The ``torch_*`` functions here (``torch_vector_norm``, ``torch_var``, ``torch_topk``, ...) take torch's
arguments (``dim``, ``keepdim``, ``correction``, ...) and return what torch returns, with torch's gradient
where it differs from the autodiff of the forward; use them directly, or through ``parity port``, which maps
the torch calls to them.

A generated twin carries the source of the helpers it uses (so the written
file needs only ``jax`` and ``jax_impl``): each function here uses ``jnp``,
builtins and, imported inside the function, ``jax`` (for a custom gradient
where torch's differs from the autodiff of the forward). A helper that calls
another (``torch_linalg_norm``) is rendered only by a mapping that registers
both. Names start with ``torch_`` so no fx node name (the twin's local
variables) can shadow them.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = [
    "HELPERS", "torch_abs", "torch_chunk", "torch_clamp", "torch_cumulative", "torch_expand", "torch_flatten", "torch_gather", "torch_linalg_norm",
    "torch_logsumexp", "torch_matrix_norm", "torch_max_dim", "torch_repeat_interleave", "torch_reshape",
    "torch_scatter", "torch_sort", "torch_split", "torch_squeeze", "torch_topk", "torch_unfold", "torch_var",
    "torch_vector_norm",
]


def torch_flatten(input, start_dim=0, end_dim=-1):
    """``torch.flatten(input, start_dim, end_dim)``: dims ``start_dim..end_dim`` merged; a 0-d input gives ``(1,)``."""
    if input.ndim == 0:
        return jnp.reshape(input, (1,))
    start, end = start_dim % input.ndim, end_dim % input.ndim
    merged = 1
    for size in input.shape[start:end + 1]:
        merged *= size
    return jnp.reshape(input, input.shape[:start] + (merged,) + input.shape[end + 1:])


def torch_reshape(input, *shape):
    """``x.view(*shape)`` / ``x.reshape(*shape)``: sizes as arguments or one sequence, ``-1`` inferred."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = tuple(shape[0])
    return jnp.reshape(input, shape)


def torch_expand(input, *sizes):
    """``x.expand(*sizes)``: a broadcast view; ``-1`` keeps the size, extra sizes are new leading dims."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        sizes = tuple(sizes[0])
    lead = len(sizes) - input.ndim
    return jnp.broadcast_to(input, tuple(input.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes)))


def torch_split(input, split_size_or_sections, dim=0):
    """``torch.split``: pieces of ``split_size`` along ``dim`` (the last one smaller), or the given section sizes."""
    size = input.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sections = [min(step, size - start) for start in range(0, size, step)] or [0]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            raise ValueError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                             f"(input tensor's size at dimension {dim}), but got split_sizes={sections}")
    offsets, total = [], 0
    for length in sections[:-1]:
        total += length
        offsets.append(total)
    return tuple(jnp.split(input, offsets, axis=dim))


def torch_chunk(input, chunks, dim=0):
    """``torch.chunk``: pieces of ``ceil(size / chunks)`` along ``dim``, so fewer than ``chunks`` may come back."""
    size = input.shape[dim]
    step = max(-(-size // chunks), 1)
    sections = [min(step, size - start) for start in range(0, size, step)] or [0]
    offsets, total = [], 0
    for length in sections[:-1]:
        total += length
        offsets.append(total)
    return tuple(jnp.split(input, offsets, axis=dim))


def torch_unfold(input, dimension, size, step):
    """``x.unfold(dimension, size, step)``: each window of ``size`` elements along ``dimension``, ``step`` apart,
    as a new last dimension; ``dimension`` then counts the ``(length - size) // step + 1`` windows. Windows
    that do not overlap (``step == size``, image patches) are a reshape; the gradient of overlapping ones sums
    each element's windows, as torch's ``unfold_backward``."""
    if input.ndim == 0:
        if size > 1:
            raise RuntimeError(f"maximum size for tensor at dimension 0 is 1 but size is {size}")
        return jnp.reshape(input, (1,))
    dim = dimension % input.ndim
    length = input.shape[dim]
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {dim} is {length} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    count = (length - size) // step + 1
    before, after = input.shape[:dim], input.shape[dim + 1:]
    if step == size:
        cut = input[(slice(None),) * dim + (slice(0, count * size),)]
        windows = jnp.reshape(cut, before + (count, size) + after)
    else:
        index = jnp.arange(count)[:, None] * step + jnp.arange(size)[None, :]
        windows = jnp.take(input, index, axis=dim)
    return jnp.moveaxis(windows, dim + 1, -1)


def torch_squeeze(input, dim=None):
    """``torch.squeeze``: without ``dim`` every size-1 dim goes; with ``dim`` (int or tuple) only those of size 1."""
    if dim is None:
        return jnp.squeeze(input)
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    return jnp.squeeze(input, tuple(d % input.ndim for d in dims if input.shape[d] == 1))


def torch_abs(input):
    """``torch.abs``: ``|x|``, as ``x * sgn(x)`` so that the gradient is torch's ``grad * sgn(x)``, 0 at
    ``x == 0``, where the autodiff of ``jnp.abs`` gives ``grad`` there."""
    return input * jnp.sign(input)


def torch_clamp(input, min=None, max=None):
    """``torch.clamp``: ``min(max(x, min), max)`` (``min > max`` gives ``max``), written as ``where`` so that
    NaN stays NaN and the gradient passes where ``x`` equals a bound, torch's subgradient 1
    (``where(min <= x <= max, grad, 0)``) where ``jnp.maximum`` would halve it."""
    if min is not None:
        input = jnp.where(input < min, min, input)
    if max is not None:
        input = jnp.where(input > max, max, input)
    return input


def torch_gather(input, dim, index):
    """``torch.gather(input, dim, index)``: ``out[i][j][k] = input[i][index[i][j][k]][k]`` (for ``dim == 1``).

    ``index`` may be smaller than ``input`` in the other dims (only its extent is read); the gradient
    scatter-adds into ``input``, as torch's.
    """
    dim = dim % input.ndim
    window = tuple(slice(None) if d == dim else slice(0, index.shape[d]) for d in range(input.ndim))
    return jnp.take_along_axis(input[window], index, axis=dim)


def torch_scatter(input, dim, index, src, reduce=None):
    """``torch.scatter`` / ``scatter_add``: ``out[i][index[i][j][k]][k] = src[i][j][k]`` (for ``dim == 1``).

    ``src`` is a tensor (read over ``index``'s extent) or a number (torch's ``value`` form); ``reduce``
    ``'add'`` / ``'multiply'`` accumulates instead of writing. Where ``index`` repeats a position with
    ``reduce=None`` torch's result is whichever write lands last, which neither framework specifies.
    """
    input = jnp.asarray(input)
    dim = dim % input.ndim
    grid = jnp.indices(index.shape, sparse=True)
    where = tuple(index if d == dim else grid[d] for d in range(input.ndim))
    if not isinstance(src, (bool, int, float)):
        src = src[tuple(slice(0, size) for size in index.shape)].astype(input.dtype)
    if reduce is None:
        return input.at[where].set(src)
    if reduce == "add":
        return input.at[where].add(src)
    if reduce == "multiply":
        return input.at[where].multiply(src)
    raise RuntimeError(f"reduce argument must be either add or multiply. Got {reduce}")


def torch_sort(input, dim=-1, descending=False, stable=False):
    """``torch.sort``: ``(values, indices)``; NaN sorts above every number, as torch's comparator places it.

    ``stable=True`` keeps equal values in input order; ``stable=False`` orders them as torch's CPU
    ``std::sort`` does (replayed on the host by :func:`jax_impl.sorting.argsort`). ``values`` gathers
    ``input`` at ``indices``, so the gradient goes to the returned positions, as torch's.
    """
    from jax_impl.sorting import argsort

    indices = argsort(input, dim, descending, stable)
    if input.ndim == 0:
        return input, indices
    return jnp.take_along_axis(input, indices, axis=dim), indices


def torch_topk(input, k, dim=-1, largest=True, sorted=True):
    """``torch.topk``: the ``k`` largest (or smallest) along ``dim`` as ``(values, indices)``, NaN largest.

    The indices are torch's CPU kernel's, ties included: ``std::partial_sort`` when ``k * 64 <= n``, else
    ``std::nth_element`` then (``sorted``) ``std::sort`` of the first ``k - 1``, replayed on the host by
    :func:`jax_impl.sorting.topk_indices`. ``values`` gathers ``input`` at them, so the gradient goes to the
    returned elements, as torch's.
    """
    from jax_impl.sorting import topk_indices

    indices = topk_indices(input, k, dim, largest, sorted)
    if input.ndim == 0:
        return input, indices
    return jnp.take_along_axis(input, indices, axis=dim % input.ndim), indices


def torch_max_dim(input, dim, keepdim=False, largest=True):
    """``torch.max(input, dim)`` / ``torch.min(input, dim)``: ``(values, indices)``, the first extremum's index
    (a NaN counts as the extremum, as in torch). ``values`` gathers ``input`` at that index, so the gradient
    goes to that one element, as torch's (``amax``/``amin`` and the full ``max()`` split it among ties)."""
    indices = (jnp.argmax if largest else jnp.argmin)(input, axis=dim, keepdims=True)
    values = jnp.take_along_axis(input, indices, axis=dim)
    if not keepdim:
        values, indices = jnp.squeeze(values, dim), jnp.squeeze(indices, dim)
    return values, indices


def torch_cumulative(input, dim, dtype=None, product=False):
    """``torch.cumsum`` / ``torch.cumprod`` along ``dim``: ``input`` cast to ``dtype`` first; integer and
    bool inputs accumulate in int64, as torch promotes them."""
    if dtype is None and (jnp.issubdtype(input.dtype, jnp.integer) or input.dtype == jnp.bool_):
        dtype = jnp.int64
    if dtype is not None:
        input = input.astype(dtype)
    return (jnp.cumprod if product else jnp.cumsum)(input, axis=dim)


def torch_repeat_interleave(input, repeats, dim=None, output_size=None):
    """``torch.repeat_interleave``: each element ``repeats[i]`` times along ``dim`` (``None``: of the flattened
    input), a one-element ``repeats`` for every element. Tensor ``repeats`` under ``jax.jit`` need
    ``output_size`` (their sum): JAX shapes are static."""
    import jax

    if output_size is None:
        length = input.size if dim is None else input.shape[dim]
        try:
            output_size = int(jnp.sum(jnp.broadcast_to(jnp.ravel(repeats), (length,))))
        except jax.errors.ConcretizationTypeError:
            raise NotImplementedError(
                "repeat_interleave with tensor repeats under jax.jit needs output_size= (the output length "
                "must be static in JAX)") from None
    return jnp.repeat(input, repeats, axis=dim, total_repeat_length=output_size)


def torch_var(input, dim=None, correction=1, keepdim=False):
    """``torch.var``: ``sum((x - mean)^2) / max(0, N - correction)`` over ``dim`` (``None``: all), so a
    ``correction`` of ``N`` or more divides by zero as torch does (``inf``; ``nan`` for ``0 / 0``), where
    ``jnp.var`` gives ``nan``."""
    dims = tuple(range(input.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    count = 1
    for d in dims:
        count *= input.shape[d]
    centered = input - jnp.mean(input, axis=dims, keepdims=True)
    return jnp.sum(centered * centered, axis=dims, keepdims=keepdim) / max(0, count - correction)


def torch_logsumexp(input, dim, keepdim=False):
    """``torch.logsumexp``: ``log(sum(exp(x - m))) + m``, ``m`` the max (0 where infinite), torch's formula;
    the gradient is torch's ``grad * exp(x - result)``."""
    import jax

    dims = tuple(d % input.ndim for d in ((dim,) if isinstance(dim, int) else dim)) if input.ndim else ()

    def forward(x):
        m = jnp.max(x, axis=dims, keepdims=True)
        m = jnp.where(jnp.abs(m) == jnp.inf, 0, m)
        out = jnp.log(jnp.sum(jnp.exp(x - m), axis=dims, keepdims=True)) + m
        return out if keepdim else jnp.squeeze(out, dims)

    @jax.custom_vjp
    def logsumexp(x):
        return forward(x)

    def fwd(x):
        out = forward(x)
        return out, (x, out)

    def bwd(saved, grad):
        x, out = saved
        if not keepdim:
            grad, out = jnp.expand_dims(grad, dims), jnp.expand_dims(out, dims)
        return (grad * jnp.exp(x - out),)

    logsumexp.defvjp(fwd, bwd)
    return logsumexp(input)


def torch_vector_norm(input, ord=2, dim=None, keepdim=False, dtype=None):
    """``torch.linalg.vector_norm``: ``sum(|x|^ord)^(1/ord)`` over ``dim`` (``None``: all elements); ``inf``
    the max of ``|x|``, ``-inf`` the min, ``0`` the count of non-zeros.

    The gradient is torch's ``norm_backward``: ``grad * x / norm`` for ``ord=2``, ``sgn(x) * grad`` for 1,
    split evenly among the ``|x|`` equal to the norm for ``+-inf``, zero for 0, and
    ``sgn(x) |x|^(ord-1) grad / norm^(ord-1)`` otherwise, every one of them 0 where the norm is 0 (where the
    autodiff of the formula gives NaN).
    """
    import jax

    if dtype is not None:
        input = input.astype(dtype)
    dims = tuple(range(input.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(d % input.ndim for d in dims) if input.ndim else ()
    p = float(ord)

    def forward(x):
        a = jnp.abs(x)
        if p == 0:
            return jnp.sum((x != 0).astype(x.dtype), axis=dims, keepdims=keepdim)
        if p == 1:
            return jnp.sum(a, axis=dims, keepdims=keepdim)
        if p == 2:
            return jnp.sqrt(jnp.sum(a * a, axis=dims, keepdims=keepdim))
        if p == float("inf"):
            return jnp.max(a, axis=dims, keepdims=keepdim)
        if p == float("-inf"):
            return jnp.min(a, axis=dims, keepdims=keepdim)
        return jnp.sum(a ** p, axis=dims, keepdims=keepdim) ** (1.0 / p)

    @jax.custom_vjp
    def vector_norm(x):
        return forward(x)

    def fwd(x):
        norm = forward(x)
        return norm, (x, norm)

    def bwd(saved, grad):
        x, norm = saved
        if not keepdim and x.ndim:
            grad, norm = jnp.expand_dims(grad, dims), jnp.expand_dims(norm, dims)
        if p == 0:
            return (jnp.zeros_like(x),)
        if p == 1:
            return (jnp.sign(x) * grad,)
        if p == 2:
            return (grad * jnp.where(norm == 0, 0, x / norm),)
        if p in (float("inf"), float("-inf")):
            a = jnp.abs(x)
            mask = ((a == norm) | jnp.isnan(a)).astype(x.dtype)
            return (jnp.sign(x) * ((grad / jnp.sum(mask, axis=dims, keepdims=True)) * mask),)
        if p < 1:
            scaled = jnp.sign(x) * jnp.where(x == 0, 0, jnp.abs(x) ** (p - 1))
            return (scaled * grad * norm ** (1 - p),)
        scaled = jnp.sign(x) * jnp.abs(x) ** (p - 1) if p < 2 else x * jnp.abs(x) ** (p - 2)
        return (scaled * jnp.where(norm == 0, 0, grad / norm ** (p - 1)),)

    vector_norm.defvjp(fwd, bwd)
    return vector_norm(input)


def torch_matrix_norm(input, ord="fro", dim=(-2, -1), keepdim=False, dtype=None):
    """``torch.linalg.matrix_norm`` for ``ord`` 1, -1, inf, -inf: the max (min) over ``dim[1]`` of the
    column sums of ``|A|`` (over ``dim[0]``), ``inf`` with the two dims swapped, as torch composes it
    (so the gradient is that composition's: ``sgn(A)``, the max split among ties)."""
    if input.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if isinstance(ord, str) or abs(float(ord)) == 2:
        raise NotImplementedError(f"the matrix norm ord={ord!r} (singular values: an SVD) is not mapped")
    first, second = (d % input.ndim for d in dim)
    if abs(float(ord)) == float("inf"):
        first, second = second, first
    if dtype is not None:
        input = input.astype(dtype)
    # |A| as A * sgn(A): its gradient is torch's sgn(A), 0 at 0, where jnp.abs's is 1 there
    sums = jnp.sum(input * jnp.sign(input), axis=first, keepdims=keepdim)
    if not keepdim and first < second:
        second -= 1
    return (jnp.max if float(ord) > 0 else jnp.min)(sums, axis=second, keepdims=keepdim)


def torch_linalg_norm(input, ord=None, dim=None, keepdim=False, dtype=None):
    """``torch.linalg.norm``: a matrix norm for a string ``ord``, for ``ord`` with two ``dim``\\ s, or for
    ``ord`` without ``dim`` on a 2-D input; otherwise the vector norm (``ord`` 2 when ``None``), of the
    flattened input without ``dim``."""
    if dim is not None:
        dim = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dim) not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dim)}")
    elif ord is not None and input.ndim not in (1, 2):
        raise RuntimeError("linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                           f"Got {input.ndim}D.")
    if isinstance(ord, str) or (ord is not None and (len(dim) == 2 if dim is not None else input.ndim == 2)):
        dim = (0, 1) if dim is None else dim
        if ord == "fro":
            return torch_vector_norm(input, 2, dim, keepdim, dtype)
        return torch_matrix_norm(input, ord, dim, keepdim, dtype)
    return torch_vector_norm(input, 2 if ord is None else ord, dim, keepdim, dtype)

HELPERS = {fn.__name__: fn for fn in (
    torch_abs, torch_chunk, torch_clamp, torch_cumulative, torch_expand, torch_flatten, torch_gather,
    torch_linalg_norm, torch_logsumexp, torch_matrix_norm, torch_max_dim, torch_repeat_interleave, torch_reshape,
    torch_scatter, torch_sort, torch_split, torch_squeeze, torch_topk, torch_unfold, torch_var, torch_vector_norm,
)}
