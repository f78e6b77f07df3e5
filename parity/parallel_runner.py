"""The data-parallel run: torch DDP with N ranks vs the JAX data-parallel step, reported like a single-device run.

Each side trains in its own processes (:mod:`parity.parallel`: DDP ranks over
gloo, the JAX step on N devices). Rank 0 / replica 0 records its state_dict
at the end of every epoch; this process then compares the two per epoch
(parameters per tensor, BatchNorm buffers), evaluates both on the held-out
split (accuracy and agreement) and, for float32 runs, compares torch's
float32 DDP run with its float64 twin: the precision floor of
:mod:`parity.floor`, per epoch, per tensor and per step. The verdict is
:func:`parity.floor.judge`'s, as for a single-device run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from parity import interrupt, staging
from parity.build import user_arrays
from parity.compare import scaled_error
from parity.config import ConfigError
from parity.evaluate import jax_predictions, torch_predictions
from parity.files import make_run_folder
from parity.floor import divergence_message, judge
from parity.progress import Phases
from parity.measure import accuracies, first_divergent_step, lr_fields, measure_states
from parity.report import EpochRecord, RunReport, write_report

__all__ = ["STAGE", "run_data_parallel"]

STAGE = ".partial"  # the run folder's staging folder while a data-parallel run lasts (parity.staging)


def run_data_parallel(cfg: Any, *, only: str | None = None, max_steps: int | None = None,
                      runs_dir: str | Path = "runs", write: bool = True, resume: Any = None,
                      phases: Phases | None = None, hosts: Any = None) -> RunReport:
    """Train ``cfg`` with torch DDP and the JAX data-parallel step (or one of them, ``only``) and compare them.

    ``resume``: a checkpoint of a data-parallel run of the same config; both
    sides (and torch's float64 twin) continue from its whole-epoch state, in
    its run folder. Checkpoints (``train.checkpoint``) hold rank 0's and
    replica 0's state after the last whole epoch the run completed.

    ``hosts`` (:class:`parity.parallel.Hosts`): this host's part of a run
    over several hosts. Each host trains its torch ranks and its JAX process;
    process 0 compares, evaluates and writes the run folder, the other
    processes return a report that says where it is.

    Raises:
      ConfigError: options a data-parallel run does not support (user models,
        NCCL without CUDA, resuming a SyncBatchNorm run on CPU) or that either
        side rejects, a checkpoint that cannot be resumed, before any rank
        starts.
    """
    from jax_impl.data import datasets as jdata
    from jax_impl.data.collate import default_collate
    from parity.parallel import DDPSpec, RunContext, validate_spec
    from parity.parallel import steps_per_epoch as ddp_steps_per_epoch

    from parity.checkpoint import CheckpointError, check_resumable, read_checkpoint, resumed_report

    phases = phases or Phases()
    par = cfg.parallel
    ckpt = read_checkpoint(resume) if resume is not None else None
    if ckpt is not None:
        check_resumable(ckpt, cfg.to_dict(), only)
        if "parallel" not in ckpt.torch and "parallel" not in ckpt.jax:
            raise CheckpointError(f"{ckpt.path} is a single-device run's checkpoint; resume it without parallel:")
        if par.sync_bn and not torch.cuda.is_available():
            raise ConfigError("resuming a SyncBatchNorm run needs CUDA (its CPU reference trains in one process)",
                              path="--resume")
    if cfg.model.by_import_path and cfg.model.ported:
        raise ConfigError("data-parallel runs take the JAX model by import path, not jax: auto", path="model.jax")
    if cfg.data.transform and par.sync_bn and not torch.cuda.is_available():
        raise ConfigError("data.transform with SyncBatchNorm on CPU is not supported (its torch reference trains "
                          "the global batch in one process, not each rank's transformed samples)",
                          path="data.transform")
    if par.backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("backend nccl needs CUDA; use gloo (or auto) on CPU", path="parallel.backend")
    if hosts is not None:
        if hosts.num_processes != par.processes:
            raise ConfigError(f"--num-processes {hosts.num_processes} but parallel.processes is {par.processes}",
                              path="parallel.processes")
        if par.sync_bn and not torch.cuda.is_available():
            raise ConfigError("SyncBatchNorm over several hosts needs CUDA (its CPU reference trains in one "
                              "process)", path="parallel.sync_bn")
        if hosts.process_id != 0:
            write = False  # process 0 writes the run folder
    phases("building the data set and both optimizers")
    split = {"val_fraction": cfg.data.val_fraction, "split_seed": cfg.data.split_seed}

    # The user's loader gives its own train and held-out arrays.
    loaded = user_arrays(cfg.data.dataset) if getattr(cfg.data.dataset, "arrays", None) else None

    def arrays(train: bool) -> tuple[np.ndarray, np.ndarray]:
        if loaded is not None:
            x, y = loaded[0 if train else 1]
            return np.asarray(x), np.asarray(y)
        dataset = jdata.build_dataset(cfg.data.dataset, train=train, **split)
        x, y = default_collate([dataset[i] for i in range(len(dataset))])
        return np.asarray(x), np.asarray(y)

    x, y = arrays(True)
    n, batch = par.world_size, cfg.data.batch_size
    per_epoch = ddp_steps_per_epoch(len(x), n, batch, cfg.train.accumulate)
    total = cfg.train.epochs * per_epoch
    steps = total if max_steps is None and cfg.train.max_steps is None else min(
        max_steps if max_steps is not None else cfg.train.max_steps, total)
    ends = tuple(sorted({min((e + 1) * per_epoch, steps) for e in range(math.ceil(steps / per_epoch))}))
    start = ckpt.step if ckpt is not None else 0
    if start >= steps:
        raise CheckpointError(f"nothing to do: {ckpt.path} is at step {start} (epoch {ckpt.epoch}) and this run "
                              f"ends at step {steps}; raise train.epochs to train longer")
    ends = tuple(end for end in ends if end > start)
    paths = (cfg.model.torch, cfg.model.jax) if cfg.model.by_import_path else None
    spec = DDPSpec(cfg.model.torch if paths else cfg.model.name, cfg.model.resolved_kwargs(), cfg.optimizer, x, y,
                   world_size=n, model_paths=paths, clip_grad_norm=cfg.train.clip_grad_norm,
                   clip_grad_norm_type=cfg.train.clip_grad_norm_type, accumulate=cfg.train.accumulate,
                   autocast=cfg.train.autocast, transform=cfg.data.transform,
                   local_batch=batch, steps=steps, seed=cfg.train.seed, sync_bn=par.sync_bn, dtype=cfg.train.dtype,
                   mode="multiprocess" if par.processes > 1 else par.jax_mode, processes=par.processes,
                   backend=par.backend, scheduler=cfg.scheduler, loss=cfg.train.loss)
    context = RunContext(snapshot_steps=ends, phases=phases if phases.enabled else None,
                         resume=_resume_states(ckpt) if ckpt is not None else None, hosts=hosts)
    dropout = _dropout_modules(spec) if only != "torch" else []
    why = ("with jax_mode vmap (its replicas share one host callback; use pmap or sharded)" if spec.mode == "vmap"
           else "with SyncBatchNorm on CPU (its torch reference trains the global batch in one process)"
           if par.sync_bn and not torch.cuda.is_available() else "on resume from a checkpoint without the ranks' "
           "generators (written before they were kept)" if ckpt is not None and not _has_generators(ckpt, only)
           else None)
    if dropout and why:
        raise ConfigError(f"dropout in a data-parallel run is not supported {why}: "
                          f"{', '.join(dropout[:3])}{' ...' if len(dropout) > 3 else ''}", path="model")
    try:  # both sides built once here: bad options fail before any rank starts, as in a single-process run
        spec = validate_spec(spec)  # with its parameter names: nothing rebuilds a model to read them
    except (ValueError, NotImplementedError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(f"cannot build the experiment: {type(error).__name__}: {error}") from error
    init, jax_initial = "initial weights: the torch model's, copied into every JAX replica", None
    if cfg.model.init == "seed" and only != "torch" and ckpt is None:
        init, jax_initial = _own_init(cfg)
    report = RunReport(name=cfg.name, config=cfg.to_dict(), only=only, total_steps=steps, init=init)
    folder = None
    if ckpt is not None:
        report, folder = resumed_report(ckpt, report, write=write)
        phases(f"resuming from {ckpt.path} at step {ckpt.step} (epoch {ckpt.epoch})")
    if write and folder is None:
        folder = make_run_folder(runs_dir, cfg.name)
    report.run_dir = None if folder is None else str(folder)
    held_out = arrays(False) if loaded is not None or cfg.data.val_fraction > 0 else None
    # Each side's whole epochs on disk while it trains (parity.staging): what an interrupted run keeps, its
    # report rows whatever train.checkpoint says (which only decides whether checkpoint.pt is written).
    stage = folder / STAGE if folder is not None else None
    if stage is not None:
        staging.clear(stage)  # a previous, interrupted run's in the folder this one resumes in
    before = (list(report.steps), list(report.epochs))  # a resumed run's rows, from its checkpoint
    try:
        with interrupt.immediate():  # this process only waits for the ranks: a signal stops them at once
            runs = _train(spec, context, cfg, only, phases, stage, jax_initial)
        if hosts is not None and hosts.process_id != 0:
            report.message = (f"process {hosts.process_id} of {hosts.num_processes} trained its ranks; process 0 "
                              f"(on {hosts.address}) compares them and writes the report")
            return report
        phases("comparing rank 0's parameters and buffers per epoch; evaluating both on the held-out split")
        _rows(cfg, spec, only, report, runs, ends, per_epoch, start, held_out)
        if only is None:
            judge(report, cfg.train.tolerance.rtol)
            report.first_divergent_step = first_divergent_step(report.steps, cfg.train.tolerance)
            where = _where(spec)
            if report.passed and report.passed_by == "tolerance":
                report.message = where
            elif not report.passed:
                report.message = f"{where}, {steps} steps: " + divergence_message(
                    report.epochs[-1], cfg.train.tolerance.rtol, report.first_divergent_step)
        if folder is not None:
            _checkpoint(cfg, runs, report, folder / "checkpoint.pt")
            write_report(report, folder)
    except BaseException as error:  # the run folder keeps the whole epochs every side finished, and why it stopped
        # A rank that took the signal itself (Ctrl-C reaches the whole process group) reports KeyboardInterrupt.
        signalled = isinstance(error, KeyboardInterrupt) or getattr(error, "exc_type", None) == "KeyboardInterrupt"
        report.steps, report.epochs, report.first_divergent_step = list(before[0]), list(before[1]), None
        report.interrupted, report.passed = True, False
        report.message = ("interrupted (SIGINT/SIGTERM)" if signalled
                          else f"stopped by {type(error).__name__}: {error}")
        if folder is not None:
            # BaseException: a signal that arrives meanwhile must not cost the report.
            with contextlib.suppress(BaseException):
                if stage is not None:
                    _keep_staged(cfg, spec, only, report, folder, stage, ends, per_epoch, start, held_out)
            with contextlib.suppress(BaseException):
                write_report(report, folder)
            error.parity_run_dir = str(folder)
        if signalled and not isinstance(error, KeyboardInterrupt):
            stopped = KeyboardInterrupt(str(error).splitlines()[0])
            stopped.parity_run_dir = getattr(error, "parity_run_dir", None)
            raise stopped from error
        raise
    finally:
        if stage is not None:
            staging.clear(stage)
    return report


def _rows(cfg: Any, spec: Any, only: str | None, report: RunReport, runs: dict[str, Any], ends: tuple[int, ...],
          per_epoch: int, start: int, held_out: Any) -> None:
    """Append the sides' step rows and a compared, evaluated row for each epoch end in ``ends``."""
    from parity.build import jax_optimizer
    from parity.optim import param_group_members
    from parity.parallel import initial_state, param_names

    names = param_names(spec)
    lrs = jax_optimizer(spec.optimizer, spec.scheduler, per_epoch, param_group_members(spec.optimizer, names))[1]
    report.steps = report.steps + _steps(runs, per_epoch, lrs, start)
    evaluate = _Evaluator(cfg, initial_state(spec), held_out)
    for end in ends:
        report.epochs.append(_measure(cfg, runs, end, per_epoch, only, evaluate, names, lrs))


def _has_floor(cfg: Any, only: str | None) -> bool:
    """Whether the run trains torch's float64 twin beside a float32 run (the precision floor)."""
    return only is None and cfg.train.dtype == "float32" and cfg.train.floor


def _staged_sides(cfg: Any, only: str | None) -> list[str]:
    """The sides a run trains, by their staging names."""
    return ((["torch"] if only != "jax" else []) + (["floor"] if _has_floor(cfg, only) else [])
            + (["jax"] if only != "torch" else []))


def _keep_staged(cfg: Any, spec: Any, only: str | None, report: RunReport, folder: Path, stage: Path,
                 ends: tuple[int, ...], per_epoch: int, start: int, held_out: Any) -> None:
    """After an interruption: the report's steps and epochs up to the last epoch every side completed,
    and ``checkpoint.pt`` there (``train.checkpoint: every``), from the staged epochs (:mod:`parity.staging`); then the staging removed."""
    staged = staging.read_staged(stage, _staged_sides(cfg, only))
    if staged is None:
        report.message += "; no epoch was complete on every side, so there is no checkpoint to resume from"
        staging.clear(stage)
        return
    runs, last = staged
    kept = tuple(end for end in ends if end <= last)
    _rows(cfg, spec, only, report, runs, kept, per_epoch, start, held_out)
    _checkpoint(cfg, runs, report, folder / "checkpoint.pt")
    note = f"; kept every step to {last} (the last epoch every side completed)"
    report.message += (note + " and checkpoint.pt there: --resume it to go on" if cfg.train.checkpoint == "every"
                       else note + f" (train.checkpoint: {cfg.train.checkpoint}, so no checkpoint.pt)")
    staging.clear(stage)


_DROPOUTS = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
             torch.nn.FeatureAlphaDropout)


def _dropout_modules(spec: Any) -> list[str]:
    """The torch model's submodules that draw dropout masks (``Dropout*`` with ``p > 0``, attention with
    ``dropout > 0``), by name. Functional dropout in ``forward`` is not visible here."""
    from parity.parallel import build_torch_model

    found = []
    for name, module in build_torch_model(spec).named_modules():
        p = module.p if isinstance(module, _DROPOUTS) else (
            module.dropout if isinstance(module, torch.nn.MultiheadAttention) else 0.0)
        if p:
            found.append(f"{name or 'the model'} ({type(module).__name__}, p={p:g})")
    return found


def _has_generators(ckpt: Any, only: str | None) -> bool:
    """Whether the checkpoint holds every rank's generator for each side this run resumes."""
    sides = ([ckpt.torch] if only != "jax" else []) + ([ckpt.jax] if only != "torch" else [])
    floor = ckpt.torch.get("floor") if only is None else None
    return all("rng" in side for side in sides + ([floor] if floor is not None else []))


def _resume_states(ckpt: Any) -> dict[str, Any]:
    """The spec's ``resume``: each side's state at the checkpoint's whole epoch."""
    states = {}
    for side, source in (("torch", ckpt.torch), ("floor", ckpt.torch.get("floor")), ("jax", ckpt.jax)):
        if source is not None and "model" in source:
            states[side] = {"step": ckpt.step, "epoch": ckpt.epoch,
                            **{k: v for k, v in source.items() if k not in ("floor", "parallel")}}
    return states


def _checkpoint(cfg: Any, runs: dict[str, Any], report: RunReport, path: Path) -> None:
    """``checkpoint.pt`` after the last whole epoch each side completed (``train.checkpoint``)."""
    from parity.checkpoint import write_state

    mode = cfg.train.checkpoint
    states = {side: run.get("resume_state") for side, run in runs.items()}
    first = next((s for s in states.values() if s is not None), None)
    if mode == "none" or first is None or any(s is None or s["step"] != first["step"] for s in states.values()):
        return
    if mode == "last" and first["epoch"] != cfg.train.epochs:
        return
    torch_state = {k: v for k, v in (states.get("torch") or {}).items() if k not in ("step", "epoch")}
    if states.get("floor") is not None:
        torch_state["floor"] = {k: v for k, v in states["floor"].items() if k not in ("step", "epoch")}
    jax_state = {k: v for k, v in (states.get("jax") or {}).items() if k not in ("step", "epoch")}
    torch_state["parallel"] = jax_state["parallel"] = True
    history = report.to_dict()
    history["steps"] = [s for s in history["steps"] if s["step"] < first["step"]]
    history["epochs"] = [e for e in history["epochs"] if e["steps"] <= first["step"]]
    write_state(path, cfg.to_dict(), first["epoch"], first["step"], history, torch_state, jax_state)


def _sides(spec: Any) -> tuple[str, str]:
    """``(torch side, JAX side)`` in words, e.g. ``("torch DDP, 2 ranks", "JAX pmap on 2 devices")``."""
    reference = ("torch BatchNorm on the global batch (SyncBatchNorm needs CUDA)"
                 if spec.sync_bn and not torch.cuda.is_available() else f"torch DDP, {spec.world_size} ranks")
    devices = f"{spec.world_size} replicas on one device" if spec.mode == "vmap" else f"{spec.world_size} devices"
    if spec.mode == "multiprocess":
        processes = spec.processes or spec.world_size
        devices += f" in {processes} processes ({spec.world_size // processes} each)"
    return reference, f"JAX {'sharded' if spec.mode == 'multiprocess' else spec.mode} on {devices}"


def _where(spec: Any) -> str:
    return " vs ".join(_sides(spec))


def _own_init(cfg: Any) -> tuple[str, dict[str, np.ndarray]]:
    """``model.init: seed``: the report's init line and the JAX model's own initial weights after the seed
    (jax_impl's init drawing from jax_impl.random as torch's from its generator), for every replica."""
    from parity.build import init_note
    from parity.convert.modules import module_state
    from parity.models import build_models

    torch_model, jax_model = build_models(cfg.model, seed=cfg.train.seed)
    return init_note(cfg, torch_model, jax_model), {k: np.array(v[...]) for k, v in module_state(jax_model).items()}


def _train(spec: Any, context: Any, cfg: Any, only: str | None, phases: Phases, stage: Path | None = None,
           jax_initial: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Each side's run (``{"losses", "snapshots", "seconds", "state", ...}``), and torch's float64 twin of a
    float32 run (``"floor"``); each side's whole epochs staged in ``stage`` as it goes. ``jax_initial``: the
    JAX side's own initial weights (``model.init: seed``); ``None``: torch's."""
    from parity.parallel import initial_state, jax_run, torch_reference

    initial = initial_state(spec)
    runs: dict[str, Any] = {}

    def staged(key: str) -> Any:  # the side's context: its whole epochs staged under its own key
        return dataclasses.replace(context, stage_dir=None if stage is None else str(stage), stage_key=key)

    if only != "jax":
        phases(f"{_sides(spec)[0]}: training {spec.steps} steps")
        runs["torch"] = torch_reference(spec, initial, context=staged("torch"))
        if _has_floor(cfg, only):
            phases(f"the same torch run in float64 beside it (torch's own float32 floor): {spec.steps} steps")
            runs["floor"] = torch_reference(dataclasses.replace(spec, dtype="float64"), initial, floor=True,
                                            context=staged("floor"))
    if only != "torch":
        phases(f"{_sides(spec)[1]}: compiling and training {spec.steps} steps")
        runs["jax"] = jax_run(spec, initial if jax_initial is None else jax_initial, context=staged("jax"))
    return runs


def _steps(runs: dict[str, Any], per_epoch: int, lrs: Any, start: int = 0) -> list[dict[str, float]]:
    """Per step from ``start``: each side's loss (the mean over ranks), torch's float64 twin's, the groups' lrs
    (:class:`parity.build.LearningRates`)."""
    first = runs.get("torch") or runs["jax"]
    records = []
    for i in range(len(first["losses"])):
        step, epoch = start + i, (start + i) // per_epoch
        record: dict[str, Any] = {"step": step, "epoch": epoch, **lr_fields(lrs.at(step, epoch))}
        for key, name in (("torch", "torch_loss"), ("jax", "jax_loss"), ("floor", "torch_f64_loss")):
            if key in runs:
                record[name] = runs[key]["losses"][i]
        records.append(record)
    return records


class _Evaluator:
    """Held-out predictions of a snapshot: torch's model and JAX's, each loaded with that side's state_dict,
    through :mod:`parity.evaluate` (as a single-device run evaluates its live models)."""

    def __init__(self, cfg: Any, initial: dict[str, np.ndarray], held_out: tuple[np.ndarray, np.ndarray] | None):
        from parity.build import cast_jax_model, float_dtypes
        from parity.models import build_models

        self.held_out = held_out
        self.autocast = cfg.train.autocast
        self.t_dtype, self.np_dtype = float_dtypes(cfg.train.dtype)
        # The held-out samples through each side's eval transforms (data.eval_transform, default the training
        # ones), once; random ones draw from a generator seeded with train.seed on both sides.
        self.t_x = self.j_x = None if held_out is None else held_out[0]
        configs = cfg.data.transforms(False)
        if held_out is not None and configs and len(held_out[0]):
            from jax_impl.random import Generator
            from parity.build import transforms
            from parity.parallel import rank_transform

            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(cfg.train.seed)
                t_transform = transforms(configs)[0]
                self.t_x = torch.stack([torch.as_tensor(t_transform(torch.from_numpy(v))) for v in held_out[0]]).numpy()
            j_transform = rank_transform(configs, Generator().manual_seed(cfg.train.seed))
            self.j_x = np.stack([np.asarray(j_transform(v)) for v in held_out[0]])
        self.torch_model, self.jax_model = build_models(cfg.model, seed=cfg.train.seed)
        self.torch_model.to(self.t_dtype).eval()
        cast_jax_model(self.jax_model, self.np_dtype)
        self.jax_model.eval()

    def torch(self, state: dict[str, np.ndarray]) -> np.ndarray:
        self.torch_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        return torch_predictions(self.torch_model, [self.t_x], self.t_dtype, self.autocast)

    def jax(self, state: dict[str, np.ndarray]) -> np.ndarray:
        from parity.convert.modules import load_torch_state_dict

        load_torch_state_dict(self.jax_model, state)
        return jax_predictions(self.jax_model, [self.j_x], self.np_dtype, self.autocast)


def _measure(cfg: Any, runs: dict[str, Any], end: int, per_epoch: int, only: str | None, evaluate: _Evaluator,
             names: list[str], lrs: Any) -> EpochRecord:
    """The record of the epoch ending at step ``end``: what a single-device run's ``_measure`` records, from
    rank 0's and replica 0's snapshots."""
    torch_run, jax_run_, floor_run = runs.get("torch"), runs.get("jax"), runs.get("floor")
    epoch = math.ceil(end / per_epoch) - 1
    rec = EpochRecord(epoch=epoch, steps=end,
                      torch_seconds=torch_run["seconds"][end] if torch_run else math.nan,
                      jax_seconds=jax_run_["seconds"][end] if jax_run_ else math.nan,
                      **lr_fields(lrs.at(end - 1, epoch)))
    theirs = torch_run["snapshots"][end] if torch_run else None
    ours = jax_run_["snapshots"][end] if jax_run_ else None
    if theirs is not None and ours is not None:
        buffers = [k for k in theirs if "running_" in k]
        floor = {}
        if floor_run is not None:
            reference = floor_run["snapshots"][end]
            floor = {k: scaled_error(theirs[k], reference[k]) for k in [*names, *buffers]}
        measure_states(rec, theirs, ours, params=names, buffers=buffers, floor=floor, tol=cfg.train.tolerance)
    if evaluate.held_out is not None and len(evaluate.held_out[1]):
        rec.torch_accuracy, rec.jax_accuracy, rec.agreement = accuracies(
            evaluate.held_out[1], evaluate.torch(theirs) if theirs is not None else None,
            evaluate.jax(ours) if ours is not None else None)
    return rec
