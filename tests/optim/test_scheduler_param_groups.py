"""One torch scheduler over several param groups == one jax_impl schedule per group (each from its own base lr)."""

import numpy as np
import torch

from jax_impl import optim
from jax_impl.optim import lr_scheduler as S
from parity import strict_numerics
from tests.optim._scheduled import assert_same_trajectory


def test_cosine_warmup_over_two_groups_with_different_base_lrs():
    rng = np.random.default_rng(0)
    shapes = {"body": (5, 4), "head": (4,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    torch_params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    torch_opt = torch.optim.AdamW([{"params": [torch_params["body"]]}, {"params": [torch_params["head"]], "lr": 3e-2}], lr=1e-3)
    L = torch.optim.lr_scheduler
    torch_sched = L.SequentialLR(
        torch_opt, [L.LinearLR(torch_opt, start_factor=0.1, total_iters=10), L.CosineAnnealingLR(torch_opt, T_max=50)], milestones=[10]
    )

    def schedule(base):
        return S.sequential_lr(base, schedulers=[S.linear_lr(base, start_factor=0.1, total_iters=10), S.cosine_annealing_lr(base, T_max=50)], milestones=[10])

    with strict_numerics():
        tx = optim.param_groups(optim.adamw, [{"params": "body", "lr": schedule(1e-3)}, {"params": "head", "lr": schedule(3e-2)}])
    assert_same_trajectory(torch_params, torch_opt, torch_sched, tx, params, shapes, rng, 80, uses_sqrt=True)
