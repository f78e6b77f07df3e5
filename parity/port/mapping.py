"""The translation tables: fx ``call_function`` / ``call_method`` targets to JAX source.

Each entry renders one node as a Python expression over the twin's local
variables, with torch's semantics:

- ``torch.nn.functional.<name>`` -> ``F.<name>`` of ``jax_impl.nn.functional``
  (same names, arguments and defaults), for every function both have;
- tensor methods and their ``torch.<name>`` twins (``view``, ``reshape``,
  ``flatten``, ``permute``, ``transpose``, ``size``, ``mean``, ``sum``,
  ``chunk``, ``split``, ``squeeze``, ``unsqueeze``, ``softmax``, ``max``,
  ``topk``, ``sort``, ``gather``, ``scatter``, ``norm``, ``einsum``,
  ``var``, ``cumsum``, ``repeat``, casts, ...) -> ``jnp`` calls or the
  :mod:`jax_impl.tensor_ops` helpers, which carry torch's gradient where
  it differs from the autodiff of the forward (norms at zero, ``abs`` at 0,
  ``clamp`` at its bounds); ``.values`` / ``.indices`` of a
  ``(values, indices)`` result -> its items;
- Python operators (``+``, ``@``, indexing, ``+=``) -> the same operators on
  jax arrays; ``x.shape`` / ``x.ndim`` / ``x.T`` -> the same attributes.

Anything else raises :class:`~parity.port.errors.PortError` naming the node.
"""

from __future__ import annotations

import builtins
import inspect
import math
import operator

import torch
import torch.nn.functional as TF

from jax_impl.nn import functional as JF
from jax_impl.nn.utils import rnn as JRNN
from parity.port.render import Renderer
from jax_impl.tensor_ops import HELPERS

__all__ = ["render_call_function", "render_call_method"]

_BINARY = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
    operator.mod: "%", operator.pow: "**", operator.matmul: "@", operator.and_: "&", operator.or_: "|",
    operator.xor: "^", operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
    operator.gt: ">", operator.ge: ">=",
    # fx records `out += x` as operator.iadd; a jax array is immutable, so it is the out-of-place sum.
    operator.iadd: "+", operator.isub: "-", operator.imul: "*", operator.itruediv: "/", operator.imatmul: "@",
}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}

# torch.nn.functional functions whose jax_impl namesake returns something else (F.batch_norm returns
# the new running statistics too, since jax arrays cannot be updated in place).
_DIFFERENT_RETURNS = {"batch_norm"}

_FUNCTIONAL = {
    getattr(TF, name): name
    for name in dir(JF)
    if not name.startswith("_") and name not in _DIFFERENT_RETURNS and callable(getattr(TF, name, None))
}


def _bound_call(r: Renderer, name: str, fn, args, kwargs) -> str:
    """``name(args)`` after checking the arguments bind to ``fn``'s signature; defaults left out."""
    signature = inspect.signature(fn)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise r.fail(f"{name} does not take these arguments ({error})") from None
    parts, positional = [], True
    for i, (key, value) in enumerate(bound.arguments.items()):
        default = signature.parameters[key].default
        if key == "training":
            text = r.training(value)
        elif default is not inspect.Parameter.empty and _same(value, default):
            positional = False  # a later argument given by position must now be named
            continue
        else:
            text = r(value)
        positional = positional and i < len(args)
        parts.append(text if positional else f"{key}={text}")
    return f"{name}({', '.join(parts)})"


def _same(value, default) -> bool:
    simple = (type(None), bool, int, float, str)
    return isinstance(value, simple) and isinstance(default, simple) and type(value) is type(default) and value == default


def _axis(value):
    return tuple(value) if isinstance(value, list) else value


# Tensor methods (x.name(...)) and torch.name(x, ...): each takes the renderer and torch's arguments.
def _reshape(r, x, *shape):
    return f"{r.helper('torch_reshape')}({', '.join(r(v) for v in (x, *shape))})"


def _expand(r, x, *sizes):
    return f"{r.helper('torch_expand')}({', '.join(r(v) for v in (x, *sizes))})"


def _flatten(r, x, start_dim=0, end_dim=-1):
    return f"{r.helper('torch_flatten')}({r(x)}, {r(start_dim)}, {r(end_dim)})"


def _permute(r, x, *dims):
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    return f"jnp.transpose({r(x)}, {r(dims)})"


def _transpose(r, x, dim0, dim1):
    return f"jnp.swapaxes({r(x)}, {r(dim0)}, {r(dim1)})"


def _t(r, x):
    return f"jnp.transpose({r(x)})"  # torch's t() takes <= 2-D tensors, where it is the full transpose


def _same_tensor(r, x, *args, **kwargs):
    return r(x)


def _size(r, x, dim=None):
    return f"{r(x)}.shape" if dim is None else f"{r(x)}.shape[{r(dim)}]"


def _dim(r, x):
    return f"{r(x)}.ndim"


def _numel(r, x):
    return f"{r(x)}.size"


def _chunk(r, x, chunks, dim=0):
    return f"{r.helper('torch_chunk')}({r(x)}, {r(chunks)}, {r(dim)})"


def _split(r, x, split_size_or_sections, dim=0):
    return f"{r.helper('torch_split')}({r(x)}, {r(split_size_or_sections)}, {r(dim)})"


def _reduction(jnp_name):
    def render(r, x, dim=None, keepdim=False, *, dtype=None):
        args = [r(x)]
        if dim is not None:
            args.append(f"axis={r(_axis(dim))}")
        if keepdim:
            args.append(f"keepdims={r(keepdim)}")
        if dtype is not None:
            args.append(f"dtype={r(dtype)}")
        return f"jnp.{jnp_name}({', '.join(args)})"

    return render


def _squeeze(r, x, dim=None):
    return f"{r.helper('torch_squeeze')}({r(x)}" + ("" if dim is None else f", {r(_axis(dim))}") + ")"


def _unsqueeze(r, x, dim):
    return f"jnp.expand_dims({r(x)}, {r(dim)})"


def _functional(name):
    def render(r, x, *args, **kwargs):
        return _bound_call(r, f"F.{name}", getattr(JF, name), (x, *args), kwargs)

    return render


def _jnp_unary(name):
    def render(r, x):
        return f"jnp.{name}({r(x)})"

    return render


def _abs(r, x):
    return f"{r.helper('torch_abs')}({r(x)})"  # torch's gradient at 0 (jnp.abs's is 1 there)


def _binary(symbol):
    def render(r, x, other):
        return f"{r(x)} {symbol} {r(other)}"

    return render


def _astype(dtype_text):
    def render(r, x):
        return f"{r(x)}.astype({dtype_text})"

    return render


def _to(r, x, *args, **kwargs):
    # x.to(device), x.to(dtype), x.to(device, dtype), x.to(other): jax places arrays itself, so only a dtype
    # (given, or other's) changes the array; `device` arrives rendered as None, or as a string.
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, torch.fx.Node) and a.op == "call_function" and a.target is builtins.getattr \
                and a.args[1] == "dtype":
            dtype = a  # x.to(y.dtype)
        elif isinstance(a, torch.fx.Node) and dtype is None:
            return f"{r(x)}.astype({r(a)}.dtype)"  # x.to(other)
        elif not (a is None or isinstance(a, (str, torch.device))):
            raise r.fail(f"x.to({a!r}) has no JAX meaning")
    if set(kwargs) - {"dtype", "device", "non_blocking", "copy"}:
        raise r.fail(f"x.to(**{kwargs}) has no JAX meaning")
    return r(x) if dtype is None else f"{r(x)}.astype({r(dtype)})"


def _matmul(r, x, other):
    return f"jnp.matmul({r(x)}, {r(other)})"


def _cat(r, tensors, dim=0):
    return f"jnp.concatenate({r(tensors)}, axis={r(dim)})"


def _stack(r, tensors, dim=0):
    return f"jnp.stack({r(tensors)}, axis={r(dim)})"


def _add(r, x, other, *, alpha=1):
    return f"{r(x)} + {r(other)}" if alpha == 1 else f"{r(x)} + {r(alpha)} * {r(other)}"


def _sub(r, x, other, *, alpha=1):
    return f"{r(x)} - {r(other)}" if alpha == 1 else f"{r(x)} - {r(alpha)} * {r(other)}"


def _div(r, x, other, *, rounding_mode=None):
    if rounding_mode is not None:
        raise r.fail(f"division with rounding_mode={rounding_mode!r} is not mapped")
    return f"{r(x)} / {r(other)}"


def _arange(r, start, end=None, step=1, *, dtype=None, device=None, layout=None, pin_memory=False,
            requires_grad=False):
    """``torch.arange``; ``device`` is dropped (arrays live on jax's device)."""
    args = [start] if end is None else [start, end] + ([step] if step != 1 else [])
    floats = any(isinstance(a, float) for a in args)
    if dtype is None and floats:
        dtype = torch.get_default_dtype()  # torch's float arange is the default dtype, jnp's the widest float
    elif dtype is torch.int64 and not floats:
        dtype = None  # jnp's default integer: int64 with x64, int32 (same values, no warning) without
    return f"jnp.arange({', '.join(r(a) for a in args)}" + (f", dtype={r(dtype)})" if dtype is not None else ")")


def _shape(r, size) -> str:
    """A factory's size arguments (``*size`` or one sequence) as the twin's shape. One traced value (timm's
    ``shape = (x.shape[0],) + (1,) * (x.ndim - 1)``, a tuple the twin computes) is passed as it is: an int or a
    tuple, either of which ``jnp.zeros`` takes."""
    if len(size) == 1 and isinstance(size[0], torch.fx.Node):
        return r(size[0])
    return r(_sizes(size))


def _filled(jnp_name, fill=None):
    """``torch.zeros`` / ``ones`` / ``full``: a float fill without ``dtype`` is torch's default dtype."""
    def render(r, *args, dtype=None, device=None, layout=None, pin_memory=False, requires_grad=False):
        size, value = (args[:-1], args[-1]) if fill is None else (args, fill)
        if dtype is None and isinstance(value, float):
            dtype = torch.get_default_dtype()
        value_text = f", {r(value)}" if fill is None else ""
        return f"jnp.{jnp_name}({_shape(r, size)}{value_text}" + (f", dtype={r(dtype)})" if dtype is not None else ")")

    return render


def _triangle(jnp_name):
    def render(r, x, diagonal=0):
        return f"jnp.{jnp_name}({r(x)}, k={r(diagonal)})"

    return render


def _where(r, condition, input, other):
    """``torch.where(condition, input, other)``: ``jnp.where`` (a Python number takes the other side's dtype,
    as torch's type promotion gives it)."""
    return f"jnp.where({r(condition)}, {r(input)}, {r(other)})"


def _masked_fill(r, x, mask, value):
    """``x.masked_fill(mask, value)``: ``value`` in ``x``'s dtype where ``mask`` holds."""
    return f"jnp.where({r(mask)}, jnp.asarray({r(value)}, {r(x)}.dtype), {r(x)})"


def _clamp(r, x, min=None, max=None):  # noqa: A002 - torch's names
    """``clamp(min, max)``: ``min(max(x, min), max)`` as torch (``min > max`` gives ``max``), NaN kept, and the
    gradient passing at ``x == min`` / ``x == max`` as torch's subgradient 1 (``torch_clamp``)."""
    if min is None and max is None:
        raise r.fail("torch.clamp: At least one of 'min' or 'max' must not be None")
    return f"{r.helper('torch_clamp')}({r(x)}" + (f", {r(min)}" if min is not None else "") + (
        f", max={r(max)})" if max is not None else ")")


def _like(jnp_name, fill=None):
    """``torch.zeros_like`` / ``ones_like`` / ``full_like``: ``x``'s shape and dtype unless ``dtype=``."""
    def render(r, x, *args, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False,
               memory_format=None):
        value = f", {r(args[0])}" if fill is None and args else ""
        return f"jnp.{jnp_name}({r(x)}{value}" + (f", dtype={r(dtype)})" if dtype is not None else ")")

    return render


def _size_args(size) -> tuple:
    """``torch.randn(2, 3)`` / ``torch.randn((2, 3))``: the shape as one tuple."""
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else tuple(size)


def _random_factory(name):
    """``torch.randn`` / ``rand`` (``*size``, ``dtype``): torch's draws from jax_impl's copy of its global
    stream, traceable (``jax_impl.random.staged``); a float draw without ``dtype`` is torch's default dtype."""
    def render(r, *size, generator=None, dtype=None, layout=None, device=None, pin_memory=False,
               requires_grad=False, out=None):
        if generator is not None or out is not None:
            raise r.fail(f"torch.{name} with generator= or out= is not mapped (the twin draws from the global stream)")
        dtype = torch.get_default_dtype() if dtype is None else dtype
        return f"staged.{name}({r(_size_args(size))}, dtype={r(dtype)})"

    return render


def _random_like(name):
    def render(r, x, *, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False,
               memory_format=None):
        return f"staged.{name}({r(x)}" + (f", dtype={r(dtype)})" if dtype is not None else ")")

    return render


def _randint(r, *args, generator=None, dtype=None, layout=None, device=None, pin_memory=False,
             requires_grad=False, out=None):
    """``torch.randint(high, size)`` / ``randint(low, high, size)``: int64 draws of torch's global stream."""
    if generator is not None or out is not None or (dtype is not None and dtype is not torch.int64):
        raise r.fail("torch.randint with generator=, out= or a dtype other than int64 is not mapped")
    low, high, size = (0, *args) if len(args) == 2 else args
    return f"staged.randint({r(low)}, {r(high)}, {r(tuple(size))})"


def _normal(r, mean, std=1.0, size=None, *, generator=None, dtype=None, layout=None, device=None,
            pin_memory=False, requires_grad=False, out=None):
    """``torch.normal`` (float or tensor mean/std): standard normals of torch's stream, then torch's arithmetic."""
    if generator is not None or out is not None or dtype is not None:
        raise r.fail("torch.normal with generator=, out= or dtype= is not mapped")
    return f"staged.normal({r(mean)}, {r(std)}" + (f", {r(tuple(size))})" if size is not None else ")")


def _bernoulli(r, p, *, generator=None, out=None):
    if generator is not None or out is not None:
        raise r.fail("torch.bernoulli with generator= or out= is not mapped")
    return f"staged.bernoulli({r(p)})"


def _bernoulli_fill(r, x, p=0.5, *, generator=None):
    """``x.bernoulli_(p)``: ``x`` filled with torch's draws (a number ``p``: its scalar kernel, dropout's)."""
    if generator is not None:
        raise r.fail("Tensor.bernoulli_ with generator= is not mapped")
    return f"staged.bernoulli_fill({r(x)}, {r(p)})"


def _normal_fill(r, x, mean=0.0, std=1.0, *, generator=None):
    """``x.normal_(mean, std)``: ``x`` filled with torch's normals."""
    if generator is not None:
        raise r.fail("Tensor.normal_ with generator= is not mapped")
    if isinstance(mean, torch.fx.Node) or isinstance(std, torch.fx.Node):
        raise r.fail("Tensor.normal_ with a tensor mean or std is not mapped (torch takes numbers)")
    return f"staged.normal_fill({r(x)}, {r(mean)}, {r(std)})"


# In-place draws fill their tensor: x.bernoulli_(p) is not x.bernoulli() (whose probabilities are x).
_FILLING_METHODS = {"bernoulli_": _bernoulli_fill, "normal_": _normal_fill}


def _torch_dropout(r, x, p, train):
    # torch.dropout(input, p, train) is F.dropout's kernel, with `train` for `training`.
    return f"F.dropout({r(x)}, {r(p)}, {r.training(train)})"


_METHODS = {
    "view": _reshape, "reshape": _reshape, "expand": _expand, "flatten": _flatten, "permute": _permute,
    "transpose": _transpose,
    "swapaxes": _transpose, "t": _t, "contiguous": _same_tensor, "size": _size, "dim": _dim, "numel": _numel,
    "chunk": _chunk, "split": _split, "mean": _reduction("mean"), "sum": _reduction("sum"),
    "amax": _reduction("max"), "amin": _reduction("min"), "squeeze": _squeeze, "unsqueeze": _unsqueeze,
    "relu": _functional("relu"), "sigmoid": _functional("sigmoid"), "tanh": _functional("tanh"),
    "softmax": _functional("softmax"), "log_softmax": _functional("log_softmax"),
    "exp": _jnp_unary("exp"), "log": _jnp_unary("log"), "sqrt": _jnp_unary("sqrt"), "abs": _abs,
    "neg": _jnp_unary("negative"), "add": _add, "sub": _sub, "mul": _binary("*"), "div": _div,
    "pow": _binary("**"), "matmul": _matmul, "float": _astype("jnp.float32"), "double": _astype("jnp.float64"),
    "to": _to, "masked_fill": _masked_fill, "clamp": _clamp, "clip": _clamp,
    # jax places arrays itself: `lengths.cpu()` (pack_padded_sequence requires CPU lengths) and `.cuda()` are the
    # array itself in the twin.
    "cpu": _same_tensor, "cuda": _same_tensor,
}

# torch.<name>(x, ...) means x.<name>(...) for these.
_TORCH_AS_METHOD = (
    "flatten", "reshape", "permute", "transpose", "swapaxes", "t", "chunk", "split", "mean", "sum", "amax",
    "amin", "squeeze", "unsqueeze", "relu", "sigmoid", "tanh", "softmax", "log_softmax", "exp", "log", "sqrt",
    "abs", "neg", "add", "sub", "mul", "div", "pow", "matmul", "numel",
)
_FUNCTIONS = {getattr(torch, name): _METHODS[name] for name in _TORCH_AS_METHOD}
_FUNCTIONS.update({
    torch.cat: _cat, torch.concat: _cat, torch.concatenate: _cat, torch.stack: _stack, torch.mm: _matmul,
    torch.bmm: _matmul, torch.dropout: _torch_dropout, torch.arange: _arange,
    torch.zeros: _filled("zeros", 0.0), torch.ones: _filled("ones", 1.0), torch.full: _filled("full"),
    torch.triu: _triangle("triu"), torch.tril: _triangle("tril"),
    torch.randn: _random_factory("randn"), torch.rand: _random_factory("rand"),
    torch.randn_like: _random_like("randn_like"), torch.rand_like: _random_like("rand_like"),
    torch.randint: _randint, torch.normal: _normal, torch.bernoulli: _bernoulli,
    torch.where: _where, torch.clamp: _clamp, torch.clip: _clamp, torch.masked_fill: _masked_fill,
    torch.zeros_like: _like("zeros_like", 0), torch.ones_like: _like("ones_like", 1),
    torch.full_like: _like("full_like"),
    torch.relu_: _functional("relu"), torch.max_pool1d: _functional("max_pool1d"),
    torch.max_pool2d: _functional("max_pool2d"), torch.max_pool3d: _functional("max_pool3d"),
    torch.avg_pool1d: _functional("avg_pool1d"), torch.adaptive_avg_pool1d: _functional("adaptive_avg_pool1d"),
})


# ---- Tensor operations of ordinary model code, with torch's signatures (methods and torch.<name>) ----

# Tensor methods that return torch's (values, indices) named tuple; the twin returns a plain pair, so
# `.values` / `.indices` read its items.
_VALUES_INDICES_METHODS = {"topk", "sort", "max", "min"}
_VALUES_INDICES_FUNCTIONS = {torch.topk, torch.sort, torch.max, torch.min}


def _returns_values_indices(node) -> bool:
    if not isinstance(node, torch.fx.Node):
        return False
    if node.op == "call_method":
        return node.target in _VALUES_INDICES_METHODS
    return node.op == "call_function" and node.target in _VALUES_INDICES_FUNCTIONS


def _sizes(args) -> tuple:
    """``x.repeat(2, 1)`` / ``x.repeat((2, 1))`` / ``x.flip(0, 1)``: the sizes or dims as one tuple."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def _helper_call(r, name: str, args, kwargs) -> str:
    """``name(args)`` for a :mod:`jax_impl.tensor_ops` helper whose signature is torch's; keyword arguments
    that are ``None`` are left out (an ``out=None`` binds to no helper, an ``out=`` tensor fails to bind)."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return _bound_call(r, r.helper(name), HELPERS[name], args, kwargs)


def _keywords(r, **options) -> str:
    """``, key=value`` for each option that is not ``None``."""
    return "".join(f", {k}={r(v)}" for k, v in options.items() if v is not None)


def _flip(r, x, *dims):
    return f"jnp.flip({r(x)}, axis={r(_sizes(dims))})"


def _roll(r, x, shifts, dims=None):
    return f"jnp.roll({r(x)}, {r(_axis(shifts))}{_keywords(r, axis=_axis(dims))})"


def _repeat(r, x, *sizes):
    """``x.repeat(*sizes)``: torch's repeat is numpy's tile (``len(sizes) >= x.ndim``)."""
    return f"jnp.tile({r(x)}, {r(_sizes(sizes))})"


def _repeat_interleave(r, x, repeats=None, dim=None, *, output_size=None):
    if repeats is None:
        raise r.fail("torch.repeat_interleave(repeats) (indices repeated, a data-dependent length) is not mapped")
    if isinstance(repeats, int):
        return f"jnp.repeat({r(x)}, {r(repeats)}{_keywords(r, axis=dim)})"
    return _helper_call(r, "torch_repeat_interleave", (x, repeats, dim), {"output_size": output_size})


def _unbind(r, x, dim=0):
    return f"jnp.unstack({r(x)}{_keywords(r, axis=dim or None)})"


def _gather(r, x, dim, index, *, sparse_grad=False):
    if sparse_grad:
        raise r.fail("gather with sparse_grad=True is not mapped")
    return _helper_call(r, "torch_gather", (x, dim, index), {})


def _scatter(r, x, dim, index, src=None, *, value=None, reduce=None):
    if (src is None) == (value is None):
        raise r.fail("scatter takes one of src (a tensor) or value (a number)")
    return _helper_call(r, "torch_scatter", (x, dim, index, value if src is None else src), {"reduce": reduce})


def _scatter_add(r, x, dim, index, src):
    return _helper_call(r, "torch_scatter", (x, dim, index, src), {"reduce": "add"})


def _index_select(r, x, dim, index):
    """``x.index_select(dim, index)``: ``index`` is 1-D or 0-D (then a dim of size 1)."""
    return f"jnp.take({r(x)}, jnp.ravel({r(index)}), axis={r(dim)})"


def _topk(r, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's names
    return _helper_call(r, "torch_topk", (x, k), {"dim": dim, "largest": largest, "sorted": sorted})


def _sort(r, x, dim=-1, descending=False, *, stable=False):
    return _helper_call(r, "torch_sort", (x,), {"dim": dim, "descending": descending, "stable": stable})


def _argsort(r, x, dim=-1, descending=False, *, stable=False):
    """``argsort``: ``torch_sort``'s indices (torch's CPU order among ties, stable or not)."""
    return _helper_call(r, "torch_sort", (x,), {"dim": dim, "descending": descending, "stable": stable}) + "[1]"


def _arg_extremum(jnp_name):
    def render(r, x, dim=None, keepdim=False):
        return f"jnp.{jnp_name}({r(x)}{_keywords(r, axis=dim, keepdims=keepdim or None)})"

    return render


def _max_min(largest: bool):
    """``max``/``min``: of all elements, ``(values, indices)`` along ``dim``, or elementwise with ``other``."""
    name = "max" if largest else "min"

    def render(r, x, *args, dim=None, keepdim=False, other=None, out=None):
        if out is not None:
            raise r.fail(f"{name} with out= is not mapped")
        if other is not None or (len(args) == 1 and isinstance(args[0], torch.fx.Node) and dim is None):
            return f"jnp.{name}imum({r(x)}, {r(args[0] if other is None else other)})"
        if len(args) > 2 or (args and dim is not None):
            raise r.fail(f"{name} takes dim and keepdim once")
        dim = args[0] if args else dim
        keepdim = args[1] if len(args) > 1 else keepdim
        if dim is None:
            return f"jnp.{name}({r(x)})"
        options = {"keepdim": keepdim} if largest else {"keepdim": keepdim, "largest": False}
        return _helper_call(r, "torch_max_dim", (x, dim), options)

    return render


def _cumulative(product: bool):
    def render(r, x, dim, *, dtype=None, out=None):
        if out is not None:
            raise r.fail("cumsum/cumprod with out= is not mapped")
        return _helper_call(r, "torch_cumulative", (x, dim), {"dtype": dtype, "product": product})

    return render


def _variance(root: bool):
    """``var`` / ``std`` with torch's overloads: ``(dim, *, correction, keepdim)``,
    ``(dim, unbiased, keepdim)`` and ``(unbiased)``."""
    def render(r, x, *args, dim=None, unbiased=None, keepdim=False, correction=None, out=None):
        if out is not None:
            raise r.fail("var/std with out= is not mapped")
        if args and isinstance(args[0], bool):
            unbiased, args = args[0], args[1:]
            if args:
                raise r.fail("var(unbiased) takes no more arguments")
        elif args:
            dim, args = args[0], args[1:]
            unbiased = args[0] if args else unbiased
            keepdim = args[1] if len(args) > 1 else keepdim
        if unbiased is not None and correction is not None:
            raise r.fail("var/std takes unbiased or correction, not both")
        if unbiased is not None:
            correction = int(unbiased)
        text = _helper_call(r, "torch_var", (x,), {"dim": dim, "correction": correction, "keepdim": keepdim})
        return f"jnp.sqrt({text})" if root else text

    return render


def _logsumexp(r, x, dim, keepdim=False, *, out=None):
    return _helper_call(r, "torch_logsumexp", (x, dim), {"keepdim": keepdim, "out": out})


def _vector_norm(r, x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002 - torch's names
    return _helper_call(r, "torch_vector_norm", (x,), {"ord": ord, "dim": dim, "keepdim": keepdim, "dtype": dtype,
                                                       "out": out})


_SVD_NORMS = ("nuc", 2, -2)


def _matrix_norm(r, x, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):  # noqa: A002
    if ord in _SVD_NORMS:
        raise r.fail(f"the matrix norm ord={ord!r} (singular values: an SVD) is not mapped")
    if ord == "fro":
        return _vector_norm(r, x, 2, dim, keepdim, dtype=dtype, out=out)
    return _helper_call(r, "torch_matrix_norm", (x, ord), {"dim": dim, "keepdim": keepdim, "dtype": dtype,
                                                           "out": out})


def _linalg_norm(r, x, ord=None, dim=None, keepdim=False, *, out=None, dtype=None):  # noqa: A002
    if ord in _SVD_NORMS and (isinstance(ord, str) or (dim is not None and len(_sizes((dim,))) == 2)):
        raise r.fail(f"the matrix norm ord={ord!r} (singular values: an SVD) is not mapped")
    r.helper("torch_vector_norm")
    r.helper("torch_matrix_norm")
    return _helper_call(r, "torch_linalg_norm", (x,), {"ord": ord, "dim": dim, "keepdim": keepdim, "dtype": dtype,
                                                       "out": out})


def _norm(r, x, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """``torch.norm`` as torch/functional.py dispatches it: ``'fro'`` over at most two dims and any number
    ``p`` are vector norms (``p=None`` is 2), ``'nuc'`` a matrix norm."""
    if isinstance(p, str):
        if p == "fro" and (dim is None or isinstance(dim, int) or len(dim) <= 2):
            return _vector_norm(r, x, 2, dim, keepdim, dtype=dtype, out=out)
        return _matrix_norm(r, x, p, (0, 1) if dim is None else dim, keepdim, dtype=dtype, out=out)
    return _vector_norm(r, x, 2 if p is None else p, dim, keepdim, dtype=dtype, out=out)


def _tensor_norm(r, x, p="fro", dim=None, keepdim=False, dtype=None):
    return _norm(r, x, p, dim, keepdim, dtype=dtype)


def _einsum(r, *args):
    """``torch.einsum(equation, *operands)``, operands as arguments or one list; the sublist form as jnp's."""
    if args and isinstance(args[0], str) and len(args) == 2 and isinstance(args[1], (list, tuple)):
        args = (args[0], *args[1])
    return f"jnp.einsum({', '.join(r(a) for a in args)})"


def _add_product(r, input, a, b, *, beta=1, alpha=1, out=None):  # noqa: A002 - torch's names
    """``addmm`` / ``baddbmm``: ``beta * input + alpha * (a @ b)``; ``beta=0`` ignores ``input`` (its NaN too)."""
    if out is not None:
        raise r.fail("addmm/baddbmm with out= is not mapped")
    product = f"jnp.matmul({r(a)}, {r(b)})"
    if alpha != 1:
        product = f"{r(alpha)} * {product}"
    if isinstance(beta, (int, float)) and beta == 0:
        return product
    return f"{r(input) if beta == 1 else f'{r(beta)} * {r(input)}'} + {product}"


def _outer(r, x, vec2):
    return f"jnp.outer({r(x)}, {r(vec2)})"


def _diag(r, x, diagonal=0):
    return f"jnp.diag({r(x)}{_keywords(r, k=diagonal or None)})"


def _diagonal(r, x, offset=0, dim1=0, dim2=1):
    return f"jnp.diagonal({r(x)}, {r(offset)}, {r(dim1)}, {r(dim2)})"


def _clamp_min(r, x, min):  # noqa: A002 - torch's names
    return f"{r.helper('torch_clamp')}({r(x)}, {r(min)})"


def _clamp_max(r, x, max):  # noqa: A002 - torch's names
    return f"{r.helper('torch_clamp')}({r(x)}, max={r(max)})"


def _binary_function(jnp_name):
    def render(r, x, other):
        return f"jnp.{jnp_name}({r(x)}, {r(other)})"

    return render


def _unary(template: str):
    def render(r, x):
        return template.format(r(x))

    return render


def _dtype_cast(dtype: torch.dtype):
    def render(r, x, memory_format=None):
        return f"{r(x)}.astype({r(dtype)})"

    return render


_TYPE_NAMES = {
    f"torch.{name}Tensor": dtype for name, dtype in (
        ("Float", torch.float32), ("Double", torch.float64), ("Half", torch.float16), ("BFloat16", torch.bfloat16),
        ("Long", torch.int64), ("Int", torch.int32), ("Short", torch.int16), ("Char", torch.int8),
        ("Byte", torch.uint8), ("Bool", torch.bool))
}


def _type(r, x, dtype=None, non_blocking=False):
    if isinstance(dtype, str) and dtype in _TYPE_NAMES:
        dtype = _TYPE_NAMES[dtype]
    if _is_dtype_node(dtype):
        return f"{r(x)}.astype({r(dtype)})"
    if not isinstance(dtype, torch.dtype):
        raise r.fail("only x.type(dtype) and x.type('torch.<Name>Tensor') are mapped (x.type() is a string)")
    return f"{r(x)}.astype({r(dtype)})"


def _is_dtype_node(value) -> bool:
    """``y.dtype`` read in ``forward`` (a graph node)."""
    return (isinstance(value, torch.fx.Node) and value.op == "call_function" and value.target is builtins.getattr
            and value.args[1:] == ("dtype",))


def _type_as(r, x, other):
    return f"{r(x)}.astype({r(other)}.dtype)"


def _as_shape(jnp_name):
    def render(r, x, other):
        return f"jnp.{jnp_name}({r(x)}, {r(other)}.shape)"

    return render


def _new_filled(jnp_name: str, full: bool = False):
    """``x.new_zeros(*size)`` / ``new_ones`` / ``new_empty`` (zeros) / ``new_full(size, fill_value)``: ``x``'s
    dtype unless ``dtype=``."""
    def render(r, x, *args, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
        size, fill = (args[:-1], f", {r(args[-1])}") if full else (args, "")
        dtype_text = f"{r(x)}.dtype" if dtype is None else r(dtype)
        return f"jnp.{jnp_name}({_shape(r, size)}{fill}, dtype={dtype_text})"

    return render


def _new_tensor(r, x, data, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    if isinstance(data, torch.fx.Node):
        raise r.fail("x.new_tensor(tensor) (a detached copy) is not mapped; use tensor.clone().detach()")
    return f"jnp.asarray({r(data)}, dtype={r(x) + '.dtype' if dtype is None else r(dtype)})"


def _unfold(r, x, dimension, size, step):
    """``x.unfold(dimension, size, step)`` (sliding windows as a new last dimension; not ``F.unfold``)."""
    return _helper_call(r, "torch_unfold", (x, dimension, size, step), {})


def _copy(r, x, src, non_blocking=False):
    """``x.copy_(src)``: ``src`` in ``x``'s dtype, broadcast to ``x``'s shape (the gradient goes to ``src``)."""
    return f"jnp.broadcast_to(jnp.asarray({r(src)}, {r(x)}.dtype), {r(x)}.shape)"


def _fill(r, x, value):
    return f"jnp.full_like({r(x)}, {r(value)})"


def _zero(r, x):
    return f"jnp.zeros_like({r(x)})"


def _tensor_where(r, x, condition, other):
    return f"jnp.where({r(condition)}, {r(x)}, {r(other)})"


_METHODS.update({
    "flip": _flip, "roll": _roll, "repeat": _repeat, "tile": _repeat, "repeat_interleave": _repeat_interleave,
    "unbind": _unbind, "gather": _gather, "scatter": _scatter, "scatter_add": _scatter_add,
    "index_select": _index_select, "topk": _topk, "sort": _sort, "argsort": _argsort,
    "argmax": _arg_extremum("argmax"), "argmin": _arg_extremum("argmin"), "max": _max_min(True),
    "min": _max_min(False), "maximum": _binary_function("maximum"), "minimum": _binary_function("minimum"),
    "cumsum": _cumulative(False), "cumprod": _cumulative(True), "var": _variance(False), "std": _variance(True),
    "prod": _reduction("prod"), "all": _reduction("all"), "any": _reduction("any"), "logsumexp": _logsumexp,
    "norm": _tensor_norm, "mm": _matmul, "bmm": _matmul, "addmm": _add_product, "baddbmm": _add_product,
    "outer": _outer, "ger": _outer, "diag": _diag, "diagonal": _diagonal, "tril": _triangle("tril"),
    "triu": _triangle("triu"), "clamp_min": _clamp_min, "clamp_max": _clamp_max,
    "rsqrt": _unary("1 / jnp.sqrt({})"), "reciprocal": _unary("1 / {}"), "square": _jnp_unary("square"),
    "sin": _jnp_unary("sin"), "cos": _jnp_unary("cos"), "log1p": _jnp_unary("log1p"), "expm1": _jnp_unary("expm1"),
    "sign": _jnp_unary("sign"), "floor": _jnp_unary("floor"), "ceil": _jnp_unary("ceil"),
    "half": _dtype_cast(torch.float16), "bfloat16": _dtype_cast(torch.bfloat16), "long": _dtype_cast(torch.int64),
    "int": _dtype_cast(torch.int32), "short": _dtype_cast(torch.int16), "char": _dtype_cast(torch.int8),
    "byte": _dtype_cast(torch.uint8), "bool": _dtype_cast(torch.bool), "type": _type, "type_as": _type_as,
    "expand_as": _as_shape("broadcast_to"), "view_as": _as_shape("reshape"), "reshape_as": _as_shape("reshape"),
    "new_zeros": _new_filled("zeros"), "new_ones": _new_filled("ones"), "new_empty": _new_filled("zeros"),
    "new_full": _new_filled("full", full=True), "new_tensor": _new_tensor, "nelement": _numel, "ndimension": _dim,
    "copy": _copy, "fill": _fill, "zero": _zero, "where": _tensor_where, "unfold": _unfold,
})
_FUNCTIONS.update({getattr(torch, name): _METHODS[name] for name in (
    "flip", "roll", "tile", "repeat_interleave", "unbind", "gather", "scatter", "scatter_add", "index_select",
    "topk", "sort", "argsort", "argmax", "argmin", "max", "min", "maximum", "minimum", "cumsum", "cumprod", "var",
    "std", "prod", "all", "any", "logsumexp", "addmm", "baddbmm", "outer", "ger", "diag", "diagonal", "clamp_min",
    "clamp_max", "rsqrt", "reciprocal", "square", "sin", "cos", "log1p", "expm1", "sign", "floor", "ceil",
)})
_FUNCTIONS.update({
    torch.norm: _norm, torch.linalg.vector_norm: _vector_norm, torch.linalg.matrix_norm: _matrix_norm,
    torch.linalg.norm: _linalg_norm, torch.einsum: _einsum,
    torch.empty_like: _like("zeros_like", 0), torch.fliplr: _unary("jnp.fliplr({})"),
    torch.flipud: _unary("jnp.flipud({})"),
})

# x.mH / x.H: the conjugate transposes (for real tensors x.mT / x.T).
_CONJUGATE_ATTRIBUTES = {"mH": "mT", "H": "T"}

_ATTRIBUTES = {"shape", "ndim", "dtype", "T", "mT"}

_SEQUENCE_FUNCTIONS = {getattr(torch.nn.utils.rnn, name) for name in (
    "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "unpad_sequence", "pack_sequence",
    "unpack_sequence")}


def _apply(r: Renderer, what: str, render, args, kwargs) -> str:
    try:
        inspect.signature(render).bind(r, *args, **kwargs)
    except TypeError as error:
        raise r.fail(f"{what} with these arguments is not mapped ({error})") from None
    return render(r, *args, **kwargs)


def render_call_method(r: Renderer, name: str, args, kwargs) -> str:
    """The expression for ``args[0].name(*args[1:], **kwargs)``; in-place ``name_`` as ``name``."""
    if name in _FILLING_METHODS:
        return _apply(r, f"Tensor.{name}", _FILLING_METHODS[name], args, kwargs)
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    render = _METHODS.get(base)
    if render is None:
        raise r.fail(f"the tensor method {name!r} has no JAX mapping")
    return _apply(r, f"Tensor.{name}", render, args, kwargs)


def render_call_function(r: Renderer, target, args, kwargs) -> str:
    """The expression for ``target(*args, **kwargs)``."""
    if target in _BINARY and len(args) == 2 and not kwargs:
        return f"{r(args[0])} {_BINARY[target]} {r(args[1])}"
    if target in _UNARY and len(args) == 1 and not kwargs:
        return f"{_UNARY[target]}{r(args[0])}"
    if target is operator.getitem and len(args) == 2 and not kwargs:
        return f"{r(args[0])}[{r.index(args[1])}]"
    if target is operator.setitem and len(args) == 3 and not kwargs:  # x[i] = y, in x's dtype (torch's copy)
        x = r(args[0])
        return f"{x}.at[{r.index(args[1])}].set(jnp.asarray({r(args[2])}, {x}.dtype))"
    if target is builtins.getattr and len(args) == 2 and args[1] in _CONJUGATE_ATTRIBUTES and not kwargs:
        return f"jnp.conj({r(args[0])}.{_CONJUGATE_ATTRIBUTES[args[1]]})"
    if target is builtins.getattr and len(args) == 2 and args[1] in ("values", "indices") and not kwargs \
            and _returns_values_indices(args[0]):
        return f"{r(args[0])}[{0 if args[1] == 'values' else 1}]"
    if target is builtins.getattr and len(args) == 2 and args[1] in _ATTRIBUTES and not kwargs:
        return f"{r(args[0])}.{args[1]}"
    if target is builtins.len and len(args) == 1 and not kwargs:
        return f"len({r(args[0])})"
    if getattr(target, "__module__", None) == "math" and getattr(math, target.__name__, None) is target:
        # fx records math functions of traced sizes (`math.sqrt(x.size(-1))`); sizes are Python ints in jax too
        return r.call(f"math.{target.__name__}", args, kwargs)
    if target is builtins.getattr and len(args) == 2 and args[1] == "device" and not kwargs:
        return "None  # x.device: jax places arrays itself; torch.arange(..., device=) drops it"
    if target in _FUNCTIONAL:
        name = _FUNCTIONAL[target]
        return _bound_call(r, f"F.{name}", getattr(JF, name), args, kwargs)
    if target in _FUNCTIONS:
        return _apply(r, getattr(target, "__name__", repr(target)), _FUNCTIONS[target], args, kwargs)
    if target in _SEQUENCE_FUNCTIONS:
        # jax_impl.nn.utils.rnn: the same names, arguments and defaults (lengths are read on the host, as torch
        # requires a CPU tensor or a list).
        name = target.__name__
        return _bound_call(r, f"nn.utils.rnn.{name}", getattr(JRNN, name), args, kwargs)
    raise r.fail("this function has no JAX mapping (jax_impl.nn.functional, jax.numpy)")
