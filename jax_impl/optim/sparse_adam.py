"""``torch.optim.SparseAdam``: Adam on the rows a sparse gradient holds, the other rows untouched.

JAX has no sparse gradients, so the gradient of each parameter is given as
torch's uncoalesced COO tensor, :class:`SparseGrad` ``(indices, values)``:
``indices`` is ``(sparse_dim, nnz)`` integer coordinates into the leading
``sparse_dim`` axes of the parameter and ``values`` is ``(nnz,
*param.shape[sparse_dim:])``. ``nn.Embedding(sparse=True)`` produces
``sparse_dim = 1``, one entry per looked-up index (:func:`embedding_sparse_grad`
builds it from the lookup indices and the output's gradient). A
:class:`MaskedGrad` ``(grad, mask)`` (a dense, already summed gradient and
the boolean mask of the present entries over the leading ``mask.ndim`` axes)
is accepted too.

The step follows ``torch/optim/_functional.py`` ``sparse_adam`` on the
present entries, computed densely and selected by the mask::

    g = coalesce(-grad if maximize else grad)        # duplicates summed
    u1 = (g - m) * (1 - beta1);   m += u1             # numer = u1 + m_old = m
    u2 = (g**2 - v) * (1 - beta2); v += u2
    denom = sqrt(v) + eps
    p += -(lr * sqrt(1 - beta2**t) / (1 - beta1**t)) * (m / denom)

each operation rounding once (``step_size`` in float64 on the host); entries
absent from the gradient keep ``p``, ``m`` and ``v``. The step count ``t``
advances for every parameter on every step, also with an empty gradient (torch
then skips the update but counts the step).

Coalescing sums duplicate coordinates in their order in ``indices``. torch's
CPU coalesce sums them in the order of an unstable sort of the coordinates
(``indices.sort(0)``), which keeps the given order for up to 16 entries; with
more entries and three or more duplicates of one coordinate, torch's float32
sum can differ from this one by rounding. Feeding torch's coalesced gradient
(``grad.coalesce()``'s indices and values) reproduces torch bit for bit.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, torch_optimizer

__all__ = ["MaskedGrad", "SparseAdamState", "SparseGrad", "embedding_sparse_grad", "sparseadam"]


class SparseGrad(NamedTuple):
    """torch's sparse COO gradient: ``indices`` ``(sparse_dim, nnz)``, ``values`` ``(nnz, *dense_shape)``."""

    indices: jax.Array
    values: jax.Array


class MaskedGrad(NamedTuple):
    """A coalesced sparse gradient as a dense array and the mask of its present entries (leading axes)."""

    grad: jax.Array
    mask: jax.Array


class SparseAdamState(NamedTuple):
    """``exp_avg``/``exp_avg_sq`` as torch's; ``present`` is the last gradient's mask (the step's input)."""

    count: jax.Array
    exp_avg: Any
    exp_avg_sq: Any
    present: Any


def embedding_sparse_grad(indices: jax.Array, grad_output: jax.Array, num_embeddings: int,
                          padding_idx: int | None = None) -> SparseGrad | MaskedGrad:
    """The gradient ``nn.Embedding(num_embeddings, D, padding_idx, sparse=True)`` gives its weight.

    torch's ``embedding_sparse_backward``: one entry per looked-up index
    (``indices`` of any shape, ``grad_output`` the gradient of the lookup's
    output, ``(*indices.shape, D)``), entries looking up ``padding_idx``
    dropped. Without ``padding_idx`` this is that :class:`SparseGrad`; with it,
    the coalesced :class:`MaskedGrad` with the padding row absent (the same
    gradient: only that row's entries are dropped).
    """
    flat = jnp.reshape(jnp.asarray(indices), (1, -1))
    grad_output = jnp.asarray(grad_output)
    values = jnp.reshape(grad_output, (flat.shape[1], grad_output.shape[-1]))
    grad = SparseGrad(flat, values)
    if padding_idx is None:
        return grad
    if padding_idx < 0:  # nn.Embedding's normalisation
        padding_idx += num_embeddings
    total, present = _coalesce(grad, (num_embeddings, values.shape[1]))
    return MaskedGrad(total, present.at[padding_idx].set(False))


@functools.partial(jax.jit, static_argnums=1)
def _coalesce(grad: SparseGrad, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """Dense sum of the entries (duplicates added in the given order) and the mask of present coordinates."""
    indices = jnp.asarray(grad.indices)
    values = jnp.asarray(grad.values)
    if indices.ndim != 2:
        raise ValueError(f"sparse gradient indices must be 2-D (sparse_dim, nnz), got shape {indices.shape}")
    sparse_dim, nnz = indices.shape
    dense_shape = tuple(shape[sparse_dim:])
    if values.shape != (nnz, *dense_shape):
        raise ValueError(
            f"sparse gradient values must have shape {(nnz, *dense_shape)} for a parameter of shape {shape}, "
            f"got {values.shape}"
        )
    sparse_shape = tuple(shape[:sparse_dim])
    rows = math.prod(sparse_shape)
    flat = jnp.zeros((), jnp.int32)
    for d in range(sparse_dim):  # torch's flatten_indices: row-major
        flat = flat * sparse_shape[d] + indices[d].astype(jnp.int32)
    total = jnp.zeros((rows, *dense_shape), values.dtype)
    seen = jnp.zeros((rows,), bool)

    def add(carry, entry):
        total, seen = carry
        i, v = entry
        # The first entry of a coordinate is copied (0 + v would turn -0.0 into +0.0), later ones added.
        total = total.at[i].set(jnp.where(seen[i], total[i] + v, v))
        return (total, seen.at[i].set(True)), None

    if nnz:
        (total, seen), _ = lax.scan(add, (total, seen), (flat, values))
    return total.reshape(shape), seen.reshape(sparse_shape)


def _check(lr: Any, eps: float, betas: tuple[float, float]) -> None:
    if not callable(lr) and not 0.0 < lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 < eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")


def sparseadam(
    lr: Hyperparameter = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    maximize: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.SparseAdam``, step for step as ``torch.optim._functional.sparse_adam``.

    On the entries present in the gradient (all others unchanged):

    .. math::
        m &\leftarrow m + (g - m)(1 - \beta_1), \qquad
        v \leftarrow v + (g^2 - v)(1 - \beta_2) \\
        p &\leftarrow p - \frac{\gamma \sqrt{1 - \beta_2^t}}{1 - \beta_1^t} \cdot \frac{m}{\sqrt{v} + \epsilon}

    Every gradient leaf is a :class:`SparseGrad` or :class:`MaskedGrad`; a
    plain array raises torch's dense-gradient error. The step size is a
    float64 host scalar; ``sqrt`` is torch's CPU sqrt as chosen by
    ``jax_impl.optim.set_sqrt_mode``.

    Args:
      lr: learning rate γ (float or schedule).
      betas: (β1, β2).
      eps: ε, added after the square root.
      maximize: ascend instead of descend.
    """
    _check(lr, eps, betas)
    beta1, beta2 = betas

    def host_scalars(step, h, sstate):
        bias_correction1 = 1 - h["beta1"] ** step  # torch's step is a Python int here
        bias_correction2 = 1 - h["beta2"] ** step
        step_size = h["lr"] * math.sqrt(bias_correction2) / bias_correction1
        return {
            "one_minus_beta1": 1 - h["beta1"],
            "one_minus_beta2": 1 - h["beta2"],
            "eps": h["eps"],
            "neg_step_size": -step_size,
        }, {}

    def init_leaf(p):
        return _buffers.zeros_like(p), _buffers.zeros_like(p), _buffers.zeros(p.shape[:1], bool, p)

    def update_leaf(ops, c, step, g, p, m, v, present):
        g = -g if maximize else g
        update1 = ops.mul(g - m, c["one_minus_beta1"])
        new_m = m + update1  # exp_avg.add_(sparse); numer = update1 + old is the same sum
        update2 = ops.mul(ops.rounded(g * g) - v, c["one_minus_beta2"])
        new_v = v + update2
        denom = ops.sqrt(new_v) + c["eps"]
        new_p = p + ops.mul(new_m / denom, c["neg_step_size"])
        keep = jnp.reshape(present, present.shape + (1,) * (p.ndim - present.ndim))
        return (jnp.where(keep, new_p, p), jnp.where(keep, new_m, m), jnp.where(keep, new_v, v), present)

    inner = torch_optimizer(
        state_cls=SparseAdamState,
        hyper={"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("exp_avg", "exp_avg_sq", "present"),
        converges=True,  # bias corrections 1 - beta**t: monotone, constant once beta**t underflows
    )

    def dense(grad: Any, param: Any) -> tuple[jax.Array, jax.Array]:
        shape = tuple(jnp.shape(param))
        if isinstance(grad, SparseGrad):
            total, present = _coalesce(grad, shape)
        elif isinstance(grad, MaskedGrad):
            total, present = jnp.asarray(grad.grad), jnp.asarray(grad.mask, bool)
            if total.shape != shape or present.shape != shape[: present.ndim]:
                raise ValueError(f"masked gradient of shape {total.shape} / mask {present.shape} does not match "
                                 f"parameter shape {shape}")
        else:
            raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")
        return total.astype(jnp.result_type(param)), present

    def split(grads: Any, params: Any) -> tuple[Any, Any]:
        is_grad = lambda x: isinstance(x, (SparseGrad, MaskedGrad))  # noqa: E731
        treedef = jax.tree.structure(params)
        leaves = treedef.flatten_up_to(jax.tree.map(lambda x: x, grads, is_leaf=is_grad))
        pairs = [dense(g, p) for g, p in zip(leaves, treedef.flatten_up_to(params))]
        return treedef.unflatten([t for t, _ in pairs]), treedef.unflatten([m for _, m in pairs])

    def step(grads: Any, state: SparseAdamState, params: Any) -> tuple[Any, SparseAdamState]:
        if params is None:
            raise ValueError("torch optimizers update parameters in place: pass params to update()")
        totals, present = split(grads, params)
        return inner.step(totals, state._replace(present=present), params)

    def update(updates: Any, state: SparseAdamState, params: Any = None, **extra_args: Any):
        del extra_args
        new_params, new_state = step(updates, state, params)
        return jax.tree.map(lambda n, p: n - p, new_params, params), new_state

    return TorchTransformation(inner.init, update, step)
