"""The translation tables: fx ``call_function`` / ``call_method`` targets to JAX source.

Each entry renders one node as a Python expression over the twin's local
variables, with torch's semantics:

- ``torch.nn.functional.<name>`` -> ``F.<name>`` of ``jax_impl.nn.functional``
  (same names, arguments and defaults), for every function both have;
- tensor methods and their ``torch.<name>`` twins (``view``, ``reshape``,
  ``flatten``, ``permute``, ``transpose``, ``size``, ``mean``, ``sum``,
  ``chunk``, ``split``, ``squeeze``, ``unsqueeze``, ``softmax``, ...) ->
  ``jnp`` calls or the :mod:`parity.port.tensor_ops` helpers;
- Python operators (``+``, ``@``, indexing, ``+=``) -> the same operators on
  jax arrays; ``x.shape`` / ``x.ndim`` / ``x.T`` -> the same attributes.

Anything else raises :class:`~parity.port.errors.PortError` naming the node.
"""

from __future__ import annotations

import builtins
import inspect
import operator

import torch
import torch.nn.functional as TF

from jax_impl.nn import functional as JF
from parity.port.render import Renderer

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


def _binary(symbol):
    def render(r, x, other):
        return f"{r(x)} {symbol} {r(other)}"

    return render


def _astype(dtype_text):
    def render(r, x):
        return f"{r(x)}.astype({dtype_text})"

    return render


def _to(r, x, *args, **kwargs):
    dtype = kwargs.get("dtype", args[0] if args else None)
    if not isinstance(dtype, torch.dtype) or len(args) + len(kwargs) != 1:
        raise r.fail("only x.to(dtype) has a JAX meaning (arrays live on jax's device)")
    return f"{r(x)}.astype({r(dtype)})"


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


def _filled(jnp_name, fill=None):
    """``torch.zeros`` / ``ones`` / ``full``: a float fill without ``dtype`` is torch's default dtype."""
    def render(r, *args, dtype=None, device=None, layout=None, pin_memory=False, requires_grad=False):
        size, value = (args[:-1], args[-1]) if fill is None else (args, fill)
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        if dtype is None and isinstance(value, float):
            dtype = torch.get_default_dtype()
        value_text = f", {r(value)}" if fill is None else ""
        return f"jnp.{jnp_name}({r(tuple(size))}{value_text}" + (f", dtype={r(dtype)})" if dtype is not None else ")")

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
    """``clamp(min, max)``: ``min(max(x, min), max)`` as torch (``min > max`` gives ``max``)."""
    if min is None and max is None:
        raise r.fail("clamp needs min or max")
    out = r(x)
    if min is not None:
        out = f"jnp.maximum({out}, {r(min)})"
    if max is not None:
        out = f"jnp.minimum({out}, {r(max)})"
    return out


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
    "exp": _jnp_unary("exp"), "log": _jnp_unary("log"), "sqrt": _jnp_unary("sqrt"), "abs": _jnp_unary("abs"),
    "neg": _jnp_unary("negative"), "add": _add, "sub": _sub, "mul": _binary("*"), "div": _div,
    "pow": _binary("**"), "matmul": _matmul, "float": _astype("jnp.float32"), "double": _astype("jnp.float64"),
    "to": _to, "masked_fill": _masked_fill, "clamp": _clamp, "clip": _clamp,
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

_ATTRIBUTES = {"shape", "ndim", "dtype", "T", "mT"}


def _apply(r: Renderer, what: str, render, args, kwargs) -> str:
    try:
        inspect.signature(render).bind(r, *args, **kwargs)
    except TypeError as error:
        raise r.fail(f"{what} with these arguments is not mapped ({error})") from None
    return render(r, *args, **kwargs)


def render_call_method(r: Renderer, name: str, args, kwargs) -> str:
    """The expression for ``args[0].name(*args[1:], **kwargs)``; in-place ``name_`` as ``name``."""
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
    if target is builtins.getattr and len(args) == 2 and args[1] in _ATTRIBUTES and not kwargs:
        return f"{r(args[0])}.{args[1]}"
    if target is builtins.getattr and len(args) == 2 and args[1] == "device" and not kwargs:
        return "None  # x.device: jax places arrays itself; torch.arange(..., device=) drops it"
    if target in _FUNCTIONAL:
        name = _FUNCTIONAL[target]
        return _bound_call(r, f"F.{name}", getattr(JF, name), args, kwargs)
    if target in _FUNCTIONS:
        return _apply(r, getattr(target, "__name__", repr(target)), _FUNCTIONS[target], args, kwargs)
    raise r.fail("this function has no JAX mapping (jax_impl.nn.functional, jax.numpy)")
