"""The base class of ``jax_impl.nn`` layers: a ``flax.nnx.Module`` with torch's train/eval switch.

torch's ``nn.Module`` carries a ``training`` flag that ``model.train()`` and
``model.eval()`` set on every submodule (``torch/nn/modules/module.py``).
:class:`Module` reproduces it on top of ``flax.nnx``:

- ``training`` is ``True`` after construction, as in torch;
- ``model.train(mode=True)`` / ``model.eval()`` set it recursively and return
  the module, like torch;
- the same calls also set flax's ``deterministic`` / ``use_running_average``
  attributes, so a model mixing these layers with ``nnx.Dropout`` or
  ``nnx.BatchNorm`` switches as a whole; conversely ``flax``'s own
  ``nnx.Module.train()`` on a plain flax container reaches these layers
  through the ``deterministic`` / ``use_running_average`` properties.

Tensors a torch module registers with ``register_buffer`` are :class:`Buffer`
variables (not trained); running statistics of BatchNorm are ``nnx.BatchStat``.
"""

from __future__ import annotations

from flax import nnx

__all__ = ["Buffer", "Module"]


class Buffer(nnx.Variable):
    """A non-trainable tensor in the module's state, torch's ``register_buffer``."""


class Module(nnx.Module):
    """``flax.nnx.Module`` with torch's ``training`` flag and ``train()`` / ``eval()``."""

    training: bool = True

    def train(self, mode: bool = True, **attributes) -> Module:
        """Set training mode on this module and every submodule (``torch.nn.Module.train``).

        Args:
          mode: ``True`` for training, ``False`` for evaluation.
          **attributes: further attributes passed to ``nnx.Module.set_attributes``.

        Returns:
          ``self``, as torch does.
        """
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.set_attributes(
            training=mode, deterministic=not mode, use_running_average=not mode,
            raise_if_not_found=False, **attributes,
        )
        return self

    def eval(self, **attributes) -> Module:
        """Set evaluation mode, ``train(False)`` (``torch.nn.Module.eval``)."""
        return self.train(False, **attributes)

    # flax's nnx.Module.train()/eval() set these two names; map them onto `training`.
    @property
    def deterministic(self) -> bool:
        return not self.training

    @deterministic.setter
    def deterministic(self, value: bool) -> None:
        self.training = not value

    @property
    def use_running_average(self) -> bool:
        return not self.training

    @use_running_average.setter
    def use_running_average(self, value: bool) -> None:
        self.training = not value
