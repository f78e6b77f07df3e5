"""torch DDP with N ranks vs the JAX data-parallel step on N devices: same init, same shards, same updates.

:func:`compare_ddp` trains both for ``steps`` optimizer steps and returns
rank 0's / replica 0's final ``state_dict`` (parameters and BatchNorm
buffers) of each, plus per-step losses (the mean over ranks):

* torch: ``torch_ref.parallel.launch`` starts ``world_size`` processes
  (gloo on CPU; with CUDA the ranks run on the GPUs, NCCL if there is one
  GPU per rank, else gloo over CUDA tensors, TF32 off); each wraps the model
  in the real ``DistributedDataParallel`` (``SyncBatchNorm`` when
  ``sync_bn``; torch runs it on GPUs only, so without CUDA the SyncBN
  reference is one torch process training on the concatenated global
  batches) and reads its shard through
  ``DistributedSampler(shuffle=True, seed=seed)`` and a ``DataLoader`` of
  ``local_batch`` samples, calling ``set_epoch`` every epoch;
* JAX: one process with ``world_size`` devices (``pmap`` or the sharded
  ``jit``), ``world_size`` vmapped replicas on one device
  (``mode="vmap"``, e.g. on a one-GPU box) or ``world_size`` processes
  joined by ``jax.distributed`` (``mode="multiprocess"``; ``processes`` of ``world_size / processes``
  devices each: the shape of several hosts), each replica reading rank ``i``'s batches from
  ``jax_impl.data.DistributedSampler`` with the same seed.

Both start from the seeded torch model's weights (converted). Uneven data
(``len(dataset)`` not a multiple of ``world_size * local_batch``) is handled
as torch does: the sampler pads with repeated indices and the last local
batches are smaller, equally on every rank.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from parity.build import build_loss, float_dtypes
from parity.measure import input_array

__all__ = [
    "DDPSpec",
    "Hosts",
    "RunContext",
    "build_torch_model",
    "compare_ddp",
    "divergence",
    "initial_state",
    "jax_run",
    "param_names",
    "rank_generators",
    "rank_transform",
    "steps_per_epoch",
    "torch_reference",
    "validate_spec",
]


@dataclasses.dataclass(frozen=True)
class Hosts:
    """This host's part of a run over several hosts (``parity run --coordinator``).

    Every host runs the same command with its own ``process_id``; process 0's
    host (``address``) listens on three ports: ``port`` for torch's DDP store,
    ``port + 1`` for the JAX coordinator and ``port + 2`` for the store of
    torch's float64 twin. Each host starts its ``world_size / num_processes``
    torch ranks and one JAX process with as many local devices.
    """

    address: str
    port: int
    num_processes: int
    process_id: int

    def __post_init__(self) -> None:
        if self.num_processes < 1 or not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process id must be in 0..{self.num_processes - 1}, got {self.process_id}")
        if not 0 < self.port < 65534:
            raise ValueError(f"coordinator port must be in 1..65533 (it uses three ports), got {self.port}")


@dataclasses.dataclass(frozen=True)
class DDPSpec:
    """What one data-parallel side trains, picklable (it travels to every process); how it is run (progress,
    snapshots, staging, resume, hosts) is its :class:`RunContext`."""

    model: str
    model_kwargs: dict[str, Any]
    optimizer: Any  # {"name": "SGD", "lr": ..., ...} or parity.config.OptimizerConfig (param_groups too)
    x: np.ndarray
    y: np.ndarray
    world_size: int = 2
    local_batch: int = 8
    steps: int = 20
    seed: int = 0
    sync_bn: bool = False
    dtype: Literal["float32", "float64"] = "float32"
    mode: Literal["pmap", "sharded", "vmap", "multiprocess"] = "pmap"
    torch_device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when torch has it
    backend: Literal["auto", "gloo", "nccl"] = "auto"  # torch_ref.parallel.resolve_backend
    scheduler: Any = None  # parity.config.SchedulerConfig: torch's scheduler, stepped per its interval
    loss: Any = None  # parity.config.LossConfig (torch.nn / jax_impl.nn class and kwargs); None: CrossEntropyLoss()
    # mode="multiprocess": JAX processes joined by jax.distributed (hosts), each with world_size / processes
    # local devices; None: world_size processes of one device.
    processes: int | None = None
    # JAX averages gradients in rank order (jax_impl.parallel's ordered_mean): the same bits in every mode and
    # process layout for a given world_size.
    ordered_mean: bool = True
    # A user's model pair by import path, ("pkg.module:TorchModel", "pkg.module:JaxModel"), each called with
    # model_kwargs; None: torch_ref.models.<model> and jax_impl.models.<model>.
    model_paths: tuple[str, str] | None = None
    # torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm, clip_grad_norm_type) between
    # backward (DDP's averaged gradients) and the optimizer step; None: no clipping.
    clip_grad_norm: float | None = None
    clip_grad_norm_type: float = 2.0
    # Gradient accumulation (train.accumulate): each optimizer step runs this many local batches per rank,
    # DDP's ddp.no_sync() on all but the last; steps count optimizer steps.
    accumulate: int = 1
    # train.autocast: "bfloat16" runs each forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
    # (float32 runs; the float64 twin runs without it, as torch's autocast leaves float64 alone); None: off.
    autocast: str | None = None
    # data.transform's configs (parity.config.TransformConfig): each rank applies them to its samples, as its
    # DataLoader fetches them; random ones draw from the rank's global generator. (): the arrays as they are.
    transform: tuple[Any, ...] = ()
    # The torch model's parameter names in named_parameters() order (what param groups match and a report
    # compares), filled in by validate_spec; (): built from a fresh model when asked (param_names).
    param_names: tuple[str, ...] = ()

    def steps_per_epoch(self) -> int:
        return steps_per_epoch(len(self.x), self.world_size, self.local_batch, self.accumulate)


@dataclasses.dataclass(frozen=True)
class RunContext:
    """How a side of a data-parallel run is run, beside what it trains (:class:`DDPSpec`); picklable.

    The default context trains from the spec's initial weights, silently, keeping only the final state.
    """

    # Steps (counted from 1) after which rank 0 / replica 0 records its state_dict, e.g. each epoch's end.
    snapshot_steps: tuple[int, ...] = ()
    # Where training starts: a whole epoch's state from a checkpoint (resume_state of a previous run's side:
    # {"step", "epoch", "model", "optimizer", "scheduler"} for torch, {"step", "epoch", "model", "opt_leaves"}
    # for JAX), one per side and dtype ("torch", "floor", "jax"); None: from `initial`.
    resume: dict[str, Any] | None = None
    phases: Any = None  # parity.progress.Phases: a line on stderr at each snapshot; None: silent
    hosts: Hosts | None = None  # this host's part of a run over several hosts; None: every process runs here
    # A folder where rank 0 / replica 0 writes each whole epoch as it completes (parity.staging), under
    # stage_key ("torch", "floor" or "jax"): what an interrupted run keeps. None: nothing written.
    stage_dir: str | None = None
    stage_key: str = ""

    def start(self, side: str) -> dict[str, Any] | None:
        """The resume state ``side`` starts from, if any."""
        return None if self.resume is None else self.resume.get(side)


def steps_per_epoch(samples: int, world_size: int, local_batch: int, accumulate: int = 1) -> int:
    """Optimizer steps per epoch on each rank: ``DistributedSampler`` (padded to a multiple of
    ``world_size``), batches of ``local_batch`` (the last one smaller, no ``drop_last``), then groups of
    ``accumulate`` batches per step (the last group shorter)."""
    return math.ceil(math.ceil(math.ceil(samples / world_size) / local_batch) / accumulate)


class _Recorder:
    """Rank 0's snapshots at ``context.snapshot_steps``: the state_dict, the seconds since the previous one
    (the snapshot itself excluded) and a progress line; each whole epoch written to ``context.stage_dir``."""

    def __init__(self, spec: DDPSpec, context: RunContext, side: str, active: bool = True) -> None:
        self.spec, self.context, self.side, self.active = spec, context, side, active
        self.snapshots: dict[int, dict[str, np.ndarray]] = {}
        self.seconds: dict[int, float] = {}
        self.resume_state: dict[str, Any] | None = None  # the last whole epoch's, for a checkpoint
        self.losses: list[float] = []
        self.start = time.perf_counter()

    def epoch_end(self, done: int, epoch: int, state: Any) -> None:
        """Call after a whole epoch (its scheduler step included): keeps ``state()`` as the resume state."""
        if self.active and done % self.spec.steps_per_epoch() == 0:
            self.resume_state = {"step": done, "epoch": epoch + 1, **state()}
            if self.context.stage_dir is not None:
                from parity.staging import write_epoch

                write_epoch(self.context.stage_dir, self.context.stage_key, done, epoch + 1, self.losses,
                            self.seconds, {k: v for k, v in self.resume_state.items() if k not in ("step", "epoch")})

    def after(self, done: int, state: Any, loss: float) -> None:
        """Call after each optimizer step; ``done`` steps so far, ``state()`` the state_dict as numpy."""
        if not self.active:
            return
        self.losses.append(loss)
        if done not in self.context.snapshot_steps:
            return
        self.seconds[done] = time.perf_counter() - self.start
        self.snapshots[done] = state()
        if self.context.phases is not None:
            self.context.phases(f"{self.side}: step {done}/{self.spec.steps}, loss {loss:.4f}")
        self.start = time.perf_counter()

    def result(self, losses: list[float], **extra: Any) -> dict[str, Any]:
        return {"losses": losses, "snapshots": self.snapshots, "seconds": self.seconds,
                "resume_state": self.resume_state, **extra}


def build_torch_model(spec: DDPSpec) -> Any:
    """``torch_ref.models.<model>(**model_kwargs)`` (or the user's torch model), freshly initialised from
    torch's global generator as it stands."""
    if spec.model_paths is not None:
        from parity.import_path import import_object

        return import_object(spec.model_paths[0], "model.torch")(**spec.model_kwargs)
    import torch_ref.models as tm

    return getattr(tm, spec.model)(**spec.model_kwargs)


def initial_state(spec: DDPSpec) -> dict[str, np.ndarray]:
    """The seeded torch model's ``state_dict`` as numpy: where both frameworks start. The model draws from
    torch's global generator seeded with ``spec.seed`` inside ``torch.random.fork_rng``: the caller's
    generator is left as it was."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        return {k: v.detach().numpy().copy() for k, v in build_torch_model(spec).state_dict().items()}


def _torch_model(spec: DDPSpec, initial: dict[str, np.ndarray]):
    """``(torch model holding initial, in spec's dtype; that dtype)``."""
    import torch

    dtype = float_dtypes(spec.dtype)[0]
    model = build_torch_model(spec)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial.items()})
    return model.to(dtype), dtype


def _torch_rank(rank: int, world_size: int, spec: DDPSpec, context: RunContext,
                initial: dict[str, np.ndarray]) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist

    from parity.torch_step import micro_batch_groups, model_input, step_loss, torch_train_step
    from torch_ref import parallel

    torch.set_num_threads(1)
    cuda = spec.torch_device == "cuda" or (spec.torch_device == "auto" and torch.cuda.is_available())
    if cuda:  # parity runs: no TF32 in cuBLAS or cuDNN (cuDNN's default is on), deterministic cuDNN
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
    model, dtype = _torch_model(spec, initial)
    ddp = parallel.wrap(model, sync_bn=spec.sync_bn, device="cuda" if cuda else "cpu")
    optimizer = _torch_optimizer(spec, ddp.module)
    scheduler = _torch_scheduler(spec, optimizer)
    if spec.transform:  # each sample through torch_ref's transforms as the loader fetches it; cast at the step
        from parity.build import transforms
        from torch_ref.data import TransformedDataset

        dataset = TransformedDataset(torch.from_numpy(spec.x), torch.from_numpy(spec.y), transforms(spec.transform)[0])
    else:
        dataset = torch.utils.data.TensorDataset(model_input(torch.from_numpy(spec.x), dtype),
                                                 torch.from_numpy(spec.y))
    sampler = parallel.sampler(dataset, shuffle=True, seed=spec.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=spec.local_batch, sampler=sampler)
    loss_fn = build_loss(spec.loss, "torch")
    device = next(ddp.parameters()).device
    loss_device = device if dist.get_backend() == "nccl" else "cpu"  # NCCL reduces GPU tensors only
    losses, step, epoch = [], 0, 0
    start = context.start("floor" if spec.dtype == "float64" and context.resume and "floor" in context.resume
                          else "torch")
    if start is not None:
        # Copies: the spec's tensors travel to every rank in one shared-memory storage (torch's pickling for
        # processes), and torch's optimizer keeps loaded state tensors as they are, updating them in place.
        start = copy.deepcopy(start)
        ddp.module.load_state_dict(start["model"])
        optimizer.load_state_dict(start["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(start["scheduler"])
        step, epoch = start["step"], start["epoch"]
    side = f"torch DDP ({spec.dtype})" if spec.dtype == "float64" else "torch DDP"
    recorder = _Recorder(spec, context, side, active=rank == 0)
    state = lambda: {k: v.detach().cpu().numpy().copy() for k, v in ddp.module.state_dict().items()}  # noqa: E731

    def resume_state() -> dict[str, Any]:
        return {"model": {k: v.detach().cpu().clone() for k, v in ddp.module.state_dict().items()},
                "optimizer": copy.deepcopy(optimizer.state_dict()),
                "scheduler": None if scheduler is None else copy.deepcopy(scheduler.state_dict())}

    def rng_states() -> list[Any]:
        """Every rank's global generator state, in rank order (a collective: every rank calls it)."""
        states: list[Any] = [None] * world_size
        dist.all_gather_object(states, torch.get_rng_state())
        return states

    ddp.train()
    # Each rank's own stream, as torchvision's reference scripts seed it: its dropout masks and its loader's
    # base seed per epoch (the JAX replicas draw the same from jax_impl.random.replica_generators); on
    # resume, where the checkpoint's epoch left it.
    if start is not None and "rng" in start:
        torch.set_rng_state(start["rng"][rank])
    else:
        torch.manual_seed(spec.seed + rank)
    while step < spec.steps:
        sampler.set_epoch(epoch)
        for group in micro_batch_groups(loader, spec.accumulate):
            if step >= spec.steps:
                break
            micro = [(x.to(device), y.to(device)) for x, y in group]
            loss = step_loss(torch_train_step(ddp, loss_fn, optimizer, micro, dtype=dtype,
                                              accumulate=spec.accumulate, autocast=_torch_autocast(spec),
                                              **_clip_args(spec)))
            mean = torch.tensor(loss, dtype=dtype, device=loss_device)  # the rank's loss, exactly
            dist.all_reduce(mean)
            losses.append(float(mean) / world_size)
            step += 1
            recorder.after(step, state, losses[-1])
            if scheduler is not None and spec.scheduler.interval == "step":
                scheduler.step()
        if scheduler is not None and spec.scheduler.interval == "epoch":
            scheduler.step()
        if step % spec.steps_per_epoch() == 0:  # a whole epoch: its resume state holds every rank's generator
            rngs = rng_states()
            recorder.epoch_end(step, epoch, lambda: {**resume_state(), "rng": rngs})
        epoch += 1
    if rank != 0:
        return None
    return recorder.result(losses, state=state())


def _torch_full_batch(spec: DDPSpec, context: RunContext, initial: dict[str, np.ndarray]) -> dict[str, Any]:
    """SyncBatchNorm's reference on CPU (torch's SyncBatchNorm runs on GPUs only): one process, plain
    BatchNorm, each step on the concatenation of the ranks' local batches. With equal local batches that
    is SyncBN's arithmetic: global-batch statistics, and the gradient of the mean of the local mean losses."""
    import torch

    from parity.torch_step import step_loss, torch_train_step

    model, dtype = _torch_model(spec, initial)
    model.train()
    optimizer = _torch_optimizer(spec, model)
    scheduler = _torch_scheduler(spec, optimizer)
    loss_fn = build_loss(spec.loss, "torch")
    losses = []
    per_epoch = spec.steps_per_epoch()
    recorder = _Recorder(spec, context, "torch (global batch)")
    state = lambda: {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}  # noqa: E731
    for step, group in enumerate(_rank_steps(spec, context, spec.world_size, range(spec.world_size))):
        micro = [(torch.from_numpy(np.concatenate([np.asarray(b[0]) for b in batches])),
                  torch.from_numpy(np.concatenate([np.asarray(b[1]) for b in batches]))) for batches in group]
        losses.append(step_loss(torch_train_step(model, loss_fn, optimizer, micro, dtype=dtype,
                                                 accumulate=spec.accumulate, autocast=_torch_autocast(spec),
                                                 **_clip_args(spec))))
        recorder.after(step + 1, state, losses[-1])
        if scheduler is not None and (spec.scheduler.interval == "step" or (step + 1) % per_epoch == 0):
            scheduler.step()
    return recorder.result(losses, state=state())


def _groups(spec: DDPSpec, names: list[str]) -> list[tuple[dict[str, Any], list[str]]]:
    from parity.optim import param_group_members

    return param_group_members(spec.optimizer, names)


def _torch_optimizer(spec: DDPSpec, model: Any) -> Any:
    """The real torch optimizer over ``model`` (DDP's ``module``), one torch param group per config group."""
    from torch_ref.optim import build_optimizer

    named = dict(model.named_parameters())
    return build_optimizer(spec.optimizer, [{"params": [named[n] for n in names], **overrides}
                                            for overrides, names in _groups(spec, list(named))])


def _torch_scheduler(spec: DDPSpec, optimizer: Any) -> Any:
    if spec.scheduler is None:
        return None
    from torch_ref.lr_scheduler import build_scheduler

    return build_scheduler(spec.scheduler, optimizer)


def rank_generators(spec: DDPSpec, ranks: range, context: RunContext = RunContext()) -> list[Any]:
    """One ``jax_impl.random.Generator`` per rank of the world (``None`` for ranks not in ``ranks``), each
    where torch's rank leaves its global generator before training: ``torch.manual_seed(seed + rank)``, or
    on resume the state the JAX side's checkpoint holds for that rank."""
    from jax_impl.random import Generator

    start = context.start("jax")
    saved = None if start is None else start.get("rng")
    if saved is not None:
        return [Generator().set_state(np.asarray(saved[r])) if r in ranks else None for r in range(spec.world_size)]
    return [Generator().manual_seed(spec.seed + r) if r in ranks else None for r in range(spec.world_size)]


def _rng_tensors(states: Any) -> list[Any]:
    """Generator states (numpy uint8, one per rank) as the tensors a checkpoint holds."""
    import torch

    return [torch.from_numpy(np.array(v, dtype=np.uint8)) for v in states]


def _rank_steps(spec: DDPSpec, context: RunContext, world_size: int, ranks: range,
                generators: Sequence[Any] | None = None):
    """Per optimizer step, its micro-batches (``spec.accumulate`` of them; an epoch's last group may be
    shorter), each a list over ``ranks`` of that rank's ``(x, y)`` local batch (jax_impl.data, torch's
    order), from the JAX side's resume point if there is one. ``generators[r]`` is rank ``r``'s global
    generator, which its loader draws each epoch's base seed from (torch's loader takes the global one)."""
    from jax_impl.data import DataLoader, DistributedSampler, TensorDataset
    from parity.torch_step import micro_batch_groups

    if spec.transform:  # rank r's samples through jax_impl's transforms, random ones drawing from its generator
        from jax_impl.data.datasets import ArrayDataset

        datasets = [ArrayDataset(spec.x, spec.y, rank_transform(spec.transform, None if generators is None
                                                                else generators[r])) for r in ranks]
    else:
        datasets = [TensorDataset(spec.x, spec.y)] * len(ranks)
    samplers = [DistributedSampler(d, num_replicas=world_size, rank=r, shuffle=True, seed=spec.seed)
                for r, d in zip(ranks, datasets, strict=True)]
    loaders = [DataLoader(d, batch_size=spec.local_batch, sampler=s,
                          generator=None if generators is None else generators[r])
               for r, d, s in zip(ranks, datasets, samplers, strict=True)]
    start = context.start("jax")
    step, epoch = (start["step"], start["epoch"]) if start is not None else (0, 0)
    while step < spec.steps:
        for s in samplers:
            s.set_epoch(epoch)
        for group in micro_batch_groups(zip(*loaders, strict=True), spec.accumulate):
            if step >= spec.steps:
                return
            yield [list(batches) for batches in group]
            step += 1
        epoch += 1


def rank_transform(configs: Any, generator: Any) -> Any:
    """The JAX side's ``Compose`` of transform ``configs`` whose random transforms draw from ``generator``
    (a rank's ``jax_impl.random.Generator``; ``None``: the global one)."""
    from parity.build import transforms

    compose = transforms(configs)[1]
    for transform in compose.transforms:
        if hasattr(transform, "generator"):
            transform.generator = generator
    return compose


def _call(step: Any, state: Any, micro: list[tuple[Any, Any]], accumulate: int) -> tuple[Any, Any]:
    """``step(state, x, y)``, or with accumulation ``step(state, micro_batches)``."""
    return step(state, *micro[0]) if accumulate == 1 else step(state, micro)


def _jax_model_and_tx(spec: DDPSpec, initial: dict[str, np.ndarray], axis_name: str):
    import jax

    import jax_impl.models as jm
    from flax import nnx
    from jax_impl.nn import SyncBatchNorm
    from parity.convert.modules import load_torch_state_dict
    from parity.build import cast_jax_model
    from parity.numerics import match_torch_sqrt

    match_torch_sqrt()  # this process's optimizer uses torch's CPU sqrt, as the runner does
    if spec.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    if spec.model_paths is not None:
        from parity.import_path import import_object

        model = import_object(spec.model_paths[1], "model.jax")(**spec.model_kwargs)
    else:
        model = getattr(jm, spec.model)(**spec.model_kwargs, rngs=nnx.Rngs(spec.seed))
    if spec.dtype == "float64":
        cast_jax_model(model, np.float64)
        initial = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in initial.items()}
    load_torch_state_dict(model, initial)
    if spec.sync_bn:
        model = SyncBatchNorm.convert_sync_batchnorm(model, axis_name=axis_name)
    model.train()
    return model, _jax_tx(spec, param_names(spec))


def param_names(spec: DDPSpec) -> list[str]:
    """The torch model's parameter names, in ``named_parameters()`` order (what param groups match): the spec's
    own (:func:`validate_spec` fills them in), else read off a freshly built model."""
    if spec.param_names:
        return list(spec.param_names)
    return [name for name, _ in build_torch_model(spec).named_parameters()]


def validate_spec(spec: DDPSpec) -> DDPSpec:
    """Builds both optimizers (with groups and schedulers) and both losses of ``spec`` once, in this process,
    and returns ``spec`` with its parameter names.

    Raises what building them raises (torch's ``ValueError`` / ``TypeError``
    for bad options, ``NotImplementedError`` for what jax_impl lacks,
    ``AttributeError`` for an unknown loss), before any rank is started.
    """
    model = build_torch_model(spec)
    names = [name for name, _ in model.named_parameters()]
    _torch_scheduler(spec, _torch_optimizer(spec, model))
    _jax_tx(spec, names)
    build_loss(spec.loss, "torch")
    build_loss(spec.loss, "jax")
    return dataclasses.replace(spec, param_names=tuple(names))


def _jax_tx(spec: DDPSpec, names: list[str]) -> Any:
    """``jax_impl.optim``'s transformation for ``spec`` (:func:`parity.build.jax_optimizer`: param groups
    and the schedule wired in as in a single-device run). Raises for options jax_impl lacks."""
    from parity.build import jax_optimizer

    return jax_optimizer(spec.optimizer, spec.scheduler, spec.steps_per_epoch(), _groups(spec, names))[0]


def _clip_args(spec: DDPSpec) -> dict[str, Any]:
    return {"clip_grad_norm": spec.clip_grad_norm, "norm_type": spec.clip_grad_norm_type}


def _autocast(spec: DDPSpec) -> str | None:
    """This side's autocast dtype name: ``spec.autocast`` in float32 runs, ``None`` for the float64 twin
    (torch's autocast leaves float64 tensors alone) or without it."""
    return spec.autocast if spec.dtype == "float32" else None


def _step_args(spec: DDPSpec) -> dict[str, Any]:
    """The keyword arguments of ``jax_impl.parallel``'s steps: clipping, accumulation and autocast."""
    import jax.numpy as jnp

    autocast = None if _autocast(spec) is None else jnp.dtype(_autocast(spec))
    return {**_clip_args(spec), "accumulate": spec.accumulate, "autocast": autocast}


def _torch_autocast(spec: DDPSpec) -> Any:
    """This side's autocast as a torch dtype (``None``: none)."""
    import torch

    return None if _autocast(spec) is None else getattr(torch, _autocast(spec))


def _state_dict(model) -> dict[str, np.ndarray]:
    from parity.convert.modules import to_torch_state_dict

    return {k: v.numpy().copy() for k, v in to_torch_state_dict(model).items()}


def _jax_single_process(rank: int, world_size: int, spec: DDPSpec, context: RunContext,
                        initial: dict[str, np.ndarray]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_impl import parallel
    from jax_impl.random import replica_generators

    n = spec.world_size
    devices = jax.local_devices()[:n]
    if len(devices) != n and spec.mode != "vmap":
        raise RuntimeError(f"{n} JAX devices needed, found {len(jax.local_devices())} "
                           '(DDPSpec(mode="vmap") runs the replicas on one device)')
    graphdef, state, tx, done = _jax_start(spec, context, initial)
    loss_fn = build_loss(spec.loss, "jax")
    fdtype = float_dtypes(spec.dtype)[1]
    losses = []
    recorder = _Recorder(spec, context, f"JAX {spec.mode}")
    replicated = spec.mode in ("pmap", "vmap")

    def local_state() -> Any:
        local = parallel.unreplicate(state) if replicated else state
        return jax.tree.map(lambda v: jnp.asarray(jax.device_get(v)), local)

    def state_dict() -> dict[str, np.ndarray]:
        return _state_dict(parallel.merge_model(graphdef, local_state()))

    def resume_state() -> dict[str, Any]:
        return {**_jax_resume_state(graphdef, local_state()), "rng": _rng_tensors(g.get_state() for g in generators)}

    def after(loss: float) -> None:
        losses.append(loss)
        recorder.after(done + len(losses), state_dict, loss)
        recorder.epoch_end(done + len(losses), (done + len(losses)) // spec.steps_per_epoch() - 1, resume_state)

    generators = rank_generators(spec, range(n), context)
    # Dropout draws each replica's masks from its rank's generator (traced on the first call, in here);
    # vmap's replicas share one callback, so dropout is refused there (parity.parallel_runner).
    routing = replica_generators(parallel.AXIS, generators) if spec.mode != "vmap" else contextlib.nullcontext()
    if replicated:
        if spec.mode == "pmap":
            step = parallel.pmap_train_step(graphdef, loss_fn, tx, devices=devices, ordered_mean=spec.ordered_mean,
                                            **_step_args(spec))
            state = parallel.replicate(state, devices)
        else:
            step = parallel.vmap_train_step(graphdef, loss_fn, tx, ordered_mean=spec.ordered_mean, **_step_args(spec))
            state = parallel.replicate(state, copies=n)
        with routing:
            for group in _rank_steps(spec, context, n, range(n), generators):
                micro = [(np.stack([input_array(b[0], fdtype) for b in batches]),
                          np.stack([np.asarray(b[1]) for b in batches])) for batches in group]
                state, loss = _call(step, state, micro, spec.accumulate)
                after(float(loss[0]))
    else:
        mesh = Mesh(np.array(devices), (parallel.AXIS,))
        step = parallel.sharded_train_step(graphdef, loss_fn, tx, mesh, ordered_mean=spec.ordered_mean,
                                           **_step_args(spec))
        state = jax.device_put(state, NamedSharding(mesh, P()))
        rows = NamedSharding(mesh, P(parallel.AXIS))
        with routing:
            for group in _rank_steps(spec, context, n, range(n), generators):
                micro = [(jax.device_put(np.concatenate([input_array(b[0], fdtype) for b in batches]), rows),
                          jax.device_put(np.concatenate([np.asarray(b[1]) for b in batches]), rows))
                         for batches in group]
                state, loss = _call(step, state, micro, spec.accumulate)
                after(float(loss))
    return recorder.result(losses, state=state_dict())


def _jax_start(spec: DDPSpec, context: RunContext, initial: dict[str, np.ndarray]) -> tuple[Any, Any, Any, int]:
    """``(graphdef, TrainState, tx, steps done)``: the model and optimizer from ``initial``, or from the JAX
    side's resume state (its model, and its optimizer state's leaves in the tree of ``tx.init``)."""
    import jax
    import jax.numpy as jnp

    from jax_impl import parallel

    start = context.start("jax")
    weights = initial if start is None else {k: np.asarray(v) for k, v in start["model"].items()}
    model, tx = _jax_model_and_tx(spec, weights, parallel.AXIS)
    graphdef, state = parallel.init_train_state(model, tx)
    if start is None:
        return graphdef, state, tx, 0
    leaves, tree = jax.tree.flatten(state.opt_state)
    saved = start["opt_leaves"]
    if len(saved) != len(leaves):
        raise ValueError(f"the checkpoint's JAX optimizer state has {len(saved)} arrays, this optimizer {len(leaves)}")
    opt_state = jax.tree.unflatten(tree, [jnp.asarray(np.asarray(v), dtype=leaf.dtype) for v, leaf in zip(saved, leaves)])
    return graphdef, state._replace(opt_state=opt_state), tx, start["step"]


def _jax_resume_state(graphdef: Any, local: Any) -> dict[str, Any]:
    """What a checkpoint keeps of the JAX side: the state_dict and the optimizer state's leaves (as tensors)."""
    import jax
    import torch

    from jax_impl import parallel

    return {"model": {k: torch.from_numpy(v) for k, v in _state_dict(parallel.merge_model(graphdef, local)).items()},
            "opt_leaves": [torch.from_numpy(np.array(v)) for v in jax.tree.leaves(local.opt_state)]}


def _jax_process(rank: int, world_size: int, spec: DDPSpec, context: RunContext,
                 initial: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """One of ``world_size`` processes (``jax.distributed``): a global mesh, this process's shard of each batch."""
    import jax
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_impl import parallel
    from jax_impl.random import replica_generators

    graphdef, state, tx, done = _jax_start(spec, context, initial)
    mesh = Mesh(np.array(jax.devices()), (parallel.AXIS,))
    step = parallel.sharded_train_step(graphdef, build_loss(spec.loss, "jax"), tx, mesh,
                                       ordered_mean=spec.ordered_mean, **_step_args(spec))
    state = jax.device_put(state, NamedSharding(mesh, P()))
    rows = NamedSharding(mesh, P(parallel.AXIS))
    fdtype = float_dtypes(spec.dtype)[1]
    losses = []
    recorder = _Recorder(spec, context, f"JAX, {world_size} processes", active=rank == 0)
    if len(jax.devices()) != spec.world_size:
        raise RuntimeError(f"{spec.world_size} JAX devices needed across {world_size} processes, found "
                           f"{len(jax.devices())}")

    def local_state() -> Any:
        return jax.tree.map(lambda v: np.asarray(v.addressable_data(0)), state)

    def state_dict() -> dict[str, np.ndarray]:
        return _state_dict(parallel.merge_model(graphdef, local_state()))

    def resume_state() -> dict[str, Any]:
        return _jax_resume_state(graphdef, local_state())

    local = spec.world_size // world_size  # this process's devices: DDP ranks rank * local, ..., rank * local + local - 1
    mine = range(rank * local, (rank + 1) * local)
    generators = rank_generators(spec, mine, context)
    with replica_generators(parallel.AXIS, generators):  # dropout: each replica its rank's generator
        for group in _rank_steps(spec, context, spec.world_size, mine, generators):
            micro = [(jax.make_array_from_process_local_data(rows, np.concatenate([input_array(b[0], fdtype)
                                                                                   for b in batches])),
                      jax.make_array_from_process_local_data(rows, np.concatenate([np.asarray(b[1]) for b in batches])))
                     for batches in group]
            state, loss = _call(step, state, micro, spec.accumulate)
            losses.append(float(loss))
            now = done + len(losses)
            recorder.after(now, state_dict, losses[-1])
            if now % spec.steps_per_epoch() == 0:  # a whole epoch: every process's generators to process 0
                rngs = _rng_tensors(multihost_utils.process_allgather(
                    np.stack([generators[r].get_state() for r in mine])).reshape(spec.world_size, -1))
                recorder.epoch_end(now, now // spec.steps_per_epoch() - 1,
                                   lambda: {**resume_state(), "rng": rngs})
    if rank != 0:
        return None
    return recorder.result(losses, state=state_dict())


def torch_reference(spec: DDPSpec, initial: dict[str, np.ndarray] | None = None, *, timeout: float = 600,
                    global_batch: bool | None = None, floor: bool = False,
                    context: RunContext = RunContext()) -> dict[str, Any] | None:
    """torch's side of :func:`compare_ddp`: ``world_size`` DDP ranks, or one process on the global batches.

    Args:
      initial: the starting ``state_dict`` (default: the seeded model's).
      context: snapshots, progress, staging, resume and hosts of this side.
      global_batch: ``True``: one process with plain BatchNorm on the
        concatenated local batches (SyncBN's reference without CUDA);
        ``False``: DDP ranks; ``None``: the former only for ``sync_bn``
        without CUDA.
      floor: this is the float64 twin of a float32 run (over several hosts
        it meets on its own port).

    Returns:
      Rank 0's result; ``None`` on a host other than process 0's.
    """
    import torch

    from torch_ref import parallel as tp

    initial = initial_state(spec) if initial is None else initial
    if global_batch is None:
        global_batch = spec.sync_bn and not torch.cuda.is_available()
    if global_batch:
        return _torch_full_batch(spec, context, initial)
    hosts = spec.processes if spec.mode == "multiprocess" and spec.processes else 1
    where = {}
    if context.hosts is not None:  # this host's ranks only; rank 0's result lives on process 0
        where = {"node_rank": context.hosts.process_id, "master_addr": context.hosts.address,
                 "master_port": context.hosts.port + (2 if floor else 0)}
    return tp.launch(_torch_rank, spec.world_size, (spec, context, initial), backend=spec.backend, timeout=timeout,
                     local_world_size=spec.world_size // hosts, **where)[0]


def compare_ddp(spec: DDPSpec, *, timeout: float = 600) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs ``spec`` in torch DDP and in JAX; returns ``(torch_result, jax_result)``.

    With ``sync_bn`` on a machine without CUDA the torch side is
    :func:`_torch_full_batch` (torch's SyncBatchNorm refuses CPU tensors).
    Each result is ``{"state": rank 0's state_dict as numpy, "losses": per-step mean over ranks,
    "snapshots": {step: state_dict} at a context's snapshot_steps (none here), "seconds": {step: seconds since the previous
    snapshot}}``.
    """
    initial = initial_state(spec)
    return torch_reference(spec, initial, timeout=timeout), jax_run(spec, initial, timeout=timeout)


def jax_run(spec: DDPSpec, initial: dict[str, np.ndarray] | None = None, *, timeout: float = 600,
            context: RunContext = RunContext()) -> dict[str, Any] | None:
    """JAX's side of :func:`compare_ddp` (in fresh processes: ``world_size`` devices, or processes), run as
    ``context`` says.

    Returns replica 0's result; ``None`` on a host other than process 0's.
    """
    from jax_impl.parallel import launch, spawn

    initial = initial_state(spec) if initial is None else initial
    if spec.mode == "multiprocess":
        processes = spec.processes or spec.world_size
        if spec.world_size % processes:
            raise ValueError(f"world_size {spec.world_size} is not a multiple of processes {processes}")
        where = {}
        if context.hosts is not None:  # this host's process only; rank 0's result lives on process 0
            where = {"ranks": [context.hosts.process_id], "address": context.hosts.address,
                     "port": context.hosts.port + 1}
        return launch(_jax_process, processes, (spec, context, initial), local_devices=spec.world_size // processes,
                      timeout=timeout, env=_eigen_threads_env(spec.world_size), **where)[0]
    local = 1 if spec.mode == "vmap" else spec.world_size
    return spawn(_jax_single_process, 1, (spec, context, initial), local_devices=local, timeout=timeout)[0]


def _eigen_threads_env(world_size: int) -> dict[str, str]:
    """``NPROC`` for each JAX process: the size of XLA:CPU's Eigen thread pool in one process of ``world_size`` devices.

    XLA:CPU sizes that pool as ``max(NPROC or the schedulable CPUs, local devices)``, and its convolutions
    split their sums by the pool's size: a process of 4 devices on 2 cores runs 4 threads, a process of 2
    devices 2, and their weight gradients differ in the last bits. Giving every process the pool of the
    single-process layout makes N devices in one process and N devices over several compute the same bits
    (a user's ``NPROC`` stands).
    """
    if "NPROC" in os.environ:
        return {}
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"NPROC": str(max(cpus, world_size))}


def divergence(torch_state: dict[str, np.ndarray], jax_state: dict[str, np.ndarray]) -> dict[str, Any]:
    """Max over tensors of ``max |jax - torch| / max |torch|`` (the runner's measure), parameters and buffers apart.

    Returns ``{"params": float, "buffers": float, "worst_param": name, "worst_buffer": name}``
    (``buffers`` covers BatchNorm running statistics; ``num_batches_tracked`` must be equal).
    """
    from parity.compare import scaled_error

    if set(torch_state) != set(jax_state):
        raise KeyError(f"state keys differ: {sorted(set(torch_state) ^ set(jax_state))}")
    out: dict[str, Any] = {"params": 0.0, "buffers": 0.0, "worst_param": None, "worst_buffer": None}
    for key, ref in torch_state.items():
        if key.endswith("num_batches_tracked"):
            if int(ref) != int(jax_state[key]):
                raise AssertionError(f"{key}: torch {int(ref)}, jax {int(jax_state[key])}")
            continue
        kind = "buffers" if "running_" in key else "params"
        err = scaled_error(jax_state[key], ref)
        if err >= out[kind]:
            out[kind], out["worst_" + kind[:-1]] = err, key
    return out
