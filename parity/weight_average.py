"""``train.ema`` in ``parity run``: torch's ``AveragedModel`` beside ``jax_impl.optim.swa_utils``'.

The torch side is the recipe of torch's docs::

    ema_model = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(decay))
    ...
    optimizer.step()
    ema_model.update_parameters(model)           # after every optimizer step

and the JAX side the same rule over the parameter pytree
(``jax_impl.optim.swa_utils.AveragedModel``, ``lerp(ema, current, 1 - decay)``
rounded as torch's CPU ``_foreach_lerp_``). The first update copies the
weights (``n_averaged == 0``), as torch's does. Buffers are copied from the
model, not averaged (torch's ``use_buffers=False``); after each epoch the
runner compares the averaged parameters of both sides like the model's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from parity.compare import scaled_error

__all__ = ["WeightAverages"]


class WeightAverages:
    """Both frameworks' exponential moving averages of the weights of one run.

    Args:
      section: ``train.ema`` (``decay``).
      torch_model: the run's torch model (copied by torch's ``AveragedModel``).
      jax_model: the run's ``jax_impl`` model (its parameters start the JAX average).
      only: ``"torch"`` or ``"jax"`` to keep one side's average, ``None`` for both.
    """

    def __init__(self, section: Any, torch_model: torch.nn.Module, jax_model: Any, only: str | None) -> None:
        from flax import nnx

        from jax_impl.optim import swa_utils

        self.torch_model = torch_model
        self.torch_average = None
        self.jax_rule = self.jax_state = None
        if only != "jax":
            self.torch_average = torch.optim.swa_utils.AveragedModel(
                torch_model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(section.decay))
        if only != "torch":
            self.jax_rule = swa_utils.AveragedModel(multi_avg_fn=swa_utils.get_ema_multi_avg_fn(section.decay))
            self.jax_state = self.jax_rule.init(nnx.state(jax_model, nnx.Param))

    def update_torch(self) -> None:
        """torch's ``ema_model.update_parameters(model)`` after an optimizer step."""
        self.torch_average.update_parameters(self.torch_model)

    def update_jax(self, params: Any) -> None:
        """The JAX average's update with the parameters after an optimizer step."""
        self.jax_state = self.jax_rule.update_parameters(self.jax_state, params)

    def torch_weights(self) -> dict[str, np.ndarray]:
        """torch's averaged parameters by ``named_parameters()`` name."""
        return {k: v.detach().numpy().copy() for k, v in self.torch_average.module.named_parameters()}

    def jax_weights(self) -> dict[str, np.ndarray]:
        """The JAX averaged parameters by torch's names."""
        from flax import nnx

        return {".".join(map(str, k)): np.asarray(v[...]) for k, v in nnx.to_flat_state(self.jax_state.params)}

    def distance(self) -> tuple[float, str | None]:
        """``(max rel, worst tensor)``: per tensor ``max |jax - torch| / max |torch|`` of the averaged
        parameters, the worst tensor."""
        theirs, ours = self.torch_weights(), self.jax_weights()
        errors = {k: scaled_error(ours[k], v) for k, v in theirs.items()}
        worst = max(errors, key=errors.get) if errors else None
        return (errors[worst] if worst is not None else 0.0), worst
