"""``torch.fx`` symbolic traces of a torch model, in train and in eval mode, with clear errors.

Modules of ``torch.nn`` itself (``Conv2d``, ``BatchNorm2d``, ``ReLU``, ...)
stay leaves of the graph (``call_module`` nodes), as fx's default tracer
keeps them; the containers ``Sequential``, ``ModuleList`` and ``ModuleDict``
and every user module are traced through, so the graph holds the user's
``forward`` code inlined, down to ``torch.nn`` layers and tensor operations.

fx bakes Python values read during the trace into the graph, ``self.training``
included (``F.dropout(x, training=self.training)`` becomes
``training=True``), so the model is traced once per mode; the code generator
emits one body when both graphs agree and an ``if self.training`` branch
when they do not.

Given an example input, the trace also runs every node on it
(:mod:`parity.port.values`): sizes, devices, lengths and loop counts are
Python values where the code needs them (``if x.is_cuda``, ``assert t <=
block_size``, ``for h in x.split(1, dim=1)``), each decision guarded in the
twin. ``forward`` arguments given as or defaulting to ``None``, a bool, a
number or a string are baked into the trace (``targets=None``).

Where the model cannot be traced (Python control flow on tensor values, or
any other failure inside ``forward``), :class:`~parity.port.errors.PortError`
names the offending node, the source line and the fallback.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import inspect
import math
import operator
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.fx

from parity.port import host_random
from parity.port.errors import FALLBACK, PortError, node_description, user_line
from parity.port.hooks import check_hooks, computed_tensor_name, copy_model, unparametrized_type
from parity.port.values import MISSING, ExampleFailure, ExampleValues, ValueProxy

__all__ = ["SEQUENCE_FUNCTIONS", "Traces", "is_torch_leaf", "set_training", "trace"]

# torch.nn.utils.rnn's packing functions, recorded as calls: the twin calls jax_impl.nn.utils.rnn's namesakes.
SEQUENCE_FUNCTIONS = tuple(getattr(torch.nn.utils.rnn, name) for name in (
    "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "unpad_sequence", "pack_sequence",
    "unpack_sequence"))

_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


def is_torch_leaf(module: torch.nn.Module) -> bool:
    """A ``torch.nn`` layer class itself (not a container, not a user subclass): a ``call_module`` leaf."""
    return unparametrized_type(module).__module__.startswith("torch.nn") and not isinstance(module, _CONTAINERS)


def _current_user_line() -> str | None:
    return user_line("".join(traceback.format_stack()))


class _Tracer(torch.fx.Tracer):
    """fx's tracer with torch.nn leaves only, stack traces on every node, errors that name the node and,
    given example inputs, each node's value on them (:mod:`parity.port.values`)."""

    def __init__(self, root: torch.nn.Module, inputs: dict | None) -> None:
        # torch.nn.utils.rnn's functions imported by name are graph nodes (fx would otherwise trace into
        # pack_padded_sequence's C++ call and fail); `_sequence_functions_recorded` covers `nn.utils.rnn.<name>`.
        super().__init__(autowrap_modules=(math,), autowrap_functions=SEQUENCE_FUNCTIONS)
        self.record_stack_traces = True
        # Buffers as graph values (get_attr nodes), as parameters are: `self.mask[:s, :s]` with a traced `s`
        # then slices a proxy, where fx's default hands forward the real tensor and the slice fails.
        self.proxy_buffer_attributes = True
        self.values = ExampleValues(self, root, inputs, _current_user_line)

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return is_torch_leaf(m)

    def call_module(self, m, forward, args, kwargs):
        # fx patches Module.__call__ while tracing; a layer run on the example (and the layers it calls
        # itself, as TransformerEncoderLayer calls its attention) is plain torch code.
        if self.values.running:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        # fx patches Module.__getattr__ too: a layer running on the example reads its real weights.
        if self.values.running:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def proxy(self, node: torch.fx.Node) -> ValueProxy:
        return ValueProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        self.values.record(proxy.node, kind, target, args, kwargs)
        return proxy

    def create_arg(self, a):
        # A weight that a normalisation or pruning hook computed, read outside its layer's call (a head tied
        # to `self.emb.weight`): fx would bake the tensor in as a constant.
        if isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Parameter) and not self.values.running:
            name = computed_tensor_name(self.root, a)
            if name is not None:
                raise PortError(f"cannot port {type(self.root).__name__}: forward reads {name}, which a "
                                f"normalisation or pruning hook computes, outside its layer's own call; the port "
                                f"reproduces the hook inside the layer's call only. Fallback: {FALLBACK}")
        return super().create_arg(a)

    def refuse(self, obj, what: str, value=MISSING):
        """Raises the ``PortError`` for a proxy Python needs a value of and cannot have."""
        if value is MISSING:
            why = ("torch.fx records tensor operations, not Python control flow; pass an example input "
                   "(parity.port(model, x)) so that sizes and devices are known")
        else:
            why = "it depends on tensor values, which the twin cannot know when it is traced"
        where = _current_user_line()
        described = node_description(obj.node)  # where the value was made; `where` is where it is used
        raise PortError(f"cannot trace: {described} {what}" + (f" at {where}" if where and where not in described
                                                                 else "") + f"; {why}. Fallback: {FALLBACK}")

    def to_bool(self, obj):
        where = _current_user_line() or ""
        if where.split(": ", 1)[-1].startswith("assert ") and self.values.depends_on_data(obj.node):
            # A sanity check on tensor values (`assert (output == hidden).all()`) changes no result: it held on
            # the example input as torch ran it, and the twin, which cannot branch on traced values, leaves it out.
            return bool(self.values.get(obj.node))
        return bool(self.values.static(obj, "is used as a Python bool (control flow: if/while/and/or/assert)"))

    def iter(self, obj):
        value = self.values.get(obj.node)
        if value is MISSING or isinstance(value, torch.Tensor) and value.dim() == 0:
            self.refuse(obj, "is iterated over in Python (its length is unknown to the trace)", value)
        return iter([obj[i] for i in range(self.values.length(obj))])

    def keys(self, obj):
        value = self.values.get(obj.node)
        if isinstance(value, dict):
            return value.keys()
        self.refuse(obj, "is unpacked with ** (its keys are unknown to the trace)", value)


@dataclasses.dataclass(frozen=True)
class Traces:
    """The model's fx graphs in train mode and in eval mode."""

    train: torch.fx.Graph
    eval: torch.fx.Graph


# Tensor factories recorded as graph nodes while tracing. fx runs a torch function whose arguments hold no
# proxy (``torch.randn(4, 6)``, ``torch.zeros(2, 3)``) and bakes its result into the graph as a constant, so
# the twin would replay one draw forever; with a traced size (``torch.rand(x.shape[0], 1)``) the call fails
# outright. Recorded, each becomes its ``jax_impl`` counterpart (``jax_impl.random.staged`` for the draws).
_FACTORIES = ("randn", "rand", "randint", "normal", "zeros", "ones", "full", "arange")


@contextlib.contextmanager
def _factories_recorded(tracer: torch.fx.Tracer) -> Iterator[None]:
    originals = {name: getattr(torch, name) for name in _FACTORIES}

    def recorded(fn):
        @functools.wraps(fn)
        def factory(*args, **kwargs):
            if tracer.values.running:  # a layer's own torch.zeros while it runs on the example
                return fn(*args, **kwargs)
            return tracer.create_proxy("call_function", fn, args, kwargs)

        return factory

    try:
        for name, fn in originals.items():
            setattr(torch, name, recorded(fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)


@contextlib.contextmanager
def _sequence_functions_recorded(tracer: torch.fx.Tracer) -> Iterator[None]:
    """``torch.nn.utils.rnn.<name>(...)`` with a traced argument becomes a call node, as fx's autowrap makes
    the same function imported by name."""
    module = torch.nn.utils.rnn

    def recorded(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if tracer.values.running or not _holds_proxy((args, kwargs)):
                return fn(*args, **kwargs)
            return tracer.create_proxy("call_function", fn, args, kwargs)

        return call

    originals = {fn.__name__: fn for fn in SEQUENCE_FUNCTIONS}
    try:
        for name, fn in originals.items():
            setattr(module, name, recorded(fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(module, name, fn)


def _holds_proxy(value) -> bool:
    if isinstance(value, torch.fx.Proxy):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_proxy(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_proxy(v) for v in value.values())
    return False


# Python values a forward argument may be specialised to: fx then bakes them into the graph, with a check.
_SPECIALISABLE = (type(None), bool, int, float, str)


def _arguments(module: torch.nn.Module, example) -> tuple[dict | None, dict]:
    """``(inputs, concrete)``: the example value of each traced argument (``None`` without an example), and
    the arguments baked into the trace: every one given as (or defaulting to) ``None``, a bool, a number or
    a string. ``targets=None`` is then ``None`` in the trace, where a placeholder would make fx take the
    ``targets is not None`` branch; ``has_mask=True`` decides its ``if`` instead of refusing it."""
    parameters = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    given = () if example is None else tuple(example) if isinstance(example, (tuple, list)) else (example,)
    if len(given) > len(parameters):
        raise PortError(f"{type(module).__name__}.forward takes {len(parameters)} inputs; the example gives "
                        f"{len(given)}")
    inputs, concrete = {}, {}
    for i, parameter in enumerate(parameters):
        if i < len(given):
            value = given[i]
        elif parameter.default is not inspect.Parameter.empty:
            value = parameter.default
        else:
            continue
        if isinstance(value, _SPECIALISABLE):
            concrete[parameter.name] = value
            inputs[f"{parameter.name}_1"] = value  # fx names the placeholder of a baked argument `name_1`
        else:
            inputs[parameter.name] = value
    return (inputs if example is not None else None), concrete


# Nodes that only compute a Python value (a size, a comparison): dropped when nothing reads them, as when an
# `assert` or `if` consumed the value during the trace and a guard node holds the decision.
_PURE_FUNCTIONS = frozenset({
    builtins.getattr, builtins.len, operator.getitem, operator.add, operator.sub, operator.mul, operator.truediv,
    operator.floordiv, operator.mod, operator.neg, operator.not_, operator.eq, operator.ne, operator.lt,
    operator.le, operator.gt, operator.ge, operator.and_, operator.or_,
})
_PURE_METHODS = frozenset({"size", "dim", "numel", "ndimension", "nelement"})


def _drop_unused(graph: torch.fx.Graph) -> None:
    for node in reversed(list(graph.nodes)):
        pure = (node.op == "call_function" and node.target in _PURE_FUNCTIONS
                or node.op == "call_method" and node.target in _PURE_METHODS)
        if pure and not node.users:
            graph.erase_node(node)


def _trace_once(module: torch.nn.Module, mode: bool, example) -> torch.fx.Graph:
    """One trace of a copy of ``module`` in ``mode``: running it on the example changes only the copy (its
    buffers, attributes it caches), and torch's generator state is restored afterwards."""
    try:
        copy_ = set_training(copy_model(module), mode)
    except Exception as error:  # noqa: BLE001 - a model holding something deepcopy refuses
        raise PortError(f"cannot port {type(module).__name__}: copy.deepcopy of the model fails "
                        f"({type(error).__name__}: {error}); the trace runs on a copy. Fallback: {FALLBACK}") from None
    inputs, concrete = _arguments(copy_, example)
    tracer = _Tracer(copy_, inputs)
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad(), _factories_recorded(tracer), \
                _sequence_functions_recorded(tracer):
            graph = tracer.trace(copy_, concrete_args=concrete or None)
    except PortError:
        raise
    except ExampleFailure as failure:
        error, where = failure.__cause__, failure.args[0]
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PortError(f"{type(module).__name__} fails on the example input" + (f" at {where}" if where else "")
                        + f": {type(error).__name__}: {first}") from error
    except Exception as error:  # noqa: BLE001 - every fx failure becomes one error that says what to do
        # The exception's own frames reach into forward, where it failed; the current stack only to the caller.
        where = user_line("".join(traceback.format_exception(error))) or _current_user_line()
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PortError(
            f"cannot trace {type(module).__name__} with torch.fx: {type(error).__name__}: {first}"
            + (f" (at {where})" if where else "") + f". Fallback: {FALLBACK}"
        ) from error
    for node in graph.nodes:
        if node.op == "placeholder" and node.target.endswith("_1") and node.target[:-2] in concrete:
            node.meta["specialised"] = (node.target[:-2], concrete[node.target[:-2]])
    _drop_unused(graph)
    return graph


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this package (the user's call)."""
    package = Path(__file__).resolve().parent.parent
    frame, level = inspect.currentframe().f_back, 1
    while frame is not None and package in Path(frame.f_code.co_filename).resolve().parents:
        frame, level = frame.f_back, level + 1
    return level


def set_training(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
    """``module.train(mode)`` as ``torch.nn.Module.train`` does it (``training`` set on every submodule),
    without calling a ``train`` the model overrides: forward-forward's layers, for one, define
    ``train(x_pos, x_neg)`` to fit themselves. Returns ``module``."""
    for m in module.modules():
        m.training = mode
    return module


def trace(module: torch.nn.Module, example=None) -> Traces:
    """Traces ``module`` in train and in eval mode, each on a copy (the model itself is not changed).

    Args:
      module: the torch model.
      example: its example input (a tensor, or a tuple of ``forward``'s positional arguments), or ``None``.
        With it, sizes, devices and lengths are Python values where the code needs them
        (:mod:`parity.port.values`); without it, only what fx traces symbolically ports.

    Raises:
      PortError: the model cannot be traced (the message names the node and the source line), or it has a
        hook or parametrization the port does not reproduce (:mod:`parity.port.hooks`).

    Warns:
      HostRandomWarning: ``forward`` drew from Python's or NumPy's random state (:mod:`parity.port.host_random`).
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"parity.port expects a torch.nn.Module, got {type(module).__name__}")
    check_hooks(module, is_torch_leaf)
    with host_random.watch() as draws:
        traces = Traces(train=_trace_once(module, True, example), eval=_trace_once(module, False, example))
    if draws:
        warnings.warn(f"forward draws from Python's or NumPy's random state ({draws[0]}"
                      + (f", and {len(draws) - 1} more calls" if len(draws) > 1 else "")
                      + "): the twin replays the numbers drawn while tracing on every call, where torch's model "
                      "draws anew; draw with torch (torch.rand) for the twin to draw torch's numbers",
                      host_random.HostRandomWarning, stacklevel=_caller_level())
    return traces
