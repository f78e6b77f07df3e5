"""The single-device training loop: both frameworks step by step on the same batches, measured per epoch.

The stages of a run, each in its own module: :mod:`parity.build` builds both
sides from the config, this module trains them, :mod:`parity.report` writes
the report and :mod:`parity.checkpoint` the checkpoints.
:func:`parity.experiment.run_experiment` is the entry point.

Per step the loop records both losses; at the first step whose losses
differ beyond tolerance it replays that step's forward layer by layer and
names the first layer whose output differs. After each epoch it compares
the parameters and BatchNorm buffers (``max |jax - torch| / max |torch|``
per tensor, the worst tensor), evaluates both models on the held-out split
and saves a checkpoint (``train.checkpoint``). The JAX side steps with the
optimizer's exact ``tx.step`` in one jitted function; an optimizer with
torch's closure protocol (LBFGS) steps with ``jax_impl.train.closure_train_step``,
its closure one jitted forward and backward. With ``train.ema`` both sides
keep an average of the weights (:mod:`parity.weight_average`), compared after
each epoch beside the parameters. A run from its first step records each side
it trains (and the float64 twin) in its run folder (:mod:`parity.run_recording`),
for ``parity compare`` of runs made apart.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from jax_impl import random as jax_random
from parity import interrupt
from parity.build import Experiment, build_experiment
from parity.checkpoint import CheckpointError, read_checkpoint, restore, resumed_report, write_checkpoint
from parity.config import ConfigError
from parity.evaluate import jax_predictions, torch_predictions
from parity.files import make_run_folder
from parity.floor import FloorReference, divergence_message, judge
from parity.measure import accuracies, input_array, losses_differ, lr_fields, measure_states
from parity.progress import Phases, step_bar
from parity.report import EpochRecord, RunReport, preload_plotting, write_report
from parity.run_recording import RunRecordings
from parity.torch_step import micro_batch_groups, model_input, step_loss, torch_train_step
from parity.weight_average import WeightAverages

__all__ = ["DivergenceError", "run_single"]


class DivergenceError(RuntimeError):
    """A side produced NaN/inf: the run stops and names the step and the side."""


@dataclasses.dataclass
class _Run:
    """A single-device run in progress: what it was asked for, where it reports, and what changes as it goes
    (the JAX optimizer state, the float64 twin, the step count). The experiment itself is not changed."""

    exp: Experiment
    report: RunReport
    only: str | None
    max_steps: int | None
    total: int  # the optimizer step this run stops at
    folder: Path | None
    phases: Phases
    progress: bool
    opt_state: Any  # the JAX optimizer's state at ``step``
    epoch: int = 0  # the epoch the next step belongs to
    step: int = 0  # optimizer steps done
    floor: FloorReference | None = None  # torch's float64 twin of a float32 run
    ema: WeightAverages | None = None  # train.ema: both sides' averaged weights
    recordings: RunRecordings | None = None  # the run folder's recording-* folders (parity.run_recording)

    @property
    def config(self) -> Any:
        return self.exp.config


def run_single(cfg: Any, *, only: str | None = None, max_steps: int | None = None,
               runs_dir: str | Path = "runs", write: bool = True, progress: bool = True,
               resume: str | Path | None = None, resume_from: str | None = None,
               allow_config_change: bool = False, phases: Phases | None = None, **objects: Any) -> RunReport:
    """Train ``cfg`` on one device in both frameworks (or one, ``only``); see :func:`parity.experiment.run_experiment`.

    ``objects`` are :func:`parity.build.build_experiment`'s ``torch_model``, ``jax_model``, ``train_data``
    and ``val_data``."""
    phases = phases or Phases(enabled=progress)
    ckpt = read_checkpoint(resume) if resume is not None else None  # a bad file fails before any building
    phases("building both models, loaders and optimizers")
    exp = build_experiment(cfg, **objects)
    max_steps = max_steps if max_steps is not None else cfg.train.max_steps
    total = exp.total_steps(max_steps)
    report = RunReport(name=cfg.name, config=cfg.to_dict(), only=only, total_steps=total, init=exp.init)
    run = _Run(exp, report, only, max_steps, total, None, phases, progress, exp.opt_state)
    if cfg.train.ema is not None:
        if ckpt is not None:
            raise ConfigError("--resume with train.ema: checkpoints do not hold the averaged weights",
                              path="train.ema")
        run.ema = WeightAverages(cfg.train.ema, exp.torch_model, exp.jax_model, only)
    if ckpt is not None:
        run.opt_state = restore(exp, ckpt, resume_from=resume_from, allow_config_change=allow_config_change,
                                only=only)
        run.epoch, run.step = ckpt.epoch, ckpt.step
        if run.step >= total or run.epoch >= cfg.train.epochs:
            raise CheckpointError(f"nothing to do: {ckpt.path} is at step {run.step} (epoch {run.epoch}) and this "
                                  f"run ends at step {total}; raise train.epochs to train longer")
        run.report, run.folder = resumed_report(ckpt, report, write=write)
        phases(f"resuming from {ckpt.path} at step {run.step} (epoch {run.epoch})")
    created = write and run.folder is None
    if created:
        run.folder = make_run_folder(runs_dir, cfg.name)
    report, folder = run.report, run.folder
    report.run_dir = None if folder is None else str(folder)
    try:
        _train(run)
    except DivergenceError:
        raise
    except ConfigError:
        if created:  # bad input found while compiling: nothing ran, nothing stays written
            shutil.rmtree(folder, ignore_errors=True)
        raise
    except BaseException as error:
        report.interrupted, report.passed = True, False
        report.message = ("interrupted (SIGINT/SIGTERM)" if isinstance(error, KeyboardInterrupt)
                          else f"stopped by {type(error).__name__}: {error}")
        _write_quietly(report, folder)
        if folder is not None:
            error.parity_run_dir = str(folder)  # where the CLI writes error.log
        raise
    if only is None and not report.passed:
        report.message = (divergence_message(report.epochs[-1], cfg.train.tolerance.rtol, report.first_divergent_step)
                          + f", its first layer whose output differs: {report.first_divergent_layer}")
    if folder is not None:
        write_report(report, folder)
    return report


def _write_quietly(report: RunReport, folder: Path | None) -> None:
    """Write what report can be written while a run stops; a second failure (a full disk) is not raised."""
    if folder is None:
        return
    try:
        write_report(report, folder)
    except Exception:  # noqa: BLE001 - the first error is the one to report
        pass


def _jax_step_fn(exp: Experiment, graphdef: Any) -> Any:
    """``step(state, micro_batches) -> (state, losses)``: ``jax_impl.train``'s step of this run (with
    ``train.clip_grad_norm``; ``accumulating_train_step`` when ``train.accumulate > 1``). The input state
    is kept (no donation), since the step's starting state is the snapshot a divergent step is replayed from."""
    from jax_impl.train import accumulating_train_step, closure_train_step, train_step
    from parity.optim import CLOSURE_OPTIMIZERS

    train = exp.config.train
    if exp.config.optimizer.name in CLOSURE_OPTIMIZERS:
        # The optimizer's flat vector in torch's parameters() order, as torch's _gather_flat_grad has it.
        leaves = _leaf_names(_nnx_params(exp))
        order = [leaves.index(name + ".value") for name in exp.groups[0][1]]
        closure_step = closure_train_step(graphdef, exp.j_loss, exp.tx, order=order, autocast=_jax_autocast(exp))

        def one_closure_batch(state: Any, micro_batches: Any) -> tuple[Any, list[Any]]:
            (x, y), = micro_batches
            state, loss = closure_step(state, x, y)
            return state, [loss]

        return one_closure_batch
    clip = {"clip_grad_norm": train.clip_grad_norm, "norm_type": train.clip_grad_norm_type,
            "autocast": _jax_autocast(exp)}
    if train.accumulate > 1:
        return accumulating_train_step(graphdef, exp.j_loss, exp.tx, train.accumulate, donate=False, **clip)
    step = train_step(graphdef, exp.j_loss, exp.tx, donate=False, **clip)

    def one_batch(state: Any, micro_batches: Any) -> tuple[Any, list[Any]]:
        (x, y), = micro_batches
        state, loss = step(state, x, y)
        return state, [loss]

    return one_batch


def _nnx_params(exp: Experiment) -> Any:
    """The JAX model's parameters (``nnx.State``)."""
    from flax import nnx

    return nnx.state(exp.jax_model, nnx.Param)


def _leaf_names(tree: Any) -> list[str]:
    """Dotted key paths of ``tree``'s leaves in JAX's flattening order (``parity._tree``'s spelling)."""
    import jax

    from parity._tree import jax_key_name

    return [".".join(jax_key_name(entry) for entry in path) for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _torch_autocast(exp: Experiment) -> torch.dtype | None:
    """``train.autocast`` as a torch dtype (``None``: no autocast)."""
    return None if exp.config.train.autocast is None else getattr(torch, exp.config.train.autocast)


def _jax_autocast(exp: Experiment) -> Any:
    """``train.autocast`` as a jax dtype (``None``: no autocast)."""
    import jax.numpy as jnp

    return None if exp.config.train.autocast is None else jnp.dtype(exp.config.train.autocast)


def _state(run: _Run) -> tuple[Any, Any]:
    """``(graphdef, jax_impl.train.TrainState)`` of the JAX model as it is now, with the run's optimizer state."""
    from flax import nnx

    from jax_impl.train import TrainState

    run.exp.jax_model.train()  # the mode is part of the graph: the epoch's steps run in train mode
    graphdef, params, rest = nnx.split(run.exp.jax_model, nnx.Param, ...)
    return graphdef, TrainState(params, rest, run.opt_state)


def _compile(run: _Run) -> Any:
    """The JAX step, compiled for the epoch's batch shapes (full, and the last partial one) before the bar starts.

    A run from step 0 to ``total`` traces the step inside ``jax_impl.optim.fixed_horizon(total)``: the
    optimizer tabulates its host scalars for every step of the run and compiles no host callback, so that
    the step can be kept in JAX's persistent compilation cache. (A resumed run may carry a float32 scalar
    state, NAdam's or ASGD's, that a table from the initial one does not predict, with
    ``--allow-config-change``: it keeps the callback.) A run of fewer steps than an epoch from ``step``
    (``--steps``) never meets the partial batch, whose compile (a second trace of the step) is skipped.
    """
    import jax.numpy as jnp

    from jax_impl.optim import fixed_horizon

    exp, phases, total, step = run.exp, run.phases, run.total, run.step
    loader = exp.j_train
    # A random transform's draws for this sample and the dummy steps' dropout draws must not advance the run's stream.
    rng = jax_random.get_rng_state()
    x, y = loader.dataset[0]
    batch = loader.batch_size or 1
    horizon = total if step == 0 else None
    partial = not loader.drop_last and total - step >= exp.steps_per_epoch
    sizes = {batch} | ({len(loader.dataset) % batch} if partial else set())
    start = time.perf_counter()
    phases("compiling the JAX train step")
    graphdef, state = _state(run)
    jax_step = _jax_step_fn(exp, graphdef)
    for size in sorted(sizes - {0}):
        xs = _jax_input(np.zeros((size, *np.shape(x)), np.asarray(x).dtype), exp.np_dtype)
        ys = jnp.asarray(np.stack([np.asarray(y)] * size))
        try:  # two micro-batches compile an accumulating step's first, running-sum and update parts
            with fixed_horizon(horizon) if horizon else contextlib.nullcontext():
                jax_step(state, [(xs, ys)] * min(exp.config.train.accumulate, 2))[1][-1].block_until_ready()
        except (TypeError, ValueError) as error:  # shapes and dtypes: the JAX model does not fit the data
            first = str(error).strip().splitlines()[0][:200]
            raise ConfigError(f"the JAX model's train step fails on a batch of shape {tuple(xs.shape)}: {first}",
                              path="model") from None
    jax_random.set_rng_state(rng)
    phases(f"compiled in {time.perf_counter() - start:.1f}s{_cache_note()}; training")
    return jax_step


def _cache_note() -> str:
    """`` (compilation cache: DIR)`` when JAX's persistent compilation cache is on, else ``""``."""
    import jax

    where = jax.config.jax_compilation_cache_dir
    return f" (compilation cache: {where})" if where else ""


def _train(run: _Run) -> None:
    cfg, exp = run.config, run.exp
    jax_step = _compile(run) if run.only != "torch" else None
    if run.only != "jax" and cfg.train.dtype == "float32" and cfg.train.floor:
        # a resumed run carries the distance torch's own run had reached when its checkpoint was written
        carried = {k: floor for k, (_, floor) in run.report.epochs[-1].leaves.items()} if run.report.epochs else None
        run.floor = FloorReference(exp, carried=carried)
    if run.folder is not None and run.step == 0:
        sides = [s for s in ("torch", "jax") if run.only in (None, s)] + (["floor"] if run.floor is not None else [])
        run.recordings = RunRecordings(run.folder, sides, dtype=cfg.train.dtype,
                                       meta={"config": cfg.name, "rtol": cfg.train.tolerance.rtol})
    try:
        _train_epochs(run, jax_step)
    except BaseException as error:
        if run.recordings is not None:
            run.recordings.close(f"stopped by {type(error).__name__}")
        raise
    if run.recordings is not None:
        run.recordings.close()


def _train_epochs(run: _Run, jax_step: Any) -> None:
    cfg, exp, report = run.config, run.exp, run.report
    # Both global generators at the same state: torch's dropout masks, drawn by both sides from here on.
    jax_random.set_rng_state(torch.get_rng_state().numpy())
    mode = getattr(cfg.train, "checkpoint", "every")
    if run.folder is not None:
        preload_plotting()
    with step_bar(run.progress) as bar:
        task = bar.add_task(cfg.name, total=run.total, info="")
        bar.update(task, completed=min(run.step, run.total))
        for run.epoch in range(run.epoch, cfg.train.epochs):
            t_time, j_time = _train_epoch(run, jax_step, lambda info: bar.update(task, advance=1, info=info))
            report.epochs.append(_measure(run, t_time, j_time))
            if run.recordings is not None:
                run.recordings.epoch_end({"torch": exp.torch_model, "jax": exp.jax_model,
                                          "floor": None if run.floor is None else run.floor.model})
            if run.only is None:
                judge(report, cfg.train.tolerance.rtol)
            last = run.epoch == cfg.train.epochs - 1 or run.step >= run.total
            # Only whole epochs: the loaders cannot resume in the middle of one.
            whole = run.step == (run.epoch + 1) * exp.steps_per_epoch
            if run.folder is not None and whole and (mode == "every" or (mode == "last" and last)):
                write_checkpoint(run.folder / "checkpoint.pt", exp, run.opt_state, run.epoch + 1, run.step,
                                 report.to_dict())
            if run.step >= run.total:
                break


def _train_epoch(run: _Run, jax_step: Any, advance: Any) -> tuple[float, float]:
    """One epoch of both sides from ``run.step``; returns ``(torch seconds, JAX seconds)``. ``advance(info)``
    moves the progress bar a step."""
    import jax.numpy as jnp
    from flax import nnx

    from jax_impl.train import merge_model

    exp, report, only, epoch = run.exp, run.report, run.only, run.epoch
    cfg, tol = exp.config, exp.config.train.tolerance
    per_step_schedule = exp.t_sched is not None and cfg.scheduler.interval == "step"
    exp.torch_model.train()
    graphdef, state = _state(run)
    t_time = j_time = 0.0
    train = cfg.train
    for group in micro_batch_groups(zip(exp.t_train, exp.j_train, strict=True), train.accumulate):
        if run.max_steps is not None and run.step >= run.max_steps:
            break
        step = run.step
        t_batches = [t for t, _ in group]
        first_input = t_batches[0][0]  # torch's input of the step: what a divergent step's forward is replayed on
        interrupt.check()
        record: dict[str, Any] = {"step": step, "epoch": epoch, **lr_fields(exp.lrs.at(step, epoch))}
        hunting = only is None and report.first_divergent_step is None
        rng = torch.get_rng_state() if (hunting or run.floor is not None) else None
        if hunting:  # both models as they enter this step, to replay it layer by layer if it diverges
            t_snap = {k: v.detach().clone() for k, v in exp.torch_model.state_dict().items()}
            j_snap = state  # immutable arrays, not donated: holding them is the snapshot
        if only != "jax":
            start = time.perf_counter()
            t_losses = torch_train_step(exp.torch_model, exp.t_loss, exp.t_opt, t_batches, dtype=exp.t_dtype,
                                        accumulate=train.accumulate, clip_grad_norm=train.clip_grad_norm,
                                        norm_type=train.clip_grad_norm_type, autocast=_torch_autocast(exp))
            if per_step_schedule:
                exp.t_sched.step()
            if run.ema is not None:
                run.ema.update_torch()
            record["torch_loss"] = step_loss(t_losses)
            t_time += time.perf_counter() - start
            if run.floor is not None:  # the float64 twin draws the same dropout masks as this step did
                with _rng_state(rng):
                    record["torch_f64_loss"] = run.floor.step(t_batches)
        if only != "torch":
            start = time.perf_counter()
            j_batches = [(_jax_input(jx_b, exp.np_dtype), jnp.asarray(np.asarray(jy_b))) for _, (jx_b, jy_b) in group]
            state, j_losses = jax_step(state, j_batches)
            if run.ema is not None:
                run.ema.update_jax(state.params)
            record["jax_loss"] = step_loss([float(loss) for loss in j_losses])
            j_time += time.perf_counter() - start
        report.steps.append(record)
        if run.recordings is not None:
            run.recordings.step(record)
        _stop_if_not_finite(report, record, step, epoch)
        if hunting and losses_differ(record["torch_loss"], record["jax_loss"], tol):
            report.first_divergent_step = step
            with _rng_state(rng):
                report.first_divergent_layer = _replay_step(exp, t_snap, merge_model(graphdef, j_snap), first_input)
        run.step += 1
        info = " ".join(f"{k.split('_')[0]} {record[k]:.4f}" for k in ("torch_loss", "jax_loss") if k in record)
        advance(f"epoch {epoch + 1}/{cfg.train.epochs} loss {info}")
    nnx.update(exp.jax_model, state.params, state.buffers)
    run.opt_state = state.opt_state
    if exp.t_sched is not None and cfg.scheduler.interval == "epoch" and only != "jax":
        exp.t_sched.step()
    if run.floor is not None:
        run.floor.end_epoch()
    return t_time, j_time


@contextlib.contextmanager
def _rng_state(state: torch.Tensor) -> Iterator[None]:
    """Both global generators at torch's ``state`` inside, and back where they were after (a side computation
    that draws dropout masks leaves the run's streams untouched)."""
    torch_after, jax_after = torch.get_rng_state(), jax_random.get_rng_state()
    torch.set_rng_state(state)
    jax_random.set_rng_state(state.numpy())
    try:
        yield
    finally:
        torch.set_rng_state(torch_after)
        jax_random.set_rng_state(jax_after)


def _stop_if_not_finite(report: RunReport, record: dict[str, Any], step: int, epoch: int) -> None:
    for side in ("torch", "jax"):
        value = record.get(f"{side}_loss")
        if value is not None and not math.isfinite(value):
            report.passed = False
            report.message = f"{side} loss is {value} at step {step} (epoch {epoch})"
            if report.run_dir is not None:
                write_report(report, report.run_dir)
            error = DivergenceError(report.message)
            error.parity_run_dir = report.run_dir
            raise error


def _measure(run: _Run, t_time: float, j_time: float) -> EpochRecord:
    """The end-of-epoch record: parameter and buffer divergence, held-out accuracy, agreement, timings."""
    from flax import nnx

    exp, only, epoch, step = run.exp, run.only, run.epoch, run.step
    rec = EpochRecord(epoch=epoch, steps=step, torch_seconds=t_time if only != "jax" else math.nan,
                      jax_seconds=j_time if only != "torch" else math.nan,
                      **lr_fields(exp.lrs.at(step - 1, epoch)))  # the lrs this epoch's last step used
    if only is None:
        theirs = {k: v.detach().numpy() for k, v in exp.torch_model.state_dict().items()}
        ours = {**_jax_flat(exp.jax_model, nnx.Param), **_jax_flat(exp.jax_model, nnx.BatchStat)}
        params = [k for k, _ in exp.torch_model.named_parameters()]
        buffers = [k for k in theirs if "running_" in k]
        floor = {}
        if run.floor is not None:
            floor = {**run.floor.distances(exp.torch_model),
                     **(run.floor.distances(exp.torch_model, buffers=True) if buffers else {})}
        measure_states(rec, theirs, ours, params=params, buffers=buffers, floor=floor, tol=exp.config.train.tolerance)
        if run.ema is not None:
            rec.ema_max_rel, rec.ema_worst_leaf = run.ema.distance()
    elif run.floor is not None:  # --only torch: torch's own float32 floor, what the recordings will be judged by
        rec.floor_max_rel, rec.floor_worst = run.floor.distance(exp.torch_model)
    if exp.eval_loaders is not None:
        rec.torch_accuracy, rec.jax_accuracy, rec.agreement = _evaluate(run)
    return rec


def _evaluate(run: _Run) -> tuple[float, float, float]:
    """Held-out accuracy of each side and the share of samples whose predicted class agrees
    (:mod:`parity.evaluate`)."""
    exp, only, autocast = run.exp, run.only, run.config.train.autocast
    t_batches = list(exp.eval_loaders[0])  # once: a random eval transform draws as the batches are made
    labels = [ty.numpy() for _, ty in t_batches]
    t_pred = j_pred = None
    if only != "jax":
        t_pred = torch_predictions(exp.torch_model, (tx for tx, _ in t_batches), exp.t_dtype, autocast)
    if only != "torch":
        j_pred = jax_predictions(exp.jax_model, (jx for jx, _ in exp.eval_loaders[1]), exp.np_dtype, autocast)
    return accuracies(np.concatenate(labels) if labels else np.zeros(0), t_pred, j_pred)


def _replay_step(exp: Experiment, t_snap: dict[str, torch.Tensor], j_model: Any, x: torch.Tensor) -> str | None:
    """The first layer (torch's call order) whose output differs, replaying a step's forward from its start."""
    from parity.models import compare_models

    tol = exp.config.train.tolerance
    t_copy = copy.deepcopy(exp.torch_model)
    t_copy.load_state_dict(t_snap)
    result = compare_models(t_copy, j_model, model_input(x, exp.t_dtype).numpy(), train=True,
                            rtol=tol.rtol, atol=tol.atol)
    first = result.first_divergence
    return None if first is None else first.name


def _jax_input(x: Any, np_dtype: type) -> Any:
    """A loader batch's inputs on the JAX side (:func:`parity.measure.input_array`) as a jax array (integer
    inputs int32 unless jax x64 is on)."""
    import jax.numpy as jnp

    return jnp.asarray(input_array(x, np_dtype))


def _jax_flat(model: Any, kind: Any) -> dict[str, np.ndarray]:
    from flax import nnx

    return {".".join(map(str, k)): np.asarray(v[...]) for k, v in nnx.to_flat_state(nnx.state(model, kind))}
