"""Record a training loop's numbers, step by step, in torch or in JAX: :class:`Recorder`.

The same loop written twice (a torch script and its ``jax_impl`` + ``flax.nnx`` port) records the same
names on both sides; :func:`parity.compare_runs` then reads the two folders and writes the report
``parity run`` writes. ::

    with parity.Recorder("runs/gan-torch", framework="torch", keep_every=100) as rec:
        for i in range(steps):
            ...
            rec.step(i, loss_d=errD, loss_g=errG, netG=netG, netD=netD, optD=optimizerD)

Names. A value's name is its keyword; a container's entries are ``<keyword>.<key>``:

- Python numbers and 0-d tensors/arrays given directly (or in dicts/lists) are *scalars*;
- ``torch.Tensor``, ``jax.Array`` and ``np.ndarray`` are *tensors*;
- a ``torch.nn.Module`` is its ``state_dict()``: ``netG.<key>``;
- a ``flax.nnx.Module`` is its state under torch's ``state_dict`` keys, as
  :func:`parity.convert.to_torch_state_dict` names them: ``netG.<key>``, the same names as torch's;
- dicts, lists and tuples: their entries, names joined with ``"."``;
- a ``torch.optim.Optimizer`` is its ``state_dict()``: ``<name>.state.<param index>.<key>`` (tensors) and
  the scalar ``<name>.lr``, param group 0's learning rate (``<name>.lr.<g>`` for group ``g >= 1``);
- a ``jax_impl.optim`` state is recorded through :func:`optimizer_record`, which writes it in torch's
  ``state_dict`` layout (:func:`parity.convert.optimizer_state_to_torch`), so its names are torch's.

Everything inside a module or an optimizer state counts as a tensor, 0-d entries (``step``,
``num_batches_tracked``) included: the state is kept with the tensors.

Keep policy. Scalars are kept at every step. Tensors are kept at the first recorded step, every step
``i`` with ``i % keep_every == 0``, every step in ``keep_steps`` (e.g. ``range(4290, 4301)`` around a
step a first comparison found divergent), and the last recorded step (written at :meth:`Recorder.close`:
with ``keep_last`` the recorder copies each step's tensors that it does not keep, to have the last).

Files (:mod:`parity.recording` describes them): ``meta.json``, ``scalars.jsonl`` (a line per step,
flushed as the step is recorded) and ``tensors/step-<i>.safetensors`` (written atomically). A recording
interrupted at any point reads back up to its last complete step.
"""

from __future__ import annotations

import datetime
import json
import numbers
import os
import platform
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parity._tree import holds_variables
from parity.files import atomic_write
from parity.recording import FORMAT, META, SCALARS, TENSORS, VERSION, encode_number, tensor_file, tensors_to_bytes

__all__ = ["OptimizerRecord", "Recorder", "optimizer_record", "torch_parameter_order"]


class OptimizerRecord:
    """An optimizer state in torch's ``state_dict`` layout, recorded under torch's names.

    Made by :func:`optimizer_record` from a ``jax_impl.optim`` state; a ``torch.optim.Optimizer`` given
    to :meth:`Recorder.step` is recorded the same way from its own ``state_dict()``.
    """

    def __init__(self, state_dict: Mapping[str, Any]) -> None:
        self.state_dict = state_dict


def optimizer_record(opt_state: Any, params: Any, *, name: str, hyperparameters: Mapping[str, Any] | None = None,
                     param_names: Sequence[str] | None = None, groups: Sequence[Sequence[str]] | None = None,
                     group_hyperparameters: Sequence[Mapping[str, Any]] | None = None) -> OptimizerRecord:
    """A ``jax_impl.optim`` state, to record under the names torch's optimizer ``state_dict()`` gives.

    Args:
      opt_state: the ``jax_impl.optim`` state (``tx.init(params)`` and its successors).
      params: the ``flax.nnx`` model the optimizer trains, or its parameter pytree
        (``nnx.state(model, nnx.Param)``, or its pure dict). Parameters with ``nnx.Variable`` s are
        taken as a pure dict when ``opt_state`` was built on one (as ``jax_impl.train.init_train_state``
        keeps them).
      name: torch's optimizer class name (``"Adam"``, ``"SGD"``, ...).
      hyperparameters: the torch keyword arguments the optimizer was built with (``{"lr": 2e-4,
        "betas": (0.5, 0.999)}``), with a schedule's current value: they fill ``param_groups`` (so
        ``<name>.lr``) and decide which buffers torch keeps.
      param_names: torch's parameter names in torch's ``parameters()`` order (``"0.weight"``, ...): the
        order that numbers torch's state. Default for a model: :func:`torch_parameter_order`, the order in
        which its modules assign their parameters and submodules in ``__init__``, torch's registration order
        for a model written as its torch twin, also after ``nnx.merge`` (a plain parameter pytree has no
        such order: pass the names).
      groups, group_hyperparameters: for ``jax_impl.optim.param_groups``: per torch param group, its
        parameters' torch names in its order, and its keyword arguments.

    Returns:
      An :class:`OptimizerRecord` to pass to :meth:`Recorder.step`.

    Raises:
      ValueError: the model's parameter order cannot be read, or a name is not one of its parameters.
    """
    from flax import nnx

    from parity.convert import grouped_optimizer_state_to_torch, optimizer_state_to_torch

    if isinstance(params, nnx.Module):
        if param_names is None and groups is None:
            param_names = torch_parameter_order(params)
        params = nnx.state(params, nnx.Param)
    if holds_variables(params) and not holds_variables(opt_state):
        params = nnx.to_pure_dict(params)  # the form of a pure-dict state (jax_impl.train.init_train_state's)
    leaves = _leaf_names(params)
    if groups is not None:
        if group_hyperparameters is None or len(group_hyperparameters) != len(groups):
            raise ValueError("groups needs group_hyperparameters: one mapping per group")
        return OptimizerRecord(grouped_optimizer_state_to_torch(
            opt_state, params, name=name, groups=[[_leaf_for(n, leaves) for n in g] for g in groups],
            hyperparameters=list(group_hyperparameters)))
    resolved = None if param_names is None else [_leaf_for(n, leaves) for n in param_names]
    return OptimizerRecord(optimizer_state_to_torch(opt_state, params, name=name, param_names=resolved,
                                                    hyperparameters=hyperparameters))


def torch_parameter_order(model: Any) -> list[str]:
    """The parameters of a ``flax.nnx`` model under torch's names, in torch's ``named_parameters()`` order for a
    model that registers its parameters and submodules as its torch twin does (depth first).

    Each module's own order is, first found:

    - the order a ``jax_impl.nn`` container or RNN keeps for torch (``Sequential``'s and ``ModuleList``'s child
      names, an RNN's ``_all_weights``);
    - the order its ``__init__`` assigned its attributes, when the instance still has it. ``nnx.merge``
      rebuilds a module with its attributes sorted by name (``bias`` before ``weight``): attributes in sorted
      order are taken as possibly rebuilt, and read instead from
    - the order of the ``self.<name> = ...`` assignments in the source of its class's ``__init__`` (with the
      bases' ``__init__`` where it calls ``super().__init__``, and the ``self.<method>(...)`` it calls).

    Raises:
      ValueError: some parameter is not reachable through module attributes, or a module's attributes are in
        sorted order (as ``nnx.merge`` leaves them) and its class's source does not assign them all: pass
        ``param_names`` in torch's ``parameters()`` order.
    """
    from flax import nnx

    order: list[str] = []
    seen: set[int] = set()

    def walk(obj: Any, prefix: str) -> None:
        for key, value in _ordered_items(obj, prefix):
            name = f"{prefix}{key}"
            if isinstance(value, nnx.Param):
                if id(value) not in seen:  # torch lists a shared parameter once, at its first name
                    seen.add(id(value))
                    order.append(name)
            elif _is_container(value):
                walk(value, name + ".")

    walk(model, "")
    expected = [".".join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    if sorted(order) != sorted(expected):
        raise ValueError(f"cannot tell torch's parameter order of {type(model).__name__} from its attributes "
                         f"(found {order}, its parameters are {expected}); pass param_names in torch's "
                         "parameters() order")
    return order


def _is_container(value: Any) -> bool:
    from flax import nnx

    return isinstance(value, (nnx.Module, list, tuple, Mapping)) or type(value).__name__ in ("List", "Dict")


def _ordered_items(obj: Any, prefix: str) -> list[tuple[Any, Any]]:
    """``obj``'s parameters and submodules as ``(attribute, value)`` in torch's registration order."""
    if isinstance(obj, Mapping):
        return list(obj.items())
    if isinstance(obj, (list, tuple)) or type(obj).__name__ == "List":
        return list(enumerate(obj))
    items = [(k, v) for k, v in vars(obj).items() if not k.startswith("_pytree__") and _holds_params(v)]
    if len(items) < 2:
        return items
    names = [k for k, _ in items]
    kept = _kept_order(obj)
    if kept is None and names != sorted(names):
        return items  # assigned by __init__: the instance's own order
    if kept is None:
        kept = _assignment_order(type(obj))
    rank = {name: i for i, name in enumerate(kept)}
    missing = [n for n in names if n not in rank]
    if missing:
        raise ValueError(f"cannot tell torch's parameter order of {prefix or 'the model'} "
                         f"({type(obj).__qualname__}): its attributes {names} are in sorted order, as nnx.merge "
                         f"rebuilds a module, and its class's __init__ does not assign {missing} by name; pass "
                         "param_names in torch's parameters() order")
    return sorted(items, key=lambda item: rank[item[0]])


def _holds_params(value: Any) -> bool:
    """Whether ``value`` is or holds an ``nnx.Param`` (attributes without any have no place in the order)."""
    from flax import nnx

    if isinstance(value, nnx.Param):
        return True
    if isinstance(value, nnx.Module):
        return bool(nnx.to_flat_state(nnx.state(value, nnx.Param)))
    if isinstance(value, Mapping):
        return any(_holds_params(v) for v in value.values())
    if isinstance(value, (list, tuple)) or type(value).__name__ == "List":
        return any(_holds_params(v) for v in value)
    return False


def _kept_order(obj: Any) -> list[str] | None:
    """The child or parameter order a ``jax_impl.nn`` module keeps as torch does (``nnx.merge`` keeps it too):
    a container's child names, an RNN's ``_all_weights`` (per layer and direction, torch's order)."""
    names = getattr(obj, "_names", None)
    if isinstance(names, tuple) and all(isinstance(n, str) for n in names):
        return list(names)
    weights = getattr(obj, "_all_weights", None)
    if isinstance(weights, (list, tuple)) and all(isinstance(w, (list, tuple)) for w in weights):
        return [str(n) for group in weights for n in group]
    return None


def _assignment_order(cls: type) -> list[str]:
    """The attribute names ``cls.__init__`` assigns (``self.<name> = ...``), in source order. A call of
    ``super().__init__`` puts the base's names there, a call of ``self.<method>(...)`` the method's, and a call
    of a function of the class's module given ``self`` first (``_init_affine(self, ...)``) the function's."""
    import ast
    import inspect
    import textwrap

    order: list[str] = []
    visited: set[Any] = set()

    def method(start: int, name: str) -> tuple[type, Any] | None:
        """The first definition of ``name`` in ``cls``'s MRO from its ``start``-th class."""
        for klass in cls.__mro__[start:]:
            if name in vars(klass):
                return klass, vars(klass)[name]
        return None

    def is_name(node: ast.AST, name: str) -> bool:
        return isinstance(node, ast.Name) and node.id == name

    def read(klass: type, func: Any, bound: bool) -> None:
        """Add the names ``func`` assigns on its first argument (``self`` of a method, ``bound``, or the module
        a helper function is given)."""
        if func in visited or not inspect.isfunction(func):
            return
        visited.add(func)
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
        except (OSError, TypeError, SyntaxError):
            return
        definition = tree.body[0]
        if not isinstance(definition, ast.FunctionDef) or not definition.args.args:
            return
        this = definition.args.args[0].arg
        for node in sorted((n for n in ast.walk(definition) if hasattr(n, "lineno")),
                           key=lambda n: (n.lineno, n.col_offset)):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                        if isinstance(element, ast.Attribute) and is_name(element.value, this) and \
                                element.attr not in order:
                            order.append(element.attr)
            elif isinstance(node, ast.Call):
                callee = node.func
                if isinstance(callee, ast.Attribute) and callee.attr == "__init__" and \
                        isinstance(callee.value, ast.Call) and is_name(callee.value.func, "super") and bound:
                    found = method(cls.__mro__.index(klass) + 1, "__init__")
                    if found:
                        read(*found, True)
                elif isinstance(callee, ast.Attribute) and is_name(callee.value, this):
                    found = method(0, callee.attr)
                    if found:
                        read(*found, True)
                elif isinstance(callee, ast.Name) and node.args and is_name(node.args[0], this):
                    helper = getattr(inspect.getmodule(func), callee.id, None)
                    if inspect.isfunction(helper):
                        read(klass, helper, False)

    found = method(0, "__init__")
    if found:
        read(*found, True)
    return order


def _leaf_names(params: Any) -> list[str]:
    import jax

    def key(entry: Any) -> str:
        for attr in ("key", "idx", "name"):
            if hasattr(entry, attr):
                return str(getattr(entry, attr))
        return str(entry)

    return [".".join(key(e) for e in path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def _leaf_for(name: str, leaves: list[str]) -> str:
    """The pytree leaf path of torch's parameter ``name`` (an ``nnx.State`` leaf ends in ``.value``)."""
    for candidate in (name, f"{name}.value"):
        if candidate in leaves:
            return candidate
    raise ValueError(f"{name!r} is not a parameter of the optimizer's params (leaves: {leaves})")


class Recorder:
    """Records a training loop's scalars and tensors in a folder, step by step (see the module docstring).

    Args:
      folder: the recording's folder; created, and it must not hold a recording already.
      framework: which side this is, ``"torch"`` or ``"jax"`` (any short name; the report shows it).
      keep_every: tensors are kept at every step ``i`` with ``i % keep_every == 0`` (and the first and last).
      keep_steps: further steps whose tensors are kept.
      keep_last: keep the last recorded step's tensors (the recorder copies each step's tensors it does not
        keep until the next step; ``False`` saves that copy on a big model).
      meta: JSON-serializable facts about the run (``{"dtype": "float64", "seed": 0}``); its ``dtype`` is
        the recording's, else the first floating value's dtype is.

    Raises:
      FileExistsError: ``folder`` holds a recording already.
      ValueError: bad arguments (``keep_every < 1``, a ``meta`` that is not JSON).
    """

    def __init__(self, folder: str | os.PathLike, framework: str, *, keep_every: int = 100,
                 keep_steps: Iterable[int] = (), keep_last: bool = True, meta: Mapping[str, Any] | None = None
                 ) -> None:
        if not isinstance(framework, str) or not framework:
            raise ValueError(f"framework must be a non-empty string such as 'torch' or 'jax', got {framework!r}")
        if isinstance(keep_every, bool) or not isinstance(keep_every, int) or keep_every < 1:
            raise ValueError(f"keep_every must be an integer >= 1, got {keep_every!r}")
        meta = dict(meta or {})
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"meta must be JSON-serializable: {error}") from None
        self.folder = Path(folder)
        if (self.folder / META).exists():
            raise FileExistsError(f"{self.folder} holds a recording already; record into a new folder")
        (self.folder / TENSORS).mkdir(parents=True, exist_ok=True)
        self.keep_every, self.keep_steps, self.keep_last = keep_every, frozenset(int(s) for s in keep_steps), keep_last
        self._meta: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "framework": framework, "dtype": meta.get("dtype"),
            "keep_every": keep_every, "keep_steps": sorted(self.keep_steps), "versions": _versions(),
            "meta": meta, "names": {}, "status": "recording", "first_step": None, "last_step": None, "steps": 0,
            "tensor_steps": [], "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        }
        self._write_meta()
        self._scalars = open(self.folder / SCALARS, "a", encoding="utf-8")  # noqa: SIM115 - open until close()
        self._pending: tuple[int, dict[str, Any]] | None = None
        self._closed = False

    # -- recording

    def step(self, i: int, **values: Any) -> None:
        """Record step ``i``'s values (see the module docstring for names and kinds).

        Raises:
          ValueError: ``i`` does not increase, two values share a name, or the recorder is closed.
          TypeError: a value of a kind the recorder does not know.
        """
        if self._closed:
            raise ValueError("the recorder is closed")
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"step must be an integer, got {type(i).__name__}")
        i = int(i)
        last = self._meta["last_step"]
        if last is not None and i <= last:
            raise ValueError(f"steps must increase: step {i} after step {last}")
        flat: dict[str, tuple[str, Any]] = {}
        for key, value in values.items():
            _flatten(value, key, flat, in_state=False)
        self._add_names(flat)
        scalars = {k: v for k, (kind, v) in flat.items() if kind == "scalar"}
        tensors = {k: v for k, (kind, v) in flat.items() if kind == "tensor"}
        first = last is None
        if first or i % self.keep_every == 0 or i in self.keep_steps:
            self._write_tensors(i, {k: _to_numpy(v) for k, v in tensors.items()})
            self._pending = None
        elif self.keep_last:
            self._pending = (i, {k: _snapshot(v) for k, v in tensors.items()})
        line = {"step": i, "scalars": {k: encode_number(_scalar(v, k)) for k, v in scalars.items()}}
        self._scalars.write(json.dumps(line, allow_nan=False) + "\n")
        self._scalars.flush()
        self._meta["last_step"] = i
        self._meta["steps"] += 1
        if first:
            self._meta["first_step"] = i

    def close(self, status: str = "complete") -> None:
        """Write the last step's tensors (unless kept already) and the final ``meta.json``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._pending is not None:
                step, tensors = self._pending
                self._write_tensors(step, {k: _to_numpy(v) for k, v in tensors.items()})
                self._pending = None
        finally:
            self._scalars.close()
            self._meta["status"] = status
            self._write_meta()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self.close("complete" if kind is None else f"stopped by {kind.__name__}")

    # -- files

    def _write_tensors(self, step: int, tensors: dict[str, np.ndarray]) -> None:
        if not tensors:
            return
        atomic_write(tensor_file(self.folder, step), tensors_to_bytes(tensors, step))
        self._meta["tensor_steps"].append(step)

    def _write_meta(self) -> None:
        atomic_write(self.folder / META, json.dumps(self._meta, indent=1, allow_nan=False))

    def _add_names(self, flat: dict[str, tuple[str, Any]]) -> None:
        names = self._meta["names"]
        new = False
        for name, (kind, value) in flat.items():
            if name in names:
                continue
            dtype = _dtype_name(value)
            names[name] = {"kind": kind, "shape": list(np.shape(value)) if kind == "tensor" else [], "dtype": dtype}
            if self._meta["dtype"] is None and dtype is not None and dtype.startswith(("float", "bfloat")):
                self._meta["dtype"] = dtype
            new = True
        if new:
            self._write_meta()  # before the step's data: every name on disk is in meta.json


def _versions() -> dict[str, str]:
    from parity import __version__

    out = {"python": platform.python_version(), "numpy": np.__version__, "parity": __version__}
    for module in ("torch", "jax", "flax"):
        if module in sys.modules:
            out[module] = getattr(sys.modules[module], "__version__", "?")
    return out


# -- values


def _is_torch(value: Any, kind: str) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(value, {"tensor": torch.Tensor, "module": torch.nn.Module,
                              "optimizer": torch.optim.Optimizer}[kind])


def _is_nnx_module(value: Any) -> bool:
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(value, nnx.Module)


def _is_array(value: Any) -> bool:
    jax = sys.modules.get("jax")
    return isinstance(value, (np.ndarray, np.generic)) or (jax is not None and isinstance(value, jax.Array))


def _flatten(value: Any, name: str, out: dict[str, tuple[str, Any]], *, in_state: bool) -> None:
    """Add ``value``'s entries to ``out`` as ``name -> (kind, value)``, in the order given."""
    def put(kind: str, key: str, item: Any) -> None:
        if key in out:
            raise ValueError(f"two values are recorded as {key!r}")
        out[key] = (kind, item)

    if value is None:
        return
    if isinstance(value, (bool, numbers.Number)):
        if isinstance(value, complex) or (isinstance(value, np.generic) and value.dtype.kind == "c"):
            raise TypeError(f"{name}: complex scalars are not recorded")
        if in_state:
            put("tensor", name, np.asarray(value))
        else:
            put("scalar", name, value)
        return
    if _is_torch(value, "tensor") or _is_array(value):
        put("scalar" if np.ndim(value) == 0 and not in_state else "tensor", name, value)
        return
    if _is_torch(value, "module"):
        for key, item in value.state_dict().items():
            _flatten(item, f"{name}.{key}", out, in_state=True)
        return
    if _is_torch(value, "optimizer"):
        value = OptimizerRecord(value.state_dict())
    if isinstance(value, OptimizerRecord):
        for index, entry in value.state_dict.get("state", {}).items():
            _flatten(entry, f"{name}.state.{index}", out, in_state=True)
        for g, group in enumerate(value.state_dict.get("param_groups", [])):
            if group.get("lr") is not None and not callable(group["lr"]):
                put("scalar", f"{name}.lr" if g == 0 else f"{name}.lr.{g}", group["lr"])
        return
    if _is_nnx_module(value):
        from parity.convert import module_state

        for key, variable in module_state(value).items():
            _flatten(variable[...], f"{name}.{key}", out, in_state=True)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(item, f"{name}.{key}", out, in_state=in_state)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _flatten(item, f"{name}.{index}", out, in_state=in_state)
        return
    raise TypeError(f"{name}: cannot record a {type(value).__module__}.{type(value).__qualname__} (record numbers, "
                    "tensors/arrays, torch or flax.nnx modules, optimizers, or dicts/lists of them)")


def _scalar(value: Any, name: str) -> float | int:
    if isinstance(value, (bool, int, float)):
        return int(value) if isinstance(value, (bool, int)) else value
    array = _to_numpy(value)
    if array.dtype.kind == "c":
        raise TypeError(f"{name}: complex scalars are not recorded")
    item = array.item()
    return int(item) if isinstance(item, (bool, int)) else float(item)


def _to_numpy(value: Any) -> np.ndarray:
    if _is_torch(value, "tensor"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":  # NumPy has no bfloat16: ml_dtypes' through the bits
            import ml_dtypes
            import torch

            return tensor.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return tensor.resolve_conj().resolve_neg().numpy()
    return np.asarray(value)


def _snapshot(value: Any) -> Any:
    """A copy that later in-place updates do not reach (torch tensors, NumPy arrays); JAX arrays are immutable."""
    if _is_torch(value, "tensor"):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _dtype_name(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return None  # a Python float says nothing about the run's dtype
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    return str(dtype).removeprefix("torch.")
