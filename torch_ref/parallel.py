"""torch's real data parallelism: ``DistributedDataParallel`` over ``torch.distributed`` (gloo on CPU, NCCL on GPU).

Nothing here reimplements DDP: :func:`wrap` returns
``torch.nn.parallel.DistributedDataParallel`` (optionally after
``torch.nn.SyncBatchNorm.convert_sync_batchnorm``), :func:`sampler` returns
``torch.utils.data.DistributedSampler``. :func:`launch` starts N local ranks
on a free loopback port, or one host's ranks of a run over several hosts (the process handling is ``jax_impl.parallel.spawn``'s:
a rank that raises fails the whole run with its error, the others are
terminated); :func:`init_from_env` joins a run started by ``torchrun``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from jax_impl.parallel.launch import ProcessFailed, spawn

__all__ = ["ProcessFailed", "init_from_env", "launch", "resolve_backend", "sampler", "wrap"]


def resolve_backend(backend: str = "auto", world_size: int | None = None) -> str:
    """``"auto"``: NCCL when CUDA is available, else gloo (torch's usual choice).

    With ``world_size`` given, ``"auto"`` picks NCCL only if there are at
    least that many GPUs: NCCL refuses two ranks on one GPU ("Duplicate GPU
    detected"), while gloo runs them, on CUDA tensors too.
    """
    if backend == "auto":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() and dist.is_nccl_available() else 0
        return "nccl" if gpus and (world_size is None or gpus >= world_size) else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    return backend


def _setup(backend: str, local_world_size: int | None, rank: int, world_size: int, address: str, port: int) -> None:
    local = local_world_size or world_size
    os.environ.update({"MASTER_ADDR": address, "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank % local),
                       "LOCAL_WORLD_SIZE": str(local), "GROUP_RANK": str(rank // local)})
    if torch.cuda.is_available():  # rank r on GPU r mod #GPUs (several ranks per GPU only under gloo)
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, rank=rank, world_size=world_size)


def _teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def launch(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), *, backend: str = "auto",
           timeout: float | None = None, local_world_size: int | None = None, node_rank: int | None = None,
           master_addr: str = "127.0.0.1", master_port: int | None = None) -> list[Any]:
    """Runs ``fn(rank, world_size, *args)`` in ``world_size`` processes with ``init_process_group`` done.

    Each process gets ``MASTER_ADDR``, ``MASTER_PORT`` (a free local one
    unless given), ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE`` and ``GROUP_RANK`` as ``torchrun`` sets them on
    hosts of ``local_world_size`` ranks each (default: all ranks on one host).

    With ``node_rank`` (torchrun's ``--node-rank``) only that host's ranks
    start here, ``node_rank * local_world_size`` onwards; every host runs the
    same call with its own ``node_rank`` and node 0's ``master_addr`` and
    ``master_port``.

    Returns:
      The return values of the ranks started here, in rank order (picklable).

    Raises:
      ProcessFailed: a rank raised (its type, message and traceback) or died.
      TimeoutError: ``timeout`` seconds passed.
    """
    from functools import partial

    ranks = None
    if node_rank is not None:
        local = local_world_size or world_size
        if world_size % local or not 0 <= node_rank < world_size // local:
            raise ValueError(f"node_rank {node_rank} is not a host of {world_size} ranks in hosts of {local}")
        ranks = range(node_rank * local, (node_rank + 1) * local)
    setup = partial(_setup, resolve_backend(backend, local_world_size or world_size), local_world_size)
    return spawn(fn, world_size, args, setup=setup, teardown=_teardown, timeout=timeout, ranks=ranks,
                 address=master_addr, port=master_port)


def init_from_env(backend: str = "auto") -> tuple[int, int, int]:
    """``init_process_group`` for a process started by ``torchrun``: returns ``(rank, world_size, local_rank)``."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    backend = resolve_backend(backend)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend)
    return rank, world_size, local_rank


def wrap(model: torch.nn.Module, *, sync_bn: bool = False, broadcast_buffers: bool = True,
         device: str | None = None, **kwargs: Any) -> torch.nn.parallel.DistributedDataParallel:
    """``DistributedDataParallel(model)`` (after ``SyncBatchNorm.convert_sync_batchnorm`` if ``sync_bn``).

    Args:
      device: ``"cuda"`` moves the model to this rank's GPU (NCCL or gloo;
        torch's ``SyncBatchNorm`` needs CUDA tensors), ``"cpu"`` keeps it on
        the CPU; ``None``: CUDA under NCCL, else CPU. On CPU ``device_ids``
        stays ``None``, as torch requires.
    """
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"device must be None, 'cpu' or 'cuda', got {device!r}")
    if sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if device == "cuda" or (device is None and dist.get_backend() == "nccl"):
        gpu = torch.cuda.current_device()
        model = model.cuda(gpu)
        kwargs.setdefault("device_ids", [gpu])
    if not broadcast_buffers:  # torch 2.13 deprecates the argument but keeps its meaning; True is the default
        kwargs["broadcast_buffers"] = False
    return torch.nn.parallel.DistributedDataParallel(model, **kwargs)


def sampler(dataset: Any, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False
            ) -> torch.utils.data.DistributedSampler:
    """torch's ``DistributedSampler`` for this rank (rank and world size from the process group)."""
    return torch.utils.data.DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
