"""torch.nn counterparts on jax and ``flax.nnx``.

- layer classes (``Linear``, ``Conv2d``, ``BatchNorm2d``, ``Sequential``, ...)
  are ``flax.nnx`` modules with torch's constructor signatures, NCHW layout,
  attribute names equal to torch's ``state_dict`` keys, and torch's
  ``train()`` / ``eval()``;
- ``jax_impl.nn.functional`` mirrors ``torch.nn.functional``;
- ``jax_impl.nn.init`` mirrors ``torch.nn.init``;
- ``channels_last_eval(False)`` turns off the channels-last eval path of
  ``jax_impl.models``' ResNets (``jax_impl/nn/_channels_last.py``).
"""

from jax_impl.nn import functional, init
from jax_impl.nn._channels_last import channels_last_eval, channels_last_eval_enabled
from jax_impl.nn.modules import *  # noqa: F403
from jax_impl.nn.modules import __all__ as _modules_all

__all__ = ["channels_last_eval", "channels_last_eval_enabled", "functional", "init", *_modules_all]
