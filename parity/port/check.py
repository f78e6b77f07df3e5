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
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

import jax_impl.optim
import jax_impl.random
from parity.compare import ComparisonReport, compare
from parity.convert.modules import module_state

__all__ = ["PortCheck", "TOLERANCES", "check_port"]

# (rtol, atol) per dtype. Measured on tests/port's models (batch 2): float64 worst 5e-13 absolute (ResNet-18
# gradients at 64x64), float32 worst 3e-7 absolute (VGG-style gradients). atol covers elements near zero,
# where the relative error of a sum is unbounded. float32 ResNet-18 gradients reach 1.8e-4 absolute through
# its batch-2 BatchNorms, beyond these bounds: there torch's own float32-vs-float64 distance is the yardstick.
TOLERANCES = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5)}

_SGD_LR = 0.1


@dataclasses.dataclass(frozen=True)
class PortCheck:
    """The reports of :func:`check_port`, one per phase, in order."""

    rows: tuple[tuple[str, ComparisonReport], ...]

    @property
    def passed(self) -> bool:
        return all(report.passed for _, report in self.rows)

    def __bool__(self) -> bool:
        return self.passed

    def table(self) -> str:
        """One line per phase: leaves compared, max abs / rel error, the worst leaf, verdict."""
        header = f"{'phase':<15} {'leaves':>6} {'max abs':>10} {'max rel':>10}  {'worst leaf':<34} verdict"
        lines = [header, "-" * len(header)]
        for phase, report in self.rows:
            worst = report.worst
            verdict = "ok" if report.passed else f"DIFFERS ({len(report.failures)} leaves)"
            lines.append(f"{phase:<15} {len(report.compared):>6} {_num(report.max_abs):>10} "
                         f"{_num(report.max_rel):>10}  {(worst.key or 'output' if worst else '-'):<34} {verdict}")
        rtol, atol = self.rows[0][1].rtol, self.rows[0][1].atol
        lines.append(f"tolerance: rtol={rtol:g}, atol={atol:g}; "
                     + ("the twin matches torch" if self.passed else "the twin DIFFERS from torch"))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _num(value: float) -> str:
    return "-" if value != value else f"{value:.2e}"


def _to_jax(tree):
    return jax.tree.map(lambda t: jnp.asarray(t.detach().cpu().numpy()), tree, is_leaf=torch.is_tensor)


def _default_losses(seed: int) -> tuple[Callable, Callable]:
    """``sum(w * output)`` over the outputs, ``w`` seeded standard-normal weights of each output's shape.

    A plain sum would make gradients through a final BatchNorm vanish
    analytically (the sum of a normalised channel is constant), leaving
    rounding noise to compare; random weights keep every gradient informative.
    """
    weights: list[torch.Tensor] = []

    def torch_loss(outputs):
        leaves = [t for t in jax.tree.leaves(outputs, is_leaf=torch.is_tensor) if t.is_floating_point()]
        generator = torch.Generator().manual_seed(seed + 1)
        weights[:] = [torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in leaves]
        return sum((w * t).sum() for w, t in zip(weights, leaves))

    def jax_loss(outputs):
        leaves = [a for a in jax.tree.leaves(outputs) if jnp.issubdtype(a.dtype, jnp.floating)]
        return sum(jnp.sum(jnp.asarray(w.numpy()) * a) for w, a in zip(weights, leaves))

    return torch_loss, jax_loss


def _flat(state) -> dict:
    return {".".join(map(str, path)): v[...] for path, v in nnx.to_flat_state(state)}


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
      example_input: the input tensor; else a seeded standard-normal one of
        ``input_shape`` in the model's floating dtype.
      input_shape: shape of the random input when ``example_input`` is ``None``.
      seed: seeds the random input and both frameworks' global generators
        (dropout masks) before the train-mode forward.
      loss_fn: ``(torch_loss, jax_loss)``, each ``outputs -> scalar``; the
        default is ``sum(w * output)`` with seeded random ``w`` (the torch loss runs first).
      tolerance: ``(rtol, atol)``; default :data:`TOLERANCES` of the dtype.

    Returns:
      A :class:`PortCheck`; ``check.passed`` and ``print(check.table())``.
    """
    if twin is None:
        from parity.port.live import port

        twin = port(torch_module)
    dtype = next((p.dtype for p in torch_module.parameters() if p.is_floating_point()), torch.float32)
    if example_input is None:
        if input_shape is None:
            raise ValueError("check_port needs example_input or input_shape")
        generator = torch.Generator().manual_seed(seed)
        example_input = torch.randn(tuple(input_shape), generator=generator, dtype=dtype)
    rtol, atol = tolerance if tolerance is not None else TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    torch_loss, jax_loss = loss_fn if loss_fn is not None else _default_losses(seed)
    x = jnp.asarray(example_input.detach().cpu().numpy())

    def report(reference, candidate, **options) -> ComparisonReport:
        return compare(reference, candidate, rtol=rtol, atol=atol, **options)

    rows = []
    t_eval = copy.deepcopy(torch_module).eval()
    with torch.no_grad():
        expected = t_eval(example_input)
    eval_graph, eval_state = nnx.split(nnx.clone(twin).eval())
    # One jitted function per phase: compiling the whole graph once beats dispatching op by op.
    rows.append(("eval forward", report(expected, jax.jit(lambda s, x: nnx.merge(eval_graph, s)(x))(eval_state, x))))

    t_train, j_train = copy.deepcopy(torch_module).train(), nnx.clone(twin).train()
    torch.manual_seed(seed)
    jax_impl.random.manual_seed(seed)
    outputs = t_train(example_input)
    torch_loss(outputs).backward()

    graphdef, params, rest = nnx.split(j_train, nnx.Param, ...)

    def loss_of(params):
        model = nnx.merge(graphdef, params, jax.tree.map(lambda v: v, rest))
        out = model(x)
        return jax_loss(out), (out, nnx.state(model, nnx.Not(nnx.Param)))

    (_, (j_outputs, j_rest)), grads = jax.jit(jax.value_and_grad(loss_of, has_aux=True))(params)
    rows.append(("train forward", report(outputs, j_outputs)))
    stepped = nnx.merge(graphdef, params, j_rest)
    buffer_keys = {key for key, _ in t_train.named_buffers()}
    rows.append(("train buffers", report({k: v for k, v in t_train.state_dict().items() if k in buffer_keys},
                                         {k: v for k, v in _state(stepped).items() if k in buffer_keys},
                                         # without jax x64 the int64 num_batches_tracked is int32 (same values)
                                         check_dtype=jax.config.jax_enable_x64)))
    torch_grads = {k: p.grad if p.grad is not None else torch.zeros_like(p) for k, p in t_train.named_parameters()}
    j_grads = _flat(grads)
    rows.append(("gradients", report(torch_grads, j_grads)))

    torch.optim.SGD(t_train.parameters(), lr=_SGD_LR).step()
    tx = jax_impl.optim.sgd(lr=_SGD_LR)
    new_params, _ = tx.step(grads, tx.init(params), params)
    j_params = _flat(new_params)
    rows.append(("SGD step", report(dict(t_train.named_parameters()), j_params)))
    return PortCheck(rows=tuple(rows))
