"""torch's own float32 precision floor: how far torch's float32 run of a config is from its float64 run.

A float32 parity bound below this floor cannot be met by any implementation
that is not bit-identical to torch's kernels: training amplifies rounding
itself (e.g. BatchNorm-bias gradients that are cancellation residues).
"""

from __future__ import annotations

from typing import Any

import torch

from parity.build import torch_optimizer
from parity.compare import scaled_error

__all__ = ["torch_precision_floor"]


def torch_precision_floor(cfg: Any, steps: int) -> dict[str, Any]:
    """How far torch's own float32 run of ``cfg`` is from its float64 run after ``steps`` steps.

    The same model, weights, batches, optimizer, scheduler and loss as the
    runner's torch side, trained twice (float32, float64); returns
    ``{"max_rel": float, "worst": name}`` with the runner's measure
    (``max |f32 - f64| / max |f64|`` per parameter, worst over parameters).
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
        opt, _ = torch_optimizer(cfg.optimizer, model)
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
    errors = {k: scaled_error(runs[torch.float32][k], runs[torch.float64][k]) for k in runs[torch.float64]}
    worst = max(errors, key=errors.get)
    return {"max_rel": errors[worst], "worst": worst}
