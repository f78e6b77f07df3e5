"""In-place tensor operations in a traced graph: which ones the twin can write as plain (out-of-place) ones.

JAX arrays are immutable, so the twin computes ``x.div_(k)`` as ``x / k``.
That is torch's result wherever the mutated value is not read again under
its old name. It is also torch's result where it is read again but nothing
else sees the tensor: a tensor the forward made itself (a factory such as
``new_empty``, a draw, an arithmetic result) and took no view of before the
mutation (a ``torch.nn`` layer's output is one, unless the layer may return
its input). There the later reads are rewired to the mutation's result
(:func:`follow_in_place`), as timm's stochastic depth needs::

    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    random_tensor.div_(keep_prob)        # a statement: its result is unused
    return x * random_tensor             # torch reads the divided tensor

``x[i] = y`` is such a mutation (``operator.setitem``; the twin writes
``x.at[i].set(y)``), as in a decoder's ``outputs[t] = output``. A mutated
input, parameter or buffer, a tensor that may be a view of another (or the
same object as another: ``Identity``, dropout in eval mode) and a tensor
viewed before the mutation keep the refusal (:func:`check_in_place`).
"""

from __future__ import annotations

import operator

import torch
import torch.fx

__all__ = ["check_in_place", "follow_in_place", "mutates_input"]

_INPLACE_FUNCTIONS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, torch.relu_, operator.setitem}

# Calls whose result is a new tensor, never an alias of an argument.
_FRESH_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.pow, operator.matmul,
    operator.neg, torch.add, torch.sub, torch.mul, torch.div, torch.matmul, torch.zeros, torch.ones, torch.empty,
    torch.full, torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.rand, torch.randn,
    torch.rand_like, torch.randn_like, torch.randint, torch.bernoulli, torch.normal, torch.arange, torch.clone,
}
_FRESH_METHODS = {"new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "clone", "add", "sub", "mul",
                  "div", "pow", "matmul"}
# Calls whose result may be a view of their first argument, or that argument itself.
_VIEW_METHODS = {"view", "reshape", "expand", "expand_as", "view_as", "reshape_as", "flatten", "unflatten", "permute",
                 "transpose", "swapaxes", "t", "contiguous", "squeeze", "unsqueeze", "narrow", "select", "unfold",
                 "split", "chunk", "unbind", "diagonal", "as_strided", "detach", "float", "double", "half",
                 "bfloat16", "to", "type", "type_as", "cpu", "cuda", "movedim", "moveaxis"}
_VIEW_FUNCTIONS = {operator.getitem, getattr, torch.flatten, torch.reshape, torch.transpose, torch.permute, torch.squeeze,
                   torch.unsqueeze, torch.narrow, torch.select, torch.split, torch.chunk, torch.unbind, torch.t,
                   torch.detach, torch.swapaxes, torch.movedim, torch.diagonal}
_PASS_THROUGH_LAYERS = (torch.nn.Identity, torch.nn.Flatten, torch.nn.Unflatten, torch.nn.Dropout, torch.nn.Dropout1d,
                        torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)
def mutates_input(node: torch.fx.Node, root: torch.nn.Module) -> bool:
    """Whether ``node`` changes its first argument in place (``x.add_(y)``, ``x += y``, ``inplace=True``)."""
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    if node.op == "call_function":
        return node.target in _INPLACE_FUNCTIONS or node.kwargs.get("inplace") is True
    if node.op == "call_module":
        return getattr(root.get_submodule(node.target), "inplace", False) is True
    return False


def _fresh(node: torch.fx.Node, root: torch.nn.Module) -> bool:
    """Whether ``node``'s value is a tensor of the forward's own that nothing else refers to: a new tensor, the
    same tensor after an in-place op, or a view or cast (``.to(device)``) of a new tensor nothing else uses."""
    if (node.op == "call_function" and node.target in _FRESH_FUNCTIONS) or (
            node.op == "call_method" and node.target in _FRESH_METHODS):
        return True
    if node.op == "call_module":  # a torch.nn layer's output is a new tensor, unless it may be its input
        return not _may_alias_input(node, root) and not mutates_input(node, root)
    source = node.args[0] if node.args else None
    if not isinstance(source, torch.fx.Node):
        return False
    if mutates_input(node, root):
        return _fresh(source, root)
    return _may_alias_input(node, root) and len(source.users) == 1 and _fresh(source, root)


def _source(node: torch.fx.Node, root: torch.nn.Module) -> torch.fx.Node | None:
    source = node.args[0] if node.args else None
    return source if isinstance(source, torch.fx.Node) and mutates_input(node, root) else None


def follow_in_place(graph: torch.fx.Graph, root: torch.nn.Module) -> None:
    """Rewire the reads after an in-place op on a fresh tensor (see the module docstring) to its result."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        source = _source(node, root)
        if source is None or not _fresh(source, root):
            continue
        if _views_before(source, node, order, root):
            continue
        for user in list(source.users):
            if order[user] > order[node]:
                user.replace_input_with(source, node)


def check_in_place(node: torch.fx.Node, root: torch.nn.Module, order: dict) -> str | None:
    """Why the twin cannot write ``node`` as its out-of-place form, or ``None``: the value it mutates is read
    again afterwards (after :func:`follow_in_place`, only where that read may see torch's tensor change)."""
    source = _source(node, root)
    if source is None:
        return None
    later = sorted((u for u in source.users if order[u] > order[node]), key=order.get)
    if later:
        return (f"it modifies {source.name!r} in place and {later[0].name!r} reads it afterwards "
                "(JAX arrays are immutable; make the op out-of-place in torch, e.g. inplace=False)")
    for base in [source, *_bases(source, root)]:
        for view in [base, *_views_before(base, node, order, root)]:
            readers = sorted((u for u in view.users if order[u] > order[node]), key=order.get)
            if view is not source and readers:
                return (f"it modifies {source.name!r} in place and {readers[0].name!r} reads {view.name!r}, which "
                        f"may share its memory, afterwards (torch's tensor sees the change; JAX arrays are "
                        f"immutable: make the op out-of-place in torch)")
    return None


def _bases(node: torch.fx.Node, root: torch.nn.Module) -> list[torch.fx.Node]:
    """The tensors ``node`` may be a view of (or the very object of): its input through views, slices,
    casts that may return their input, and layers that may (``Identity``, dropout, ``Flatten``)."""
    bases = []
    while _may_alias_input(node, root) and node.args and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
        bases.append(node)
    return bases


def _may_alias_input(node: torch.fx.Node, root: torch.nn.Module) -> bool:
    if node.op == "call_method":
        return node.target in _VIEW_METHODS or mutates_input(node, root)
    if node.op == "call_function":
        return node.target in _VIEW_FUNCTIONS or mutates_input(node, root)
    if node.op == "call_module":
        return isinstance(root.get_submodule(node.target), _PASS_THROUGH_LAYERS)
    return False


def _views_before(source: torch.fx.Node, node: torch.fx.Node, order: dict,
                  root: torch.nn.Module) -> list[torch.fx.Node]:
    """The values made from ``source`` before ``node`` that may share its memory (slices, ``view``,
    ``transpose``, a cast or a layer that may return its input, an in-place op's result), and those made from
    them in turn."""
    found, todo = [], [source]
    while todo:
        for user in todo.pop().users:
            if order[user] < order[node] and _may_alias_input(user, root) and user not in found:
                found.append(user)
                todo.append(user)
    return found
