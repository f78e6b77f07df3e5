"""Module-level functions the parallel tests run in spawned processes (spawn pickles them by name)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np


def raise_on_rank_one(rank: int, world_size: int) -> int:
    if rank == 1:
        raise ValueError("rank 1 gives up")
    time.sleep(60)  # rank 0 would wait for rank 1 forever
    return rank


def torch_collective_then_raise(rank: int, world_size: int) -> int:
    import torch
    import torch.distributed as dist

    if rank == 1:
        raise ValueError("rank 1 gives up before the all_reduce")
    dist.all_reduce(torch.ones(1))  # blocks: rank 1 never joins
    return rank


def torch_all_reduce(rank: int, world_size: int) -> tuple[int, int, str, float]:
    """``(rank, world size, GROUP_RANK, the all-reduced sum of rank + 1)``."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    return rank, world_size, os.environ["GROUP_RANK"], float(value)


def die_on_rank_one(rank: int, world_size: int) -> int:
    if rank == 1:
        os._exit(3)
    time.sleep(60)
    return rank


def jax_ranks(rank: int, world_size: int) -> tuple[int, int, int, float]:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("batch",))
    local = np.full((2,), float(rank + 1), np.float32)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), local)
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x)
    return jax.process_index(), jax.process_count(), jax.device_count(), float(total)


def single_vs_replicated(rank: int, world_size: int, n: int) -> dict[str, float]:
    """In a process with ``n`` devices: the n-device steps (pmap, sharded; and n vmapped replicas on one
    device) vs one full-batch step, no BN."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_impl.nn as jnn
    from jax_impl import optim, parallel
    from jax_impl.models import LeNet

    model = LeNet(num_classes=10, in_channels=1, image_size=8)
    tx = optim.sgd(lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss = jnn.CrossEntropyLoss()
    graphdef, state0 = parallel.init_train_state(model, tx)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((10, 8 * n, 1, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 10, (10, 8 * n))

    one = jax.jit(jax.vmap(parallel.train_step_fn(graphdef, loss, tx), axis_name=parallel.AXIS,
                           in_axes=(None, 0, 0), out_axes=(None, None)))
    state = state0
    for x, y in zip(xs, ys):
        state, _ = one(state, x[None], y[None])
    full = state.params

    pstep = parallel.pmap_train_step(graphdef, loss, tx)
    state = parallel.replicate(state0)
    for x, y in zip(xs, ys):
        state, _ = pstep(state, x.reshape(n, 8, 1, 8, 8), y.reshape(n, 8))
    pmapped = parallel.unreplicate(state).params

    vstep = parallel.vmap_train_step(graphdef, loss, tx)
    state = parallel.replicate(state0, copies=n)
    for x, y in zip(xs, ys):
        state, _ = vstep(state, x.reshape(n, 8, 1, 8, 8), y.reshape(n, 8))
    vmapped = parallel.unreplicate(state).params

    # last: device_put onto the mesh may alias state0's buffers, which the sharded step donates
    mesh = Mesh(np.array(jax.devices()), (parallel.AXIS,))
    sstep = parallel.sharded_train_step(graphdef, loss, tx, mesh)
    rows = NamedSharding(mesh, P(parallel.AXIS))
    state = jax.device_put(state0, NamedSharding(mesh, P()))
    for x, y in zip(xs, ys):
        state, _ = sstep(state, jax.device_put(x, rows), jax.device_put(y, rows))
    sharded = state.params

    def scaled(a, b):
        return max(float(jnp.max(jnp.abs(u - v)) / jnp.max(jnp.abs(v)))
                   for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))

    return {"devices": jax.device_count(), "pmap_vs_full": scaled(pmapped, full),
            "sharded_vs_full": scaled(sharded, full), "pmap_vs_sharded": scaled(pmapped, sharded),
            "vmap_vs_pmap": scaled(vmapped, pmapped)}


def replica_dropout_masks(rank: int, world_size: int, seeds: list[int], shape: tuple[int, ...]) -> dict[str, Any]:
    """In a process of 2 devices: dropout's keep masks of each replica under pmap and under the sharded
    step's shard_map, each replica drawing from its own generator (jax_impl.random.replica_generators)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    import jax_impl.nn.functional as JF
    from jax_impl.random import Generator, replica_generators

    x = jnp.ones((2, *shape), jnp.float32)
    out = {}
    with replica_generators("b", [Generator().manual_seed(s) for s in seeds]):
        step = jax.pmap(lambda a: JF.dropout(a, 0.5), axis_name="b")
        out["pmap"] = [np.asarray(step(x)) != 0 for _ in range(2)]  # two calls: the streams advance
    mesh = Mesh(np.array(jax.devices()), ("b",))
    with replica_generators("b", [Generator().manual_seed(s) for s in seeds]):
        sharded = jax.jit(jax.shard_map(lambda a: JF.dropout(a, 0.5), mesh=mesh, in_specs=P("b"),
                                        out_specs=P("b"), check_vma=False))
        flat = x.reshape(-1, *shape[1:])
        out["sharded"] = [np.asarray(sharded(flat)).reshape(2, *shape) != 0 for _ in range(2)]
    return out
