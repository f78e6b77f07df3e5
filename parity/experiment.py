"""The entry point of a parity run: one config, trained in torch and in JAX, compared.

:func:`run_experiment` sets the numerics both sides need (float64 in JAX
when the config asks for it, torch's CPU ``sqrt`` in the optimizers) and
hands the config to the single-device runner (:mod:`parity.runner`) or, with
``parallel.world_size > 1``, to the data-parallel one
(:mod:`parity.parallel_runner`).
"""

from __future__ import annotations

import os
from typing import Any

from parity.config import ConfigError
from parity.progress import Phases
from parity.report import RunReport
from parity.runner import DivergenceError, run_single

__all__ = ["DivergenceError", "RunReport", "run_experiment"]


def run_experiment(config: Any, *, only: str | None = None, max_steps: int | None = None,
                   runs_dir: str | os.PathLike = "runs", write: bool = True, progress: bool = True,
                   resume: str | os.PathLike | None = None, resume_from: str | None = None,
                   allow_config_change: bool = False, phases: Phases | None = None, torch_model: Any = None,
                   jax_model: Any = None, train_data: Any = None, val_data: Any = None,
                   hosts: Any = None) -> RunReport:
    """Train ``config`` in both frameworks (or one, ``only='torch'|'jax'``) and compare them.

    Both sides start from identical weights (the seeded torch model's,
    converted), read identical batches in identical order and use the
    configured optimizer, LR scheduler, loss and dtype.

    Args:
      config: a :class:`parity.config.ExperimentConfig`.
      only: train just one side (time and accuracy, no comparison).
      max_steps: stop after this many optimizer steps (overrides ``train.max_steps``).
      runs_dir: parent of the run folder ``<name>-<timestamp>/``.
      write: write the run folder (report.json, report.md, plots, checkpoints).
      progress: phases and a step bar on stderr.
      resume: a ``checkpoint.pt`` of an earlier run: continue from it, in its run folder.
      resume_from: ``None`` (each side from its own state), ``"torch"`` or ``"jax"``: both sides
        continue from that framework's model and optimizer state.
      allow_config_change: resume although the config differs from the
        checkpoint's; both frameworks then use this config's values.
      phases: where phase lines go (default: stderr when ``progress``).
      torch_model, jax_model: your own pair (a ``torch.nn.Module`` and a ``jax_impl.nn``
        module with the same state-dict keys) instead of ``config.model``; the JAX model
        starts from the torch model's weights; both are trained in place.
      train_data, val_data: ``(inputs, targets)`` arrays instead of ``config.data.dataset``.
      hosts: a :class:`parity.parallel.Hosts`: this host's part of a data-parallel
        run over several hosts (every host calls with its own ``process_id``;
        process 0's returns the report, the others a report saying so).

    Returns:
      The :class:`parity.report.RunReport`; ``report.passed`` is False when the
      final parameters differ beyond ``train.tolerance.rtol``.

    Raises:
      parity.config.ConfigError: bad settings or a checkpoint that cannot be resumed (nothing written).
      DivergenceError: NaN/inf loss on a side (the report is written first).
      KeyboardInterrupt: SIGINT; the report of the steps done is written first.
    """
    import jax

    from jax_impl.optim import get_sqrt_mode, set_sqrt_mode
    from parity.numerics import match_torch_sqrt

    if only not in (None, "torch", "jax"):
        raise ValueError(f"only must be 'torch', 'jax' or None, got {only!r}")
    phases = phases or Phases(enabled=progress)
    objects = {k: v for k, v in {"torch_model": torch_model, "jax_model": jax_model, "train_data": train_data,
                                 "val_data": val_data}.items() if v is not None}
    parallel = config.parallel is not None and config.parallel.world_size > 1
    if parallel and objects:
        raise ConfigError("data-parallel runs take the config's model and data, not Python objects")
    if parallel and (allow_config_change or resume_from is not None):
        flag = "--allow-config-change" if allow_config_change else "--resume-from"
        raise ConfigError(f"{flag} is not supported for data-parallel runs: a data-parallel run resumes with "
                          "its checkpoint's config, each framework from its own state")
    if hosts is not None and not parallel:
        raise ConfigError("--coordinator runs a data-parallel config: set parallel.world_size and "
                          "parallel.processes")
    previous_x64, previous_sqrt = jax.config.jax_enable_x64, get_sqrt_mode()
    jax.config.update("jax_enable_x64", config.train.dtype == "float64")
    match_torch_sqrt()  # torch's CPU sqrt on this machine (IEEE, MKL AVX-512 or its table): sqrt optimizers exact
    try:
        if parallel:
            from parity.parallel_runner import run_data_parallel

            return run_data_parallel(config, only=only, max_steps=max_steps, runs_dir=runs_dir, write=write,
                                     resume=resume, phases=phases, hosts=hosts)
        return run_single(config, only=only, max_steps=max_steps, runs_dir=runs_dir, write=write,
                          progress=progress, resume=resume, resume_from=resume_from,
                          allow_config_change=allow_config_change, phases=phases, **objects)
    finally:
        jax.config.update("jax_enable_x64", previous_x64)
        set_sqrt_mode(previous_sqrt)
