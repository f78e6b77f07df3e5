"""torch.nn's activation modules as ``flax.nnx`` modules (torch's constructor arguments)."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from jax_impl.nn import _functional_activation as F
from jax_impl._constants import full
from jax_impl.nn.modules._utils import factory_dtype
from jax_impl.nn.modules.module import Module

__all__ = [
    "CELU", "ELU", "GELU", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU", "LogSigmoid", "LogSoftmax",
    "Mish", "PReLU", "ReLU", "ReLU6", "SELU", "SiLU", "Sigmoid", "Softmax", "Softplus", "Softsign", "Tanh",
    "Tanhshrink", "Threshold", "GLU", "Hardshrink", "Softmax2d", "Softmin", "Softshrink",
]


class _Inplace(Module):
    """Activations with only torch's ``inplace`` flag (ignored: JAX arrays are immutable)."""

    _fn = None

    def __init__(self, inplace: bool = False) -> None:
        self.inplace = inplace

    def __call__(self, input):
        return type(self)._fn(input)


class _NoArgs(Module):
    _fn = None

    def __call__(self, input):
        return type(self)._fn(input)


class ReLU(_Inplace):
    """``torch.nn.ReLU(inplace=False)``."""

    _fn = staticmethod(F.relu)


class ReLU6(_Inplace):
    """``torch.nn.ReLU6(inplace=False)``: ``hardtanh(x, 0, 6)``."""

    _fn = staticmethod(F.relu6)


class SELU(_Inplace):
    """``torch.nn.SELU(inplace=False)``."""

    _fn = staticmethod(F.selu)


class SiLU(_Inplace):
    """``torch.nn.SiLU(inplace=False)``."""

    _fn = staticmethod(F.silu)


class Mish(_Inplace):
    """``torch.nn.Mish(inplace=False)``."""

    _fn = staticmethod(F.mish)


class Hardsigmoid(_Inplace):
    """``torch.nn.Hardsigmoid(inplace=False)``."""

    _fn = staticmethod(F.hardsigmoid)


class Hardswish(_Inplace):
    """``torch.nn.Hardswish(inplace=False)``."""

    _fn = staticmethod(F.hardswish)


class Sigmoid(_NoArgs):
    """``torch.nn.Sigmoid()``."""

    _fn = staticmethod(F.sigmoid)


class Tanh(_NoArgs):
    """``torch.nn.Tanh()``."""

    _fn = staticmethod(F.tanh)


class LogSigmoid(_NoArgs):
    """``torch.nn.LogSigmoid()``."""

    _fn = staticmethod(F.logsigmoid)


class Softsign(_NoArgs):
    """``torch.nn.Softsign()``."""

    _fn = staticmethod(F.softsign)


class Tanhshrink(_NoArgs):
    """``torch.nn.Tanhshrink()``."""

    _fn = staticmethod(F.tanhshrink)


class Hardshrink(Module):
    """``torch.nn.Hardshrink(lambd=0.5)``."""

    def __init__(self, lambd: float = 0.5) -> None:
        self.lambd = lambd

    def __call__(self, input):
        return F.hardshrink(input, self.lambd)


class Softshrink(Module):
    """``torch.nn.Softshrink(lambd=0.5)``."""

    def __init__(self, lambd: float = 0.5) -> None:
        self.lambd = lambd

    def __call__(self, input):
        return F.softshrink(input, self.lambd)


class GLU(Module):
    """``torch.nn.GLU(dim=-1)``: ``a * sigmoid(b)`` of the halves of ``dim``."""

    def __init__(self, dim: int = -1) -> None:
        self.dim = dim

    def __call__(self, input):
        return F.glu(input, self.dim)


class LeakyReLU(Module):
    """``torch.nn.LeakyReLU(negative_slope=0.01, inplace=False)``."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        self.negative_slope = negative_slope
        self.inplace = inplace

    def __call__(self, input):
        return F.leaky_relu(input, self.negative_slope)


class ELU(Module):
    """``torch.nn.ELU(alpha=1.0, inplace=False)``."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        self.alpha = alpha
        self.inplace = inplace

    def __call__(self, input):
        return F.elu(input, self.alpha)


class CELU(Module):
    """``torch.nn.CELU(alpha=1.0, inplace=False)``."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        self.alpha = alpha
        self.inplace = inplace

    def __call__(self, input):
        return F.celu(input, self.alpha)


class GELU(Module):
    """``torch.nn.GELU(approximate='none')``."""

    def __init__(self, approximate: str = "none") -> None:
        self.approximate = approximate

    def __call__(self, input):
        return F.gelu(input, self.approximate)


class Softplus(Module):
    """``torch.nn.Softplus(beta=1.0, threshold=20.0)``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        self.beta = beta
        self.threshold = threshold

    def __call__(self, input):
        return F.softplus(input, self.beta, self.threshold)


class Hardtanh(Module):
    """``torch.nn.Hardtanh(min_val=-1.0, max_val=1.0, inplace=False)``."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        if max_val <= min_val:
            # torch raises AssertionError here (torch/nn/modules/activation.py, Hardtanh.__init__).
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def __call__(self, input):
        return F.hardtanh(input, self.min_val, self.max_val)


class Threshold(Module):
    """``torch.nn.Threshold(threshold, value, inplace=False)``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def __call__(self, input):
        return F.threshold(input, self.threshold, self.value)


class PReLU(Module):
    """``torch.nn.PReLU(num_parameters=1, init=0.25)``: learnable ``weight`` of shape ``(num_parameters,)``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        self.num_parameters = num_parameters
        self.init = init
        self.weight = nnx.Param(full((num_parameters,), init, factory_dtype(device, dtype)))

    def __call__(self, input):
        return F.prelu(input, self.weight[...])


class Softmax(Module):
    """``torch.nn.Softmax(dim=None)`` (``None``: torch's legacy implicit dim, with its warning)."""

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    def __call__(self, input):
        return F.softmax(input, self.dim)


class Softmin(Module):
    """``torch.nn.Softmin(dim=None)``: ``softmax(-x, dim)``."""

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    def __call__(self, input):
        return F.softmin(input, self.dim)


class Softmax2d(Module):
    """``torch.nn.Softmax2d()``: softmax over the channels of ``(N, C, H, W)`` or ``(C, H, W)``."""

    def __call__(self, input):
        x = jnp.asarray(input)
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {x.ndim}D instead")
        return F.softmax(x, -3)


class LogSoftmax(Module):
    """``torch.nn.LogSoftmax(dim=None)``."""

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    def __call__(self, input):
        return F.log_softmax(input, self.dim)
