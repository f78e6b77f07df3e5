"""The machinery every torch optimizer here is built from.

A torch optimizer step is (1) scalar hyper-maths in Python float64 on the
host (bias corrections, step sizes, ``1 - beta``), rounded to the parameter
dtype only when a kernel receives them, and (2) a sequence of elementwise
kernels per parameter. :func:`torch_optimizer` assembles both halves into a
:class:`TorchTransformation` (optax's ``init``/``update`` plus ``step``):

- ``host_scalars(step, hyper, scalar_state)`` runs in Python with torch's
  exact float64 expressions. Eagerly it is called directly. Under
  ``jax.jit`` with constant hyperparameters its results for the first steps
  are tabulated when the step is traced and read on device (a
  ``jax.pure_callback`` would stall the whole update every step);
  past the table, with schedules, or with a scalar state the table did not
  predict, it runs through ``jax.pure_callback``. Its inputs are the
  step number, the hyperparameters (floats, or schedules evaluated at the
  current count) and any float32 scalar state torch keeps as tensors (NAdam's
  ``mu_product``, ASGD's ``eta`` and ``mu``).
- ``update_leaf(ops, c, step, grad, param, *state)`` is one parameter's
  kernel sequence, written with :class:`~jax_impl.kernels.TorchOps`. It
  returns the new parameter (computed in place, as torch does) and the new
  per-parameter state. The whole tree's step is compiled with ``jax.jit`` so
  that the rounding emulation holds with and without an outer ``jit``.

Besides ``init``/``update``, the returned transformation has a ``step(grads,
state, params) -> (params, state)`` field that returns torch's new
parameters directly. ``update`` returns ``new_params - params``;
``optax.apply_updates`` adds that back, which reproduces torch's parameter
bit for bit except where the subtraction is inexact (a parameter crossing
zero or changing by more than a factor of two in one step). Use ``step`` for
exact parity.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from jax_impl.kernels import TorchOps, runtime_zero
from jax_impl.optim import _flat_update as flat_update
from jax_impl.optim._sqrt import get_sqrt_mode, get_sqrt_table, torch_sqrt

__all__ = [
    "Hyperparameter",
    "TorchTransformation",
    "fixed_horizon",
    "torch_optimizer",
    "is_host_schedule",
    "host_schedule",
    "check_torch_only_flags",
]

Hyperparameter = float | Callable[[Any], Any]

_HORIZON: list[int | None] = [None]  # fixed_horizon's steps while a step is traced inside it


@contextlib.contextmanager
def fixed_horizon(steps: int) -> Iterator[None]:
    """Steps traced inside this block serve at most ``steps`` optimizer steps, and compile no host callback.

    Under ``jax.jit`` an optimizer reads its host scalars (torch's float64
    bias corrections and scheduled learning rates) from a table of the first
    steps and falls back to a ``jax.pure_callback`` past it. A compiled step
    that holds a host callback cannot be kept in JAX's persistent
    compilation cache. Inside this block the table covers at least the
    counts ``0 .. steps - 1`` (``steps`` up to 32768; beyond that the
    callback stays) and the callback is left out: a count past the table,
    or a float32 scalar state (NAdam's ``mu_product``, ASGD's ``eta`` and
    ``mu``) other than the one the table predicts from the initial state,
    gives NaN scalars, so such a step turns the parameters NaN instead of
    running on wrong numbers. Read when a step is traced: a function traced
    inside the block keeps its table when called later, and one jax traced
    before (it caches traces per function) keeps its callback.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    previous = _HORIZON[0]
    _HORIZON[0] = steps
    try:
        yield
    finally:
        _HORIZON[0] = previous


def is_host_schedule(value: Any) -> bool:
    """Whether ``value`` is a schedule evaluated on the host in Python float64 (``schedule(k: int) -> float``),
    marked by a true ``is_host_schedule`` attribute as jax_impl's LR schedulers are. Any other callable is
    traced with the step count as optax does."""
    return callable(value) and bool(getattr(value, "is_host_schedule", False))


class host_schedule:  # noqa: N801 - used like a decorator/function
    """Marks ``fn(count: int) -> float`` to be evaluated on the host in Python float64.

    torch computes learning rates (and scheduled momenta/betas) as Python
    floats and rounds them only inside each kernel; a host schedule makes the
    optimizer do the same under ``jax.jit`` (through ``jax.pure_callback``),
    so ``lr=host_schedule(lambda k: 0.1 * 0.95**k)`` reproduces torch's
    ``LambdaLR(opt, lambda k: 0.95**k)`` bit for bit. ``count`` is the number
    of optimizer steps already taken (torch's ``last_epoch`` when the
    scheduler is stepped after every ``optimizer.step()``).
    """

    is_host_schedule = True

    def __init__(self, fn: Callable[[int], float]) -> None:
        self.fn = fn

    def __call__(self, count: Any) -> float:
        return float(self.fn(int(count)))

    def __repr__(self) -> str:
        return f"host_schedule({self.fn!r})"


class TorchTransformation(NamedTuple):
    """An optax gradient transformation with torch's exact in-place ``step``.

    ``init`` and ``update`` follow optax's ``GradientTransformationExtraArgs``
    protocol, so the transformation goes wherever optax's do
    (``nnx.Optimizer(model, tx, wrt=nnx.Param)``, ``optax.chain``); ``step``
    is the third field, so ``_replace``, pickling (of picklable functions)
    and ``jax.tree_util`` keep it.

    Attributes:
      init: ``params -> state``.
      update: ``(grads, state, params, **extra_args) -> (new_params - params, new_state)``;
        ``params`` is required, because torch updates parameters in place.
      step: the exact update, ``(grads, state, params) -> (new_params, new_state)``
        computed as torch's ``optimizer.step()`` computes them. ``update``
        followed by ``optax.apply_updates`` adds ``new_params - params`` back
        to ``params``, which is inexact where that difference is (a
        parameter crossing zero or changing by more than a factor of two).
    """

    init: optax.TransformInitFn
    update: optax.TransformUpdateExtraArgsFn
    step: Callable[[Any, Any, Any], tuple[Any, Any]]


TorchTransformation.step.__doc__ = (
    "The exact update: ``(grads, state, params) -> (new_params, new_state)`` computed as torch does, "
    "where ``update`` + ``optax.apply_updates`` is inexact when ``new - old`` is."
)


_UNREPRODUCED_FLAGS = {
    "capturable": "torch's capturable path keeps the step count and the bias corrections as device tensors "
                  "(tensor arithmetic in the parameter dtype instead of Python float64 host scalars)",
    "differentiable": "torch's differentiable path records the step in autograd, with its own operation order",
}


def check_torch_only_flags(**flags: Any) -> None:
    """Rejects torch execution-path flags whose arithmetic is not reproduced (capturable, differentiable, ...).

    ``foreach`` is not one of them: each optimizer reproduces torch's
    multi-tensor CPU path itself and passes only the other flags here.
    """
    for name, value in flags.items():
        if value:
            reason = _UNREPRODUCED_FLAGS.get(name, f"torch's {name} path changes the operation order")
            raise NotImplementedError(
                f"{name}={value!r} is not supported: only torch's single-tensor and foreach (multi-tensor) "
                f"CPU paths are reproduced; {reason}"
            )


def _scalar_dtype() -> np.dtype:
    """The dtype host scalars travel in: float64 when JAX has x64, else float32."""
    return np.dtype(np.float64) if jax.config.jax_enable_x64 else np.dtype(np.float32)


def torch_optimizer(
    *,
    state_cls: type,
    hyper: Mapping[str, Hyperparameter],
    host_scalars: Callable[[int, dict[str, float], dict[str, np.ndarray]], tuple[dict[str, float], dict[str, Any]]],
    init_leaf: Callable[[jax.Array], tuple[jax.Array, ...]],
    update_leaf: Callable[..., tuple[jax.Array, ...]],
    leaf_state_names: Sequence[str],
    scalar_state: Mapping[str, float] | None = None,
    step_dependent: bool = True,
    converges: bool = False,
    elementwise: bool = False,
) -> TorchTransformation:
    """Builds an optimizer from its host scalar maths and its per-parameter kernel.

    Args:
      state_cls: a NamedTuple with fields ``count``, then ``leaf_state_names``
        (each a tree like params), then the ``scalar_state`` names.
      hyper: hyperparameters that may be schedules (``lr``, ``momentum``, betas...).
      host_scalars: ``(step, hyper_values, scalar_state) -> (scalars, new_scalar_state)``,
        torch's float64 scalar maths; ``step`` is torch's 1-based step.
      init_leaf: per-parameter initial state, one array per ``leaf_state_names``.
      update_leaf: ``(ops, c, step, grad, param, *leaf_state) -> (new_param, *new_leaf_state)``;
        ``c`` maps the scalar names to arrays of the parameter's dtype.
      leaf_state_names: names of the per-parameter state trees.
      scalar_state: float32 scalars torch keeps as tensors, with initial values.
      step_dependent: whether ``host_scalars`` depends on the step; if not, and
        no hyperparameter is a schedule, the scalars are computed once.
      converges: the optimizer's promise that every host scalar is monotone
        in the step and reaches its limit (its value at step ``2**62``), e.g.
        bias corrections ``1 - beta**t``: once a step's scalars equal the
        limit, so do all later steps' (see :func:`_scalar_table`).
      elementwise: the optimizer's promise that ``update_leaf`` is elementwise
        (each result element depends on the same element of each array input
        and on the scalars) and that its per-parameter states have the
        parameter's shape. Then on XLA:CPU a leaf whose kernels take a square
        root and whose last dimension compiles to scalar loops (conv kernels:
        ``(O, I, 3, 3)``) is updated on ``(O, -1)`` views, with the same
        results (:mod:`jax_impl.optim._flat_update`).

    Under ``jax.jit`` with constant hyperparameters, the host scalars of the
    first steps are tabulated when the step is traced (:func:`_scalar_table`)
    and read from the table on device; the ``pure_callback`` (it stalls the
    whole update) runs only past the
    table, or if the float32 scalar state differs from the table's (a state
    loaded from elsewhere). Host schedules marked ``tabulable`` (torch's
    schedulers in :mod:`jax_impl.optim.lr_scheduler`, pure functions of the
    count) are tabulated with them; other schedules take the callback.
    """
    scalar_state = dict(scalar_state or {})
    host_names = [k for k, v in hyper.items() if is_host_schedule(v)]
    traced_names = [k for k, v in hyper.items() if callable(v) and not is_host_schedule(v)]
    constant_hyper = {k: float(v) for k, v in hyper.items() if not callable(v)}
    needs_host = step_dependent or bool(host_names) or bool(traced_names) or bool(scalar_state)

    def evaluate_host(count: int, traced_values: Sequence[float], sstate: Sequence[np.ndarray]):
        values = dict(constant_hyper)
        values.update({k: float(hyper[k](count)) for k in host_names})
        values.update({k: float(v) for k, v in zip(traced_names, traced_values)})
        old = {k: np.float32(v) for k, v in zip(scalar_state, sstate)}
        scalars, new = host_scalars(count + 1, values, old)
        return scalars, [np.float32(new[k]) for k in scalar_state]

    # Discover the scalar names once (their order fixes the callback's output layout).
    probe, _ = evaluate_host(0, [0.0] * len(traced_names), [np.float32(v) for v in scalar_state.values()])
    scalar_names = list(probe)
    constant_scalars = None if needs_host else np.array([probe[k] for k in scalar_names], dtype=np.float64)

    def host_callback(count, traced_values, sstate):
        scalars, new = evaluate_host(int(count), [float(v) for v in traced_values], [np.float32(v) for v in sstate])
        dtype = _scalar_dtype()
        return np.array([scalars[k] for k in scalar_names], dtype=dtype), tuple(np.float32(v) for v in new)

    tables: dict[tuple[np.dtype, int | None], _ScalarTable | None] = {}

    def compute_scalars(count: jax.Array, sstate: tuple[jax.Array, ...]):
        dtype = _scalar_dtype()
        if constant_scalars is not None:
            return jnp.asarray(constant_scalars.astype(dtype)), sstate
        traced_values = tuple(jnp.asarray(hyper[k](count), dtype) for k in traced_names)
        if not isinstance(count, jax.core.Tracer) and not any(isinstance(v, jax.core.Tracer) for v in (*traced_values, *sstate)):
            vector, new = host_callback(count, traced_values, sstate)
            return jnp.asarray(vector), tuple(jnp.asarray(v) for v in new)
        shapes = (
            jax.ShapeDtypeStruct((len(scalar_names),), dtype),
            tuple(jax.ShapeDtypeStruct((), jnp.float32) for _ in scalar_state),
        )

        def callback():
            return jax.pure_callback(host_callback, shapes, count, traced_values, sstate, vmap_method="broadcast_all")

        if traced_names or not all(getattr(hyper[k], "tabulable", False) for k in host_names):
            return callback()
        horizon = _HORIZON[0] if _HORIZON[0] is not None and _HORIZON[0] <= _TABLE_STEPS else None
        key = (dtype, horizon)
        if key not in tables:
            tables[key] = _scalar_table(lambda k, old: evaluate_host(k, [], old), scalar_names,
                                        [np.float32(v) for v in scalar_state.values()], dtype,
                                        converges and not host_names, horizon or 0)
        if tables[key] is None:
            return callback()
        return tables[key].lookup(count, sstate, callback if horizon is None else None)

    n_leaf = len(leaf_state_names)
    sqrt_mode = get_sqrt_mode()  # fixed when the optimizer is built
    sqrt_table = get_sqrt_table(packed=True) if sqrt_mode == "table" else None

    def sqrt(x: jax.Array) -> jax.Array:
        return torch_sqrt(x, sqrt_mode, sqrt_table)

    def init(params: Any) -> Any:
        treedef = jax.tree.structure(params)
        per_leaf = treedef.flatten_up_to(jax.tree.map(lambda p: tuple(init_leaf(jnp.asarray(p))), params))
        leaves = _unzip(treedef, per_leaf, 0, n_leaf)
        # Host scalars placed on the device: jnp.zeros or a cast would each be a computation, compiled the first
        # time (jax_impl.optim._buffers).
        sstate = [jax.device_put(np.float32(v)) for v in scalar_state.values()]
        return state_cls(jax.device_put(np.int32(0)), *leaves, *sstate)

    @jax.jit
    def kernel(grads, params, leaf_states, vector, count):
        roots = [0]  # square roots the leaves' kernels have taken so far

        def counted_sqrt(x: jax.Array) -> jax.Array:
            roots[0] += 1
            return sqrt(x)

        ops = TorchOps(runtime_zero(count), counted_sqrt)
        step = count + 1

        def one(g, p, *s):
            _check_leaf(g, p)
            c = {k: vector[i].astype(p.dtype) for i, k in enumerate(scalar_names)}
            g = g.astype(p.dtype)
            before = roots[0]
            out = tuple(update_leaf(ops, c, step, g, p, *s))
            if elementwise and roots[0] > before and flat_update.applies(p, s):
                # Scalar loops on XLA:CPU: the same kernels on 2-D views (jax_impl.optim._flat_update).
                return flat_update.on_rows(lambda *a: update_leaf(ops, c, step, *a), p.shape, (g, p, *s))
            return out

        treedef = jax.tree.structure(params)
        flat = flat_update.restore(treedef.flatten_up_to(jax.tree.map(one, grads, params, *leaf_states)))
        new_params, *new_leaf_states = _unzip(treedef, flat, 0, 1 + n_leaf)
        return new_params, tuple(new_leaf_states)

    def step_fn(grads: Any, state: Any, params: Any) -> tuple[Any, Any]:
        if params is None:
            raise ValueError("torch optimizers update parameters in place: pass params to update()")
        _check_structure(grads, params)
        count = state[0]
        leaf_states = tuple(state[1 : 1 + n_leaf])
        sstate = tuple(state[1 + n_leaf :])
        vector, new_sstate = compute_scalars(count, sstate)
        new_params, new_leaf_states = kernel(grads, params, leaf_states, vector, count)
        return new_params, state_cls(count + 1, *new_leaf_states, *new_sstate)

    def update(updates: Any, state: Any, params: Any = None, **extra_args: Any) -> tuple[Any, Any]:
        del extra_args
        new_params, new_state = step_fn(updates, state, params)
        return jax.tree.map(lambda n, p: n - p, new_params, params), new_state

    return TorchTransformation(init, update, step_fn)


# At most this many steps are tabulated: enough for torch's default betas to converge
# (~16.6k steps in float32), under a second of host maths when the step is traced ...
_TABLE_STEPS = 1 << 15
# ... and for scalars that never settle (LR schedules, ASGD's eta, Adagrad's lr_decay),
# whose table is cut off and followed by the callback: parity runs of a few thousand steps.
_OPEN_TABLE_STEPS = 1 << 13
_LIMIT_STEP = 2**62  # a step where every beta**t is 0.0 in float64
_CHECK_EVERY = 64  # counts between convergence checks while tabulating


class _ScalarTable(NamedTuple):
    """Host scalars of counts ``0 .. len(rows) - 1``, as constants for the device.

    Row ``k`` holds count ``k``'s scalar vector and its float32 scalar state
    after and before that step (``[new..., old...]``). Columns that never
    change are stored once (``fixed_*``, with zeros where a column varies),
    the others per row (``rows``, ``states``). ``converged``: every count
    past the last row has the last row's values.
    """

    fixed_rows: np.ndarray  # (n_scalars,) the row's constant columns (varying ones 0)
    varying: np.ndarray  # column indices that change
    rows: np.ndarray  # (n_steps, len(varying))
    fixed_states: np.ndarray  # (2 * n_state,) [new..., old...] constant columns
    varying_states: np.ndarray
    states: np.ndarray  # (n_steps, len(varying_states)) float32
    converged: bool

    def lookup(self, count: jax.Array, sstate: tuple[jax.Array, ...], callback: Callable[[], Any] | None):
        """The scalars and new scalar state of ``count``: the table's row where it holds, else ``callback()``
        (``None``: NaN, see :func:`fixed_horizon`)."""
        n_steps = self.rows.shape[0]
        index = jnp.minimum(count, n_steps - 1)
        vector = jnp.asarray(self.fixed_rows)
        if self.varying.size:
            vector = vector.at[self.varying].set(jnp.asarray(self.rows)[index])
        both = jnp.asarray(self.fixed_states)
        if self.varying_states.size:
            both = both.at[self.varying_states].set(jnp.asarray(self.states)[index])
        n_state = len(sstate)
        new, old = both[:n_state], both[n_state:]
        ok = None
        if not self.converged:
            ok = count < n_steps
        if n_state:
            # Bitwise: the table holds the state torch would have reached from the initial one.
            given = lax.bitcast_convert_type(jnp.stack([jnp.asarray(v, jnp.float32) for v in sstate]), jnp.int32)
            same = jnp.all(given == lax.bitcast_convert_type(old, jnp.int32))
            ok = same if ok is None else ok & same
        result = (vector, tuple(new[i] for i in range(n_state)))
        if ok is None:
            return result
        if callback is None:
            return jax.tree.map(lambda v: jnp.where(ok, v, jnp.nan), result)
        return lax.cond(ok, lambda: result, callback)


def _scalar_table(host: Callable[[int, list[np.float32]], tuple[dict[str, float], list[np.float32]]],
                  names: list[str], initial_state: list[np.float32], dtype: np.dtype,
                  converges: bool, min_steps: int = 0) -> _ScalarTable | None:
    """Runs the host maths ``host(count, state)`` for counts ``0, 1, ...`` from the initial scalar state.

    Stops after ``_TABLE_STEPS`` rows (``_OPEN_TABLE_STEPS`` unless
    ``converges``, or ``min_steps`` if more, up to ``_TABLE_STEPS``), at the first count whose host maths raises (the callback
    raises it again at run time), or, if ``converges``, at a count whose
    scalars equal their limit (step ``2**62``, same scalar state) in ``dtype``
    and whose scalar state is a fixed point: the optimizer's monotone scalars
    never change again, and that row serves every later count. The limit is
    checked every ``_CHECK_EVERY`` counts (the table may end a little after
    the first converged count; those rows equal the limit row too).
    Returns ``None`` if not even count 0 can be computed.
    """
    state = list(initial_state)
    rows: list[list[float]] = []
    states: list[list[np.float32]] = []
    converged = False
    for count in range(_TABLE_STEPS if converges else min(_TABLE_STEPS, max(_OPEN_TABLE_STEPS, min_steps))):
        try:
            scalars, new = host(count, state)
        except Exception:  # noqa: BLE001 - e.g. OneCycleLR past total_steps: the callback raises it at that step
            break
        rows.append([scalars[k] for k in names])
        states.append(new + state)
        if converges and count % _CHECK_EVERY == 0 and _bits(new) == _bits(state):
            limit, _ = host(_LIMIT_STEP - 1, state)
            if _bits(np.array([limit[k] for k in names], dtype=dtype)) == _bits(np.array(rows[-1], dtype=dtype)):
                converged = True
                break
        state = new
    if not rows:
        return None
    table = np.array(rows, dtype=dtype)
    state_table = np.array(states, dtype=np.float32).reshape(len(rows), 2 * len(initial_state))
    varying = np.flatnonzero([len(set(_bits(col))) > 1 for col in table.T])
    varying_states = np.flatnonzero([len(set(_bits(col))) > 1 for col in state_table.T])
    fixed_rows = table[0].copy()
    fixed_rows[varying] = 0
    fixed_states = state_table[0].copy()
    fixed_states[varying_states] = 0
    return _ScalarTable(fixed_rows, varying, np.ascontiguousarray(table[:, varying]), fixed_states, varying_states,
                        np.ascontiguousarray(state_table[:, varying_states]), converged)


def _bits(values: Any) -> tuple[int, ...]:
    """Exact identity of float values (NaN equal to itself, -0.0 apart from 0.0)."""
    array = np.asarray(values)
    return tuple(array.view(np.uint64 if array.dtype == np.float64 else np.uint32).tolist())


def _unzip(treedef: Any, flat: list[tuple[Any, ...]], start: int, stop: int) -> list[Any]:
    """Per-leaf tuples -> one tree per tuple position in ``range(start, stop)``."""
    return [treedef.unflatten([item[i] for item in flat]) for i in range(start, stop)]


def _check_structure(grads: Any, params: Any) -> None:
    """Grads must mirror params leaf for leaf; ``None`` grads (frozen params) are named, not mis-mapped."""
    if jax.tree.structure(grads) == jax.tree.structure(params):
        return
    paths = lambda tree: {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]}  # noqa: E731
    missing = sorted(paths(params) - paths(grads))
    extra = sorted(paths(grads) - paths(params))
    raise ValueError(
        "gradients do not match the parameter tree"
        + (f"; no gradient for {', '.join(missing)}" if missing else "")
        + (f"; gradients without a parameter: {', '.join(extra)}" if extra else "")
        + ". torch skips parameters whose .grad is None and keeps their step counts apart; here every"
        " parameter steps together: give frozen parameters zero gradients or leave them out of the tree"
    )


def _check_leaf(grad: jax.Array, param: jax.Array) -> None:
    if jnp.iscomplexobj(param) or jnp.iscomplexobj(grad):
        raise NotImplementedError("complex parameters are not supported by jax_impl.optim")
    if grad.shape != param.shape:
        raise ValueError(f"gradient shape {grad.shape} does not match parameter shape {param.shape}")
