"""Layer-by-layer views of a torch model and its ``jax_impl`` twin: ``compare_models`` and ``summary``.

Both run the two models once on the same input and record every submodule's
output under torch's dotted module name (``layer1.0.conv1``): the torch side
with forward hooks, the JAX side by wrapping ``__call__`` of each
``jax_impl.nn`` submodule for the duration of one eager (un-jitted) call. A
module called several times (a shared ``relu``) is recorded once per call, as
``relu``, ``relu#1``, ... in call order on both sides.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import torch
from flax import nnx

from jax_impl.nn import channels_last_eval
from parity.convert.modules import module_state
from parity.import_path import import_object

__all__ = ["LayerRecord", "ModelComparison", "build_models", "check_same_keys", "compare_models", "example_input",
           "import_object", "input_shape", "summary"]


@dataclasses.dataclass(frozen=True)
class LayerRecord:
    """One submodule call on both sides."""

    name: str
    kind: str
    torch_shape: tuple[int, ...] | None
    jax_shape: tuple[int, ...] | None
    torch_params: int
    jax_params: int
    max_abs_err: float = math.nan
    max_rel_err: float = math.nan
    ok: bool = True


@dataclasses.dataclass(frozen=True)
class ModelComparison:
    """Every layer's output side by side; ``first_divergence`` names the first layer beyond tolerance."""

    layers: list[LayerRecord]
    rtol: float
    atol: float

    @property
    def first_divergence(self) -> LayerRecord | None:
        return next((r for r in self.layers if not r.ok), None)

    @property
    def ok(self) -> bool:
        return self.first_divergence is None

    def __str__(self) -> str:
        head = f"{'layer':<28} {'type':<18} {'torch shape':<20} {'jax shape':<20} {'max abs':>10} {'max rel':>10}"
        lines = [head, "-" * len(head)]
        for r in self.layers:
            mark = "" if r.ok else "  <-- diverges" if r is self.first_divergence else "  !"
            lines.append(
                f"{r.name:<28} {r.kind:<18} {_shape(r.torch_shape):<20} {_shape(r.jax_shape):<20} "
                f"{r.max_abs_err:>10.3g} {r.max_rel_err:>10.3g}{mark}"
            )
        first = self.first_divergence
        lines.append(f"first divergence: {first.name}" if first else f"all {len(self.layers)} layers within "
                     f"rtol={self.rtol:g}, atol={self.atol:g}")
        return "\n".join(lines)


def _shape(shape) -> str:
    return "-" if shape is None else str(list(shape))


def _first_array(out) -> Any:
    """A module's output, or the first array of a tuple output (``return_indices`` pools)."""
    return out[0] if isinstance(out, (tuple, list)) else out


def _record_torch(model: torch.nn.Module, x: torch.Tensor) -> tuple[dict[str, np.ndarray], dict[str, str], Any]:
    outputs: dict[str, np.ndarray] = {}
    kinds: dict[str, str] = {}
    counts: dict[str, int] = {}
    handles = []

    def hook(name):
        def fn(module, args, out):
            n = counts.get(name, 0)
            counts[name] = n + 1
            key = name if n == 0 else f"{name}#{n}"
            outputs[key] = _first_array(out).detach().cpu().numpy().copy()
            kinds[key] = type(module).__name__

        return fn

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            final = model(x)
    finally:
        for h in handles:
            h.remove()
    return outputs, kinds, final.detach().cpu().numpy()


@contextlib.contextmanager
def _recording(model: nnx.Module, outputs: dict[str, Any], kinds: dict[str, str], record=np.asarray) -> Iterator[None]:
    names = {id(m): ".".join(map(str, path)) for path, m in nnx.iter_modules(model) if path}
    counts: dict[str, int] = {}
    patched: dict[type, Any] = {}
    active: set[int] = set()  # a subclass's wrapper calling its patched base records once
    for path, m in nnx.iter_modules(model):
        cls = type(m)
        if path and cls not in patched:
            patched[cls] = cls.__dict__.get("__call__")
            original = cls.__call__

            def wrapper(self, *args, __original=original, **kwargs):
                if id(self) in active:
                    return __original(self, *args, **kwargs)
                active.add(id(self))
                try:
                    out = __original(self, *args, **kwargs)
                finally:
                    active.discard(id(self))
                name = names.get(id(self))
                if name is not None:
                    n = counts.get(name, 0)
                    counts[name] = n + 1
                    key = name if n == 0 else f"{name}#{n}"
                    outputs[key] = record(_first_array(out))
                    kinds[key] = type(self).__name__
                return out

            cls.__call__ = wrapper
    try:
        yield
    finally:
        for cls, original in patched.items():
            if original is None:
                del cls.__call__
            else:
                cls.__call__ = original


def _params_by_module(torch_model: torch.nn.Module, jax_model: nnx.Module) -> tuple[dict, dict]:
    t = {name: sum(p.numel() for p in m.parameters(recurse=False)) for name, m in torch_model.named_modules()}
    j: dict[str, int] = {}
    for key, var in module_state(jax_model).items():
        if isinstance(var, nnx.Param):
            owner = key.rpartition(".")[0]
            j[owner] = j.get(owner, 0) + int(np.prod(var[...].shape))
    return t, j


def _run_both(torch_model, jax_model, inputs, train: bool, *, shapes_only: bool = False):
    """Both models' per-layer outputs; with ``shapes_only`` the JAX side's are ``ShapeDtypeStruct``s.

    The JAX model runs eagerly, one compiled kernel per new operation and
    shape; ``shapes_only`` traces it under ``jax.eval_shape`` instead, which
    goes through the same code and compiles nothing.
    """
    x = np.asarray(inputs)
    torch_model.train(train)
    jax_model.train(train)
    t_out, t_kind, t_final = _record_torch(torch_model, torch.from_numpy(np.array(x)))
    j_out: dict[str, Any] = {}
    j_kind: dict[str, str] = {}
    # Every submodule's output is recorded, so the model runs module by module (the channels-last
    # eval blocks of jax_impl.models skip their submodules' calls).
    if shapes_only:
        graphdef, state = nnx.split(jax_model)

        def probe(state, x):
            model = nnx.merge(graphdef, state)
            with _recording(model, j_out, j_kind, _abstract), channels_last_eval(False):
                return model(x)

        j_final = jax.eval_shape(probe, state, jax.ShapeDtypeStruct(x.shape, x.dtype))
    else:
        with _recording(jax_model, j_out, j_kind), channels_last_eval(False):
            j_final = np.asarray(jax_model(jax.numpy.asarray(x)))
    return t_out, t_kind, t_final, j_out, j_kind, j_final


def _abstract(array) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(array.shape, array.dtype)


def compare_models(torch_model: torch.nn.Module, jax_model: nnx.Module, inputs, *, train: bool = False,
                   rtol: float = 1e-5, atol: float = 1e-6) -> ModelComparison:
    """Run both models on ``inputs`` and compare every layer's output (and the final output).

    Args:
      torch_model: the reference ``torch.nn.Module``.
      jax_model: its ``jax_impl`` twin (same module names), e.g. after
        ``parity.convert.load_torch_state_dict``.
      inputs: one input batch (array-like, NCHW).
      train: run both in training mode (BatchNorm batch statistics; note this
        updates both models' running statistics, as a torch forward does).
      rtol, atol: a layer is ``ok`` when ``|jax - torch| <= atol + rtol * max|torch|``.

    Returns:
      A :class:`ModelComparison`; ``str()`` of it is a table, its
      ``first_divergence`` the first layer (in torch's call order) beyond tolerance.
    """
    t_out, t_kind, t_final, j_out, j_kind, j_final = _run_both(torch_model, jax_model, inputs, train)
    t_params, j_params = _params_by_module(torch_model, jax_model)
    t_out["(output)"], j_out["(output)"] = t_final, j_final
    t_kind["(output)"] = j_kind["(output)"] = type(torch_model).__name__
    records = []
    for name in list(t_out) + [n for n in j_out if n not in t_out]:
        a, b = t_out.get(name), j_out.get(name)
        base = name.split("#")[0]
        rec = dict(name=name, kind=t_kind.get(name, j_kind.get(name, "?")),
                   torch_shape=None if a is None else tuple(a.shape), jax_shape=None if b is None else tuple(b.shape),
                   torch_params=t_params.get(base, 0), jax_params=j_params.get(base, 0))
        if a is None or b is None or a.shape != b.shape:
            records.append(LayerRecord(**rec, ok=False))
            continue
        diff = np.abs(b.astype(np.float64) - a.astype(np.float64))
        scale = float(np.abs(a).max()) if a.size else 0.0
        abs_err = float(diff.max()) if diff.size else 0.0
        rel_err = abs_err / scale if scale > 0 else abs_err
        ok = bool(abs_err <= atol + rtol * scale) and np.array_equal(np.isnan(a), np.isnan(b))
        records.append(LayerRecord(**rec, max_abs_err=abs_err, max_rel_err=rel_err, ok=ok))
    return ModelComparison(records, rtol, atol)


def summary(torch_model: torch.nn.Module, jax_model: nnx.Module, input_shape, *, dtype=np.float32) -> str:
    """torchsummary-style table: each layer's output shape and parameter count in torch and JAX, side by side.

    A ``!`` marks a layer whose shapes or parameter counts differ. Runs the
    torch model once in eval mode on zeros of ``input_shape`` (batch included)
    and traces the JAX one on the same shape (``jax.eval_shape``: every layer's
    code runs, nothing is compiled).
    """
    x = np.zeros(tuple(input_shape), dtype)
    t_out, t_kind, _, j_out, _, _ = _run_both(torch_model, jax_model, x, train=False, shapes_only=True)
    t_params, j_params = _params_by_module(torch_model, jax_model)
    head = f"{'layer':<28} {'type':<18} {'torch output':<20} {'jax output':<20} {'torch #':>10} {'jax #':>10}"
    lines = [head, "=" * len(head)]
    for name in list(t_out) + [n for n in j_out if n not in t_out]:
        base = name.split("#")[0]
        a, b = t_out.get(name), j_out.get(name)
        ts, js = None if a is None else a.shape, None if b is None else b.shape
        tp, jp = (t_params.get(base, 0), j_params.get(base, 0)) if "#" not in name else (0, 0)
        mark = "" if ts == js and tp == jp else "  !"
        lines.append(f"{name:<28} {t_kind.get(name, '?'):<18} {_shape(ts):<20} {_shape(js):<20} {tp:>10,} {jp:>10,}{mark}")
    t_total = sum(p.numel() for p in torch_model.parameters())
    # a shared (tied) parameter once, as torch's parameters() counts it
    unique = {id(v): v for v in module_state(jax_model).values() if isinstance(v, nnx.Param)}
    j_total = sum(int(np.prod(v[...].shape)) for v in unique.values())
    t_train = sum(p.numel() for p in torch_model.parameters() if p.requires_grad)
    lines += ["=" * len(head), f"Total params: torch {t_total:,}, jax {j_total:,}{'' if t_total == j_total else '  !'}",
              f"Trainable params: torch {t_train:,}, jax {j_total:,}"]
    return "\n".join(lines)


def build_models(model_config, *, seed: int = 0,
                 example_input: torch.Tensor | None = None) -> tuple[torch.nn.Module, nnx.Module]:
    """Both models of a config's ``model`` section, the JAX one holding exactly the torch one's weights.

    ``torch_ref.models.<name>(**kwargs)`` is built after ``torch.manual_seed(seed)``;
    ``jax_impl.models.<name>(**kwargs)`` is then loaded with its state dict, so
    both sides start identical (the init-from-torch contract of every parity run).
    With ``jax: auto`` the JAX model is ``parity.port`` of the torch model; an
    ``example_input`` (a batch of one sample: :func:`example_input`) lets the
    port check the twin's output shapes against torch's on it.
    """
    import jax_impl.models as jm
    import torch_ref.models as tm
    from parity.convert.modules import load_torch_state_dict

    if getattr(model_config, "by_import_path", False):
        return _build_user_models(model_config, seed, example_input)
    kwargs = model_config.resolved_kwargs()
    torch.manual_seed(seed)
    torch_model = getattr(tm, model_config.name)(**kwargs)
    if getattr(model_config, "init", "copy") == "seed":
        return torch_model, _own_init(lambda: getattr(jm, model_config.name)(**kwargs), seed)

    def build() -> nnx.Module:
        return getattr(jm, model_config.name)(**kwargs, rngs=nnx.Rngs(seed))

    # The JAX init's draws are all overwritten by torch's weights, so the model is built
    # abstractly (shapes only: no jax.random kernel compiled per parameter shape) and filled
    # from the state dict. A model holding variables torch does not have (RNG state) gets a
    # real init, so those keep their seeded values.
    jax_model = nnx.eval_shape(build)
    state = nnx.state(jax_model)
    if len(jax.tree.leaves(state)) == len({id(v) for v in module_state(jax_model).values()}):
        nnx.update(jax_model, jax.tree.map(lambda s: jax.numpy.asarray(np.zeros(s.shape, s.dtype)), state))
    else:
        jax_model = build()
    load_torch_state_dict(jax_model, torch_model.state_dict())
    return torch_model, jax_model


def _build_user_models(model_config, seed: int, example=None) -> tuple[torch.nn.Module, nnx.Module]:
    """The user's torch model (built after ``torch.manual_seed(seed)``) and JAX twin holding its weights."""
    from parity.config import ConfigError
    from parity.convert.modules import load_torch_state_dict

    kwargs = model_config.resolved_kwargs()
    torch_factory = import_object(model_config.torch, "model.torch")
    jax_factory = None if model_config.ported else import_object(model_config.jax, "model.jax")
    torch.manual_seed(seed)
    torch_model = torch_factory(**kwargs)
    if not isinstance(torch_model, torch.nn.Module):
        raise ConfigError(f"{model_config.torch}(**kwargs) returned a {type(torch_model).__name__}, not a "
                          "torch.nn.Module", path="model.torch")
    if model_config.ported:
        return torch_model, _ported_twin(torch_model, example)
    seeded = model_config.init == "seed"
    jax_model = _own_init(lambda: jax_factory(**kwargs), seed) if seeded else jax_factory(**kwargs)
    if not isinstance(jax_model, nnx.Module):
        raise ConfigError(f"{model_config.jax}(**kwargs) returned a {type(jax_model).__name__}, not a flax.nnx "
                          "Module (a jax_impl.nn model)", path="model.jax")
    try:
        if seeded:
            check_same_keys(torch_model, jax_model)
        else:
            load_torch_state_dict(jax_model, torch_model.state_dict())
    except RuntimeError as error:
        raise ConfigError(f"the JAX model cannot hold the torch model's weights: {error}", path="model.jax") from None
    return torch_model, jax_model


def _ported_twin(torch_model: torch.nn.Module, example) -> nnx.Module:
    """``parity.port`` of the torch model as built (the runner casts both models to ``train.dtype`` afterwards)."""
    from parity import port
    from parity.config import ConfigError

    try:
        return port.port(torch_model, example)
    except port.PortError as error:
        raise ConfigError(f"jax: auto cannot port the torch model: {error}", path="model.jax") from None
    except Exception as error:  # noqa: BLE001 - the torch forward on the sample is the user's code
        if example is None:
            raise
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise ConfigError(f"the torch model fails on a sample of shape {tuple(example.shape[1:])} of the data: "
                          f"{first}", path="model") from None


def _own_init(build, seed: int) -> nnx.Module:
    """The JAX model built after ``jax_impl.random.manual_seed(seed)``: ``jax_impl.nn`` layers without ``rngs``
    draw torch's numbers from that stream, so its own init equals torch's after ``torch.manual_seed(seed)``."""
    from jax_impl import random as jax_random

    jax_random.manual_seed(seed)
    return build()


def check_same_keys(torch_model: torch.nn.Module, jax_model: nnx.Module) -> None:
    """``RuntimeError`` naming the state-dict keys and shapes one model has and the other lacks."""
    ours = {k: tuple(v[...].shape) for k, v in module_state(jax_model).items()}
    theirs = {k: tuple(v.shape) for k, v in torch_model.state_dict().items()}
    if ours != theirs:
        missing = sorted(set(theirs) - set(ours))
        unexpected = sorted(set(ours) - set(theirs))
        shapes = sorted(k for k in set(ours) & set(theirs) if ours[k] != theirs[k])
        raise RuntimeError(f"missing keys {missing[:5]}, unexpected keys {unexpected[:5]}, "
                           f"shape mismatches {shapes[:5]}")


def example_input(config) -> torch.Tensor | None:
    """A batch of one sample as the model sees it, for ``jax: auto``'s check of the port; ``None`` when the
    data has transforms (the model sees their output, which the runner's own probe checks).

    A user data set gives its first training sample (token ids stay integers, floats become float32, the
    dtype the models are built in); a built-in one zeros of :func:`input_shape`.
    """
    if config.data.transforms(True):
        return None
    dataset = config.data.dataset
    if dataset.by_import_path:
        x, _ = import_object(dataset.arrays, "data.dataset.arrays")(train=True, **dataset.kwargs)
        sample = torch.as_tensor(np.asarray(x[:1]))
        return sample.float() if sample.is_floating_point() else sample
    return torch.zeros((1, *input_shape(config)))


def input_shape(config) -> tuple[int, ...]:
    """One sample's shape for a config's data set: digits ``(1, 8, 8)``, synthetic its ``image_shape``."""
    dataset = config.data.dataset
    if dataset.by_import_path:
        x, _ = import_object(dataset.arrays, "data.dataset.arrays")(train=True, **dataset.kwargs)
        return tuple(np.shape(x)[1:])
    if dataset.name == "digits":
        return (1, 8, 8)
    return tuple(dataset.resolved_kwargs()["image_shape"])
