"""Keyword signatures of the torch classes a config may name.

A config section such as ``optimizer: {name: Adam, lr: 1e-3, betas: [0.9, 0.99]}``
names a torch class; its other keys are that class's keyword arguments. The
signatures are read from torch itself (``inspect`` + the annotations torch
ships), so the config accepts exactly what torch accepts, with torch's
defaults. Models and datasets are this project's own and are listed here.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import typing
from typing import Any

__all__ = ["Param", "Signature", "SECTIONS", "signature", "names"]

REQUIRED: Any = inspect.Parameter.empty

# Arguments that the framework supplies (never a config key).
_SUPPLIED = {"self", "params", "optimizer", "size_average", "reduce"}


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    annotation: Any
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclasses.dataclass(frozen=True)
class Signature:
    qualname: str
    params: dict[str, Param]


def _resolve_annotation(annotation: Any, module_globals: dict[str, Any]) -> Any:
    if not isinstance(annotation, str):
        return Any if annotation is inspect.Parameter.empty else annotation
    namespace = {**vars(typing), "Callable": collections.abc.Callable, **module_globals}
    try:
        return eval(annotation, namespace)  # torch's own annotation strings
    except Exception:
        return Any


def _from_class(cls: type) -> Signature:
    module_globals = vars(inspect.getmodule(cls) or typing)
    params: dict[str, Param] = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in _SUPPLIED or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params[name] = Param(name, _resolve_annotation(p.annotation, module_globals), p.default)
    return Signature(f"{cls.__module__}.{cls.__qualname__}", params)


def _torch_classes(section: str) -> dict[str, type]:
    import torch
    from torch.optim import lr_scheduler

    if section == "optimizer":
        return {
            n: c
            for n in torch.optim.__all__
            if isinstance(c := getattr(torch.optim, n), type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer
        }
    if section == "scheduler":
        return {
            n: c
            for n in lr_scheduler.__all__
            if isinstance(c := getattr(lr_scheduler, n), type) and n not in ("LRScheduler", "_LRScheduler")
        }
    if section == "loss":
        return {n: getattr(torch.nn, n) for n in dir(torch.nn) if n.endswith("Loss") and isinstance(getattr(torch.nn, n), type)}
    raise KeyError(section)


# The models both frameworks build (torch_ref.models / jax_impl.models), with
# torchvision's constructor names; ``num_classes`` as torchvision spells it.
_MODELS: dict[str, dict[str, Param]] = {
    "LeNet": {
        "num_classes": Param("num_classes", int, 10),
        "in_channels": Param("in_channels", int, 1),
        "image_size": Param("image_size", int, 8),
    },
    **{name: {"num_classes": Param("num_classes", int, 1000)} for name in ("resnet18", "resnet34", "resnet50")},
}

# Datasets the runner can load offline.
_DATASETS: dict[str, dict[str, Param]] = {
    "digits": {"normalize": Param("normalize", bool, False)},
    "synthetic": {
        "num_samples": Param("num_samples", int, 512),
        "image_shape": Param("image_shape", tuple[int, ...], (1, 8, 8)),
        "num_classes": Param("num_classes", int, 10),
    },
}

# torchvision's transforms both sides implement (jax_impl.data.transforms, torch_ref.data); their
# signatures are jax_impl's, which are torchvision's (the keyword-only `generator` is not a config key).
_TRANSFORMS = ("Normalize", "RandomCrop", "RandomHorizontalFlip", "ToTensor")


def _transform_signature(name: str) -> Signature:
    from jax_impl.data import transforms

    signature = _from_class(getattr(transforms, name))
    return Signature(f"transforms.{name}", {k: v for k, v in signature.params.items() if k != "generator"})


SECTIONS: dict[str, str] = {
    "model": "model",
    "dataset": "dataset",
    "transform": "transform",
    "optimizer": "optimizer",
    "scheduler": "LR scheduler",
    "loss": "loss",
}


@functools.cache
def names(section: str) -> tuple[str, ...]:
    """The class names a section may name, e.g. ``names("optimizer")``."""
    if section == "model":
        return tuple(_MODELS)
    if section == "dataset":
        return tuple(_DATASETS)
    if section == "transform":
        return _TRANSFORMS
    return tuple(sorted(_torch_classes(section)))


@functools.cache
def signature(section: str, name: str) -> Signature:
    """The keyword signature of ``name`` in ``section``; ``KeyError`` if unknown."""
    if section == "model":
        return Signature(f"models.{name}", dict(_MODELS[name]))
    if section == "dataset":
        return Signature(f"datasets.{name}", dict(_DATASETS[name]))
    if section == "transform":
        if name not in _TRANSFORMS:
            raise KeyError(name)
        return _transform_signature(name)
    return _from_class(_torch_classes(section)[name])

