"""A twin checked against its torch model: forward in eval and train mode, BN buffers, one SGD step.

Both sides run on the same seeded random input, each on its own copy (the
torch model and the twin passed in are not changed):

- ``eval forward``: outputs in eval mode;
- ``train forward``: outputs in train mode, both global generators seeded
  alike so dropout masks are torch's (``jax_impl.random`` reproduces them);
- ``train buffers``: BatchNorm running statistics and counters after that
  forward;
- ``gradients``: of a seeded random weighting of the outputs (or ``loss_fn(outputs)``) with
  respect to every parameter, from that same forward;
- ``SGD step``: the parameters after one ``torch.optim.SGD`` step with those
  gradients, next to ``jax_impl.optim.sgd``'s ``step``.

Each row is a :func:`parity.compare` report within the dtype's tolerance.
A float32 phase beyond it still passes when the twin is within
:data:`parity.floor.FLOOR_FACTOR` times torch's own float32-vs-float64
distance for that phase (torch's model in float64 on the same input), the
verdict ``parity run`` gives float32 runs: rounding that torch's own float32
run shows is no porting error (ill-conditioned BatchNorms with batch 2
amplify it past any fixed bound), while a porting bug moves the twin away by
far more than the floor.

A float64 phase beyond tolerance has the same test against torch's float64
floor: the distance of torch's own float64 run from a second one whose
parameters, buffers, floating inputs and layer outputs are each moved by one
rounding (multiplied by ``1 +- 2**-52``, the sign from the value's last bit). Summing in another
order is such a rounding per operation, so a well-conditioned model stays within the
tolerance and an ill-conditioned one (a spectral norm evaluated before its power
iteration has converged divides by a small ``sigma`` in every layer) is judged
by how far torch's own result moves; a porting bug still moves the twin by many
orders of magnitude more.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

import jax_impl.optim
import jax_impl.random
from parity.compare import ComparisonReport, compare
from parity.convert.modules import module_state, tied_keys
from parity.floor import FLOOR_FACTOR
from parity.port.hooks import copy_model
from parity.port.inputs import example_arguments
from parity.port.trace import set_training

__all__ = ["PortCheck", "TOLERANCES", "check_port"]

# (rtol, atol) per dtype. Measured on tests/port's models (batch 2): float64 worst 5e-13 absolute (ResNet-18
# gradients at 64x64), float32 worst 3e-7 absolute (VGG-style gradients). atol covers elements near zero,
# where the relative error of a sum is unbounded. float32 ResNet-18 gradients reach 1.8e-4 absolute through
# its batch-2 BatchNorms, beyond these bounds: there torch's own float32-vs-float64 distance is the yardstick.
TOLERANCES = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5)}

_SGD_LR = 0.1

PHASES = ("eval forward", "train forward", "train buffers", "gradients", "SGD step")


@dataclasses.dataclass(frozen=True)
class PortCheck:
    """The reports of :func:`check_port`, one per phase, in order.

    Attributes:
      rows: ``(phase, report)`` pairs, each a :func:`parity.compare` report within the dtype's tolerance.
      floors: per phase beyond tolerance, per leaf beyond it, ``(twin, floor)``: the twin's max absolute
        distance from torch, and torch's own: its float32 run's from its float64 run on the same input, or
        (float64) its run's from its run with inputs and weights moved by one rounding.
      floor_kind: ``"float32"`` or ``"float64"``, the floor's kind (the table's words).
    """

    rows: tuple[tuple[str, ComparisonReport], ...]
    floors: dict[str, dict[str, tuple[float, float]]] = dataclasses.field(default_factory=dict)
    floor_kind: str = "float32"

    def passed_by(self, phase: str) -> str | None:
        """``"tolerance"``; ``"floor"``: every leaf beyond tolerance is within
        :data:`~parity.floor.FLOOR_FACTOR` times torch's own distance (:attr:`floors`); ``None``: differs."""
        report = dict(self.rows)[phase]
        if report.passed:
            return "tolerance"
        leaves = self.floors.get(phase)
        # every failing leaf must be a value mismatch that the floor measured (no missing keys, no integers)
        if not leaves or len(leaves) != len(report.failures) or any(f.status != "mismatch" for f in report.failures):
            return None
        return "floor" if all(0 < floor and twin <= FLOOR_FACTOR * floor for twin, floor in leaves.values()) else None

    def worst_floor(self, phase: str) -> tuple[str, float, float]:
        """``(leaf, twin, floor)`` of the phase's leaf with the largest ratio of twin to floor."""
        leaves = self.floors[phase]
        key = max(leaves, key=lambda k: leaves[k][0] / leaves[k][1] if leaves[k][1] > 0 else math.inf)
        return (key, *leaves[key])

    @property
    def passed(self) -> bool:
        return all(self.passed_by(phase) is not None for phase, _ in self.rows)

    def __bool__(self) -> bool:
        return self.passed

    def table(self) -> str:
        """One line per phase: leaves compared, max abs / rel error, the worst leaf, verdict."""
        header = f"{'phase':<15} {'leaves':>6} {'max abs':>10} {'max rel':>10}  {'worst leaf':<34} verdict"
        lines = [header, "-" * len(header)]
        for phase, report in self.rows:
            worst = report.worst
            by = self.passed_by(phase)
            if by == "floor":
                leaf, twin, floor = self.worst_floor(phase)
                verdict = (f"ok by torch's {self.floor_kind} floor ({leaf}: {twin:.2g} <= {FLOOR_FACTOR:g} x "
                           f"{floor:.2g})")
            else:
                verdict = "ok" if by else f"DIFFERS ({len(report.failures)} leaves)"
            lines.append(f"{phase:<15} {len(report.compared):>6} {_num(report.max_abs):>10} "
                         f"{_num(report.max_rel):>10}  {(worst.key or 'output' if worst else '-'):<34} {verdict}")
        rtol, atol = self.rows[0][1].rtol, self.rows[0][1].atol
        lines.append(f"tolerance: rtol={rtol:g}, atol={atol:g}; "
                     + ("the twin matches torch" if self.passed else "the twin DIFFERS from torch"))
        if any(self.passed_by(phase) == "floor" for phase, _ in self.rows):
            lines.append("torch's float32 floor: per leaf beyond tolerance, max |twin - torch| against torch's own "
                         "max |f32 - f64| (its model in float64 on the same input)" if self.floor_kind == "float32"
                         else "torch's float64 floor: per leaf beyond tolerance, max |twin - torch| against torch's "
                         "own distance when its inputs, parameters, buffers and layer outputs move by one rounding")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _num(value: float) -> str:
    return "-" if value != value else f"{value:.2e}"


def _default_losses(seed: int, dtype: torch.dtype) -> tuple[Callable, Callable]:
    """``sum(w * output)`` over the outputs, ``w`` seeded standard-normal weights of each output's shape.

    A plain sum would make gradients through a final BatchNorm vanish
    analytically (the sum of a normalised channel is constant), leaving
    rounding noise to compare; random weights keep every gradient informative.
    The weights are drawn in the check's ``dtype`` and cast to each output's,
    so a float32 model and its float64 copy (torch's floor) get the same loss.
    """
    weights: list[torch.Tensor] = []

    def torch_loss(outputs):
        leaves = [t for t in jax.tree.leaves(outputs, is_leaf=torch.is_tensor) if t.is_floating_point()]
        generator = torch.Generator().manual_seed(seed + 1)
        weights[:] = [torch.randn(t.shape, generator=generator, dtype=dtype).to(t.dtype) for t in leaves]
        return sum((w * t).sum() for w, t in zip(weights, leaves))

    def jax_loss(outputs):
        leaves = [a for a in jax.tree.leaves(outputs) if jnp.issubdtype(a.dtype, jnp.floating)]
        return sum(jnp.sum(jnp.asarray(w.numpy()) * a) for w, a in zip(weights, leaves))

    return torch_loss, jax_loss


def _torch_phases(torch_module: torch.nn.Module, args: tuple, torch_loss: Callable, seed: int) -> dict:
    """torch's value of every phase (:data:`PHASES`), each on its own copy of the model."""
    t_eval = set_training(copy_model(torch_module), False)
    torch.manual_seed(seed)  # a model that draws in eval mode too (a VAE's noise) draws the same numbers
    with torch.no_grad():
        expected = t_eval(*args)
    t_train = set_training(copy_model(torch_module), True)
    torch.manual_seed(seed)
    outputs = t_train(*args)
    torch_loss(outputs).backward()
    buffer_keys = {key for key, _ in t_train.named_buffers()}
    buffers = {k: v for k, v in t_train.state_dict().items() if k in buffer_keys}
    grads = {k: p.grad if p.grad is not None else torch.zeros_like(p) for k, p in t_train.named_parameters()}
    torch.optim.SGD(t_train.parameters(), lr=_SGD_LR).step()
    params = {k: p.detach() for k, p in t_train.named_parameters()}
    return dict(zip(PHASES, (expected, outputs.detach() if torch.is_tensor(outputs) else outputs,
                             buffers, grads, params)))


_BITS = {torch.float64: torch.int64, torch.float32: torch.int32}


def _rounded_once(value):
    """``value`` (a model or a pytree of tensors) with every float64/float32 tensor multiplied by
    ``1 +- 2**-52`` element by element: each value moved by about one rounding. A model's layers (its modules
    without children) also move each output they return, on every call: the rounding of the layer's own
    arithmetic, which another summation order changes. The sign is the value's lowest mantissa bit, so
    equal values move alike and a model's own checks of equality (``assert (output == hidden).all()``)
    still hold."""

    def move(t):
        if not (torch.is_tensor(t) and t.dtype in _BITS):
            return t
        signs = (t.detach().contiguous().view(_BITS[t.dtype]) & 1).to(t.dtype) * 2 - 1
        return t * (1 + signs * 2.0 ** -52)

    if isinstance(value, torch.nn.Module):
        with torch.no_grad():
            for tensor in [*value.parameters(), *value.buffers()]:
                if tensor.is_floating_point():
                    tensor.copy_(move(tensor))
        for layer in value.modules():
            if not next(layer.children(), None):
                layer.register_forward_hook(lambda module, inputs, output: jax.tree.map(move, output,
                                                                                        is_leaf=torch.is_tensor))
        return value
    return jax.tree.map(move, value, is_leaf=torch.is_tensor)


def _pairs(expected, got, reference):
    """``(key, torch, twin, torch float64)`` per floating leaf: state dicts by key, outputs in order."""
    if isinstance(expected, dict):
        return [(k, v, got.get(k), reference.get(k)) for k, v in expected.items() if v.is_floating_point()]
    leaves = [jax.tree.leaves(t, is_leaf=torch.is_tensor) for t in (expected, got, reference)]
    if len({len(part) for part in leaves}) != 1:
        return []
    return [(str(i) if len(leaves[0]) > 1 else "output", e, g, r)
            for i, (e, g, r) in enumerate(zip(*leaves)) if e.is_floating_point()]


def _leaf_floors(expected, got, reference, rtol: float, atol: float) -> dict[str, tuple[float, float]]:
    """Per leaf beyond ``(rtol, atol)``: ``(twin, floor)``, the twin's max absolute distance from torch and
    the reference run's (torch in float64, or torch moved by one rounding). Absolute, not relative to the
    leaf's scale: a gradient that is zero in exact arithmetic (a bias before a BatchNorm) is rounding noise in
    both runs."""
    floors = {}
    for key, e, g, r in _pairs(expected, got, reference):
        if g is None or r is None or compare(e, g, rtol=rtol, atol=atol).passed:
            continue
        e = e.detach().numpy().astype(np.float64)
        floors[key] = (float(np.abs(np.asarray(g, np.float64) - e).max()),
                       float(np.abs(e - r.detach().numpy()).max()))
    return floors


def _flat(state, tied: dict[str, str]) -> dict:
    """``state``'s leaves under torch's names: a shared parameter (``tied``) under the name torch keeps."""
    flat = {".".join(map(str, path)): v[...] for path, v in nnx.to_flat_state(state)}
    return {tied.get(key, key): value for key, value in flat.items()}


def _state(model) -> dict:
    return {key: var[...] for key, var in module_state(model).items()}


def check_port(torch_module: torch.nn.Module, twin: nnx.Module | None = None, example_input=None, *,
               input_shape: Sequence[int] | None = None, seed: int = 0,
               loss_fn: tuple[Callable, Callable] | None = None,
               tolerance: tuple[float, float] | None = None) -> PortCheck:
    """Compares ``twin`` (default: ``parity.port(torch_module)``) with ``torch_module``.

    Args:
      torch_module: the torch model (not changed: each phase runs on a copy).
      twin: its JAX twin (not changed either); ported here when ``None``.
      example_input: the input tensor, or a tuple of ``forward``'s positional
        arguments (tensors, nested tuples of tensors such as an LSTM's
        ``(h, c)``, ``None``); else a seeded standard-normal tensor of
        ``input_shape`` in the model's floating dtype.
      input_shape: shape of the random input when ``example_input`` is ``None``.
      seed: seeds the random input and both frameworks' global generators
        before the eval-mode and before the train-mode forward (dropout masks,
        ``torch.randn_like`` noise and the other draws a model makes).
      loss_fn: ``(torch_loss, jax_loss)``, each ``outputs -> scalar``; the
        default is ``sum(w * output)`` with seeded random ``w``. The torch loss
        runs before the JAX one; in a float32 check it also runs, first, on
        torch's float64 copy of the model (the floor).
      tolerance: ``(rtol, atol)``; default :data:`TOLERANCES` of the dtype.

    Returns:
      A :class:`PortCheck`; ``check.passed`` and ``print(check.table())``.
    """
    dtype = next((p.dtype for p in torch_module.parameters() if p.is_floating_point()), torch.float32)
    if example_input is None:
        if input_shape is None:
            raise ValueError("check_port needs example_input or input_shape")
        generator = torch.Generator().manual_seed(seed)
        example_input = torch.randn(tuple(input_shape), generator=generator, dtype=dtype)
    if twin is None:
        from parity.port.live import port

        twin = port(torch_module, example_input)
    rtol, atol = tolerance if tolerance is not None else TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    torch_loss, jax_loss = loss_fn if loss_fn is not None else _default_losses(seed, dtype)
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    # Floating-point tensors become the jitted functions' arguments; the rest are constants of the compiled
    # functions (parity.port.inputs).
    example = example_arguments(example_input)
    x, call = example.traced, example.call

    # float32: torch's own run in float64 on the same input first (torch_loss then keeps the float32 weights).
    reference = None
    if dtype == torch.float32:
        # token ids and masks stay as they are
        args64 = jax.tree.map(lambda t: t.double() if torch.is_tensor(t) and t.is_floating_point() else t, args,
                              is_leaf=torch.is_tensor)
        reference = _torch_phases(copy_model(torch_module).double(), args64, torch_loss, seed)
    elif dtype == torch.float64:
        reference = _torch_phases(_rounded_once(copy_model(torch_module)), _rounded_once(args), torch_loss, seed)
    expected = _torch_phases(torch_module, args, torch_loss, seed)

    eval_graph, eval_state = nnx.split(nnx.clone(twin).eval())
    jax_impl.random.manual_seed(seed)  # as torch's eval phase starts: the same draws in eval mode
    # One jitted function per phase: compiling the whole graph once beats dispatching op by op.
    j_eval = jax.jit(lambda s, x: call(nnx.merge(eval_graph, s), x))(eval_state, x)

    j_train = nnx.clone(twin).train()
    jax_impl.random.manual_seed(seed)  # torch's global stream as torch.manual_seed(seed) left it: its dropout masks
    graphdef, params, rest = nnx.split(j_train, nnx.Param, ...)

    def loss_of(params):
        model = nnx.merge(graphdef, params, jax.tree.map(lambda v: v, rest))
        out = call(model, x)
        return jax_loss(out), (out, nnx.state(model, nnx.Not(nnx.Param)))

    (_, (j_outputs, j_rest)), grads = jax.jit(jax.value_and_grad(loss_of, has_aux=True))(params)
    stepped = nnx.merge(graphdef, params, j_rest)
    tied = tied_keys(twin, torch_module.state_dict())
    buffer_keys = set(expected["train buffers"])
    tx = jax_impl.optim.sgd(lr=_SGD_LR)
    new_params, _ = tx.step(grads, tx.init(params), params)
    got = dict(zip(PHASES, (j_eval, j_outputs, {k: v for k, v in _state(stepped).items() if k in buffer_keys},
                            _flat(grads, tied), _flat(new_params, tied))))

    rows = []
    for phase in PHASES:
        # without jax x64 the int64 num_batches_tracked is int32 (same values)
        options = {"check_dtype": jax.config.jax_enable_x64} if phase == "train buffers" else {}
        rows.append((phase, compare(expected[phase], got[phase], rtol=rtol, atol=atol, **options)))
    floors = {}
    if reference is not None:
        floors = {phase: _leaf_floors(expected[phase], got[phase], reference[phase], rtol, atol)
                  for phase, report in rows if not report.passed}
    return PortCheck(rows=tuple(rows), floors=floors, floor_kind="float32" if dtype == torch.float32 else "float64")
