"""torch's ``ReduceLROnPlateau``: a pure step function and a host-side lr driver.

torch (``torch/optim/lr_scheduler.py``, class ``ReduceLROnPlateau.step``), once
per epoch with a metric ``a``::

    last_epoch += 1
    better = a < best * (1 - threshold)   # mode='min', threshold_mode='rel'
             a < best - threshold         # 'min', 'abs'
             a > best * (threshold + 1)   # 'max', 'rel'
             a > best + threshold         # 'max', 'abs'
    if better: best = a; num_bad_epochs = 0
    else:      num_bad_epochs += 1
    if cooldown_counter > 0: cooldown_counter -= 1; num_bad_epochs = 0
    if num_bad_epochs > patience:                      # patience + 1 bad epochs
        for each group i:
            new = max(float(lr[i]) * factor, min_lrs[i])
            if float(lr[i]) - new > eps: lr[i] = new
        cooldown_counter = cooldown; num_bad_epochs = 0

``best`` starts at ``inf`` ('min') or ``-inf`` ('max'); there is no initial step.

Two forms:

- :func:`reduce_lr_on_plateau_init` / :func:`reduce_lr_on_plateau_step`: pure
  functions over a :class:`ReduceLROnPlateauState` of Python numbers, the same
  expressions in the same order as torch, so the lrs are torch's floats.
- :class:`ReduceLROnPlateau`: a host schedule holding that state, usable as
  any jax_impl optimizer's ``lr``. ``plateau.step(val_loss)`` once per epoch,
  as in torch; every optimizer update (also under ``jax.jit``, through
  ``jax.pure_callback``) reads the current lr. ``plateau.group(i)`` is group
  ``i``'s lr, for :func:`jax_impl.optim.param_groups`.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import inf
from typing import Any, NamedTuple

__all__ = [
    "ReduceLROnPlateau",
    "ReduceLROnPlateauState",
    "reduce_lr_on_plateau_init",
    "reduce_lr_on_plateau_step",
]


class ReduceLROnPlateauState(NamedTuple):
    """torch's mutable scheduler attributes, plus the groups' lrs (torch keeps those in the optimizer)."""

    lrs: tuple[float, ...]
    best: float
    num_bad_epochs: int
    cooldown_counter: int
    last_epoch: int


class _Config(NamedTuple):
    mode: str
    factor: float
    patience: int
    threshold: float
    threshold_mode: str
    cooldown: int
    min_lrs: tuple[float, ...]
    eps: float


def _config(
    n_groups: int,
    mode: str = "min",
    factor: float = 0.1,
    patience: int = 10,
    threshold: float = 1e-4,
    threshold_mode: str = "rel",
    cooldown: int = 0,
    min_lr: Sequence[float] | float = 0,
    eps: float = 1e-8,
) -> _Config:
    """torch's ``__init__`` checks, in torch's order and with its messages."""
    if factor >= 1.0:
        raise ValueError("Factor should be < 1.0.")
    if isinstance(min_lr, (list, tuple)):
        if len(min_lr) != n_groups:
            raise ValueError(f"expected {n_groups} min_lrs, got {len(min_lr)}")
        min_lrs = tuple(min_lr)
    else:
        min_lrs = (min_lr,) * n_groups
    if mode not in {"min", "max"}:
        raise ValueError("mode " + mode + " is unknown!")
    if threshold_mode not in {"rel", "abs"}:
        raise ValueError("threshold mode " + threshold_mode + " is unknown!")
    return _Config(
        mode, factor, patience, threshold, threshold_mode, cooldown, min_lrs, eps
    )


def _as_lrs(base_lrs: Sequence[float] | float) -> tuple[float, ...]:
    return tuple(base_lrs) if isinstance(base_lrs, (list, tuple)) else (base_lrs,)


def _is_better(c: _Config, a: float, best: float) -> bool:
    # torch's ``_is_better``, expression for expression (``rel_epsilon`` first).
    if c.mode == "min" and c.threshold_mode == "rel":
        return a < best * (1.0 - c.threshold)
    if c.mode == "min" and c.threshold_mode == "abs":
        return a < best - c.threshold
    if c.mode == "max" and c.threshold_mode == "rel":
        return a > best * (c.threshold + 1.0)
    return a > best + c.threshold


def _reduce(c: _Config, lrs: tuple[float, ...]) -> tuple[float, ...]:
    out = []
    for old, min_lr in zip(lrs, c.min_lrs):
        old_lr = float(old)
        new_lr = max(old_lr * c.factor, min_lr)
        # torch's eps guard: a change smaller than eps is not applied.
        out.append(new_lr if old_lr - new_lr > c.eps else old)
    return tuple(out)


def _step(
    c: _Config, state: ReduceLROnPlateauState, metric: Any
) -> ReduceLROnPlateauState:
    current = float(metric)
    lrs, best, bad, cooldown_counter, last_epoch = state
    if _is_better(c, current, best):
        best, bad = current, 0
    else:
        bad += 1
    if cooldown_counter > 0:
        cooldown_counter -= 1
        bad = 0  # torch ignores bad epochs in cooldown
    if bad > c.patience:
        lrs = _reduce(c, lrs)
        cooldown_counter, bad = c.cooldown, 0
    return ReduceLROnPlateauState(lrs, best, bad, cooldown_counter, last_epoch + 1)


def reduce_lr_on_plateau_init(
    base_lrs: Sequence[float] | float, **kwargs: Any
) -> ReduceLROnPlateauState:
    """The state right after torch's ``ReduceLROnPlateau(optimizer, **kwargs)``.

    Args:
      base_lrs: each param group's lr (a float for one group).
      **kwargs: torch's ``mode='min', factor=0.1, patience=10, threshold=1e-4,
        threshold_mode='rel', cooldown=0, min_lr=0, eps=1e-8`` (``min_lr`` a
        float or one per group), validated as torch does.
    """
    lrs = _as_lrs(base_lrs)
    c = _config(len(lrs), **kwargs)
    return ReduceLROnPlateauState(lrs, inf if c.mode == "min" else -inf, 0, 0, 0)


def reduce_lr_on_plateau_step(
    state: ReduceLROnPlateauState, metric: Any, **kwargs: Any
) -> ReduceLROnPlateauState:
    """torch's ``scheduler.step(metric)``; ``kwargs`` as given to :func:`reduce_lr_on_plateau_init`."""
    return _step(_config(len(state.lrs), **kwargs), state, metric)


class _GroupLR:
    """Group ``i``'s current lr as a host schedule (``count`` is ignored)."""

    is_host_schedule = True

    def __init__(self, plateau: ReduceLROnPlateau, index: int) -> None:
        self.plateau, self.index = plateau, index

    def __call__(self, count: Any = None) -> float:
        del count
        return float(self.plateau.state.lrs[self.index])


class ReduceLROnPlateau:
    """torch's ``ReduceLROnPlateau`` as a host-side lr for jax_impl optimizers.

    ::

        plateau = ReduceLROnPlateau(0.1, patience=5)
        tx = jax_impl.optim.sgd(lr=plateau, momentum=0.9)
        for epoch in range(n):
            ...                          # jitted tx.step calls read plateau's lr
            plateau.step(val_loss)       # torch: scheduler.step(val_loss)

    ``base_lr`` is a float, or one lr per param group (then pass
    ``plateau.group(i)`` as group ``i``'s ``lr``). ``plateau(count)`` is group
    0's current lr; ``count`` is ignored since the lr depends on the metrics.
    """

    is_host_schedule = True

    def __init__(self, base_lr: Sequence[float] | float, **kwargs: Any) -> None:
        self.state = reduce_lr_on_plateau_init(base_lr, **kwargs)
        self._kwargs = kwargs
        self._config = _config(len(self.state.lrs), **kwargs)

    def step(self, metric: Any) -> None:
        self.state = _step(self._config, self.state, metric)

    def __call__(self, count: Any = None) -> float:
        del count
        return float(self.state.lrs[0])

    def group(self, index: int) -> _GroupLR:
        self.state.lrs[index]  # IndexError now rather than inside a callback
        return _GroupLR(self, index)

    def get_last_lr(self) -> list[float]:
        return list(self.state.lrs)

    def state_dict(self) -> dict[str, Any]:
        """torch's ``ReduceLROnPlateau.state_dict()``: same keys, order and values."""
        c, s = self._config, self.state
        min_lr = self._kwargs.get("min_lr", 0)
        return {
            "factor": c.factor,
            "default_min_lr": None if isinstance(min_lr, (list, tuple)) else min_lr,
            "min_lrs": list(c.min_lrs),
            "patience": c.patience,
            "cooldown": c.cooldown,
            "eps": c.eps,
            "last_epoch": s.last_epoch,
            "_last_lr": list(s.lrs),
            "mode_worse": inf if c.mode == "min" else -inf,
            "mode": c.mode,
            "threshold": c.threshold,
            "threshold_mode": c.threshold_mode,
            "best": s.best,
            "cooldown_counter": s.cooldown_counter,
            "num_bad_epochs": s.num_bad_epochs,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a torch (or our) state dict; the lrs come from ``_last_lr``.

        torch keeps the lrs in the optimizer's param groups, so its scheduler
        state dict alone restores them only through ``_last_lr`` (the groups'
        lrs after the last ``step``), which is what is used here.
        """
        sd = state_dict
        default = sd["default_min_lr"]
        kwargs = {
            "mode": sd["mode"],
            "factor": sd["factor"],
            "patience": sd["patience"],
            "threshold": sd["threshold"],
            "threshold_mode": sd["threshold_mode"],
            "cooldown": sd["cooldown"],
            "min_lr": list(sd["min_lrs"]) if default is None else default,
            "eps": sd["eps"],
        }
        lrs = tuple(sd["_last_lr"])
        self._config = _config(len(lrs), **kwargs)
        self._kwargs = kwargs
        self.state = ReduceLROnPlateauState(
            lrs,
            sd["best"],
            sd["num_bad_epochs"],
            sd["cooldown_counter"],
            sd["last_epoch"],
        )

    def __repr__(self) -> str:
        return f"ReduceLROnPlateau(lrs={list(self.state.lrs)}, {self._kwargs})"
