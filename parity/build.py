"""Both sides of an experiment from one config: models, loaders, optimizers, schedulers, losses.

:func:`build_experiment` is the first stage of a parity run: it builds the
torch side from torch's own classes (``torch_ref``) and the JAX side from
``jax_impl``, starting from identical weights (the seeded torch model's,
converted) and reading identical batches. Settings either framework rejects
raise :class:`parity.config.ConfigError` here, before anything is written.
The single-device runner and the data-parallel comparison share
:func:`jax_optimizer` and :func:`cast_jax_model`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import torch

from parity.config import ConfigError

__all__ = ["Experiment", "LearningRates", "build_experiment", "build_loss", "cast_jax_model", "float_dtypes", "init_note",
           "jax_optimizer", "optimizer_defaults", "torch_optimizer", "transforms", "user_arrays"]


@dataclasses.dataclass(frozen=True)
class Experiment:
    """Everything a run trains: both models, loaders, optimizers and losses, ready for step 0.

    A description: a run never reassigns its fields. What changes as a run goes (the JAX optimizer state,
    the step count, torch's float64 twin) is the runner's own run state.
    """

    config: Any
    t_dtype: torch.dtype
    np_dtype: type
    torch_model: torch.nn.Module
    jax_model: Any
    t_train: Any
    j_train: Any
    eval_loaders: tuple[Any, Any] | None
    steps_per_epoch: int  # optimizer steps: ceil(batches / train.accumulate)
    t_opt: torch.optim.Optimizer
    t_sched: Any
    groups: list[tuple[dict[str, Any], list[str]]]
    tx: Any
    lrs: LearningRates
    opt_state: Any  # the JAX optimizer's state at step 0 (tx.init)
    t_loss: Any
    j_loss: Any
    init: str = ""  # the report's line on the initial weights (init_note)

    def total_steps(self, max_steps: int | None) -> int:
        """Optimizer steps of the whole run: every epoch's steps, capped by ``max_steps``."""
        total = self.config.train.epochs * self.steps_per_epoch
        return total if max_steps is None else min(max_steps, total)


def float_dtypes(name: str) -> tuple[torch.dtype, type]:
    """``(torch dtype, numpy dtype)`` of ``train.dtype``."""
    return {"float32": (torch.float32, np.float32), "float64": (torch.float64, np.float64)}[name]


def build_loss(section: Any, framework: str) -> Any:
    """The loss module of a ``train.loss`` section (``parity.config.LossConfig``): ``torch.nn.<name>(**kwargs)``
    for ``framework="torch"``, ``jax_impl.nn.<name>(**kwargs)`` for ``"jax"``; ``None`` is torch's
    ``CrossEntropyLoss()``."""
    if framework == "torch":
        namespace = torch.nn
    else:
        import jax_impl.nn as namespace
    if section is None:
        return namespace.CrossEntropyLoss()
    return getattr(namespace, section.name)(**section.kwargs)


def cast_jax_model(model: Any, dtype: Any) -> None:
    """Cast every floating-point variable of an nnx ``model`` to ``dtype``, in place (torch's ``model.to(dtype)``)."""
    import jax.numpy as jnp

    from parity.convert.modules import module_state

    for var in module_state(model).values():
        value = var[...]
        if jnp.issubdtype(value.dtype, jnp.floating):
            var.set_value(jnp.asarray(value, dtype))


def torch_optimizer(optimizer_cfg: Any, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, list]:
    """The real ``torch.optim`` optimizer over ``model``, one torch param group per entry of
    :func:`parity.optim.param_group_members` (returned too: the JAX side builds the same groups)."""
    from parity.optim import param_group_members
    from torch_ref.optim import build_optimizer

    named = dict(model.named_parameters())
    groups = param_group_members(optimizer_cfg, list(named))
    return build_optimizer(optimizer_cfg, [{"params": [named[n] for n in names], **overrides}
                                           for overrides, names in groups]), groups


@dataclasses.dataclass(frozen=True)
class LearningRates:
    """Every param group's learning rate as torch's ``optimizer.param_groups[i]["lr"]`` holds it for a step.

    Read off the built optimizers, never off the config: ``base[i]`` is group
    ``i``'s resolved ``lr`` (its override, else the section's, else torch's
    default), ``schedules[i]`` its ``jax_impl`` schedule (``None`` without a
    scheduler). torch's schedulers scale every group from its own
    ``initial_lr``, so each group has its own schedule; ``per_step`` says
    whether a schedule advances per optimizer step or per epoch.
    """

    base: tuple[float, ...]
    schedules: tuple[Any, ...]
    per_step: bool = False

    def at(self, step: int, epoch: int) -> tuple[float, ...]:
        """Each group's lr during optimizer step ``step`` (counted from 0) of epoch ``epoch``."""
        k = step if self.per_step else epoch
        return tuple(float(b if s is None else s(k)) for b, s in zip(self.base, self.schedules, strict=True))


def optimizer_defaults(name: str) -> dict[str, Any]:
    """torch's keyword defaults of ``torch.optim.<name>``, read once through the config registry."""
    from parity.config import registry

    return {k: p.default for k, p in registry.signature("optimizer", name).params.items() if not p.required}


def jax_optimizer(optimizer_cfg: Any, scheduler_cfg: Any, steps_per_epoch: int,
                  groups: list) -> tuple[Any, LearningRates]:
    """``(jax_impl.optim transformation, every group's LearningRates)`` with the scheduler's lr (and cycled
    momentum) wired in.

    ``groups`` is :func:`parity.optim.param_group_members`' list: one group
    gives the plain optimizer; several give ``jax_impl.optim.param_groups``
    with each group's hyperparameters, each lr scheduled from its own value
    (torch's schedulers scale every group's ``initial_lr``). Every keyword
    left out takes torch's default, as ``torch.optim.<name>(params)`` does.
    """
    from jax_impl.optim import lr_scheduler as S
    from jax_impl.optim import param_groups
    from parity.lr_scheduler import build_jax_schedule
    from parity.optim import jax_optimizer_factory
    from torch_ref.optim import optimizer_spec

    name, base = optimizer_spec(optimizer_cfg)
    factory = jax_optimizer_factory(name)
    defaults = optimizer_defaults(name)
    per_step = scheduler_cfg is not None and scheduler_cfg.interval == "step"

    def group_kwargs(overrides: dict[str, Any]) -> tuple[dict[str, Any], float, Any]:
        kwargs = {**base, **overrides}
        lr = kwargs.get("lr", defaults.get("lr"))
        if scheduler_cfg is None:
            return kwargs, lr, None
        schedule = build_jax_schedule(scheduler_cfg, lr)
        kwargs["lr"] = schedule if per_step else S.per_epoch(schedule, steps_per_epoch=steps_per_epoch)
        momentum = getattr(schedule, "momentum", None)
        if momentum is not None:
            # torch's OneCycleLR/CyclicLR cycle betas[0] of Adam-like optimizers, else `momentum`.
            if not per_step:
                raise NotImplementedError("momentum cycling with a per-epoch scheduler interval")
            if "betas" in defaults:
                kwargs["betas"] = (momentum, tuple(kwargs.get("betas", defaults["betas"]))[1])
            elif "momentum" in defaults:
                kwargs["momentum"] = momentum
        return kwargs, lr, schedule

    built = [group_kwargs(overrides) for overrides, _ in groups]
    lrs = LearningRates(tuple(float(lr) for _, lr, _ in built), tuple(s for _, _, s in built), per_step)
    if len(groups) == 1:
        return factory(**built[0][0]), lrs
    specs = [{"params": (lambda path, leaf, names=frozenset(names): path in names), **kwargs}
             for (kwargs, _, _), (_, names) in zip(built, groups, strict=True)]
    return param_groups(factory, specs, strict=True), lrs


def build_experiment(cfg: Any, *, torch_model: torch.nn.Module | None = None, jax_model: Any = None,
                     train_data: Any = None, val_data: Any = None) -> Experiment:
    """Both sides of ``cfg`` at step 0.

    Args:
      cfg: the experiment config.
      torch_model, jax_model: the user's own pair instead of ``cfg.model``
        (both or neither); the JAX model takes the torch model's current
        weights (with ``model.init: seed`` it keeps its own). Both are
        trained in place.
      train_data, val_data: ``(inputs, targets)`` NumPy arrays instead of
        ``cfg.data.dataset`` (``val_data`` optional); both frameworks'
        loaders read them with ``cfg.data``'s batch size and shuffling.

    Raises:
      ConfigError: a setting torch or jax_impl rejects (torch's own
        ``ValueError``/``TypeError`` messages, ``NotImplementedError`` for
        what jax_impl lacks), with the original message.
    """
    if (torch_model is None) != (jax_model is None):
        raise ConfigError("give both torch_model and jax_model, or neither")
    if val_data is not None and train_data is None:
        raise ConfigError("val_data needs train_data")
    try:
        return _build(cfg, (torch_model, jax_model) if torch_model is not None else None,
                      (train_data, val_data) if train_data is not None else None)
    except ConfigError:
        raise
    except (ValueError, NotImplementedError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(f"cannot build the experiment: {type(error).__name__}: {error}") from error


def _user_models(torch_model: torch.nn.Module, jax_model: Any, init: str) -> tuple[torch.nn.Module, Any]:
    from parity.convert.modules import load_torch_state_dict
    from parity.models import check_same_keys

    if not isinstance(torch_model, torch.nn.Module):
        raise ConfigError(f"torch_model must be a torch.nn.Module, got {type(torch_model).__name__}")
    try:
        if init == "seed":
            check_same_keys(torch_model, jax_model)
        else:
            load_torch_state_dict(jax_model, torch_model.state_dict())
    except RuntimeError as error:
        raise ConfigError(f"the JAX model cannot hold the torch model's weights: {error}") from None
    return torch_model, jax_model


def init_note(cfg: Any, torch_model: torch.nn.Module, jax_model: Any) -> str:
    """The report's line on where the JAX model's initial weights come from (``model.init``), with their
    distance from torch's when the JAX model drew its own."""
    from parity.compare import scaled_error
    from parity.convert.modules import module_state

    if cfg.model.init != "seed":
        return "initial weights: the torch model's, copied into the JAX model"
    ours = {k: np.asarray(v[...]) for k, v in module_state(jax_model).items()}
    errors = {k: scaled_error(ours[k], v.detach().numpy()) for k, v in torch_model.named_parameters()}
    worst = max(errors, key=errors.get) if errors else None
    where = f" (max rel {errors[worst]:.3g} at {worst})" if worst is not None and errors[worst] > 0 else ""
    same = "identical to torch's" if not where else "different from torch's" + where
    return (f"initial weights: each framework's own init after seed {cfg.train.seed} "
            f"(model.init: seed), {same}")


def user_arrays(section: Any) -> tuple[Any, Any]:
    """``(train arrays, held-out arrays or None)`` from ``data.dataset.arrays``' loader."""
    from parity.models import import_object

    load = import_object(section.arrays, "data.dataset.arrays")
    try:
        return load(train=True, **section.kwargs), load(train=False, **section.kwargs)
    except TypeError as error:
        raise ConfigError(f"{section.arrays}(train=..., **kwargs) fails: {error}", path="data.dataset") from None


def transforms(configs: Any) -> tuple[Any, Any]:
    """``(torch side, JAX side)`` of a config's transform list (``data.transform``): each a torchvision-style
    ``Compose``, or ``None`` for an empty list."""
    from jax_impl.data import transforms as jt
    from torch_ref import data as td

    if not configs:
        return None, None
    return (td.Compose([getattr(td, t.name)(**t.resolved_kwargs()) for t in configs]),
            jt.Compose([getattr(jt, t.name)(**t.resolved_kwargs()) for t in configs]))


def _array_datasets(data: Any, what: str, transform: tuple[Any, Any] = (None, None)) -> tuple[Any, Any]:
    """``(torch data set, jax_impl data set)`` over the same ``(inputs, targets)`` arrays, each side with its
    ``transform``."""
    from jax_impl.data import TensorDataset
    from jax_impl.data.datasets import ArrayDataset
    from torch_ref.data import TransformedDataset

    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise ConfigError(f"{what} must be (inputs, targets) arrays, got {type(data).__name__}")
    x, y = (np.asarray(a) for a in data)
    if len(x) != len(y):
        raise ConfigError(f"{what}: {len(x)} inputs but {len(y)} targets")
    t_x, t_y = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y))
    if transform[0] is None:
        return torch.utils.data.TensorDataset(t_x, t_y), TensorDataset(x, y)
    return TransformedDataset(t_x, t_y, transform[0]), ArrayDataset(x, y, transform[1])


def _probe(torch_model: torch.nn.Module, loss_fn: Any, loader: Any, dtype: torch.dtype) -> None:
    """One sample through the torch model (eval mode: no state changes) and the loss: a model or loss that
    does not fit the data fails here, as bad input, before anything is written."""
    from parity.torch_step import model_input

    with torch.random.fork_rng(devices=[]):  # a random transform's draws must not advance the run's stream
        x, y = loader.dataset[0]
    x = model_input(torch.as_tensor(np.asarray(x))[None], dtype)
    y = torch.as_tensor(np.asarray(y))[None]
    was_training = torch_model.training
    torch_model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = torch_model(x)
            loss_fn(out, y.to(out.dtype) if y.is_floating_point() else y)
    except Exception as error:  # noqa: BLE001 - whatever the user's code raises, it is a model/data mismatch
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        where = "train.loss" if "out" in locals() else "model"
        part = "loss" if where == "train.loss" else "torch model"
        raise ConfigError(f"the {part} fails on a sample of shape {tuple(x.shape[1:])} of the data: {first}",
                          path=where) from None
    finally:
        torch_model.train(was_training)


def _check_gradients(name: str, torch_model: torch.nn.Module) -> None:
    """:func:`parity.optim.check_gradients_fit` as a config error (SparseAdam on dense gradients)."""
    from parity.optim import check_gradients_fit

    try:
        check_gradients_fit(name, torch_model)
    except RuntimeError as error:  # NotImplementedError too: it subclasses RuntimeError
        raise ConfigError(f"{type(error).__name__}: {error}", path="optimizer") from None


def _build(cfg: Any, models: tuple[Any, Any] | None = None, data: tuple[Any, Any] | None = None) -> Experiment:
    from flax import nnx

    from jax_impl.data import datasets as jdata
    from parity.models import build_models, example_input
    from torch_ref import data as tdata
    from torch_ref.lr_scheduler import build_scheduler

    t_dtype, np_dtype = float_dtypes(cfg.train.dtype)
    if models:
        torch_model, jax_model = _user_models(*models, cfg.model.init)
    else:
        example = example_input(cfg) if cfg.model.ported else None  # jax: auto checks the port on it
        torch_model, jax_model = build_models(cfg.model, seed=cfg.train.seed, example_input=example)
    note = init_note(cfg, torch_model, jax_model)  # before the casts: the init's own dtype
    torch_model = torch_model.to(t_dtype)
    cast_jax_model(jax_model, np_dtype)

    split = {"val_fraction": cfg.data.val_fraction, "split_seed": cfg.data.split_seed}

    if data is None and cfg.data.dataset.by_import_path:
        data = user_arrays(cfg.data.dataset)

    def datasets(train: bool) -> tuple[Any, Any]:
        t_transform, j_transform = transforms(cfg.data.transforms(train))
        if data is not None:
            return _array_datasets(data[0 if train else 1], "train_data" if train else "val_data",
                                   (t_transform, j_transform))
        return (tdata.build_dataset(cfg.data.dataset, train=train, transform=t_transform, **split),
                jdata.build_dataset(cfg.data.dataset, train=train, transform=j_transform, **split))

    def loaders(train: bool) -> tuple[Any, Any]:
        extra = {} if train else {"train": False}
        t_set, j_set = datasets(train)
        return (tdata.build_dataloader(cfg.data, t_set, seed=cfg.train.seed, **extra),
                jdata.build_dataloader(cfg.data, j_set, seed=cfg.train.seed, **extra))

    t_train, j_train = loaders(True)
    has_val = data[1] is not None if data is not None else cfg.data.val_fraction > 0
    eval_loaders = loaders(False) if has_val else None
    t_loss = build_loss(cfg.train.loss, "torch")
    _probe(torch_model, t_loss, t_train, t_dtype)
    steps_per_epoch = -(-len(t_train) // cfg.train.accumulate)  # optimizer steps: train.accumulate batches each
    _check_gradients(cfg.optimizer.name, torch_model)
    t_opt, groups = torch_optimizer(cfg.optimizer, torch_model)
    t_sched = build_scheduler(cfg.scheduler, t_opt) if cfg.scheduler is not None else None
    tx, lrs = jax_optimizer(cfg.optimizer, cfg.scheduler, steps_per_epoch, groups)
    return Experiment(
        config=cfg, t_dtype=t_dtype, np_dtype=np_dtype, torch_model=torch_model, jax_model=jax_model,
        t_train=t_train, j_train=j_train, eval_loaders=eval_loaders, steps_per_epoch=steps_per_epoch,
        t_opt=t_opt, t_sched=t_sched, groups=groups, tx=tx, lrs=lrs,
        opt_state=tx.init(nnx.state(jax_model, nnx.Param)),
        t_loss=t_loss, j_loss=build_loss(cfg.train.loss, "jax"), init=note,
    )
