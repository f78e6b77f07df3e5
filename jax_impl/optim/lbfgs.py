"""``torch.optim.LBFGS``: limited-memory BFGS with torch's closure protocol, evaluations and state.

torch's ``LBFGS.step(closure)`` is not one update but a loop of up to
``max_iter`` iterations, each calling the closure once (or several times in
the strong-Wolfe line search), with early exits on tolerances that depend on
the values computed. That loop runs on the host here as in torch, over the
parameters flattened into one vector (torch's ``_gather_flat_grad``: leaves
in the order given, each raveled), in the parameters' dtype:

- direction: ``d = -g`` on the first iteration; afterwards the two-loop
  recursion over the last ``history_size`` pairs ``s = d t``, ``y = g -
  g_prev``, stored only when ``y . s > 1e-10``, with ``H_diag = (y . s) / (y
  . y)``;
- step length: ``t = min(1, 1 / sum|g|) lr`` on the very first iteration,
  ``lr`` afterwards; then either a fixed step (``x += t d`` and one closure
  call, skipped on the last iteration) or torch's strong-Wolfe line search
  (cubic interpolation, zoom phase, ``c1 = 1e-4``, ``c2 = 0.9``);
- exits: ``max|g| <= tolerance_grad``, ``g . d > -tolerance_change``,
  ``max|d t| <= tolerance_change``, ``|f - f_prev| < tolerance_change``,
  ``max_iter`` iterations or ``max_eval`` evaluations per step.

The closure evaluations are the same in number and order as torch's, so a
closure that draws random numbers or counts calls sees what torch's sees.
Additions with ``alpha`` are torch's fused multiply-adds
(:func:`jax_impl.optim.lbfgs_add.torch_add`), dot products are torch's (MKL's
kernel, summed in its order: :func:`jax_impl.optim.lbfgs_dot.torch_dot`) and
the line search's scalar
arithmetic follows torch's 0-d tensors (NumPy scalars stand for them), so on
torch's closure values the runs are torch's bit for bit, float64 and float32
(tests/optim/test_lbfgs.py). ``sum |g|`` (the first step length) is ATen's
``cascade_sum`` (:func:`jax_impl.optim.lbfgs_sum.torch_sum`; from 32768
parameters on, ATen splits it across threads and NumPy's sum stands in).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.optim._sqrt import get_sqrt_mode, torch_sqrt
from jax_impl.optim.lbfgs_add import torch_add
from jax_impl.optim.lbfgs_dot import torch_dot
from jax_impl.optim.lbfgs_sum import torch_sum

__all__ = ["LBFGS", "LBFGSState", "lbfgs"]


class LBFGSState(NamedTuple):
    """torch's LBFGS state (``optimizer.state[params[0]]``), with its keys as fields.

    ``d``, ``prev_flat_grad`` and the history entries are flat vectors in the
    parameters' dtype; ``t``, ``ro``, ``H_diag``, ``al`` entries and
    ``prev_loss`` are scalars (``None`` before torch sets them).
    """

    func_evals: int = 0
    n_iter: int = 0
    d: np.ndarray | None = None
    t: Any = None
    old_dirs: tuple = ()
    old_stps: tuple = ()
    ro: tuple = ()
    H_diag: Any = None  # noqa: N815 - torch's state key
    prev_flat_grad: np.ndarray | None = None
    prev_loss: float | None = None
    al: tuple | None = None


@functools.lru_cache(maxsize=None)
def _scalar_sqrt(mode: str) -> Callable[[Any], Any]:
    """torch's ``sqrt`` of a 0-d tensor under ``jax_impl.optim``'s sqrt ``mode``, on a NumPy scalar.

    torch's ``Tensor.sqrt`` on CPU is MKL's ``vdSqrt``/``vsSqrt`` (1 ULP below IEEE on about 0.5% of inputs
    on AVX-512), which :func:`jax_impl.optim.torch_sqrt` reproduces per mode, jitted (its fused
    multiply-adds are XLA's contractions); ``"ieee"`` is ``np.sqrt``.
    """
    if mode == "ieee":
        return np.sqrt
    jitted = jax.jit(functools.partial(torch_sqrt, mode=mode))

    def sqrt(value):
        dtype = np.asarray(value).dtype
        with jax.enable_x64(True):
            return dtype.type(np.asarray(jitted(jnp.asarray(value, dtype))))

    return sqrt


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None, sqrt=np.sqrt):
    """torch's ``_cubic_interpolate``: the minimiser of the cubic through two points and slopes, clamped."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    span = x1 - x2
    if isinstance(span, np.generic):
        # A step that is a 0-d tensor in torch (NumPy scalars stand for them here, Python floats for floats):
        # ``float / tensor`` is ``Tensor.__rtruediv__``, ``tensor.reciprocal() * float``, rounded twice.
        d1 = g1 + g2 - (1.0 / span) * (3 * (f1 - f2))
    else:
        d1 = g1 + g2 - 3 * (f1 - f2) / span
    # torch's ``tensor ** 2`` is ``x * x``; NumPy's scalar ``** 2`` calls ``pow``, which can round otherwise.
    d2_square = d1 * d1 - g1 * g2
    if d2_square >= 0:
        d2 = sqrt(d2_square)  # torch's ``Tensor.sqrt``: MKL's on CPU (:func:`_scalar_sqrt`)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25, sqrt=np.sqrt):
    """torch's ``_strong_wolfe`` line search, statement for statement: ``(f, g, t, evaluations)``."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = torch_dot(g_new, d)

    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step), sqrt=sqrt)
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = torch_dot(g_new, d)
        ls_iter += 1

    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1],
                               sqrt=sqrt)
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False

        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = torch_dot(g_new, d)
        ls_iter += 1

        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new

    t = bracket[low_pos]
    return bracket_f[low_pos], bracket_g[low_pos], t, ls_func_evals


@dataclasses.dataclass(frozen=True)
class LBFGS:
    """``torch.optim.LBFGS``'s hyperparameters, with :meth:`init` and :meth:`step` (see the module docstring).

    Use :func:`lbfgs` to build one with torch's validation and defaults.
    """

    lr: float = 1.0
    max_iter: int = 20
    max_eval: int = 25
    tolerance_grad: float = 1e-7
    tolerance_change: float = 1e-9
    history_size: int = 100
    line_search_fn: str | None = None
    sqrt_mode: str = "ieee"

    def init(self, params: Any) -> LBFGSState:
        """The empty state (torch's before the first ``step``); ``params`` is accepted for optax's shape."""
        del params
        return LBFGSState()

    def step(self, closure: Callable[[Any], tuple[Any, Any]], state: LBFGSState, params: Any
             ) -> tuple[Any, Any, LBFGSState]:
        """One ``optimizer.step(closure)``: ``(loss, params, state)``, the loss of the first evaluation.

        Args:
          closure: ``params -> (loss, grads)`` for a parameter tree like ``params`` (for instance
            ``jax.value_and_grad(loss_fn)``, jitted or not); called as often as torch calls its closure.
          state: the state from :meth:`init` or the previous step.
          params: the parameters: a pytree of float arrays of one dtype, flattened in JAX's leaf order
            (pass a list in ``model.parameters()`` order to sum in torch's order).
        """
        leaves, treedef = jax.tree.flatten(params)
        dtype = np.result_type(*[np.asarray(leaf).dtype for leaf in leaves])
        if not np.issubdtype(dtype, np.floating):
            raise ValueError(f"LBFGS needs floating parameters, got {dtype}")
        shapes = [np.shape(leaf) for leaf in leaves]
        sizes = [math.prod(s) for s in shapes]
        dt = dtype.type

        def unflatten(flat: np.ndarray):
            parts, offset = [], 0
            for shape, size in zip(shapes, sizes):
                parts.append(flat[offset:offset + size].reshape(shape))
                offset += size
            return jax.tree.unflatten(treedef, parts)

        def evaluate(flat: np.ndarray) -> tuple[Any, float, np.ndarray]:
            loss, grads = closure(unflatten(flat))
            grad_leaves = jax.tree.leaves(grads)
            if len(grad_leaves) != len(leaves):
                raise ValueError(f"the closure returned {len(grad_leaves)} gradients for {len(leaves)} parameters")
            flat_grad = np.concatenate([np.asarray(g, dtype).reshape(-1) for g in grad_leaves])
            return loss, float(loss), flat_grad

        x = np.concatenate([np.asarray(leaf, dtype).reshape(-1) for leaf in leaves])
        lr, max_iter, max_eval = self.lr, self.max_iter, self.max_eval
        tolerance_grad, tolerance_change = self.tolerance_grad, self.tolerance_change
        func_evals, state_n_iter = state.func_evals, state.n_iter

        orig_loss, loss, flat_grad = evaluate(x)
        current_evals = 1
        func_evals += 1
        opt_cond = np.abs(flat_grad).max() <= tolerance_grad
        if opt_cond:
            return orig_loss, params, state._replace(func_evals=func_evals)

        d, t, H_diag = state.d, state.t, state.H_diag  # noqa: N806 - torch's name
        old_dirs, old_stps, ro = list(state.old_dirs), list(state.old_stps), list(state.ro)
        al = list(state.al) if state.al is not None else None
        prev_flat_grad, prev_loss = state.prev_flat_grad, state.prev_loss

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state_n_iter += 1
            if state_n_iter == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1  # noqa: N806
            else:
                y = flat_grad - prev_flat_grad
                s = d * dt(t)
                ys = torch_dot(y, s)
                if ys > 1e-10:
                    if len(old_dirs) == self.history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(dt(1.0) / ys)
                    H_diag = ys / torch_dot(y, y)  # noqa: N806
                num_old = len(old_dirs)
                if al is None:
                    al = [None] * self.history_size
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = torch_dot(old_stps[i], q) * ro[i]
                    q = torch_add(q, -al[i], old_dirs[i])
                d = r = q * dt(H_diag)
                for i in range(num_old):
                    be_i = torch_dot(old_dirs[i], r) * ro[i]
                    r = torch_add(r, al[i] - be_i, old_stps[i])
                d = r
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss

            if state_n_iter == 1:
                inverse = dt(1.0) / torch_sum(np.abs(flat_grad))
                t = (inverse if inverse < 1.0 else 1.0) * (dt(lr) if inverse < 1.0 else lr)
            else:
                t = lr
            gtd = torch_dot(flat_grad, d)
            if gtd > -tolerance_change:
                break

            ls_func_evals = 0
            if self.line_search_fn is not None:
                x_init = x.copy()

                def obj_func(x0, step, direction):
                    _, value, grad = evaluate(torch_add(x0, step, direction))
                    return value, grad

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals,
                    sqrt=_scalar_sqrt(self.sqrt_mode))
                x = torch_add(x, t, d)
                opt_cond = np.abs(flat_grad).max() <= tolerance_grad
            else:
                x = torch_add(x, t, d)
                if n_iter != max_iter:
                    _, loss, flat_grad = evaluate(x)
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1

            current_evals += ls_func_evals
            func_evals += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * dt(t)).max() <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        new_state = LBFGSState(func_evals=func_evals, n_iter=state_n_iter, d=d, t=t, old_dirs=tuple(old_dirs),
                               old_stps=tuple(old_stps), ro=tuple(ro), H_diag=H_diag,
                               prev_flat_grad=prev_flat_grad, prev_loss=prev_loss,
                               al=tuple(al) if al is not None else None)
        return orig_loss, unflatten(x), new_state


def lbfgs(lr: float = 1, max_iter: int = 20, max_eval: int | None = None, tolerance_grad: float = 1e-7,
          tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn: str | None = None) -> LBFGS:
    """``torch.optim.LBFGS(params, lr, max_iter, max_eval, tolerance_grad, tolerance_change, history_size,
    line_search_fn)``: torch's defaults (``max_eval = max_iter * 5 // 4``) and checks.

    Raises:
      ValueError: a negative ``lr``.
      RuntimeError: a ``line_search_fn`` other than ``None`` or ``"strong_wolfe"`` (torch raises it at the
        first step; here at construction).
    """
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if line_search_fn not in (None, "strong_wolfe"):
        raise RuntimeError("only 'strong_wolfe' is supported")
    if max_eval is None:
        max_eval = max_iter * 5 // 4
    return LBFGS(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                 tolerance_change=tolerance_change, history_size=history_size, line_search_fn=line_search_fn,
                 sqrt_mode=get_sqrt_mode())
