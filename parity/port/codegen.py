"""The twin's Python source: an ``nnx.Module`` subclass with torch's names, ``__init__`` and ``__call__``.

``__init__`` rebuilds the torch module's tree: each ``torch.nn`` layer as its
``jax_impl.nn`` namesake (:mod:`parity.port.layers`), ``Sequential`` /
``ModuleList`` as theirs, and each user module as a small holder class of the
same name that keeps its children, parameters and buffers under torch's
attribute names, so ``nnx`` state paths are torch's ``state_dict`` keys
(``layer1.0.conv1.weight``). The holders have no ``__call__``: fx inlined
their ``forward`` into the traced graph, which becomes the top class's
``__call__``, one statement per node.
"""

from __future__ import annotations

import inspect
import keyword
import re

import torch
import torch.fx

from parity.port.errors import FALLBACK, PortError
from parity.port.hooks import normalization_source
from parity.port.inplace import check_in_place, follow_in_place
from parity.port.layers import layer_class, layer_source
from parity.port.mapping import render_call_function, render_call_method
from parity.port.render import Renderer
from jax_impl.tensor_ops import HELPERS
from parity.port.trace import Traces, is_torch_leaf, trace
from parity.port.values import guard

__all__ = ["generate", "port_source"]

_INDENT = "    "
_GLOBAL_NAMES = {"F", "jnp", "math", "nn", "nnx", "OrderedDict", "self", *HELPERS}


def _is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _module_ref(root: torch.nn.Module, qualname: str, base: str = "self") -> str:
    """``self.layer1[0].conv1`` for ``"layer1.0.conv1"``: indices into Sequential / ModuleList, else attributes."""
    text, module = base, root
    for part in qualname.split(".") if qualname else ():
        # The twin's top class is an nn.Module even when the torch model is a Sequential: no indexing there.
        if isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList)) and part.isdigit() and module is not root:
            text += f"[{part}]"
        elif _is_identifier(part):
            text += f".{part}"
        else:
            text = f"getattr({text}, {part!r})"
        module = getattr(module, part)
    return text


class _ClassNames:
    """Unique class names for the generated module (user classes may share a name, or shadow an import)."""

    def __init__(self) -> None:
        self.taken: set[str] = set(_GLOBAL_NAMES)
        self.by_type: dict[type, str] = {}

    def new(self, name: str) -> str:
        base = name if _is_identifier(name) else "Module"
        candidate, i = base, 1
        while candidate in self.taken:
            i += 1
            candidate = f"{base}_{i}"
        self.taken.add(candidate)
        return candidate

    def holder(self, cls: type) -> str:
        if cls not in self.by_type:
            self.by_type[cls] = self.new(cls.__name__)
        return self.by_type[cls]


def _array_source(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"jnp.zeros({tuple(tensor.shape)!r}, jnp.{dtype})"


def _own_state(module: torch.nn.Module, path: str) -> list[tuple[str, str]]:
    """``(name, source)`` of the module's own parameters and buffers (values come from the state dict)."""
    entries = []
    for name, param in module._parameters.items():
        if param is not None:
            entries.append((name, f"nnx.Param({_array_source(param)})"))
    for name, buffer in module._buffers.items():
        if buffer is None:
            continue
        if name in module._non_persistent_buffers_set:
            raise PortError(f"cannot port {path + '.' if path else ''}{name}: a non-persistent buffer is not in the "
                            f"state_dict, so its value cannot be loaded. Fallback: {FALLBACK}")
        entries.append((name, f"nn.Buffer({_array_source(buffer)})"))
    return entries


def _indent(text: str, level: int = 1) -> str:
    return "\n".join(_INDENT * level + line if line else line for line in text.splitlines())


class _InitWriter:
    """The constructor source of every submodule, and the holder classes it needs."""

    def __init__(self, names: _ClassNames) -> None:
        self.names = names
        self.holders: dict[str, str] = {}

    def members(self, module: torch.nn.Module, path: str) -> list[tuple[str, str]]:
        """``(attribute, source)`` of ``module``'s parameters, buffers and children, in torch's order."""
        entries = _own_state(module, path)
        for name, child in module.named_children():
            entries.append((name, self.module(child, f"{path}.{name}" if path else name)))
        return entries

    def module(self, module: torch.nn.Module, path: str) -> str:
        if is_torch_leaf(module):
            return normalization_source(module, layer_source(module, path))
        # Every child name, a layer registered twice included (named_children() lists it once): the container
        # keeps torch's length, and _ties below makes the later name the first one's module.
        children = [(name, child) for name, child in module._modules.items() if child is not None]
        if isinstance(module, torch.nn.Sequential):
            if [name for name, _ in children] == [str(i) for i in range(len(children))]:
                return self._call("nn.Sequential", [self.module(c, f"{path}.{n}") for n, c in children])
            pairs = [f"({n!r}, {self.module(c, f'{path}.{n}')})" for n, c in children]
            return "nn.Sequential(OrderedDict(" + self._call("", pairs, brackets="[]") + "))"
        if isinstance(module, torch.nn.ModuleList):
            items = [self.module(c, f"{path}.{n}") for n, c in children]
            return "nn.ModuleList(" + self._call("", items, brackets="[]") + ")"
        return self._holder(module, path)

    @staticmethod
    def _call(function: str, items: list[str], brackets: str = "()") -> str:
        if not items:
            return f"{function}{brackets}"
        inner = ",\n".join(_indent(item) for item in items)
        return f"{function}{brackets[0]}\n{inner},\n{brackets[1]}"

    def _holder(self, module: torch.nn.Module, path: str) -> str:
        name = self.names.holder(type(module))
        if name not in self.holders:
            self.holders[name] = (
                f"class {name}(nn.Module):\n"
                f'    """torch\'s ``{type(module).__qualname__}``: its submodules, parameters and buffers under '
                "torch's names\n    (its forward is inlined into the traced ``__call__`` above it)."
                '"""\n\n'
                "    def __init__(self, **members):\n"
                "        for name, member in members.items():\n"
                "            setattr(self, name, member)\n"
            )
        items = [f"{n}={src}" if _is_identifier(n) else f"**{{{n!r}: {src}}}" for n, src in self.members(module, path)]
        return self._call(name, items)


def _member_ref(root: torch.nn.Module, key: str) -> str:
    """The twin's expression for the member at dotted ``key`` (a submodule, parameter or buffer)."""
    owner, _, name = key.rpartition(".")
    base = _module_ref(root, owner)
    return f"{base}.{name}" if _is_identifier(name) and not (owner and name.isdigit()) else f"getattr({base}, {name!r})"


def _ties(root: torch.nn.Module) -> list[str]:
    """Statements that share the twin's members as torch shares them: a parameter, buffer or submodule
    registered under several names (tied weights, ``self.head.weight = self.embed.weight``) becomes one nnx
    variable or module under each name, so its gradient sums every use, as torch's does.

    The first name in torch's registration order (the one ``named_parameters()`` keeps) is built; each later
    name is set to it. The holders and layers built above still make their own (unused) initial value for
    it, which the state dict's value replaces.
    """
    lines: list[str] = []
    first: dict[int, str] = {}

    def tie(key: str, kept: str) -> None:
        owner, _, name = key.rpartition(".")
        lines.append(f"setattr({_module_ref(root, owner)}, {name!r}, {_member_ref(root, kept)})")

    def visit(module: torch.nn.Module, path: str) -> None:
        members = [*module._parameters.items(), *module._buffers.items()]
        for name, value in [*members, *module._modules.items()]:
            if value is None:
                continue
            key = f"{path}.{name}" if path else name
            if id(value) in first:
                tie(key, first[id(value)])
                continue
            first[id(value)] = key
            if isinstance(value, torch.nn.Module):  # jax_impl's layers keep torch's names for their members too
                visit(value, key)

    visit(root, "")
    return lines


def _get_attr(node: torch.fx.Node, root: torch.nn.Module, r: Renderer) -> str:
    owner_path, _, name = node.target.rpartition(".")
    try:
        owner = root.get_submodule(owner_path)
    except AttributeError:
        owner = None
    if owner is None or (name not in owner._parameters and name not in owner._buffers):
        raise r.fail("it reads a tensor that is neither a parameter nor a buffer (a tensor constant); "
                     "register it with register_buffer")
    return f"{_module_ref(root, owner_path)}.{name}[...]"


def _statement(node: torch.fx.Node, r: Renderer) -> str | None:
    """The twin's check for a node that only checks: a guard on a static fact, or a baked argument."""
    if node.op != "call_function":
        return None
    if node.target is guard:
        value, expected, where = node.args
        where = where.replace("{", "{{").replace("}", "}}")
        message = (f"{where}: the example input the twin was traced with gave {expected!r}, this input gives "
                   f"{{{r(value)}!r}}; port the model again with an example input of this shape")
        return f"if {r(value)} != {r(expected)}: raise ValueError(f{message!r})"
    if node.target is torch._assert:
        return f"if not {r(node.args[0])}: raise ValueError({r(node.args[1])})"
    if node.target is torch.fx._symbolic_trace._assert_is_none:
        return f"if {r(node.args[0])} is not None: raise ValueError({r(node.args[1])})"
    return None


def _body(graph: torch.fx.Graph, root: torch.nn.Module, mode: bool) -> tuple[list[str], list[str], set[str]]:
    """``(parameters, statements, helpers)`` of ``__call__`` for one traced graph."""
    r = Renderer(mode)
    follow_in_place(graph, root)
    order = {node: i for i, node in enumerate(graph.nodes)}
    taken = {node.name for node in graph.nodes}
    params, lines = [], []
    for node in graph.nodes:
        r.node = node
        if node.op == "placeholder":
            if node.target.startswith("*"):
                raise r.fail("variadic forward arguments (*args, **kwargs) are not supported")
            if "specialised" in node.meta:  # baked into the trace: the twin keeps torch's name and checks it
                name, value = node.meta["specialised"]
                if name not in taken:
                    r.rename(node, name)
                params.append(f"{r.var(node)}={r(value)}")
                continue
            name = r.var(node)
            params.append(f"{name}={r(node.args[0])}" if node.args else name)
            continue
        if node.op == "output":
            lines.append(f"return {r(node.args[0])}")
            continue
        statement = _statement(node, r)
        if statement is not None:
            lines.append(statement)
            continue
        refusal = check_in_place(node, root, order)
        if refusal is not None:
            raise r.fail(refusal)
        if node.op == "call_module":
            module = root.get_submodule(node.target)
            if ".parametrizations." in f".{node.target}":
                owner, _, rest = f".{node.target}".partition(".parametrizations.")
                raise r.fail(f"it reads {owner[1:] or 'the model'}'s parametrized {rest.split('.')[0]} outside the "
                             "layer's own call; the port reproduces a parametrization inside its layer's call only")
            if layer_class(module) is None:
                raise r.fail(f"jax_impl.nn has no {type(module).__name__}")
            expr = r.call(_module_ref(root, node.target), node.args, node.kwargs)
        elif node.op == "get_attr":
            expr = _get_attr(node, root, r)
        elif node.op == "call_method":
            expr = render_call_method(r, node.target, node.args, node.kwargs)
        elif node.op == "call_function":
            expr = render_call_function(r, node.target, node.args, node.kwargs)
        else:  # pragma: no cover - fx has no other node kinds
            raise r.fail(f"unknown fx node kind {node.op!r}")
        lines.append(f"{r.var(node)} = {expr}")
    return params, lines, r.helpers


def generate(module: torch.nn.Module, traces: Traces) -> str:
    """The twin's module source for ``module`` and its train/eval graphs."""
    names = _ClassNames()
    class_name = names.new(type(module).__name__)
    train_params, train_lines, helpers = _body(traces.train, module, True)
    eval_params, eval_lines, eval_helpers = _body(traces.eval, module, False)
    helpers |= eval_helpers
    if train_params != eval_params:
        raise PortError(f"cannot port {type(module).__name__}: its forward's arguments differ between train and "
                        f"eval mode. Fallback: {FALLBACK}")
    if train_lines == eval_lines:
        call = train_lines
    else:  # fx baked `self.training` into Python branches: one body per mode
        call = ["if self.training:", *(_INDENT + line for line in train_lines),
                "else:", *(_INDENT + line for line in eval_lines)]

    writer = _InitWriter(names)
    init = []
    for name, source in writer.members(module, ""):
        init.append(f"self.{name} = {source}" if _is_identifier(name) else f"setattr(self, {name!r}, {source})")
    init += _ties(module)
    torch_name = f"{type(module).__module__}.{type(module).__qualname__}"
    cls = (
        f"class {class_name}(nn.Module):\n"
        f'    """JAX twin of torch\'s ``{torch_name}``: same attributes, same ``state_dict`` keys."""\n\n'
        "    def __init__(self):\n" + (_indent("\n".join(init), 2) if init else "        pass") + "\n\n"
        f"    def __call__(self, {', '.join(['self', *train_params][1:])}):\n" + _indent("\n".join(call), 2) + "\n"
    )
    body = "\n\n".join([*(inspect.getsource(HELPERS[h]) for h in sorted(helpers)), cls, *writer.holders.values()])
    return _header(class_name, torch_name, body) + body


def _uses(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", text) is not None


def _header(class_name: str, torch_name: str, body: str) -> str:
    imports = []
    if _uses("math", body):
        imports.append("import math")
    if _uses("OrderedDict", body):
        imports.append("from collections import OrderedDict")
    if imports:
        imports[-1] += "\n"  # the standard library's group, then jax's
    if _uses("jnp", body):
        imports.append("import jax.numpy as jnp")
    if _uses("nnx", body):
        imports.append("from flax import nnx")
    imports.append("import jax_impl.nn as nn")
    if _uses("F", body):
        imports.append("from jax_impl.nn import functional as F")
    if _uses("staged", body):
        imports.append("from jax_impl.random import staged")
    return (
        f'"""JAX twin of ``{torch_name}``, written by ``parity port`` from a torch.fx trace.\n\n'
        "Attribute names are torch's, so the twin's state paths are the torch model's ``state_dict`` keys;\n"
        "``parity.convert.load_torch_state_dict(twin, torch_model.state_dict())`` loads its weights.\n"
        '"""\n\n' + "\n".join(imports) + f"\n\n__all__ = [{class_name!r}]\n\n\n"
    )


def port_source(module: torch.nn.Module, example_input=None) -> str:
    """The Python source of ``module``'s ``jax_impl`` twin (a module defining one ``nnx.Module`` class).

    Args:
      module: the torch model; traced in train and in eval mode, on copies.
      example_input: a tensor, or a tuple of ``forward``'s positional arguments. With it, Python code on
        sizes, devices and lengths ports (each decision guarded in the twin); see :mod:`parity.port.trace`.

    Raises:
      PortError: the model cannot be traced, or a node or layer has no JAX mapping.
    """
    return generate(module, trace(module, example_input))
