"""A data-parallel train step with torch ``DistributedDataParallel``'s semantics.

torch's DDP (``torch/nn/parallel/distributed.py``, torch 2.13), which this
reproduces on a JAX device axis:

* every replica runs the forward and backward pass on its own slice of the
  batch (``DistributedSampler`` gives each rank ``len(dataset) / world_size``
  samples), so a replica's loss is the mean over its local batch;
* gradients are averaged over the replicas (the reducer divides each gradient
  by ``world_size`` and all-reduces the sum): ``lax.pmean``; every replica
  then takes the same optimizer step, so parameters stay identical;
* BatchNorm normalises with the *local* batch statistics, and with
  ``broadcast_buffers=True`` (the default) rank 0's buffers (running mean and
  variance, ``num_batches_tracked``) overwrite every rank's at the start of
  each forward. The buffers that matter are therefore rank 0's, each step
  updated from rank 0's local batch: here every replica takes replica 0's
  updated buffers after the step (an exact copy: a masked ``psum``), which
  is what the next forward of every torch rank starts from;
* with ``SyncBatchNorm`` (``SyncBatchNorm.convert_sync_batchnorm(model,
  axis_name=...)``) the statistics are those of the global batch, and every
  replica computes the same buffers.

The per-replica function is written once, against a named axis, and mapped
three ways: :func:`pmap_train_step` (``jax.pmap``: arrays carry a leading
device axis), :func:`sharded_train_step` (``jax.jit`` of ``shard_map`` over
a ``Mesh``: the batch is one array sharded along its first axis, params
replicated; the form that also spans processes, see
:mod:`jax_impl.parallel.launch`) and :func:`vmap_train_step` (``jax.vmap``
with the same axis name: N replicas on one device, e.g. DDP's arithmetic
for N ranks on a single GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.nn.utils import clip_grad_norm_
from jax_impl.train import TrainState, init_train_state, loss_and_grads, merge_model

__all__ = [
    "AXIS",
    "TrainState",
    "init_train_state",
    "merge_model",
    "pmap_train_step",
    "replicate",
    "sharded_train_step",
    "train_step_fn",
    "unreplicate",
    "vmap_train_step",
]

AXIS = "batch"  # the default name of the replica axis


def _from_replica_zero(tree: Any, axis_name: str) -> Any:
    """Every replica gets replica 0's values, bit for bit (x + 0 + ... + 0 == x)."""
    first = lax.axis_index(axis_name) == 0
    return jax.tree.map(lambda v: lax.psum(jnp.where(first, v, jnp.zeros_like(v)), axis_name), tree)


def _mean(tree: Any, axis_name: str, ordered: bool) -> Any:
    """The mean over replicas: ``lax.pmean``, or with ``ordered`` the sum in rank order ``((g0 + g1) + g2) + ...``
    divided by N, the same numbers however the replicas are spread over devices and processes."""
    if not ordered:
        return lax.pmean(tree, axis_name)

    def one(value):
        gathered = lax.all_gather(value, axis_name)
        total = gathered[0]
        for i in range(1, gathered.shape[0]):
            total = total + gathered[i]
        return total / gathered.shape[0]

    return jax.tree.map(one, tree)


def train_step_fn(
    graphdef: Any,
    loss_fn: Callable[[Any, Any], Any],
    tx: Any,
    *,
    axis_name: str = AXIS,
    broadcast_buffers: bool = True,
    ordered_mean: bool = False,
    clip_grad_norm: float | None = None,
    norm_type: float = 2.0,
    accumulate: int = 1,
    autocast: Any = None,
) -> Callable[..., tuple[TrainState, Any]]:
    """The per-replica DDP step ``(state, x, y) -> (state, mean loss over replicas)``.

    Call it under a mapping that names ``axis_name`` (``jax.pmap``,
    ``shard_map``, ``jax.vmap``); :func:`pmap_train_step`,
    :func:`sharded_train_step` and :func:`vmap_train_step` do that.

    Args:
      graphdef: from :func:`init_train_state`.
      loss_fn: ``loss_fn(outputs, targets)``, a mean over the local batch
        (e.g. ``jax_impl.nn.CrossEntropyLoss()``), as each torch rank computes.
      tx: a ``jax_impl.optim`` transformation (its exact ``step`` is used when
        it has one, else ``optax.apply_updates``).
      axis_name: the replica axis.
      broadcast_buffers: torch DDP's argument: ``True`` makes every replica
        continue from replica 0's buffers; ``False`` keeps each replica's own.
      ordered_mean: average the gradients (and losses) in rank order
        (``all_gather``, then ``((g0 + g1) + g2) + ...``, divided by N) instead
        of ``lax.pmean``, whose summation order follows the topology (XLA's
        in-process all-reduce, gloo across processes): the step then gives
        the same bits on N devices in one process and on N devices spread
        over several. Costs N copies of the gradients on each device.
      clip_grad_norm: ``max_norm`` of ``torch.nn.utils.clip_grad_norm_(model.parameters(),
        max_norm, norm_type)`` called between ``backward()`` (DDP's averaged
        gradients, the same on every rank) and ``step()``; ``None`` clips nothing.
      norm_type: the clip's ``p``.
      accumulate: ``k > 1``: gradient accumulation as a DDP recipe writes it,
        each rank running ``with ddp.no_sync(): (loss_fn(ddp(x), y) / k).backward()``
        on its first micro-batches and ``(loss / k).backward()`` on the last
        (which all-reduces the summed gradients) before ``step()``. The step
        then takes ``(state, micro_batches)``, a sequence of 1 to ``k``
        ``(x, y)`` pairs (an epoch's trailing group may be shorter; each loss
        is still divided by ``k``): each replica sums its micro-batches'
        gradients in order, and the sums are averaged over replicas once.
        DDP broadcasts rank 0's buffers only before a forward that follows a
        synchronising one, i.e. before a step's first micro-batch: replica
        0's buffers after the step, as without accumulation. Its loss is the
        mean over replicas of each replica's mean micro-batch loss.
      autocast: ``jnp.bfloat16`` runs each forward and loss as under
        ``torch.autocast("cpu", dtype=torch.bfloat16)`` on each rank
        (:func:`jax_impl.train.train_step`'s); ``None`` runs without it.

    Returns:
      The step function. Its loss is the mean of the replicas' local losses.
    """
    import optax

    if not isinstance(accumulate, int) or accumulate < 1:
        raise ValueError(f"accumulate must be a positive integer, got {accumulate!r}")

    def finish(state: TrainState, grads: Any, buffers: Any, loss: Any) -> tuple[TrainState, Any]:
        grads = _mean(grads, axis_name, ordered_mean)
        if clip_grad_norm is not None:
            grads = clip_grad_norm_(grads, clip_grad_norm, norm_type)[1]
        if hasattr(tx, "step"):
            params, opt_state = tx.step(grads, state.opt_state, state.params)
        else:
            updates, opt_state = tx.update(grads, state.opt_state, state.params)
            params = optax.apply_updates(state.params, updates)
        if broadcast_buffers:
            buffers = _from_replica_zero(buffers, axis_name)
        return TrainState(params, buffers, opt_state), _mean(loss, axis_name, ordered_mean)

    def step(state: TrainState, x: Any, y: Any) -> tuple[TrainState, Any]:
        loss, grads, buffers = loss_and_grads(graphdef, loss_fn, state, x, y, autocast=autocast)
        return finish(state, grads, buffers, loss)

    def accumulating_step(state: TrainState, micro_batches: Any) -> tuple[TrainState, Any]:
        batches = list(micro_batches)
        if not 1 <= len(batches) <= accumulate:
            raise ValueError(f"expected 1 to {accumulate} micro-batches, got {len(batches)}")
        buffers, grads, total = state.buffers, None, None
        for x, y in batches:
            loss, micro, buffers = loss_and_grads(graphdef, loss_fn, state._replace(buffers=buffers), x, y,
                                                  accumulate, autocast)
            # torch's AccumulateGrad: `.grad += new`, the running sum first.
            grads = micro if grads is None else jax.tree.map(lambda a, g: a + g, grads, micro)
            total = loss if total is None else total + loss
        return finish(state, grads, buffers, total / len(batches))

    return step if accumulate == 1 else accumulating_step


def replicate(tree: Any, devices: list[Any] | None = None, *, copies: int | None = None,
              axis_name: str = AXIS) -> Any:
    """``tree`` with a leading axis of ``len(devices)`` copies, one on each device (for ``pmap``).

    With ``copies``: that many copies stacked on the default device (for :func:`vmap_train_step`).
    ``axis_name`` names the devices' mesh axis: ``pmap`` returns its outputs sharded over a mesh axis of its
    ``axis_name``, so a state replicated on the step's axis name is the sharding the step's outputs have,
    and the second call reuses the first call's compilation instead of compiling again.
    """
    if copies is not None:
        if devices is not None:
            raise ValueError("give devices (pmap) or copies (vmap), not both")
        return jax.tree.map(lambda v: jnp.broadcast_to(v, (copies, *jnp.shape(v))).copy(), tree)
    devices = list(devices or jax.local_devices())
    mesh = jax.sharding.Mesh(devices, (axis_name,))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis_name))
    return jax.tree.map(lambda v: jax.device_put(jnp.broadcast_to(v, (len(devices), *jnp.shape(v))), sharding), tree)


def unreplicate(tree: Any) -> Any:
    """Replica 0 of a ``pmap``-ed tree (for DDP: rank 0's model, as torch saves it)."""
    return jax.tree.map(lambda v: v[0], tree)


def pmap_train_step(
    graphdef: Any,
    loss_fn: Callable[[Any, Any], Any],
    tx: Any,
    *,
    axis_name: str = AXIS,
    broadcast_buffers: bool = True,
    devices: list[Any] | None = None,
    ordered_mean: bool = False,
    clip_grad_norm: float | None = None,
    norm_type: float = 2.0,
    accumulate: int = 1,
    autocast: Any = None,
) -> Callable[..., tuple[TrainState, Any]]:
    """The DDP step under ``jax.pmap``: state from :func:`replicate`, batches shaped ``(devices, local_batch, ...)``.

    The state is donated (updated in place). Returns ``(state, loss)`` with the
    loss replicated (``loss[0]`` is the mean over replicas). ``accumulate`` and
    ``autocast`` as :func:`train_step_fn`'s (micro-batches each shaped ``(devices, local_batch, ...)``).
    """
    step = train_step_fn(graphdef, loss_fn, tx, axis_name=axis_name, broadcast_buffers=broadcast_buffers,
                         ordered_mean=ordered_mean, clip_grad_norm=clip_grad_norm, norm_type=norm_type,
                         accumulate=accumulate, autocast=autocast)
    return jax.pmap(step, axis_name=axis_name, devices=devices, donate_argnums=(0,))


def sharded_train_step(
    graphdef: Any,
    loss_fn: Callable[[Any, Any], Any],
    tx: Any,
    mesh: jax.sharding.Mesh,
    *,
    axis_name: str = AXIS,
    broadcast_buffers: bool = True,
    ordered_mean: bool = False,
    clip_grad_norm: float | None = None,
    norm_type: float = 2.0,
    accumulate: int = 1,
    autocast: Any = None,
) -> Callable[..., tuple[TrainState, Any]]:
    """The DDP step as ``jax.jit`` of ``shard_map`` over ``mesh`` (pmap's successor).

    The state is replicated over the mesh (``NamedSharding(mesh, P())``), the
    global batch is sharded along its first axis (``P(axis_name)``): device
    ``i`` of the mesh holds rows ``[i * local, (i + 1) * local)``, i.e. rank
    ``i``'s local batch. Works the same when the mesh spans several processes
    (``jax.distributed``): build the global batch with
    ``jax.make_array_from_process_local_data``. ``accumulate`` and
    ``autocast`` as :func:`train_step_fn`'s (each micro-batch a global batch).
    """
    from jax.sharding import PartitionSpec as P

    step = train_step_fn(graphdef, loss_fn, tx, axis_name=axis_name, broadcast_buffers=broadcast_buffers,
                         ordered_mean=ordered_mean, clip_grad_norm=clip_grad_norm, norm_type=norm_type,
                         accumulate=accumulate, autocast=autocast)
    batch = (P(axis_name),) if accumulate > 1 else (P(axis_name), P(axis_name))  # micro-batches: one spec each leaf
    mapped = jax.shard_map(step, mesh=mesh, in_specs=(P(), *batch), out_specs=(P(), P()), check_vma=False)
    return jax.jit(mapped, donate_argnums=(0,))


def vmap_train_step(
    graphdef: Any,
    loss_fn: Callable[[Any, Any], Any],
    tx: Any,
    *,
    axis_name: str = AXIS,
    broadcast_buffers: bool = True,
    ordered_mean: bool = False,
    clip_grad_norm: float | None = None,
    norm_type: float = 2.0,
    accumulate: int = 1,
    autocast: Any = None,
) -> Callable[..., tuple[TrainState, Any]]:
    """The DDP step for N replicas on one device: ``jax.jit`` of ``jax.vmap`` over a named axis.

    The same per-replica function as :func:`pmap_train_step`, with the same
    arguments (state from ``replicate(state, copies=N)``, batches shaped
    ``(N, local_batch, ...)``) and results; the collectives (``pmean``,
    SyncBatchNorm's ``psum``) run over the vmapped axis. For N ranks'
    arithmetic where fewer than N devices exist. ``accumulate`` and
    ``autocast`` as :func:`train_step_fn`'s.
    """
    step = train_step_fn(graphdef, loss_fn, tx, axis_name=axis_name, broadcast_buffers=broadcast_buffers,
                         ordered_mean=ordered_mean, clip_grad_norm=clip_grad_norm, norm_type=norm_type,
                         accumulate=accumulate, autocast=autocast)
    return jax.jit(jax.vmap(step, axis_name=axis_name), donate_argnums=(0,))
