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

Where fx cannot trace (a tensor used in Python control flow, iterated, or any
other failure inside ``forward``), :class:`~parity.port.errors.PortError`
names the offending node, the source line and the fallback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import traceback
from collections.abc import Iterator

import torch
import torch.fx

from parity.port.errors import FALLBACK, PortError, node_description, user_line

__all__ = ["Traces", "is_torch_leaf", "set_training", "trace"]

_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


def is_torch_leaf(module: torch.nn.Module) -> bool:
    """A ``torch.nn`` layer class itself (not a container, not a user subclass): a ``call_module`` leaf."""
    return type(module).__module__.startswith("torch.nn") and not isinstance(module, _CONTAINERS)


def _current_user_line() -> str | None:
    return user_line("".join(traceback.format_stack()))


class _Tracer(torch.fx.Tracer):
    """fx's tracer with torch.nn leaves only, stack traces on every node and errors that name the node."""

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True
        # Buffers as graph values (get_attr nodes), as parameters are: `self.mask[:s, :s]` with a traced `s`
        # then slices a proxy, where fx's default hands forward the real tensor and the slice fails.
        self.proxy_buffer_attributes = True

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return is_torch_leaf(m)

    def _control_flow(self, obj, what: str):
        where = _current_user_line()
        raise PortError(
            f"cannot trace: {node_description(obj.node)} is {what}"
            + (f" at {where}" if where else "")
            + "; torch.fx records tensor operations, not Python control flow that depends on tensor values. "
            f"Fallback: {FALLBACK}"
        )

    def to_bool(self, obj):
        self._control_flow(obj, "used as a Python bool (data-dependent control flow: if/while/and/or)")

    def iter(self, obj):
        # fx unpacks `a, b = x.chunk(2)` itself (it reads the unpacking's length from the bytecode).
        try:
            return super().iter(obj)
        except torch.fx.proxy.TraceError:
            self._control_flow(obj, "iterated over in Python (its length is unknown to the trace)")

    def keys(self, obj):
        try:
            return super().keys(obj)
        except torch.fx.proxy.TraceError:
            self._control_flow(obj, "unpacked with ** (its keys are unknown to the trace)")


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
            return tracer.create_proxy("call_function", fn, args, kwargs)

        return factory

    try:
        for name, fn in originals.items():
            setattr(torch, name, recorded(fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)


def _trace_once(module: torch.nn.Module) -> torch.fx.Graph:
    tracer = _Tracer()
    try:
        with _factories_recorded(tracer):
            return tracer.trace(module)
    except PortError:
        raise
    except Exception as error:  # noqa: BLE001 - every fx failure becomes one error that says what to do
        # The exception's own frames reach into forward, where it failed; the current stack only to the caller.
        where = user_line("".join(traceback.format_exception(error))) or _current_user_line()
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PortError(
            f"cannot trace {type(module).__name__} with torch.fx: {type(error).__name__}: {first}"
            + (f" (at {where})" if where else "") + f". Fallback: {FALLBACK}"
        ) from error


def set_training(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
    """``module.train(mode)`` as ``torch.nn.Module.train`` does it (``training`` set on every submodule),
    without calling a ``train`` the model overrides: forward-forward's layers, for one, define
    ``train(x_pos, x_neg)`` to fit themselves. Returns ``module``."""
    for m in module.modules():
        m.training = mode
    return module


def trace(module: torch.nn.Module) -> Traces:
    """Traces ``module`` in train and in eval mode; every submodule's own mode is restored afterwards.

    Raises:
      PortError: fx cannot trace the model; the message names the node and the source line.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"parity.port expects a torch.nn.Module, got {type(module).__name__}")
    modes = {name: m.training for name, m in module.named_modules()}
    try:
        set_training(module, True)
        train_graph = _trace_once(module)
        set_training(module, False)
        eval_graph = _trace_once(module)
    finally:
        for name, m in module.named_modules():
            m.training = modes[name]
    return Traces(train=train_graph, eval=eval_graph)
