"""torch's own ModuleInfo database (``torch.testing._internal.common_modules.module_db``) run against jax_impl.nn.

One test per ModuleInfo (named by its class). Its samples come from its
``module_inputs_func`` (CPU, ``requires_grad=True``) in float32 and float64 (those
of its ``dtypes``), in training mode and, where torch says the modes differ, in
eval mode. With ``PARITY_MODULE_DB_ALL=1`` every sample runs in every
combination; by default each class runs a spread of its samples, every
combination at least once (``_selected``: each sample costs an XLA compilation,
and the database holds over 4000). For each sample:

- the torch module is built from the sample's ``constructor_input`` and cast
  with ``.to(dtype)``, as torch's ``TestModule`` does; its jax_impl namesake
  gets the same arguments (tensors as arrays, torch layers as their jax_impl
  twins, ``torch.nn.functional`` callables as jax_impl's), is cast the same
  way and loads torch's ``state_dict`` (strict: the keys must be torch's);
- a lazy module (``LazyConv2d``, ...) is first called once on both sides after
  the same seed: the materialised parameters must be torch's init numbers,
  bit for bit;
- both run ``forward_input``; outputs, the gradients of
  ``sum(w * out)`` (fixed weights ``w``) with respect to every input torch
  asks a gradient for and every parameter, and the state after the forward
  (BatchNorm's running statistics, ``num_batches_tracked``) are compared.

Where torch's forward raises, jax_impl must raise the same exception type.

torch's own skips and decorators in the database are not applied: on CPU in
float32/float64 they cover only MPS/CUDA/XPU devices, channels-last memory
format, gradcheck's finite differences and second derivatives, none of which
this comparison runs. Every sample here is a CPU sample.

A class jax_impl lacks fails its test, except the names in ``_PENDING``.

Tolerances (``max |ours - torch| / max |torch|`` per array): ``_TOL64`` and
``_TOL32``, with the measured worst cases. A float32 array beyond ``_TOL32``
still passes within ``parity.floor.FLOOR_FACTOR`` times torch's own float32
error against its float64 run of the same sample (the verdict ``check_port``
and ``parity run`` give float32).
"""

from __future__ import annotations

import copy
import os
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

pytest.importorskip("expecttest")  # torch.testing._internal imports it (the `test` extra installs it)

from torch.testing._internal.common_modules import module_db  # noqa: E402

# Importing torch's test utilities freezes torch.backends' global flags (torch.backends.disable_global_flags(),
# a rule of torch's own test suite). Collection imports this file in every pytest process, and the other
# tests set those flags through parity.strict_numerics, so they are unfrozen again.
torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True

import jax_impl.nn as jnn  # noqa: E402
import jax_impl.nn.functional as jF  # noqa: E402
from parity.convert import load_torch_state_dict, module_state  # noqa: E402
from parity.floor import FLOOR_FACTOR  # noqa: E402
from parity.port.layers import layer_source  # noqa: E402
from tests.nn.modules._torch_pair import rel_err, seed_both  # noqa: E402

pytestmark = pytest.mark.slow

# Classes of the database that jax_impl.nn is still getting; each one's test is an expected failure until
# it lands (strict: a class that lands and passes turns its entry into an XPASS failure, and its name
# leaves this set). Every class of torch 2.13's module_db is in jax_impl.nn now.
_PENDING: set[str] = set()

# Samples using a torch feature jax_impl documents as unsupported (docs/support.md): jax_impl must raise
# NotImplementedError for them (or compute them, where it falls back to a path it has).
_UNSUPPORTED = {
    # torch's chunked path (a LinearCrossEntropyOptions object); jax_impl has the reference path only.
    "LinearCrossEntropyLoss": lambda sample: sample.constructor_input.kwargs.get("options") is not None,
}

# Relative-error bars per dtype (max |ours - torch| / max |torch| per array).
# float64: the sides differ in the order of float64 sums (reductions, matrix products, convolutions) and
# in libm against XLA's transcendental functions; measured worst 2.3e-13 (Tanh's input gradient on a
# scalar sample: 1 - tanh(x)^2 at |x| ~ 4 cancels the forward's 1-ULP difference), typically <= 2e-15.
# float32: the same at float32's rounding; measured worst 6.7e-6 (MultiheadAttention's input gradient:
# softmax and matrix products summed in another order), every other class <= 2.2e-6.
_TOL64 = 1e-12
_TOL32 = 1e-5


# PARITY_MODULE_DB_ALL=1 runs every sample in every dtype and mode (tens of minutes of CPU);
# otherwise each class runs _PER_CLASS of its samples (see _selected).
_EXHAUSTIVE = os.environ.get("PARITY_MODULE_DB_ALL") == "1"
_PER_CLASS = 2


def _tolerance(dtype) -> float:
    return _TOL64 if dtype == torch.float64 else _TOL32


# --- arguments: torch -> jax_impl ---------------------------------------------------------------

def _to_jax(value):
    """A torch constructor/forward argument as jax_impl takes it (nested tuples/lists/dicts kept)."""
    if isinstance(value, torch.Tensor):
        return jnp.asarray(value.detach().numpy())
    if isinstance(value, torch.nn.Module):
        return eval(layer_source(value, "arg"), {"nn": jnn})  # its jax_impl twin; weights come with the parent's
    if callable(value) and getattr(torch.nn.functional, getattr(value, "__name__", ""), None) is value:
        return getattr(jF, value.__name__)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_jax(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_jax(v) for k, v in value.items()}
    return value


def _fresh_torch(value):
    """A copy of a forward argument for torch: new leaves, so in-place modules cannot touch the sample."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, (tuple, list)):
        return type(value)(_fresh_torch(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh_torch(v) for k, v in value.items()}
    return value


def _double(value):
    """A forward argument for torch's float64 reference run: floating tensors in float64, the rest as given."""
    if isinstance(value, torch.Tensor):
        cast = value.detach().double() if value.is_floating_point() else value.detach()
        return cast.clone().requires_grad_(value.requires_grad)
    if isinstance(value, (tuple, list)):
        return type(value)(_double(v) for v in value)
    if isinstance(value, dict):
        return {k: _double(v) for k, v in value.items()}
    return value


def _leaves(tree) -> list:
    """Tensors/arrays of a nested output in order (``None`` entries dropped)."""
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves(tree[k])]
    return [] if tree is None else [tree]


def _cast(module, np_dtype) -> None:
    """torch's ``module.to(dtype)`` on the floating variables (on the host: no per-shape compilation)."""
    for var in module_state(module).values():
        value = np.asarray(var.get_value())
        if np.issubdtype(value.dtype, np.floating):
            var.set_value(jnp.asarray(value.astype(np_dtype)))


def _weights(shape, dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return np.cos(np.arange(n, dtype=np.float64)).reshape(shape).astype(dtype)


# --- one sample ---------------------------------------------------------------------------------

def _torch_run(module, args, kwargs, np_dtype):
    args, kwargs = _fresh_torch(args), _fresh_torch(kwargs)
    module.zero_grad(set_to_none=True)
    out = module(*args, **kwargs)
    outs = _leaves(out)
    loss = None
    for o in outs:
        if o.is_floating_point() and o.requires_grad:
            w = torch.from_numpy(_weights(tuple(o.shape), np_dtype))
            term = (o * w).sum()  # a NaN output makes the sum NaN, not its gradient (w)
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    inputs = [t for t in jax.tree.leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    input_grads = [np.zeros(t.shape, np_dtype) if t.grad is None else t.grad.numpy() for t in inputs]
    param_grads = {name: None if p.grad is None else p.grad.numpy() for name, p in module.named_parameters()}
    return [o.detach().numpy() for o in outs], input_grads, param_grads


def _jax_run(module, args, kwargs, torch_args, torch_kwargs, np_dtype):
    """Forward once (state advances once) and the VJP w.r.t. the inputs torch differentiates and the params."""
    # Both argument trees have one structure (_to_jax keeps it): torch's leaves say which to differentiate.
    torch_leaves = jax.tree.leaves((torch_args, torch_kwargs))
    diff_at = [i for i, t in enumerate(torch_leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
    flat_jax, treedef = jax.tree.flatten((args, kwargs))
    assert len(flat_jax) == len(torch_leaves), "argument structure differs from torch's"
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def run(params, diff_inputs):
        flat = list(flat_jax)
        for i, x in zip(diff_at, diff_inputs):
            flat[i] = x
        a, k = jax.tree.unflatten(treedef, flat)
        m = nnx.merge(graphdef, params, rest, copy=True)
        out = m(*a, **k)
        return out, nnx.split(m, nnx.Param, ...)[2]

    def cotangent(o):
        if o is None:
            return None
        if not jnp.issubdtype(o.dtype, jnp.floating):
            return np.zeros(o.shape, jax.dtypes.float0)
        return jnp.asarray(_weights(o.shape, np_dtype))

    def forward_backward(params, diff_inputs):
        out, vjp, new_rest = jax.vjp(run, params, diff_inputs, has_aux=True)
        return out, new_rest, vjp(jax.tree.map(cotangent, out, is_leaf=lambda x: x is None))

    # One compilation per sample: eager dispatch would compile every primitive of every new shape.
    out, new_rest, (param_grads, input_grads) = jax.jit(forward_backward)(params, [flat_jax[i] for i in diff_at])
    nnx.update(module, new_rest)
    flat_params = {".".join(map(str, k)): v[...] for k, v in nnx.to_flat_state(param_grads)}
    return [np.asarray(o) for o in _leaves(out)], [np.asarray(g) for g in input_grads], flat_params


def _compare_sample(mi, sample, dtype, training, failures: list, worst: dict) -> None:
    np_dtype = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
    tol = _tolerance(dtype)
    ctor, fwd = sample.constructor_input, sample.forward_input
    name = mi.module_cls.__name__
    where = f"{name} {str(dtype)[6:]} {'train' if training else 'eval'} sample {sample.desc!r}"

    reference = {}  # float32 samples: torch's own run in float64 on the same weights and inputs, when needed

    def record(kind, err, floor=None):
        key = f"{str(dtype)[6:]} {kind}"
        worst[key] = max(worst.get(key, 0.0), err)
        if err <= tol:
            return
        # float32 beyond the bar still passes within FLOOR_FACTOR times torch's own float32 distance from its
        # float64 run for that array: parity.floor's verdict, as check_port and parity run give it.
        own = floor() if floor is not None and dtype == torch.float32 else None
        if own is not None and err <= FLOOR_FACTOR * own:
            worst[f"float32 {kind} by torch's floor"] = max(worst.get(f"float32 {kind} by torch's floor", 0.0), err)
            return
        failures.append(f"{where}: {kind} rel err {err:.3g} > {tol:g}"
                        + (f" and > {FLOOR_FACTOR:g} x torch's own float32 error {own:.3g}" if own is not None else ""))

    def torch64(part, index):
        """``lambda: rel err of torch's float32 array against its float64 run`` for output/grad ``index``."""
        def own():
            if not reference:
                reference["run"] = _torch_run(t_mod64, _double(fwd.args), _double(fwd.kwargs), np.float64)
            theirs32 = {"out": t_outs, "in": t_in_grads, "param": t_param_grads}[part][index]
            theirs64 = {"out": 0, "in": 1, "param": 2}[part]
            exact = reference["run"][theirs64][index]
            return None if theirs32 is None or exact is None else rel_err(theirs32.astype(np.float64), exact)
        return own

    torch.manual_seed(0)
    t_mod = mi.module_cls(*ctor.args, **ctor.kwargs).to(dtype)
    t_mod.train(training)
    kwargs = {k: v for k, v in ctor.kwargs.items() if k not in ("device", "dtype")}
    j_mod = getattr(jnn, name)(*_to_jax(ctor.args), **_to_jax(kwargs))
    _cast(j_mod, np_dtype)
    j_mod.train(training)
    j_args, j_kwargs = _to_jax(fwd.args), _to_jax(fwd.kwargs)

    if mi.is_lazy:
        # The first call materialises; after the same seed both draw torch's init numbers.
        seed_both(1)
        with torch.no_grad():
            t_mod(*_fresh_torch(fwd.args), **_fresh_torch(fwd.kwargs))
        j_mod(*j_args, **j_kwargs)
        ours = {k: np.asarray(v[...]) for k, v in module_state(j_mod).items()}
        for key, value in t_mod.state_dict().items():
            if key not in ours or not np.array_equal(ours[key], value.numpy()):
                failures.append(f"{where}: lazy init of {key} differs from torch's")

    load_torch_state_dict(j_mod, t_mod.state_dict())
    t_mod64 = copy.deepcopy(t_mod).double() if dtype == torch.float32 else None
    try:
        t_outs, t_in_grads, t_param_grads = _torch_run(t_mod, fwd.args, fwd.kwargs, np_dtype)
    except Exception as torch_error:  # noqa: BLE001 - torch rejects the sample: jax_impl must too
        try:
            _jax_run(j_mod, j_args, j_kwargs, fwd.args, fwd.kwargs, np_dtype)
        except type(torch_error):
            return
        failures.append(f"{where}: torch raises {type(torch_error).__name__}: {torch_error}; jax_impl does not")
        return
    j_outs, j_in_grads, j_param_grads = _jax_run(j_mod, j_args, j_kwargs, fwd.args, fwd.kwargs, np_dtype)

    if len(j_outs) != len(t_outs):
        failures.append(f"{where}: {len(j_outs)} outputs, torch has {len(t_outs)}")
        return
    for i, (mine, theirs) in enumerate(zip(j_outs, t_outs)):
        if mine.shape != theirs.shape:
            failures.append(f"{where}: output {i} shape {mine.shape}, torch's {theirs.shape}")
        elif np.issubdtype(theirs.dtype, np.floating):
            if mine.dtype != theirs.dtype:
                failures.append(f"{where}: output {i} dtype {mine.dtype}, torch's {theirs.dtype}")
            record("forward", rel_err(mine, theirs), torch64("out", i))
        elif not np.array_equal(mine, theirs):
            failures.append(f"{where}: integer/bool output {i} differs from torch's")
    for i, (mine, theirs) in enumerate(zip(j_in_grads, t_in_grads)):
        record("grad input", rel_err(mine, theirs), torch64("in", i))
    for key, theirs in t_param_grads.items():
        mine = j_param_grads.get(key)
        if mine is None:
            failures.append(f"{where}: no gradient for parameter {key}")
        else:
            record("grad param", rel_err(mine, np.zeros_like(mine) if theirs is None else theirs),
                   torch64("param", key))
    ours = {k: np.asarray(v[...]) for k, v in module_state(j_mod).items()}
    for key, value in t_mod.state_dict().items():
        theirs = value.numpy()
        if np.issubdtype(theirs.dtype, np.floating):
            record("state", rel_err(ours[key], theirs))
        elif not np.array_equal(ours[key], theirs):
            failures.append(f"{where}: state {key} = {ours[key]}, torch's {theirs}")


def _params():
    for mi in module_db:
        name = mi.module_cls.__name__
        marks = [pytest.mark.xfail(strict=True, reason=f"{name} is not in jax_impl.nn yet")] if name in _PENDING else []
        yield pytest.param(mi, id=name, marks=marks)


def _selected(mi):
    """``(dtype, training, sample)`` triples to run: all of them with PARITY_MODULE_DB_ALL=1, else a spread.

    The spread takes ``_PER_CLASS`` samples evenly over the database's list and runs them in turn in
    each (dtype, mode) combination, so every class runs in both dtypes (and both modes where they
    differ) within the slow tier's time budget: each sample costs one XLA compilation of its
    forward and backward (about 0.05-1 s of CPU), and the database holds over 4000 of them.
    """
    combos = [(dtype, training) for dtype in (torch.float64, torch.float32) if dtype in mi.dtypes
              for training in ([True, False] if mi.train_and_eval_differ else [True])]
    runs = []
    for c, (dtype, training) in enumerate(combos):
        torch.manual_seed(0)  # the samples' random tensors
        samples = [s for s in mi.module_inputs_func(mi, device="cpu", dtype=dtype, requires_grad=True,
                                                    training=training) if s.forward_input is not None]
        if _EXHAUSTIVE:
            runs += [(dtype, training, s) for s in samples]
            continue
        n = max(_PER_CLASS, len(combos))
        picks = sorted({round(i * (len(samples) - 1) / max(n - 1, 1)) for i in range(n)})
        runs += [(dtype, training, samples[i]) for j, i in enumerate(picks) if j % len(combos) == c]
    return runs


@pytest.mark.parametrize("mi", list(_params()))
def test_module_db_sample_matches_torch(mi):
    name = mi.module_cls.__name__
    if not hasattr(jnn, name):
        pytest.fail(f"jax_impl.nn has no {name} (torch.nn.{name} is in torch's module_db)")
    failures: list[str] = []
    worst: dict[str, float] = {}
    for dtype, training, sample in _selected(mi):
        with jax.enable_x64(dtype == torch.float64):
            try:
                _compare_sample(mi, sample, dtype, training, failures, worst)
            except NotImplementedError:
                if not _UNSUPPORTED.get(name, lambda _: False)(sample):
                    failures.append(f"{name} {str(dtype)[6:]} {'train' if training else 'eval'} sample "
                                    f"{sample.desc!r}: {traceback.format_exc(limit=-3)}")
            except Exception:  # noqa: BLE001 - every failing sample is listed, not only the first
                failures.append(f"{name} {str(dtype)[6:]} {'train' if training else 'eval'} sample "
                                f"{sample.desc!r}: {traceback.format_exc(limit=-3)}")
    print(f"{name}: worst relative errors {worst}")
    assert not failures, f"{len(failures)} failing samples:\n" + "\n".join(failures[:20])
