"""``torch.distributions`` on torch's CPU stream: the samplers research recipes use, same seed, same samples.

Each class draws from :data:`jax_impl.random.default_generator` (torch's
global generator; ``generator=`` picks another) exactly as its torch
namesake draws, so after ``torch.manual_seed(s)`` and
``jax_impl.random.manual_seed(s)`` a GAN's latents, a VAE's
reparameterisation noise or a policy's sampled actions are identical.
Samples are drawn on the host (eagerly, not under ``jax.jit``) and returned
as ``jax.Array``; ``rsample`` is differentiable with respect to the
parameters (the noise is a constant). ``log_prob``, ``entropy``, ``mean``
and ``variance`` are jnp expressions of torch's formulas (equal to torch's
to float rounding, and differentiable).

- :class:`Normal` (``sample``, ``rsample``, ``log_prob``, ``entropy``, ``cdf``);
- :class:`MultivariateNormal` with ``scale_tril`` or ``covariance_matrix``;
- :class:`Bernoulli` (``probs`` or ``logits``; torch's tensor ``bernoulli`` kernel);
- :class:`Categorical` (``probs`` or ``logits``; torch's ``multinomial`` with replacement);
- :class:`Uniform`, :class:`Exponential`.
"""

from jax_impl.distributions.bernoulli import Bernoulli
from jax_impl.distributions.categorical import Categorical
from jax_impl.distributions.distribution import Distribution
from jax_impl.distributions.exponential import Exponential
from jax_impl.distributions.multivariate_normal import MultivariateNormal
from jax_impl.distributions.normal import Normal
from jax_impl.distributions.uniform import Uniform

__all__ = ["Bernoulli", "Categorical", "Distribution", "Exponential", "MultivariateNormal", "Normal", "Uniform"]
