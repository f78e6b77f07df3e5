"""The end-to-end runner: train one config in torch and in JAX side by side and report how far apart they are.

Both sides start from identical weights (the seeded torch model's, converted),
read identical batches in identical order (torch's ``DataLoader`` and
``jax_impl.data.DataLoader`` with the same seed), and use the configured
optimizer, LR scheduler (stepped per epoch or per step), loss and dtype.
Recorded: the loss of every step on both sides; after every epoch the
parameter and BatchNorm-buffer divergence (``parity.compare``: max abs, max
rel, max ULP, worst leaf), held-out accuracy of both models and their
prediction agreement, and wall time per epoch. A run folder
``runs/<name>-<timestamp>/`` receives ``report.json``, ``report.md`` and
PNG plots. :func:`run_experiment` returns the report; ``report.passed`` is
False when the final parameters differ beyond ``train.tolerance``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import functools
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["DivergenceError", "EpochRecord", "RunReport", "run_experiment"]


class DivergenceError(RuntimeError):
    """A side produced NaN/inf: the run stops and names the step and the side."""


@dataclasses.dataclass
class EpochRecord:
    epoch: int
    steps: int
    param_max_abs: float = math.nan
    param_max_rel: float = math.nan
    param_max_ulp: int | None = None
    worst_leaf: str | None = None
    buffer_max_rel: float = math.nan
    torch_accuracy: float = math.nan
    jax_accuracy: float = math.nan
    agreement: float = math.nan
    torch_seconds: float = math.nan
    jax_seconds: float = math.nan
    lr: float = math.nan


@dataclasses.dataclass
class RunReport:
    name: str
    config: dict[str, Any]
    only: str | None
    steps: list[dict[str, float]] = dataclasses.field(default_factory=list)
    epochs: list[EpochRecord] = dataclasses.field(default_factory=list)
    passed: bool = True
    first_divergent_step: int | None = None
    first_divergent_layer: str | None = None
    run_dir: str | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "epochs": [dataclasses.asdict(e) for e in self.epochs]}


# ----------------------------------------------------------------------------- builders


def _float_dtype(name: str):
    return {"float32": (torch.float32, np.float32), "float64": (torch.float64, np.float64)}[name]


def _cast_jax_model(model, dtype) -> None:
    import jax.numpy as jnp

    from parity.convert.modules import module_state

    for var in module_state(model).values():
        value = var[...]
        if jnp.issubdtype(value.dtype, jnp.floating):
            var.value = jnp.asarray(value, dtype)


def _torch_optimizer(cfg, model):
    """The real ``torch.optim`` optimizer of ``cfg`` over ``model``, one torch param group per entry of
    :func:`parity.optim.param_group_members` (returned too: the JAX side builds the same groups)."""
    from parity.optim import param_group_members
    from torch_ref.optim import build_optimizer

    named = dict(model.named_parameters())
    groups = param_group_members(cfg.optimizer, list(named))
    return build_optimizer(cfg.optimizer, [{"params": [named[n] for n in names], **overrides}
                                           for overrides, names in groups]), groups


def _jax_optimizer(cfg, steps_per_epoch: int, groups):
    """``jax_impl.optim`` transformation with the scheduler's lr (and cycled momentum) wired in.

    ``groups`` is :func:`parity.optim.param_group_members`' list: one group
    gives the plain optimizer; several give ``jax_impl.optim.param_groups``
    with each group's hyperparameters, each lr scheduled from its own value
    (torch's schedulers scale every group's ``initial_lr``).
    """
    import inspect

    from jax_impl.optim import lr_scheduler as S
    from jax_impl.optim import param_groups
    from parity.lr_scheduler import build_jax_schedule
    from parity.optim import jax_optimizer_factory
    from torch_ref.optim import optimizer_class, optimizer_spec

    name, base = optimizer_spec(cfg.optimizer)
    defaults = {k: p.default for k, p in inspect.signature(optimizer_class(name)).parameters.items()}
    factory = jax_optimizer_factory(name)

    def group_kwargs(overrides):
        kwargs = {**base, **overrides}
        if cfg.scheduler is None:
            return kwargs, None
        schedule = build_jax_schedule(cfg.scheduler, kwargs.get("lr", defaults["lr"]))
        driven = schedule if cfg.scheduler.interval == "step" else S.per_epoch(schedule, steps_per_epoch=steps_per_epoch)
        kwargs["lr"] = driven
        momentum = getattr(schedule, "momentum", None)
        if momentum is not None:
            # torch's OneCycleLR/CyclicLR cycle betas[0] of Adam-like optimizers, else `momentum`.
            if cfg.scheduler.interval != "step":
                raise NotImplementedError("momentum cycling with a per-epoch scheduler interval")
            if "betas" in defaults:
                kwargs["betas"] = (momentum, tuple(kwargs.get("betas", defaults["betas"]))[1])
            elif "momentum" in defaults:
                kwargs["momentum"] = momentum
        return kwargs, schedule

    built = [group_kwargs(overrides) for overrides, _ in groups]
    schedule = built[0][1]  # the report's lr column: torch's param_groups[0]['lr']
    if len(groups) == 1:
        return factory(**built[0][0]), schedule
    specs = [{"params": (lambda path, leaf, names=frozenset(names): path in names), **kwargs}
             for (kwargs, _), (_, names) in zip(built, groups, strict=True)]
    return param_groups(factory, specs, strict=True), schedule


def _lr_at(schedule, cfg, step: int, epoch: int) -> float:
    if schedule is None:
        from torch_ref.optim import optimizer_spec

        return float(optimizer_spec(cfg.optimizer)[1]["lr"])
    return float(schedule(step if cfg.scheduler.interval == "step" else epoch))


# ----------------------------------------------------------------------------- the loop


@functools.cache
def _jitted_forward():
    import jax
    from flax import nnx

    return jax.jit(lambda graphdef, state, x: nnx.merge(graphdef, state)(x), static_argnums=0)


def _evaluate(torch_model, jax_model, loaders, np_dtype, t_dtype, only):
    import jax.numpy as jnp
    from flax import nnx

    t_pred, j_pred, labels = [], [], []
    if torch_model is not None:
        torch_model.eval()
    if jax_model is not None:
        jax_model.eval()
        graphdef, state = nnx.split(jax_model)
        forward = _jitted_forward()
    t_loader, j_loader = loaders
    for (tx, ty), (jx, _) in zip(t_loader, j_loader, strict=True):
        labels.append(ty.numpy())
        if only != "jax":
            with torch.no_grad():
                t_pred.append(torch_model(tx.to(t_dtype)).argmax(1).numpy())
        if only != "torch":
            j_pred.append(np.asarray(forward(graphdef, state, jnp.asarray(np.asarray(jx), np_dtype)).argmax(1)))
    y = np.concatenate(labels) if labels else np.zeros(0)
    t = np.concatenate(t_pred) if t_pred else None
    j = np.concatenate(j_pred) if j_pred else None
    acc = lambda p: float((p == y).mean()) if p is not None and len(y) else math.nan  # noqa: E731
    agree = float((t == j).mean()) if t is not None and j is not None and len(y) else math.nan
    return acc(t), acc(j), agree


def run_experiment(config, *, only: str | None = None, max_steps: int | None = None, runs_dir: str | os.PathLike = "runs",
                   write: bool = True, progress: bool = True, resume: str | os.PathLike | None = None,
                   resume_from: str | None = None) -> RunReport:
    """Train ``config`` in both frameworks (or one, ``only='torch'|'jax'``) and compare them.

    Args:
      config: a :class:`parity.config.ExperimentConfig`.
      only: train just one side (research comparisons: time and accuracy).
      max_steps: stop after this many optimizer steps (overrides ``train.max_steps``).
      runs_dir: parent of the run folder.
      write: write the run folder (report.json, report.md, plots).
      progress: show rich progress bars.
      resume: a ``checkpoint.pt`` written by an earlier run (after each epoch): continue from it.
      resume_from: ``None`` (each side from its own state), ``"torch"`` or ``"jax"``: both sides
        continue from that framework's model and optimizer state (cross-framework resume).

    Returns:
      The :class:`RunReport`.

    Raises:
      DivergenceError: NaN/inf loss on a side (the report is written first).
    """
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import jax_impl.nn as jnn
    from jax_impl.data import datasets as jdata
    from parity.compare import compare
    from parity.models import build_models
    from torch_ref import data as tdata
    from jax_impl.optim import get_sqrt_mode, set_sqrt_mode
    from parity.numerics import match_torch_sqrt
    from torch_ref.lr_scheduler import build_scheduler

    if only not in (None, "torch", "jax"):
        raise ValueError(f"only must be 'torch', 'jax' or None, got {only!r}")
    if config.parallel is not None and config.parallel.world_size > 1:
        return _run_parallel(config, only, max_steps, runs_dir, write, resume)
    t_dtype, np_dtype = _float_dtype(config.train.dtype)
    x64 = config.train.dtype == "float64"
    previous_x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", x64)
    previous_sqrt = get_sqrt_mode()
    match_torch_sqrt()  # torch's CPU sqrt on this machine (IEEE, MKL AVX-512 or its table): sqrt optimizers exact
    try:
        return _run(config, only, max_steps, runs_dir, write, progress, t_dtype, np_dtype,
                    jax, jnp, optax, nnx, jnn, jdata, compare, build_models, tdata, build_scheduler,
                    resume, resume_from)
    finally:
        jax.config.update("jax_enable_x64", previous_x64)
        set_sqrt_mode(previous_sqrt)


def _run_parallel(cfg, only, max_steps, runs_dir, write, resume) -> RunReport:
    """``parallel.world_size`` N > 1: torch DDP with N gloo/NCCL ranks vs the JAX step on N devices.

    ``data.batch_size`` is each rank's batch (torch's habit: every rank's
    DataLoader gets it). The ranks return rank 0's final state; only the
    launching process logs and writes the report (torch recipes'
    ``if rank in [-1, 0]``). No held-out evaluation yet.
    """
    import math

    from jax_impl.data import datasets as jdata
    from jax_impl.data.collate import default_collate
    from parity.config import ConfigError
    from parity.parallel import DDPSpec, compare_ddp, divergence, validate_spec
    from parity.parallel import steps_per_epoch as ddp_steps_per_epoch

    par = cfg.parallel
    unsupported = [(only is not None, "--only", "--only"), (resume is not None, "--resume", "--resume")]
    for bad, path, what in unsupported:
        if bad:
            raise ConfigError(f"data-parallel runs (parallel.world_size > 1) do not support {what} yet", path=path)
    if par.backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("backend nccl needs CUDA; use gloo (or auto) on CPU", path="parallel.backend")
    split = {"val_fraction": cfg.data.val_fraction, "split_seed": cfg.data.split_seed}
    dataset = jdata.build_dataset(cfg.data.dataset, train=True, **split)
    x, y = default_collate([dataset[i] for i in range(len(dataset))])
    n, batch = par.world_size, cfg.data.batch_size
    steps_per_epoch = ddp_steps_per_epoch(len(dataset), n, batch)
    steps = cfg.train.epochs * steps_per_epoch if max_steps is None else min(max_steps, cfg.train.epochs * steps_per_epoch)
    spec = DDPSpec(cfg.model.name, cfg.model.resolved_kwargs(), cfg.optimizer, np.asarray(x),
                   np.asarray(y), world_size=n, local_batch=batch, steps=steps, seed=cfg.train.seed,
                   sync_bn=par.sync_bn, dtype=cfg.train.dtype, mode=par.jax_mode, backend=par.backend,
                   scheduler=cfg.scheduler, loss=cfg.train.loss)
    try:  # both sides built once here: bad options fail before any rank starts, as in a single-process run
        validate_spec(spec)
    except (ValueError, NotImplementedError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(f"cannot build the experiment: {type(error).__name__}: {error}") from error
    report = RunReport(name=cfg.name, config=cfg.to_dict(), only=None)
    folder = _make_folder(cfg, runs_dir) if write else None
    report.run_dir = None if folder is None else str(folder)
    start = time.perf_counter()
    torch_run, jax_run = compare_ddp(spec)
    seconds = time.perf_counter() - start
    report.steps = [{"step": i, "epoch": i // steps_per_epoch, "torch_loss": a, "jax_loss": b}
                    for i, (a, b) in enumerate(zip(torch_run["losses"], jax_run["losses"], strict=True))]
    d = divergence(torch_run["state"], jax_run["state"])
    report.epochs.append(EpochRecord(epoch=math.ceil(steps / steps_per_epoch) - 1, steps=steps,
                                     param_max_rel=d["params"], worst_leaf=d["worst_param"],
                                     buffer_max_rel=d["buffers"] if d["worst_buffer"] else math.nan,
                                     torch_seconds=seconds))
    tol = cfg.train.tolerance
    report.passed = d["params"] <= tol.rtol
    reference = "torch BatchNorm on the global batch (SyncBatchNorm needs CUDA)" if (
        par.sync_bn and not torch.cuda.is_available()) else f"torch DDP, {n} ranks"
    where = f"{n} replicas on one device" if par.jax_mode == "vmap" else f"{n} devices"
    report.message = (f"{reference} vs JAX {par.jax_mode} on {where}, {steps} steps: max rel param divergence "
                      f"{d['params']:.3g} ({d['worst_param']})" + ("" if report.passed else f" > rtol={tol.rtol}"))
    _finish(report, cfg, runs_dir, write)
    return report


def _run(config, only, max_steps, runs_dir, write, progress, t_dtype, np_dtype,
         jax, jnp, optax, nnx, jnn, jdata, compare, build_models, tdata, build_scheduler,
         resume=None, resume_from=None):
    cfg = config
    max_steps = max_steps if max_steps is not None else cfg.train.max_steps
    report = RunReport(name=cfg.name, config=cfg.to_dict(), only=only)
    tol = cfg.train.tolerance

    from parity.config import ConfigError

    try:  # building both sides: torch's and our constructors reject impossible settings here
        torch_model, jax_model = build_models(cfg.model, seed=cfg.train.seed)
        torch_model = torch_model.to(t_dtype)
        _cast_jax_model(jax_model, np_dtype)
        split = dict(val_fraction=cfg.data.val_fraction, split_seed=cfg.data.split_seed)
        t_train = tdata.build_dataloader(cfg.data, tdata.build_dataset(cfg.data.dataset, train=True, **split),
                                         seed=cfg.train.seed)
        j_train = jdata.build_dataloader(cfg.data, jdata.build_dataset(cfg.data.dataset, train=True, **split),
                                         seed=cfg.train.seed)
        eval_loaders = None
        if cfg.data.val_fraction > 0:
            eval_loaders = (
                tdata.build_dataloader(cfg.data, tdata.build_dataset(cfg.data.dataset, train=False, **split),
                                       seed=cfg.train.seed, train=False),
                jdata.build_dataloader(cfg.data, jdata.build_dataset(cfg.data.dataset, train=False, **split),
                                       seed=cfg.train.seed, train=False),
            )
        steps_per_epoch = len(t_train)

        t_opt, groups = _torch_optimizer(cfg, torch_model)
        t_sched = build_scheduler(cfg.scheduler, t_opt) if cfg.scheduler is not None else None
        tx, schedule = _jax_optimizer(cfg, steps_per_epoch, groups)
        opt_state = tx.init(nnx.state(jax_model, nnx.Param))
        loss_kwargs = cfg.train.loss.kwargs
        t_loss_fn = getattr(torch.nn, cfg.train.loss.name)(**loss_kwargs)
        j_loss_fn = getattr(jnn, cfg.train.loss.name)(**loss_kwargs)
    except (ValueError, NotImplementedError, KeyError, TypeError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"cannot build the experiment: {type(error).__name__}: {error}") from error
    opt_name = cfg.optimizer.name
    start_epoch = step = 0
    if resume is not None:
        start_epoch, step, opt_state = _load_checkpoint(
            resume, resume_from, torch_model, t_opt, t_sched, t_train, jax_model, j_train, opt_name, groups,
            nnx, ConfigError,
        )
    folder = _make_folder(cfg, runs_dir) if write else None
    report.run_dir = None if folder is None else str(folder)

    # A pure jax.jit over the split model: nnx.jit re-walks the module graph on every call
    # (~25 ms per LeNet step here, 10x torch's whole step); the model is merged back per epoch.
    @partial(jax.jit, static_argnums=0)
    def jax_step(graphdef, params, rest, opt_state, x, y):
        model = nnx.merge(graphdef, params, rest)
        loss, grads = nnx.value_and_grad(lambda m: j_loss_fn(m(x), y))(model)
        updates, opt_state = tx.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), nnx.state(model, nnx.Not(nnx.Param)), opt_state

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = cfg.train.epochs * steps_per_epoch if max_steps is None else min(max_steps, cfg.train.epochs * steps_per_epoch)
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[info]}"), disable=not progress, transient=False)
    with bar:
        task = bar.add_task(cfg.name, total=total, info="")
        bar.update(task, completed=min(step, total))
        for epoch in range(start_epoch, cfg.train.epochs):
            torch_model.train()
            jax_model.train()
            graphdef, j_params, j_rest = nnx.split(jax_model, nnx.Param, ...)
            t_time = j_time = 0.0
            for (tx_b, ty_b), (jx_b, jy_b) in zip(t_train, j_train, strict=True):
                if max_steps is not None and step >= max_steps:
                    break
                record: dict[str, float] = {"step": step, "epoch": epoch, "lr": _lr_at(schedule, cfg, step, epoch)}
                hunting = only is None and report.first_divergent_step is None
                if hunting:  # both models as they enter this step, to replay it layer by layer if it diverges
                    t_snap = {k: v.detach().clone() for k, v in torch_model.state_dict().items()}
                    j_snap = (j_params, j_rest)  # immutable arrays: holding them is the snapshot
                if only != "jax":
                    start = time.perf_counter()
                    t_opt.zero_grad()
                    t_loss = t_loss_fn(torch_model(tx_b.to(t_dtype)), ty_b)
                    t_loss.backward()
                    t_opt.step()
                    if t_sched is not None and cfg.scheduler.interval == "step":
                        t_sched.step()
                    record["torch_loss"] = float(t_loss.item())
                    t_time += time.perf_counter() - start
                if only != "torch":
                    start = time.perf_counter()
                    j_loss, j_params, j_rest, opt_state = jax_step(
                        graphdef, j_params, j_rest, opt_state, jnp.asarray(np.asarray(jx_b), np_dtype),
                        jnp.asarray(np.asarray(jy_b)))
                    record["jax_loss"] = float(j_loss)
                    j_time += time.perf_counter() - start
                report.steps.append(record)
                for side in ("torch", "jax"):
                    value = record.get(f"{side}_loss")
                    if value is not None and not math.isfinite(value):
                        report.passed = False
                        report.message = f"{side} loss is {value} at step {step} (epoch {epoch})"
                        _finish(report, cfg, runs_dir, write)
                        raise DivergenceError(report.message)
                if hunting:
                    a, b = record["torch_loss"], record["jax_loss"]
                    if abs(a - b) > tol.atol + tol.rtol * abs(a):
                        report.first_divergent_step = step
                        report.first_divergent_layer = _replay_step(torch_model, t_snap, nnx.merge(graphdef, *j_snap),
                                                                    tx_b, t_dtype, np_dtype, tol)
                step += 1
                info = " ".join(f"{k.split('_')[0]} {record[k]:.4f}" for k in ("torch_loss", "jax_loss") if k in record)
                bar.update(task, advance=1, info=f"epoch {epoch + 1}/{cfg.train.epochs}  loss {info}")
            nnx.update(jax_model, j_params, j_rest)
            if t_sched is not None and cfg.scheduler.interval == "epoch" and only != "jax":
                t_sched.step()
            rec = EpochRecord(epoch=epoch, steps=step, torch_seconds=t_time, jax_seconds=j_time,
                              lr=_lr_at(schedule, cfg, step, epoch + 1))
            if only is None:
                params = compare(dict(torch_model.named_parameters()),
                                 {k: v for k, v in _jax_flat(jax_model, nnx.Param).items()},
                                 rtol=tol.rtol, atol=tol.atol, max_ulp=tol.max_ulp, check_dtype=False)
                ours = _jax_flat(jax_model, nnx.Param)
                theirs = {k: v.detach().numpy() for k, v in torch_model.named_parameters()}
                scaled = {k: _scaled_err(ours[k], theirs[k]) for k in theirs}
                rec.worst_leaf = max(scaled, key=scaled.get)
                rec.param_max_rel = scaled[rec.worst_leaf]
                rec.param_max_abs, rec.param_max_ulp = params.max_abs, params.max_ulp
                buffers = {k: v.numpy() for k, v in torch_model.state_dict().items() if "running" in k}
                if buffers:
                    ours_b = _jax_flat(jax_model, nnx.BatchStat)
                    rec.buffer_max_rel = max(_scaled_err(ours_b[k], v) for k, v in buffers.items())
                report.passed = rec.param_max_rel <= tol.rtol
            if eval_loaders is not None:
                rec.torch_accuracy, rec.jax_accuracy, rec.agreement = _evaluate(
                    torch_model if only != "jax" else None, jax_model if only != "torch" else None,
                    eval_loaders, np_dtype, t_dtype, only,
                )
            report.epochs.append(rec)
            if folder is not None:
                _save_checkpoint(folder / "checkpoint.pt", epoch + 1, step, torch_model, t_opt, t_sched, t_train,
                                 jax_model, opt_state, j_train, opt_name, groups, nnx)
            if max_steps is not None and step >= max_steps:
                break
    if only is None and not report.passed:
        report.message = (f"parameters diverged beyond rtol={tol.rtol:g}: worst tensor {report.epochs[-1].worst_leaf} "
                          f"(max rel {report.epochs[-1].param_max_rel:.3g}); first step whose losses differ, and its "
                          f"first layer whose output differs: "
                          f"{report.first_divergent_layer} (at step {report.first_divergent_step})")
    _finish(report, cfg, runs_dir, write)
    return report


def _replay_step(torch_model, t_snap, j_snap, x, t_dtype, np_dtype, tol) -> str | None:
    """The first layer (torch's call order) whose output differs, replaying a step's forward from its start."""
    import copy

    from parity.models import compare_models

    t_copy = copy.deepcopy(torch_model)
    t_copy.load_state_dict(t_snap)
    report = compare_models(t_copy, j_snap, x.to(t_dtype).numpy().astype(np_dtype), train=True,
                            rtol=tol.rtol, atol=tol.atol)
    first = report.first_divergence
    return None if first is None else first.name


def torch_precision_floor(cfg, steps: int) -> dict[str, Any]:
    """How far torch's own float32 run of ``cfg`` is from its float64 run after ``steps`` steps.

    The same model, weights, batches, optimizer, scheduler and loss as
    :func:`run_experiment`'s torch side, trained twice (float32, float64);
    returns ``{"max_rel": float, "worst": name}`` with the runner's measure
    (``max |f32 - f64| / max |f64|`` per parameter, worst over parameters).
    A float32 parity bound below this floor cannot be met by any
    implementation that is not bit-identical to torch's kernels: the training
    amplifies rounding itself (e.g. BatchNorm-bias gradients that are
    cancellation residues).
    """
    from parity.models import build_models
    from torch_ref import data as tdata
    from torch_ref.lr_scheduler import build_scheduler

    split = {"val_fraction": cfg.data.val_fraction, "split_seed": cfg.data.split_seed}
    runs = {}
    for dtype in (torch.float32, torch.float64):
        model = build_models(cfg.model, seed=cfg.train.seed)[0].to(dtype).train()
        loader = tdata.build_dataloader(cfg.data, tdata.build_dataset(cfg.data.dataset, train=True, **split),
                                        seed=cfg.train.seed)
        opt, _ = _torch_optimizer(cfg, model)
        sched = build_scheduler(cfg.scheduler, opt) if cfg.scheduler is not None else None
        loss_fn = getattr(torch.nn, cfg.train.loss.name)(**cfg.train.loss.kwargs)
        step = 0
        while step < steps:
            for x, y in loader:
                if step >= steps:
                    break
                opt.zero_grad()
                loss_fn(model(x.to(dtype)), y).backward()
                opt.step()
                step += 1
                if sched is not None and cfg.scheduler.interval == "step":
                    sched.step()
            else:
                if sched is not None and cfg.scheduler.interval == "epoch":
                    sched.step()
        runs[dtype] = {k: v.detach().double().numpy() for k, v in model.named_parameters()}
    errors = {k: _scaled_err(runs[torch.float32][k], runs[torch.float64][k]) for k in runs[torch.float64]}
    worst = max(errors, key=errors.get)
    return {"max_rel": errors[worst], "worst": worst}


def _scaled_err(ours: np.ndarray, theirs: np.ndarray) -> float:
    """``max |ours - torch| / max |torch|`` over one array (relative to its scale, not per element)."""
    theirs = np.asarray(theirs, np.float64)
    scale = float(np.abs(theirs).max()) if theirs.size else 0.0
    err = float(np.abs(np.asarray(ours, np.float64) - theirs).max()) if theirs.size else 0.0
    return err / scale if scale > 0 else err


def _jax_flat(model, kind) -> dict[str, np.ndarray]:
    from flax import nnx

    return {".".join(map(str, k)): np.asarray(v[...]) for k, v in nnx.state(model, kind).flat_state()}


# ----------------------------------------------------------------------------- outputs


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "-" if math.isnan(x) else f"{x:.3g}"
    return str(x)


def render_markdown(report: RunReport) -> str:
    lines = [f"# parity run: {report.name}", "", f"**{'PASSED' if report.passed else 'FAILED'}**"
             + (f": {report.message}" if report.message else ""), ""]
    if report.first_divergent_step is not None:
        lines += [f"First step whose losses differ beyond tolerance: {report.first_divergent_step}; "
                  f"replayed layer by layer, its first layer whose output differs: {report.first_divergent_layer}", ""]
    lines += ["| epoch | steps | lr | param max abs | param max rel | max ULP | worst leaf | BN buffers max rel "
              "| torch acc | jax acc | agreement | torch s | jax s |",
              "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for e in report.epochs:
        lines.append(
            f"| {e.epoch + 1} | {e.steps} | {_fmt(e.lr)} | {_fmt(e.param_max_abs)} | {_fmt(e.param_max_rel)} | "
            f"{_fmt(e.param_max_ulp)} | {_fmt(e.worst_leaf)} | {_fmt(e.buffer_max_rel)} | {_fmt(e.torch_accuracy)} | "
            f"{_fmt(e.jax_accuracy)} | {_fmt(e.agreement)} | {_fmt(e.torch_seconds)} | {_fmt(e.jax_seconds)} |"
        )
    if report.steps:
        last = report.steps[-1]
        lines += ["", f"Final step {last['step']}: torch loss {_fmt(last.get('torch_loss'))}, "
                      f"jax loss {_fmt(last.get('jax_loss'))}."]
    lines += ["", "Plots: `loss.png`, `divergence.png`. All numbers: `report.json`."]
    return "\n".join(lines) + "\n"


def _plots(report: RunReport, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [s["step"] for s in report.steps]
    for side, style in (("torch", "-"), ("jax", "--")):
        values = [s.get(f"{side}_loss", math.nan) for s in report.steps]
        if not all(math.isnan(v) for v in values):
            ax.plot(steps, values, style, label=side)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(report.name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "loss.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    epochs = [e.epoch + 1 for e in report.epochs]
    for attr, label in (("param_max_rel", "params max rel"), ("param_max_abs", "params max abs"),
                        ("buffer_max_rel", "BN buffers max rel")):
        values = [getattr(e, attr) for e in report.epochs]
        if any(v > 0 for v in values if not math.isnan(v)):
            ax.semilogy(epochs, [v if v > 0 else np.nan for v in values], "o-", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("torch vs jax divergence")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "divergence.png", dpi=100)
    plt.close(fig)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _make_folder(cfg, runs_dir) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = Path(runs_dir) / f"{cfg.name}-{stamp}"
    suffix = 1
    while folder.exists():
        folder = Path(runs_dir) / f"{cfg.name}-{stamp}-{suffix}"
        suffix += 1
    folder.mkdir(parents=True)
    return folder


def _save_checkpoint(path: Path, epoch, step, torch_model, t_opt, t_sched, t_train, jax_model, opt_state, j_train,
                     opt_name, groups, nnx) -> None:
    """Both sides after ``epoch`` epochs, in torch's formats (the JAX side through ``parity.convert``); atomic."""
    from parity.convert import grouped_optimizer_state_to_torch, optimizer_state_to_torch, to_torch_state_dict

    import inspect

    params = nnx.state(jax_model, nnx.Param)
    accepted = inspect.signature(type(t_opt)).parameters  # AdamW's defaults carry Adam's decoupled_weight_decay
    hypers = [{k: v for k, v in group.items() if k in accepted and k != "params"} for group in t_opt.param_groups]
    if len(groups) == 1:
        j_opt = optimizer_state_to_torch(opt_state, params, name=opt_name,
                                         param_names=[n + ".value" for n in groups[0][1]], hyperparameters=hypers[0])
    else:
        j_opt = grouped_optimizer_state_to_torch(opt_state, params, name=opt_name, hyperparameters=hypers,
                                                 groups=[[n + ".value" for n in names] for _, names in groups])
    checkpoint = {
        "epoch": epoch,
        "step": step,
        "torch": {
            "model": torch_model.state_dict(),
            "optimizer": t_opt.state_dict(),
            "scheduler": None if t_sched is None else t_sched.state_dict(),
            "generator": t_train.generator.get_state(),
        },
        "jax": {
            "model": to_torch_state_dict(jax_model),
            "optimizer": j_opt,
            "generator": torch.from_numpy(np.array(j_train.generator.get_state())),
        },
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(checkpoint, tmp)
    os.replace(tmp, path)


def _load_checkpoint(path, resume_from, torch_model, t_opt, t_sched, t_train, jax_model, j_train, opt_name,
                     groups, nnx, config_error):
    """Restore both sides from ``path``; ``resume_from`` picks one framework's model and optimizer state for both."""
    from parity.convert import grouped_optimizer_state_from_torch, load_torch_state_dict, optimizer_state_from_torch

    if resume_from not in (None, "torch", "jax"):
        raise config_error(f"resume_from must be 'torch' or 'jax', got {resume_from!r}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError) as error:
        raise config_error(f"cannot read checkpoint {path}: {error}") from None
    t_src = checkpoint[resume_from or "torch"]
    j_src = checkpoint[resume_from or "jax"]
    torch_model.load_state_dict(t_src["model"])
    # The param_groups (lr, betas as the scheduler left them) are torch's in both cases: same step.
    t_opt.load_state_dict({"state": t_src["optimizer"]["state"],
                           "param_groups": checkpoint["torch"]["optimizer"]["param_groups"]})
    if t_sched is not None:
        t_sched.load_state_dict(checkpoint["torch"]["scheduler"])
    t_train.generator.set_state(checkpoint["torch"]["generator"])
    load_torch_state_dict(jax_model, j_src["model"])
    params = nnx.state(jax_model, nnx.Param)
    j_opt = {"state": j_src["optimizer"]["state"], "param_groups": checkpoint["torch"]["optimizer"]["param_groups"]}
    if len(groups) == 1:
        opt_state = optimizer_state_from_torch(j_opt, params, name=opt_name,
                                               param_names=[n + ".value" for n in groups[0][1]])
    else:
        opt_state = grouped_optimizer_state_from_torch(j_opt, params, name=opt_name,
                                                       groups=[[n + ".value" for n in names] for _, names in groups])
    j_train.generator.set_state(np.asarray(checkpoint["jax"]["generator"].numpy()))
    # The scheduled lr is read at the state's count. torch's SGD keeps no step count, so the
    # conversion cannot know it: the checkpoint's optimizer step is the count on every side.
    opt_state = _with_count(opt_state, int(checkpoint["step"]))
    return int(checkpoint["epoch"]), int(checkpoint["step"]), opt_state


def _with_count(state, count: int):
    """``state`` (a jax_impl.optim state, or ParamGroupsState of them) with its step count set to ``count``."""
    import jax.numpy as jnp

    from jax_impl.optim import ParamGroupsState

    if isinstance(state, ParamGroupsState):
        return ParamGroupsState(tuple(_with_count(inner, count) for inner in state.groups))
    return state._replace(count=jnp.asarray(count, state.count.dtype))


def _finish(report: RunReport, cfg, runs_dir, write: bool) -> None:
    if not write:
        return
    folder = Path(report.run_dir) if report.run_dir else _make_folder(cfg, runs_dir)
    report.run_dir = str(folder)
    _atomic_write(folder / "report.json", json.dumps(report.to_dict(), indent=2, default=str))
    _atomic_write(folder / "report.md", render_markdown(report))
    _plots(report, folder)
