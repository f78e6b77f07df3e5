"""Run checkpoints: both sides' state in torch's formats, verified before anything is unpickled.

A checkpoint file is a header line, the SHA-256 digest of the body, and the
body: one ``torch.save`` of ``{format, version, config, epoch, step, torch,
jax, history}`` (the resolved config, both models, both optimizers, the
scheduler, both loaders' and both global generators' states, and the report
so far). Reading checks the header and the digest of every byte of the body
first, so a damaged file is refused before any unpickling, and then loads
the body with ``torch.load(weights_only=True)``: a file that needs anything
but tensors and plain Python containers (a crafted pickle that would run
code) is refused, and nothing in it runs. Every problem raises
:class:`CheckpointError`, a :class:`parity.config.ConfigError`: bad input,
exit code 2 on the CLI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from jax_impl import random as jax_random
from parity.config import ConfigError
from parity.files import atomic_write

__all__ = ["Checkpoint", "CheckpointError", "check_resumable", "config_changes", "read_checkpoint", "restore",
           "resumed_report", "write_checkpoint", "write_state"]

FORMAT = "parity-checkpoint"
VERSION = 2
MAGIC = b"PARITY-CHECKPOINT\n"

# Keys a resumed run may change freely: how long it runs, how often it saves,
# how strictly it is judged (and against what), what it is called and how many worker processes
# load the (same) batches. Any other key changes the
# trajectory and needs `--allow-config-change`.
FREE_KEYS = ("name", "train.epochs", "train.max_steps", "train.checkpoint", "train.tolerance", "train.floor",
             "data.num_workers")


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed: unreadable, damaged, foreign, or from another config."""


@dataclasses.dataclass
class Checkpoint:
    """A verified checkpoint, read by :func:`read_checkpoint`."""

    path: Path
    epoch: int
    step: int
    config: dict[str, Any]
    history: dict[str, Any] | None
    torch: dict[str, Any]
    jax: dict[str, Any]
    only: str | None = None


def resumed_report(ckpt: Checkpoint, report: Any, *, write: bool) -> tuple[Any, Path | None]:
    """``(report, run folder or None)`` of a run resumed from ``ckpt``, single-device or data-parallel alike.

    The report goes on from the checkpoint's history (its steps and epochs so far) with ``report``'s
    config, ``only``, total steps and init line; a run whose folder holds its report goes on in that folder
    (one report from step 0), else ``None`` (the caller makes a new one, or writes nothing).

    Raises:
      CheckpointError: the history is unreadable, or the run folder is not writable.
    """
    from parity.files import check_writable
    from parity.report import report_from_dict

    if ckpt.history is not None:
        try:
            report = report_from_dict({**ckpt.history, "config": report.config, "only": report.only,
                                       "total_steps": report.total_steps, "passed": True, "message": "",
                                       "interrupted": False, "init": report.init})
        except (TypeError, ValueError, KeyError, AttributeError):
            raise CheckpointError(f"{ckpt.path} is damaged: its report history is unreadable") from None
    if not (write and (ckpt.path.parent / "report.json").exists()):
        return report, None
    folder = ckpt.path.parent
    try:
        check_writable(folder)
    except OSError as error:
        raise CheckpointError(f"the run folder {folder} is not writable ({error.strerror}); copy its "
                              "checkpoint.pt elsewhere to resume into a new folder") from None
    return report, folder


def write_checkpoint(path: str | os.PathLike, exp: Any, opt_state: Any, epoch: int, step: int,
                     history: dict[str, Any]) -> None:
    """Save both sides of ``exp`` (a :class:`parity.build.Experiment`) after ``epoch`` epochs, atomically;
    ``opt_state`` is the JAX optimizer's state at that point.

    ``history`` is the report so far (``RunReport.to_dict()``), so a resumed
    run reports every step from step 0.
    """
    write_state(path, exp.config.to_dict(), epoch, step, history, _torch_state(exp), _jax_state(exp, opt_state))


def write_state(path: str | os.PathLike, config: dict[str, Any], epoch: int, step: int, history: dict[str, Any],
                torch_state: dict[str, Any], jax_state: dict[str, Any]) -> None:
    """The checkpoint file: header, SHA-256 digest, then the body (tensors, lists and dicts only), atomically.

    :func:`write_checkpoint` fills it from a single-device run; the
    data-parallel runner from rank 0's and replica 0's states.
    """
    body = _serialize({"format": FORMAT, "version": VERSION, "config": config, "epoch": epoch, "step": step,
                       "only": history.get("only"), "torch": torch_state, "jax": jax_state, "history": history})
    atomic_write(path, MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def _serialize(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _torch_state(exp: Any) -> dict[str, Any]:
    return {"model": exp.torch_model.state_dict(), "optimizer": exp.t_opt.state_dict(),
            "scheduler": None if exp.t_sched is None else exp.t_sched.state_dict(),
            "generator": exp.t_train.generator.get_state(), "rng": torch.get_rng_state()}


def _jax_state(exp: Any, opt_state: Any) -> dict[str, Any]:
    from flax import nnx

    from parity.convert import grouped_optimizer_state_to_torch, optimizer_state_to_torch, to_torch_state_dict

    params = nnx.state(exp.jax_model, nnx.Param)
    accepted = inspect.signature(type(exp.t_opt)).parameters  # AdamW's defaults carry Adam's decoupled_weight_decay
    hypers = [{k: v for k, v in group.items() if k in accepted and k != "params"} for group in exp.t_opt.param_groups]
    name = exp.config.optimizer.name
    if len(exp.groups) == 1:
        optimizer = optimizer_state_to_torch(opt_state, params, name=name, hyperparameters=hypers[0],
                                             param_names=[n + ".value" for n in exp.groups[0][1]])
    else:
        optimizer = grouped_optimizer_state_to_torch(
            opt_state, params, name=name, hyperparameters=hypers,
            groups=[[n + ".value" for n in names] for _, names in exp.groups])
    return {"model": to_torch_state_dict(exp.jax_model), "optimizer": optimizer,
            "generator": torch.from_numpy(np.array(exp.j_train.generator.get_state())),
            "rng": torch.from_numpy(jax_random.get_rng_state())}


def _load(source: Any, path: Path) -> Any:
    """``torch.load(source, weights_only=True)``; every failure is a one-line :class:`CheckpointError`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. torch's note on a pickle protocol it did not write
            return torch.load(source, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any failure to unpickle a user's file is bad input
        text = str(error)
        if "weights_only" in text or "Unsupported global" in text:
            raise CheckpointError(f"refusing to load {path}: it holds Python objects, not only tensors "
                                  "(loading it would run code)") from None
        first = text.strip().splitlines()[0][:160] if text.strip() else type(error).__name__
        raise CheckpointError(f"cannot read {path}: {first}") from None


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Load and verify a checkpoint written by :func:`write_checkpoint`.

    Raises:
      CheckpointError: the file is missing, not a parity checkpoint, fails
        its digest, needs code to unpickle, or lacks the run's state.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint not found: {path}") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint {path} is a folder; pass its checkpoint.pt") from None
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror}") from None
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{path} is not a parity checkpoint (one written by `parity run`: checkpoint.pt "
                              "in its run folder), or its header is damaged")
    digest, newline, body = data[len(MAGIC):len(MAGIC) + 64], data[len(MAGIC) + 64:len(MAGIC) + 65], \
        data[len(MAGIC) + 65:]
    if newline != b"\n" or hashlib.sha256(body).hexdigest().encode() != digest:
        raise CheckpointError(f"{path} is damaged: its contents do not match their SHA-256 digest")
    state = _load(io.BytesIO(body), path)
    if not isinstance(state, dict) or state.get("format") != FORMAT or state.get("version") != VERSION:
        raise CheckpointError(f"{path} is not a parity checkpoint of version {VERSION}")
    shapes = {"epoch": int, "step": int, "config": dict, "torch": dict, "jax": dict}
    for key, kind in shapes.items():
        if not isinstance(state.get(key), kind) or (kind is int and state[key] < 0):
            raise CheckpointError(f"{path} is damaged: '{key}' is {type(state.get(key)).__name__}")
    history = state.get("history")
    return Checkpoint(path=path, epoch=state["epoch"], step=state["step"], config=state["config"],
                      history=history if isinstance(history, dict) else None, torch=state["torch"],
                      jax=state["jax"], only=state.get("only"))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: {}}
    if isinstance(value, (list, tuple)):
        return {prefix: [_flatten(v) if isinstance(v, dict) else v for v in value]}
    return {prefix: value}


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(dotted key, checkpoint's value, this run's value)`` for every key that changes the trajectory."""
    a, b = _flatten(old), _flatten(new)
    free = lambda key: any(key == k or key.startswith(k + ".") for k in FREE_KEYS)  # noqa: E731
    missing = object()
    return [(key, a.get(key, missing), b.get(key, missing)) for key in sorted(set(a) | set(b))
            if not free(key) and a.get(key, missing) != b.get(key, missing)]


def _show(value: Any) -> str:
    return "(absent)" if value.__class__ is object else repr(value)


def check_resumable(ckpt: Checkpoint, config: dict[str, Any], only: str | None, *, allow_config_change: bool = False,
                    resume_from: str | None = None) -> list[tuple[str, Any, Any]]:
    """The config changes between ``ckpt`` and this run's resolved ``config``; raises when they or ``only``
    forbid resuming.

    Raises:
      CheckpointError: a key that changes the trajectory changed (named) without
        ``allow_config_change``, or the checkpoint trained another framework alone.
    """
    changes = config_changes(ckpt.config, config)
    if changes and not allow_config_change:
        listed = "; ".join(f"{k}: {_show(a)} in the checkpoint, {_show(b)} now" for k, a, b in changes[:5])
        raise CheckpointError(f"{ckpt.path} was written with another config ({listed}); resume with the "
                              "checkpoint's values, or pass --allow-config-change to continue with the new ones")
    if ckpt.only is not None and only != ckpt.only and resume_from != ckpt.only:
        raise CheckpointError(f"{ckpt.path} trained {ckpt.only} only: resume with --only {ckpt.only}, or with "
                              f"--resume-from {ckpt.only} to start both frameworks from its state")
    return changes


def restore(exp: Any, ckpt: Checkpoint, *, resume_from: str | None = None,
            allow_config_change: bool = False, only: str | None = None) -> Any:
    """Load ``ckpt`` into ``exp`` (both sides) and return the JAX optimizer state.

    Args:
      exp: a freshly built :class:`parity.build.Experiment` of this run's config.
      ckpt: from :func:`read_checkpoint`.
      resume_from: ``None`` (each side from its own state), ``"torch"`` or
        ``"jax"``: both sides continue from that framework's model and
        optimizer state.
      allow_config_change: accept a config that differs from the
        checkpoint's; both frameworks then use this run's hyperparameters.
      only: this run's ``only``: a checkpoint of a one-framework run resumes
        as such, or from that framework's state (``resume_from``).

    Raises:
      CheckpointError: the config changed (naming the keys) without
        ``allow_config_change``, or the state does not fit this run's model.
    """
    changes = check_resumable(ckpt, exp.config.to_dict(), only, allow_config_change=allow_config_change,
                              resume_from=resume_from)
    if any(key.startswith("scheduler") for key, _, _ in changes):
        raise CheckpointError(f"{ckpt.path}: changing the scheduler on resume is not supported "
                              f"({', '.join(k for k, _, _ in changes if k.startswith('scheduler'))})")
    try:
        changed = {key for key, _, _ in changes} if allow_config_change else set()
        return _restore(exp, ckpt, resume_from, changed)
    except CheckpointError:
        raise
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        text = " ".join(str(error).split())[:240] or type(error).__name__
        raise CheckpointError(f"{ckpt.path} does not fit this run's model or optimizer: {text}") from None


def _restore(exp: Any, ckpt: Checkpoint, resume_from: str | None, changed: set[str]) -> Any:
    from flax import nnx

    from parity.convert import grouped_optimizer_state_from_torch, load_torch_state_dict, optimizer_state_from_torch

    if resume_from not in (None, "torch", "jax"):
        raise CheckpointError(f"resume_from must be 'torch' or 'jax', got {resume_from!r}")
    t_src = ckpt.torch if resume_from != "jax" else ckpt.jax
    j_src = ckpt.jax if resume_from != "torch" else ckpt.torch
    exp.torch_model.load_state_dict(t_src["model"])
    # The param_groups (lr, betas as the scheduler left them) are torch's in both cases: same step.
    groups = ckpt.torch["optimizer"]["param_groups"]
    new_hyperparameters = any(key.startswith("optimizer.") for key in changed)
    if new_hyperparameters:
        groups = _groups_with_new_hyperparameters(exp, groups, ckpt, changed)
    exp.t_opt.load_state_dict({"state": t_src["optimizer"]["state"], "param_groups": groups})
    if exp.t_sched is not None:
        exp.t_sched.load_state_dict(ckpt.torch["scheduler"])
        if new_hyperparameters and "initial_lr" in groups[0]:
            exp.t_sched.base_lrs = [group["initial_lr"] for group in groups]
    exp.t_train.generator.set_state(ckpt.torch["generator"])
    load_torch_state_dict(exp.jax_model, j_src["model"])
    params = nnx.state(exp.jax_model, nnx.Param)
    j_opt = {"state": j_src["optimizer"]["state"], "param_groups": groups}
    name = exp.config.optimizer.name
    if len(exp.groups) == 1:
        opt_state = optimizer_state_from_torch(j_opt, params, name=name,
                                               param_names=[n + ".value" for n in exp.groups[0][1]])
    else:
        opt_state = grouped_optimizer_state_from_torch(
            j_opt, params, name=name, groups=[[n + ".value" for n in names] for _, names in exp.groups])
    exp.j_train.generator.set_state(np.asarray(ckpt.jax["generator"].numpy()))
    # The global generators (dropout masks): each side's own, or the chosen framework's for both.
    if "rng" in t_src and "rng" in j_src:
        torch.set_rng_state(t_src["rng"])
        jax_random.set_rng_state(j_src["rng"].numpy())
    # The scheduled lr is read at the state's count. torch's SGD keeps no step count, so the
    # conversion cannot know it: the checkpoint's optimizer step is the count on every side.
    return _with_count(opt_state, ckpt.step)


def _groups_with_new_hyperparameters(exp: Any, groups: list[dict[str, Any]], ckpt: Checkpoint,
                                     changed: set[str]) -> list[dict]:
    """The checkpoint's torch param groups with this run's changed hyperparameters (``--allow-config-change``).

    Only the changed keys take the freshly built optimizer's values (every
    key when the param groups themselves changed): a scheduler's current
    ``lr`` and cycled ``betas``/``momentum`` stay as the checkpoint has them.
    With a scheduler, a changed ``lr`` is the JAX schedule's value at the
    resume point (the new base lr scheduled as far as the checkpoint got), and
    ``initial_lr`` the new base, so both frameworks go on from the same lr.
    """
    fresh = exp.t_opt.state_dict()["param_groups"]
    if len(fresh) != len(groups):
        raise CheckpointError(f"{ckpt.path}: {len(groups)} param groups in the checkpoint, {len(fresh)} now")
    every = any(key.startswith("optimizer.param_groups") for key in changed)
    keys = {key.split(".")[1] for key in changed if key.startswith("optimizer.")}
    out = []
    scheduled = exp.lrs.at(ckpt.step, ckpt.epoch)  # each group's new base lr, scheduled to the resume point
    for i, (old, new) in enumerate(zip(groups, fresh, strict=True)):
        take = {k for k in new if k != "params"} if every else keys & set(new)
        merged = {**old, **{k: new[k] for k in take}}
        if "lr" in take and exp.lrs.schedules[i] is not None:
            merged["lr"] = scheduled[i]
            merged["initial_lr"] = new.get("initial_lr", new["lr"])
        out.append(merged)
    return out


def _with_count(state: Any, count: int) -> Any:
    """``state`` (a jax_impl.optim state, or ParamGroupsState of them) with its step count set to ``count``."""
    import jax.numpy as jnp

    from jax_impl.optim import ParamGroupsState

    if isinstance(state, ParamGroupsState):
        return ParamGroupsState(tuple(_with_count(inner, count) for inner in state.groups))
    if "count" not in state._fields:  # LBFGS counts iterations and evaluations, not steps
        return state
    return state._replace(count=jnp.asarray(count, state.count.dtype))
