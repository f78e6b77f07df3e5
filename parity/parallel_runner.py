"""``parity run`` with ``parallel.world_size`` N > 1: torch DDP with N ranks vs the JAX step on N devices.

``data.batch_size`` is each rank's batch (torch's habit: every rank's
DataLoader gets it). The ranks return rank 0's final state; only the
launching process writes the report (torch recipes' ``if rank in [-1, 0]``).
The comparison itself is :mod:`parity.parallel`'s.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from parity.config import ConfigError
from parity.files import make_run_folder
from parity.progress import Phases
from parity.report import EpochRecord, RunReport, write_report

__all__ = ["run_data_parallel"]


def run_data_parallel(cfg: Any, *, only: str | None = None, max_steps: int | None = None,
                      runs_dir: str | Path = "runs", write: bool = True, resume: Any = None,
                      phases: Phases | None = None) -> RunReport:
    """Train ``cfg`` with torch DDP and the JAX data-parallel step; report rank 0's divergence.

    Raises:
      ConfigError: options a data-parallel run does not support (``only``,
        ``resume``, NCCL without CUDA) or that either side rejects, before
        any rank starts.
    """
    from jax_impl.data import datasets as jdata
    from jax_impl.data.collate import default_collate
    from parity.parallel import DDPSpec, divergence, initial_state, jax_run, torch_reference, validate_spec
    from parity.parallel import steps_per_epoch as ddp_steps_per_epoch

    phases = phases or Phases()
    par = cfg.parallel
    for given, flag in ((only is not None, "--only"), (resume is not None, "--resume")):
        if given:
            raise ConfigError(f"data-parallel runs (parallel.world_size > 1) do not support {flag} yet", path=flag)
    if cfg.model.by_import_path:
        raise ConfigError("data-parallel runs take the built-in models only", path="model")
    if par.backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("backend nccl needs CUDA; use gloo (or auto) on CPU", path="parallel.backend")
    phases("building the data set and both optimizers")
    split = {"val_fraction": cfg.data.val_fraction, "split_seed": cfg.data.split_seed}
    dataset = jdata.build_dataset(cfg.data.dataset, train=True, **split)
    x, y = default_collate([dataset[i] for i in range(len(dataset))])
    n, batch = par.world_size, cfg.data.batch_size
    per_epoch = ddp_steps_per_epoch(len(dataset), n, batch)
    steps = cfg.train.epochs * per_epoch if max_steps is None else min(max_steps, cfg.train.epochs * per_epoch)
    spec = DDPSpec(cfg.model.name, cfg.model.resolved_kwargs(), cfg.optimizer, np.asarray(x),
                   np.asarray(y), world_size=n, local_batch=batch, steps=steps, seed=cfg.train.seed,
                   sync_bn=par.sync_bn, dtype=cfg.train.dtype, mode=par.jax_mode, backend=par.backend,
                   scheduler=cfg.scheduler, loss=cfg.train.loss)
    try:  # both sides built once here: bad options fail before any rank starts, as in a single-process run
        validate_spec(spec)
    except (ValueError, NotImplementedError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(f"cannot build the experiment: {type(error).__name__}: {error}") from error
    report = RunReport(name=cfg.name, config=cfg.to_dict(), only=None, total_steps=steps)
    folder = make_run_folder(runs_dir, cfg.name) if write else None
    report.run_dir = None if folder is None else str(folder)
    initial = initial_state(spec)
    sync_reference = par.sync_bn and not torch.cuda.is_available()
    reference = "torch BatchNorm on the global batch (SyncBatchNorm needs CUDA)" if sync_reference else (
        f"torch DDP, {n} ranks")
    where = f"{n} replicas on one device" if par.jax_mode == "vmap" else f"{n} devices"
    try:
        phases(f"{reference}: training {steps} steps")
        start = time.perf_counter()
        torch_run = torch_reference(spec, initial)
        torch_seconds = time.perf_counter() - start
        phases(f"JAX {par.jax_mode} on {where}: compiling and training {steps} steps")
        start = time.perf_counter()
        jax_run_ = jax_run(spec, initial)
        jax_seconds = time.perf_counter() - start
    except BaseException as error:  # the run folder keeps a report saying why it holds no steps
        report.interrupted, report.passed = True, False
        report.message = ("interrupted (SIGINT/SIGTERM)" if isinstance(error, KeyboardInterrupt)
                          else f"stopped by {type(error).__name__}: {error}")
        if folder is not None:
            try:
                write_report(report, folder)
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
            error.parity_run_dir = str(folder)
        raise
    phases("comparing rank 0's parameters and buffers")
    report.steps = [{"step": i, "epoch": i // per_epoch, "torch_loss": a, "jax_loss": b}
                    for i, (a, b) in enumerate(zip(torch_run["losses"], jax_run_["losses"], strict=True))]
    d = divergence(torch_run["state"], jax_run_["state"])
    report.epochs.append(EpochRecord(epoch=math.ceil(steps / per_epoch) - 1, steps=steps,
                                     param_max_rel=d["params"], worst_leaf=d["worst_param"],
                                     buffer_max_rel=d["buffers"] if d["worst_buffer"] else math.nan,
                                     torch_seconds=torch_seconds, jax_seconds=jax_seconds))
    rtol = cfg.train.tolerance.rtol
    report.passed = d["params"] <= rtol
    report.message = f"{reference} vs JAX {par.jax_mode} on {where}"
    if not report.passed:
        report.message = (f"{reference} vs JAX {par.jax_mode} on {where}, {steps} steps: max rel param divergence "
                          f"{d['params']:.3g} ({d['worst_param']}) > rtol {rtol:g}")
    if folder is not None:
        write_report(report, folder)
    return report
