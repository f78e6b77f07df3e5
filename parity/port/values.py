"""The values an fx trace's nodes take on the model's example input, so that static facts stay Python values.

A plain ``torch.fx`` trace knows no value: ``if x.is_cuda``, ``assert t <=
self.block_size``, ``len(src)``, ``range(x.size(1))`` or a loop over
``x.split(1, dim=1)`` all stop it. Traced with an example input, every node
here also runs on real tensors (a copy of the model, torch's generator state
restored afterwards), and :class:`ValueProxy` answers Python's questions
from those values:

- device, dtype and the other tensor attributes that are metadata come back
  as Python values (``x.is_cuda`` is ``False``);
- a size, a comparison of sizes, a length, a loop count is a Python value
  where Python needs one (``bool``, ``len``, ``range``, ``int``), and stays a
  graph node where a tensor operation takes it, so a reshape still follows
  the input's batch size;
- a decision taken on such a value is recorded as a :func:`guard` node: the
  twin raises if an input would take the other branch, instead of silently
  computing what the traced branch computes;
- a decision on tensor *values* (``if x.sum() > 0``, ``loss.item()``) is
  data-dependent control flow and stays refused.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from parity.port.errors import FALLBACK, PortError, node_description

__all__ = ["MISSING", "ExampleFailure", "ExampleValues", "ValueProxy", "guard"]

MISSING = object()  # a node whose value is unknown: traced without an example input

# Tensor attributes that are metadata, not data, and mean nothing to jax: read as Python values during the
# trace. `dtype` is not one of them: it stays a graph value (`x.dtype` in the twin), so a twin whose weights
# are cast afterwards (`jax: auto` casts to train.dtype) follows its input's dtype as torch's code does.
STATIC_ATTRIBUTES = frozenset({
    "is_cuda", "is_cpu", "is_mps", "is_xpu", "is_meta", "is_sparse", "is_quantized", "is_nested", "is_mkldnn",
    "device", "layout", "requires_grad", "is_leaf",
})

# Operations that read a tensor's metadata, never its values: their Python results are static facts.
_METADATA_METHODS = frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "is_floating_point", "is_complex", "is_contiguous",
    "element_size", "get_device", "stride", "is_signed",
})
_METADATA_FUNCTIONS = frozenset({len, torch.is_floating_point, torch.is_complex, torch.numel, getattr})


class ExampleFailure(Exception):
    """The model's own code failed on the example input while it was traced: ``args[0]`` is the user's
    source line, ``__cause__`` the error."""


def guard(value, expected, what: str):
    """The twin's check that an input takes the branch its trace took: ``value == expected`` or an error.

    Args:
      value: the static fact on the twin's input (a size, a comparison of sizes, a length).
      expected: what it was on the example input the model was traced with.
      what: the source line that read it.

    Raises:
      ValueError: the input gives another value, so torch's code would take another path.
    """
    if value != expected:
        raise ValueError(f"this twin was traced with {expected!r} at {what}; this input gives {value!r}. "
                         "Port the model again with an example input of this shape")
    return value


def _is_tensor(value) -> bool:
    return isinstance(value, torch.Tensor)


def _holds_tensors(value) -> bool:
    """A tensor, or a tuple/list/dict of them (``x.split(1)``, an LSTM's ``(h, c)``): values, not facts."""
    if isinstance(value, (tuple, list)):
        return any(_holds_tensors(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensors(v) for v in value.values())
    return _is_tensor(value)


class ValueProxy(torch.fx.Proxy):
    """An fx proxy that also knows its node's value on the example input (see the module docstring)."""

    def __getattr__(self, name: str):
        if name in STATIC_ATTRIBUTES:
            value = self.tracer.values.get(self.node)
            if _is_tensor(value):
                return getattr(value, name)
        return ValueAttribute(self, name)

    def __len__(self) -> int:
        return self.tracer.values.length(self)

    def __index__(self) -> int:
        return operator.index(self.tracer.values.static(self, "is used as a Python int"))

    def __int__(self) -> int:
        return int(self.tracer.values.static(self, "is converted with int()"))

    def __float__(self) -> float:
        return float(self.tracer.values.static(self, "is converted with float()"))

    def __setitem__(self, index, value) -> None:
        """``x[index] = value``: a node that changes ``x`` in place (``operator.setitem``), or, for a boolean
        mask and a number, ``x.masked_fill_(mask, value)``; the twin writes either as a new array
        (:mod:`parity.port.inplace`)."""
        mask = self.tracer.values.get(index.node) if isinstance(index, torch.fx.Proxy) else None
        if _is_tensor(mask) and mask.dtype == torch.bool:
            if isinstance(value, torch.fx.Proxy):
                self.tracer.refuse(index, "indexes an assignment of a tensor (x[mask] = tensor: the number of "
                                          "elements it selects depends on tensor values)", mask)
            self.tracer.create_proxy("call_method", "masked_fill_", (self, index, value), {})
            return
        self.tracer.create_proxy("call_function", operator.setitem, (self, index, value), {})


class ValueAttribute(torch.fx.proxy.Attribute, ValueProxy):
    """fx's lazy attribute proxy (``x.size`` before the call) with :class:`ValueProxy`'s answers."""


class ExampleValues:
    """Each node's value on the example input, and whether a non-tensor value is a static fact.

    Args:
      tracer: the fx tracer whose nodes these are.
      root: the module traced (a copy of the user's: running it may change buffers).
      inputs: the example value of each placeholder, by ``forward``'s parameter name; ``None`` traces
        without values (every node ``MISSING``).
      where: returns the user's source line being traced, for guards and errors.
    """

    def __init__(self, tracer, root: torch.nn.Module, inputs: dict | None, where) -> None:
        self.tracer, self.root, self.where = tracer, root, where
        self.enabled = inputs is not None
        self.running = False  # True while a node runs on real values
        self._inputs = inputs or {}
        self._values: dict[torch.fx.Node, object] = {}
        self._data: set[torch.fx.Node] = set()  # non-tensor values read from tensor data (.item(), ...)

    def get(self, node: torch.fx.Node):
        return self._values.get(node, MISSING)

    def record(self, node: torch.fx.Node, kind: str, target, args, kwargs) -> None:
        """Runs ``node`` on its inputs' values (fx's ``create_proxy`` calls this for every node)."""
        if not self.enabled:
            return
        inputs = [a.node for a in _proxies((args, kwargs))]
        if any(self.get(n) is MISSING for n in inputs):
            return
        real_args, real_kwargs = torch.fx.node.map_aggregate((args, kwargs), self._value_of)
        self.running = True  # torch code run now is torch's, not the user's: the tracer lets it through
        try:
            value = self._run(kind, target, real_args, real_kwargs)
        except Exception as error:  # noqa: BLE001 - the model's own failure on its example, reported as such
            raise ExampleFailure(self.where()) from error
        finally:
            self.running = False
        if value is MISSING:
            return
        self._values[node] = value
        if (not _holds_tensors(value) and kind in ("call_method", "call_function")
                and self._reads_data(target, inputs)):
            self._data.add(node)

    def _run(self, kind: str, target, real_args, real_kwargs):
        if kind == "placeholder":
            value = self._inputs.get(target, real_args[0] if real_args else MISSING)
        elif kind == "get_attr":
            value = operator.attrgetter(target)(self.root)
        elif kind == "call_module":
            value = self.root.get_submodule(target)(*real_args, **real_kwargs)
        elif kind == "call_method":
            value = getattr(real_args[0], target)(*real_args[1:], **real_kwargs)
        elif kind == "call_function":
            value = target(*real_args, **real_kwargs)
        else:
            value = MISSING
        return value

    def _value_of(self, a):
        return self.get(a.node) if isinstance(a, torch.fx.Proxy) else a

    def _reads_data(self, target, inputs) -> bool:
        for n in inputs:
            if n in self._data:
                return True
            if _is_tensor(self.get(n)) and target not in _METADATA_METHODS and target not in _METADATA_FUNCTIONS:
                return True
        return False

    def depends_on_data(self, node: torch.fx.Node) -> bool:
        """Whether ``node``'s example value is a tensor or was read from one's values (``.item()``, a
        comparison's ``.all()``), not a static fact such as a size."""
        value = self.get(node)
        return value is not MISSING and (_is_tensor(value) or node in self._data)

    def static(self, proxy: torch.fx.Proxy, how: str):
        """The Python value of a static fact, guarded in the graph; ``PortError`` for tensor values."""
        value = self.get(proxy.node)
        if value is MISSING or _is_tensor(value) or proxy.node in self._data:
            self.tracer.refuse(proxy, how, value)
        self.tracer.create_proxy("call_function", guard, (proxy, value, self.where() or "forward"), {})
        return value

    def length(self, proxy: torch.fx.Proxy) -> int:
        """``len(proxy)``: a tensor's first size or a sequence's length, guarded; refused without a value."""
        value = self.get(proxy.node)
        if value is MISSING or proxy.node in self._data or (_is_tensor(value) and value.dim() == 0):
            self.tracer.refuse(proxy, "has its length taken with len()", value)
        if not hasattr(value, "__len__"):  # torch.tensor([size]) asks a traced number for its length
            raise PortError(f"cannot trace: {node_description(proxy.node)} is a number ({value!r}) that torch code "
                            f"takes as a sequence (torch.tensor([...]) of a traced size is not mapped; keep sizes as "
                            f"Python ints, e.g. x.size(2) - y.size(2)). Fallback: {FALLBACK}")
        size = self.tracer.create_proxy("call_function", len, (proxy,), {})
        self.tracer.create_proxy("call_function", guard, (size, len(value), self.where() or "forward"), {})
        return len(value)


def _proxies(tree) -> list[torch.fx.Proxy]:
    found = []
    torch.fx.node.map_aggregate(tree, lambda a: found.append(a) if isinstance(a, torch.fx.Proxy) else None)
    return found
