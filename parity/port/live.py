"""The live twin: the generated source executed as a module, instantiated and loaded with torch's weights.

The live object and a written file come from the same source through the
same loader (:func:`load_twin_class` takes source text or a path), so they
behave identically by construction.
"""

from __future__ import annotations

import hashlib
import linecache
import os
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

import jax_impl.random
from parity.convert.modules import load_torch_state_dict, module_state
from parity.port.codegen import port_source
from parity.port.errors import FALLBACK, PortError
from parity.port.hooks import copy_model
from parity.port.inputs import example_arguments
from parity.port.trace import set_training

__all__ = ["instantiate", "load_twin_class", "port"]

def load_twin_class(source: str | os.PathLike) -> type:
    """The twin class defined by generated source text, or by the file at a path (its ``__all__[0]``).

    The module is named by a hash of its text and registered in ``sys.modules`` (nnx's graph machinery and
    pickling look classes up by module): porting the same model again reuses that module and its class, so
    that repeated ports neither grow ``sys.modules`` nor retrace a jitted step for an equal graph.
    """
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source):
        path = os.fspath(source)
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        filename = path
    else:
        text, filename = source, None
    name = f"parity_port_twin_{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    module = sys.modules.get(name)
    if module is None:
        filename = filename or f"<parity.port {name}>"
        if filename.startswith("<"):  # registered with linecache: tracebacks through the twin show its lines
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        module = types.ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module
        try:
            exec(compile(text, filename, "exec"), module.__dict__)  # noqa: S102 - our own generated source
        except BaseException:
            del sys.modules[name]
            raise
    return getattr(module, module.__all__[0])


def _check_dtypes(state_dict) -> None:
    if not jax.config.jax_enable_x64 and any(t.dtype == torch.float64 for t in state_dict.values()):
        raise ValueError("the torch model is float64 but jax's x64 mode is off (its float64 arrays would be "
                         "float32): jax.config.update('jax_enable_x64', True) or parity.strict_numerics(x64=True)")


def instantiate(cls: type, torch_module: torch.nn.Module) -> nnx.Module:
    """``cls()`` holding ``torch_module``'s weights, buffers, dtypes and train/eval modes.

    The constructor runs abstractly (``nnx.eval_shape``: no initial weights
    are drawn, and torch's global stream in ``jax_impl.random`` is left where
    it was); every variable then takes the torch tensor's dtype and
    ``parity.convert.load_torch_state_dict`` loads the values, strictly.
    """
    state_dict = torch_module.state_dict()
    _check_dtypes(state_dict)
    rng_state = jax_impl.random.get_rng_state()
    try:
        twin = nnx.eval_shape(cls)
    finally:
        jax_impl.random.set_rng_state(rng_state)
    variables = module_state(twin)
    if len(jax.tree.leaves(nnx.state(twin))) != len({id(var) for var in variables.values()}):
        raise RuntimeError(f"{cls.__name__} holds state that is no torch parameter or buffer (e.g. RNG keys)")
    for key, var in variables.items():
        dtype = state_dict[key].dtype if key in state_dict else None
        np_dtype = np.dtype(str(dtype).removeprefix("torch.")) if dtype is not None else var.get_value().dtype
        # int64 counters are int32 without jax's x64 mode (the values are the same); asked for, jax warns
        np_dtype = jax.dtypes.canonicalize_dtype(np_dtype)
        var.set_value(jnp.zeros(var.get_value().shape, np_dtype))
    load_torch_state_dict(twin, state_dict)
    for name, module in torch_module.named_modules():
        target = twin
        for part in name.split(".") if name else ():
            target = getattr(target, part)
        target.training = module.training
    return twin


def port(torch_module: torch.nn.Module, example_input=None) -> nnx.Module:
    """The ``jax_impl.nn`` twin of ``torch_module``: same function, same ``state_dict`` keys, its weights.

    The model is traced with ``torch.fx`` in train and in eval mode (on copies), the twin's
    source generated (:func:`parity.port.port_source` returns the same text),
    executed, instantiated and loaded with the torch module's parameters and
    buffers, in the torch module's dtypes and train/eval modes.

    Args:
      torch_module: the torch model.
      example_input: optional tensor, or tuple of ``forward``'s positional
        arguments. The trace runs on it, so that Python code on sizes,
        devices and lengths ports (:mod:`parity.port.trace`); the twin is
        then run on it abstractly (``jax.eval_shape``, eval mode) and its
        output shapes are checked against torch's eval-mode forward.

    Returns:
      The twin, an ``nnx.Module`` (a ``jax_impl.nn.Module``).

    Raises:
      PortError: fx cannot trace the model, or a node has no JAX mapping; the
        message names the node, its target and source line, and the fallback.
      ValueError: a float64 model while jax's x64 mode is off.
    """
    twin = instantiate(load_twin_class(port_source(torch_module, example_input)), torch_module)
    if example_input is not None:
        _check_shapes(torch_module, twin, example_input)
    return twin


def _check_shapes(torch_module, twin, example_input) -> None:
    reference = set_training(copy_model(torch_module), False)
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        expected = reference(*args)
    example = example_arguments(example_input)
    graphdef, state = nnx.split(twin)

    def forward(state, traced):
        # A merged copy: switching it to eval mode leaves the twin's own modes alone.
        return example.call(nnx.merge(graphdef, state).eval(), traced)

    got = jax.eval_shape(forward, state, example.traced)
    expected_shapes = [tuple(t.shape) for t in jax.tree.leaves(expected, is_leaf=torch.is_tensor)]
    got_shapes = [tuple(a.shape) for a in jax.tree.leaves(got)]
    if expected_shapes != got_shapes:
        raise PortError(f"the twin of {type(torch_module).__name__} returns shapes {got_shapes} where torch returns "
                        f"{expected_shapes}. Fallback: {FALLBACK}")
