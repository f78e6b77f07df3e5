"""Data parallelism with torch ``DistributedDataParallel``'s semantics: ``pmap``, sharded ``jit``, processes.

* :mod:`jax_impl.parallel.step`: the DDP train step (gradients averaged over
  replicas, BatchNorm buffers from replica 0, or SyncBatchNorm), mapped with
  ``jax.pmap``, ``jax.jit`` + ``shard_map`` over a ``Mesh``, or ``jax.vmap``
  (N replicas on one device);
* :mod:`jax_impl.parallel.launch`: N local processes joined by
  ``jax.distributed`` (gloo collectives on CPU, NCCL through XLA on GPUs),
  the counterpart of ``torch_ref.parallel.launch`` / ``torchrun``.

:mod:`~jax_impl.parallel.launch` is pure Python (jax is imported inside the
processes it starts) and ``torch_ref.parallel`` uses it; the step functions
are imported on first use, so importing the launcher does not start jax.
"""

from typing import TYPE_CHECKING

from jax_impl._lazy import lazy_attributes
from jax_impl.parallel.launch import ProcessFailed, free_port, init_from_env, launch, spawn

_STEP_NAMES = (
    "AXIS", "TrainState", "init_train_state", "merge_model", "pmap_train_step", "replicate", "sharded_train_step",
    "train_step_fn", "unreplicate", "vmap_train_step",
)
__getattr__, __dir__ = lazy_attributes(__name__, dict.fromkeys(_STEP_NAMES, "jax_impl.parallel.step"), globals())

if TYPE_CHECKING:
    from jax_impl.parallel.step import (
        AXIS,
        TrainState,
        init_train_state,
        merge_model,
        pmap_train_step,
        replicate,
        sharded_train_step,
        train_step_fn,
        unreplicate,
        vmap_train_step,
    )

__all__ = [
    "AXIS",
    "ProcessFailed",
    "TrainState",
    "free_port",
    "init_from_env",
    "init_train_state",
    "launch",
    "merge_model",
    "pmap_train_step",
    "replicate",
    "sharded_train_step",
    "spawn",
    "train_step_fn",
    "unreplicate",
    "vmap_train_step",
]
