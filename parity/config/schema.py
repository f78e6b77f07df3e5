"""The typed schema of an experiment config.

An experiment is one YAML mapping with the sections below. Sections that name
a torch class (``optimizer``, ``scheduler``, ``train.loss``) hold its ``name``
and exactly that class's keyword arguments, with torch's defaults::

    name: lenet-digits
    model: {name: LeNet, num_classes: 10}
    data: {dataset: digits, batch_size: 64, shuffle: true}
    optimizer: {name: SGD, lr: 0.05, momentum: 0.9}
    scheduler: {name: StepLR, step_size: 2, gamma: 0.5, interval: epoch}
    train: {epochs: 3, seed: 0, dtype: float32, checkpoint: every, loss: {name: CrossEntropyLoss}}
    parallel: {world_size: 2, backend: auto, sync_bn: false, jax_mode: pmap}
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

from parity.config import registry
from parity.config.types import ConfigError


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(message, path=key)

__all__ = [
    "NamedSection",
    "DatasetConfig",
    "TransformConfig",
    "ModelConfig",
    "OptimizerConfig",
    "ParamGroupConfig",
    "SchedulerConfig",
    "LossConfig",
    "DataConfig",
    "ToleranceConfig",
    "EMAConfig",
    "TrainConfig",
    "ParallelConfig",
    "ExperimentConfig",
]


@dataclasses.dataclass(frozen=True)
class NamedSection:
    """A section naming a class (``name``) plus the keyword arguments given (``kwargs``).

    In YAML a bare string is short for ``{name: <string>}``. ``kwargs`` holds
    only what the config gave; :meth:`to_dict` adds the class's defaults.
    """

    section: ClassVar[str]
    # Sections that may name the user's own callables instead (``model: {torch: ..., jax: ...}``): those
    # fields, the first of which decides; their ``kwargs`` are free-form.
    import_keys: ClassVar[tuple[str, ...]] = ()
    name: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def by_import_path(self) -> bool:
        return bool(self.import_keys) and getattr(self, self.import_keys[0]) is not None

    def resolved_kwargs(self) -> dict[str, Any]:
        """Every keyword argument of the named class: the given ones, then its defaults."""
        if self.by_import_path:
            return dict(self.kwargs)
        params = registry.signature(self.section, self.name).params
        return {key: self.kwargs.get(key, param.default) for key, param in params.items()}

    def to_dict(self) -> dict[str, Any]:
        if self.by_import_path:
            return {**{key: getattr(self, key) for key in self.import_keys}, "kwargs": dict(self.kwargs)}
        return {"name": self.name, **self.resolved_kwargs()}


@dataclasses.dataclass(frozen=True)
class ModelConfig(NamedSection):
    """A built-in model, ``torch_ref.models.<name>(**kwargs)`` and ``jax_impl.models.<name>(**kwargs)``, or
    the user's own pair given by import path::

        model: {torch: "my_models:Net", jax: "my_models_jax:Net", kwargs: {hidden: 128}}

    ``torch`` and ``jax`` name a class or any callable (``"package.module:attribute"``,
    importable from the working directory or ``PYTHONPATH``) returning a
    ``torch.nn.Module`` and a ``jax_impl.nn`` module with the same state-dict
    keys; both are called with ``kwargs``. ``jax: auto`` makes the JAX model the
    torch model's ``parity.port`` twin, ported at run time with its weights.

    ``init`` says where the JAX model's initial weights come from: ``"copy"``
    (the default) loads the torch model's; ``"seed"`` keeps the JAX model's own
    init, drawn after ``jax_impl.random.manual_seed(train.seed)`` as torch's
    after ``torch.manual_seed(train.seed)`` (``jax_impl.nn`` layers built
    without ``rngs`` draw torch's numbers), so the run also checks the init.
    """

    section: ClassVar[str] = "model"
    import_keys: ClassVar[tuple[str, ...]] = ("torch", "jax")
    torch: str | None = None
    jax: str | None = None
    init: Literal["copy", "seed"] = "copy"

    AUTO: ClassVar[str] = "auto"

    @property
    def ported(self) -> bool:
        """``jax: auto``: the JAX model is the torch model's ``parity.port`` twin."""
        return self.jax == self.AUTO

    def to_dict(self) -> dict[str, Any]:
        # `init` appears only when set, so configs and checkpoints written without it read the same.
        out = super().to_dict()
        return {**out, "init": self.init} if self.init != "copy" else out


@dataclasses.dataclass(frozen=True)
class DatasetConfig(NamedSection):
    """An offline data set: ``digits`` (scikit-learn's bundled 8x8 digits) or ``synthetic``, or your own::

        dataset: {arrays: "my_data:load", kwargs: {root: data/}}

    ``arrays`` names a callable (``"package.module:attribute"``) called as
    ``load(train=True, **kwargs)`` for the training set and
    ``load(train=False, **kwargs)`` for the held-out set, each returning
    ``(inputs, targets)`` arrays (or ``None`` for no held-out set); both
    frameworks read the same arrays.
    """

    section: ClassVar[str] = "dataset"
    import_keys: ClassVar[tuple[str, ...]] = ("arrays",)
    arrays: str | None = None


@dataclasses.dataclass(frozen=True)
class TransformConfig(NamedSection):
    """One torchvision transform applied to every sample, on both sides: ``ToTensor``, ``Normalize``,
    ``RandomHorizontalFlip`` or ``RandomCrop``, with torchvision's keyword arguments.

    The torch side runs ``torch_ref.data.<name>`` (torchvision's tensor code
    written with torch ops), the JAX side ``jax_impl.data.transforms.<name>``;
    random transforms draw torch's numbers from each side's global generator.
    """

    section: ClassVar[str] = "transform"


@dataclasses.dataclass(frozen=True)
class ParamGroupConfig:
    """One torch param group: the parameters whose ``state_dict`` names match ``params`` (globs).

    ``overrides`` are the optimizer keyword arguments this group sets
    differently (e.g. ``weight_decay: 0.0``), as in
    ``torch.optim.SGD([{"params": ..., "weight_decay": 0.0}, ...], ...)``.
    """

    params: tuple[str, ...]
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"params": list(self.params), **self.overrides}


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(NamedSection):
    """``torch.optim.<name>(params, **kwargs)`` and ``jax_impl.optim.<name.lower()>(**kwargs)``.

    ``param_groups`` (optional) is a list of ``{params: <glob or list of globs>,
    <kwarg>: <value>, ...}``: each group takes the parameters whose
    ``state_dict`` names match (``"*.bias"``, ``"*bn*"``) and overrides those
    keyword arguments. The parameters no group matches form torch's first
    group with the section's own arguments; the listed groups follow in order.
    """

    section: ClassVar[str] = "optimizer"

    param_groups: tuple[ParamGroupConfig, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.param_groups:
            out["param_groups"] = [group.to_dict() for group in self.param_groups]
        return out


@dataclasses.dataclass(frozen=True)
class LossConfig(NamedSection):
    """``torch.nn.<name>(**kwargs)`` and ``jax_impl.nn.<name>(**kwargs)``."""

    section: ClassVar[str] = "loss"


@dataclasses.dataclass(frozen=True)
class SchedulerConfig(NamedSection):
    """``torch.optim.lr_scheduler.<name>(optimizer, **kwargs)``, stepped per ``interval``.

    ``interval`` is ``"epoch"`` (``scheduler.step()`` after each epoch, torch's
    documented habit) or ``"step"`` (after each optimizer step).
    """

    section: ClassVar[str] = "scheduler"

    interval: Literal["epoch", "step"] = "epoch"

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "interval": self.interval}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The data set and how both loaders batch it.

    ``val_fraction`` of a built-in data set is held out for evaluation, split
    with ``split_seed`` (a user data set gives its own held-out arrays); both
    loaders shuffle with ``train.seed``.

    ``transform`` is a list of torchvision transforms (torchvision's
    ``Compose``) applied to each training sample, e.g.
    ``[ToTensor, {name: Normalize, mean: [0.1307], std: [0.3081]}]``;
    ``eval_transform`` those for the held-out samples (default: the same
    list).
    """

    dataset: DatasetConfig = dataclasses.field(default_factory=lambda: DatasetConfig("digits"))
    batch_size: int = 64
    eval_batch_size: int | None = None
    shuffle: bool = True
    drop_last: bool = False
    num_workers: int = 0
    val_fraction: float = 0.2
    split_seed: int = 0
    transform: tuple[TransformConfig, ...] = ()
    eval_transform: tuple[TransformConfig, ...] | None = None

    def transforms(self, train: bool) -> tuple[TransformConfig, ...]:
        """The transforms of the training (``train=True``) or held-out samples."""
        return self.transform if train or self.eval_transform is None else self.eval_transform

    def __post_init__(self) -> None:
        _require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        _require(self.eval_batch_size is None or self.eval_batch_size >= 1, "eval_batch_size", "must be >= 1")
        _require(self.num_workers >= 0, "num_workers", f"must be >= 0, got {self.num_workers}")
        _require(0.0 <= self.val_fraction < 1.0, "val_fraction", f"must be in [0, 1), got {self.val_fraction}")


@dataclasses.dataclass(frozen=True)
class ToleranceConfig:
    """Divergence allowed between the two sides (``parity.compare`` semantics)."""

    rtol: float = 1e-4
    atol: float = 1e-6
    max_ulp: int | None = None

    def __post_init__(self) -> None:
        for key in ("rtol", "atol"):
            _require(getattr(self, key) >= 0, key, f"must be >= 0, got {getattr(self, key)}")
        _require(self.max_ulp is None or self.max_ulp >= 0, "max_ulp", f"must be >= 0, got {self.max_ulp}")


@dataclasses.dataclass(frozen=True)
class EMAConfig:
    """An exponential moving average of the weights beside the run (``train.ema``).

    torch's side: ``AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))``
    and ``update_parameters(model)`` after every optimizer step; the JAX side:
    ``jax_impl.optim.swa_utils``' same rule. The averaged parameters are
    compared after every epoch (the report's *EMA max rel*).
    """

    decay: float = 0.999

    def __post_init__(self) -> None:
        _require(0.0 <= self.decay <= 1.0, "decay", f"must be in [0, 1], got {self.decay}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The training loop both frameworks run.

    ``checkpoint`` says when the run folder's ``checkpoint.pt`` (what
    ``parity run --resume`` continues from) is written: ``"every"`` after each
    epoch, ``"last"`` only after the final epoch, ``"none"`` never.

    ``floor`` (float32 runs): train torch a second time in float64 beside
    the run and report torch's own float32-vs-float64 distance, the precision
    floor the verdict falls back on (:mod:`parity.floor`).

    ``clip_grad_norm`` (``max_norm``): torch's
    ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm,
    clip_grad_norm_type)`` after the backward pass, before the optimizer step.

    ``accumulate`` (``k``): gradient accumulation. Every loader batch is one
    micro-batch; each runs ``(loss / k).backward()`` and every ``k``
    micro-batches make one optimizer step (clip, ``optimizer.step()``,
    ``zero_grad()``). An epoch whose batch count is not a multiple of ``k``
    ends with one step on its trailing micro-batches, their losses still
    divided by ``k`` (the usual recipe's ``if (i + 1) % k == 0 or i + 1 ==
    len(loader)``). Steps, ``max_steps``, per-step schedulers and the report's
    per-step records count optimizer steps.

    ``autocast: bfloat16`` (float32 runs): each forward and loss runs under
    ``torch.autocast("cpu", dtype=torch.bfloat16)``, the JAX side's under
    ``jax_impl.amp.autocast(jnp.bfloat16)``, and evaluation too; parameters,
    gradients and optimizer state stay float32. The float64 floor twin runs
    without autocast, so the floor verdict measures torch's bf16 run against
    float64.

    ``ema: {decay: 0.999}``: an exponential moving average of the weights on
    both sides (:class:`EMAConfig`), compared after every epoch.
    """

    epochs: int = 3
    seed: int = 0
    dtype: Literal["float32", "float64"] = "float32"
    max_steps: int | None = None
    checkpoint: Literal["every", "last", "none"] = "every"
    floor: bool = True
    loss: LossConfig = dataclasses.field(default_factory=lambda: LossConfig("CrossEntropyLoss"))
    tolerance: ToleranceConfig = dataclasses.field(default_factory=ToleranceConfig)
    clip_grad_norm: float | None = None
    clip_grad_norm_type: float = 2.0
    accumulate: int = 1
    autocast: Literal["bfloat16"] | None = None
    ema: EMAConfig | None = None

    def __post_init__(self) -> None:
        _require(self.epochs >= 1, "epochs", f"must be >= 1, got {self.epochs}")
        _require(self.max_steps is None or self.max_steps >= 1, "max_steps", f"must be >= 1, got {self.max_steps}")
        _require(self.accumulate >= 1, "accumulate", f"must be >= 1, got {self.accumulate}")
        _require(self.clip_grad_norm is None or self.clip_grad_norm >= 0, "clip_grad_norm",
                 f"must be >= 0, got {self.clip_grad_norm}")
        # torch's autocast leaves float64 tensors alone: a float64 run would not use it.
        _require(self.autocast is None or self.dtype == "float32", "autocast",
                 "autocast needs train.dtype=float32 (torch's autocast does not cast float64 tensors)")


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
    """Data parallelism: torch DDP with ``world_size`` ranks, JAX with as many devices.

    ``processes`` > 1 runs the JAX side as that many processes joined by
    ``jax.distributed`` (the shape of several hosts), each with
    ``world_size / processes`` devices and a global mesh (``jax_mode:
    sharded``); torch's ranks see torchrun's ``LOCAL_RANK`` /
    ``LOCAL_WORLD_SIZE`` / ``GROUP_RANK`` of the same layout.
    """

    world_size: int = 1
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    sync_bn: bool = False
    jax_mode: Literal["pmap", "sharded", "vmap"] = "pmap"  # vmap: world_size replicas on one device
    processes: int = 1

    def __post_init__(self) -> None:
        _require(self.world_size >= 1, "world_size", f"must be >= 1, got {self.world_size}")
        _require(self.processes >= 1 and self.world_size % self.processes == 0, "processes",
                 f"must divide world_size ({self.world_size}), got {self.processes}")
        _require(self.processes == 1 or self.jax_mode == "sharded", "jax_mode",
                 "several JAX processes train with the sharded step over a global mesh: set parallel.jax_mode=sharded")
        _require(not self.sync_bn or self.world_size > 1, "sync_bn",
                 "SyncBatchNorm needs a data-parallel run: set parallel.world_size > 1")


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One experiment, run identically by torch and JAX."""

    model: ModelConfig
    optimizer: OptimizerConfig
    name: str = "experiment"
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    scheduler: SchedulerConfig | None = None
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    parallel: ParallelConfig | None = None

    # torch.optim classes whose step takes a closure (several loss evaluations on one batch).
    CLOSURE_OPTIMIZERS: ClassVar[frozenset[str]] = frozenset({"LBFGS"})

    def __post_init__(self) -> None:
        parallel = self.parallel is not None and self.parallel.world_size > 1
        if self.optimizer.name in self.CLOSURE_OPTIMIZERS:
            what = f"optimizer {self.optimizer.name} steps with a closure, on one batch at a time"
            _require(self.train.accumulate == 1, "train.accumulate", f"{what}: train.accumulate must be 1")
            _require(self.train.clip_grad_norm is None, "train.clip_grad_norm",
                     f"{what}: its closure evaluates the gradients it uses, so train.clip_grad_norm cannot clip them")
            _require(self.scheduler is None, "scheduler",
                     f"{what}: a scheduler with it is not supported (jax_impl.optim.lbfgs takes a float lr)")
            _require(not parallel, "parallel", f"{what}: data-parallel runs are not supported")
        _require(self.train.ema is None or not parallel, "train.ema",
                 "weight averaging (train.ema) is not supported in data-parallel runs")

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain YAML-able data (every default filled in)."""
        order = ("name", "model", "data", "optimizer", "scheduler", "train", "parallel")
        return {key: _plain(getattr(self, key)) for key in order}


# Keys omitted from the resolved config while at their default, so configs and checkpoints written before
# they existed read the same.
_OMITTED_AT_DEFAULT = {
    DataConfig: {"transform": (), "eval_transform": None},
    TrainConfig: {"clip_grad_norm": None, "clip_grad_norm_type": 2.0, "accumulate": 1, "autocast": None,
                  "ema": None},
    ParallelConfig: {"processes": 1},
}


def _plain(value: Any) -> Any:
    if isinstance(value, NamedSection):
        return {k: _plain(v) for k, v in value.to_dict().items()}
    if dataclasses.is_dataclass(value):
        omitted = _OMITTED_AT_DEFAULT.get(type(value), {})
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.name in omitted and getattr(value, f.name) == omitted[f.name])}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
