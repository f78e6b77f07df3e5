"""TF32 switches (``jax_impl.backends.cudnn.allow_tf32``, ``jax_impl.backends.cuda.matmul.allow_tf32``): which
precision jax_impl's float32 convolutions and GEMMs ask XLA for, lowered for CUDA (no GPU needed) and on the CPU."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_impl import amp
from jax_impl.backends import cuda, cudnn
from jax_impl.nn import functional as F

X, W, V = (np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in ((2, 3, 6, 6), (4, 3, 3, 3), (5, 144)))


def _loss(x, w, v):
    y = F.conv2d(x, w, padding=1)
    z = F.conv1d(y.reshape(2, 4, 36), w.reshape(4, 27)[:, :12].reshape(4, 4, 3))  # jax_impl's generic conv path
    return (F.linear(z.reshape(2, -1)[:, :136], v[:, :136]) ** 2).sum() + (F.conv_transpose2d(y, w) ** 2).sum()


@contextlib.contextmanager
def _switches(conv: bool, gemm: bool):
    previous = cuda.matmul.allow_tf32
    cuda.matmul.allow_tf32 = gemm
    try:
        with cudnn.flags(allow_tf32=conv):
            yield
    finally:
        cuda.matmul.allow_tf32 = previous


def _precisions(platform: str, dtype=jnp.float32, **switches) -> dict[str, set[str]]:
    """The precision of each convolution and dot in the lowered value-and-grad, by op kind."""
    with _switches(**switches):
        args = [jnp.asarray(a, dtype) for a in (X, W, V)]
        text = jax.jit(jax.value_and_grad(_loss, argnums=(0, 1, 2))).trace(*args).lower(
            lowering_platforms=(platform,)).as_text()
    found: dict[str, set[str]] = {"convolution": set(), "dot_general": set()}
    for line in text.splitlines():
        for kind in found:
            if f"stablehlo.{kind}" in line:
                found[kind].add("HIGHEST" if "HIGHEST" in line else "DEFAULT")
    return found


@pytest.fixture
def gpu_default_backend(monkeypatch):
    """The switches act where jax's default backend is not the CPU: pretend it is a GPU while lowering for CUDA."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")


@pytest.mark.parametrize("conv,gemm", [(False, False), (True, False), (False, True), (True, True)])
def test_tf32_switches_choose_each_products_precision_on_a_gpu(gpu_default_backend, conv, gemm):
    # Off (jax_impl's default, the parity setting): every product HIGHEST, full float32. cudnn.allow_tf32 moves
    # the convolutions, forward and both gradients, to XLA's default (TF32 on NVIDIA GPUs); cuda.matmul.allow_tf32
    # moves the GEMMs; each leaves the other alone, as torch's two switches do.
    found = _precisions("cuda", conv=conv, gemm=gemm)
    assert found["convolution"] == {"DEFAULT" if conv else "HIGHEST"}
    assert found["dot_general"] == {"DEFAULT" if gemm else "HIGHEST"}


def test_tf32_switches_leave_float64_alone(gpu_default_backend):
    # TF32 rounds float32 operands only: float64 products stay HIGHEST with both switches on.
    with jax.enable_x64(True):
        assert _precisions("cuda", jnp.float64, conv=True, gemm=True) == {"convolution": {"HIGHEST"},
                                                                         "dot_general": {"HIGHEST"}}


def test_parity_numerics_keep_full_float32_with_the_switches_on(gpu_default_backend):
    # With a switch on, the precision is left unset and jax_default_matmul_precision decides: parity's
    # strict_numerics sets it to "highest", so a parity run stays at full float32 whatever the switches say.
    from parity.numerics import strict_numerics

    with strict_numerics(match_sqrt=False):
        args = [jnp.asarray(a) for a in (X, W, V)]
        with _switches(conv=True, gemm=True):
            text = jax.jit(jax.grad(_loss, argnums=(0, 1, 2))).trace(*args).lower(
                lowering_platforms=("cuda",)).as_text()
    products = [line for line in text.splitlines() if "stablehlo.convolution" in line or "stablehlo.dot_general" in line]
    assert products and all("HIGHEST" in line for line in products)


def test_tf32_switches_change_nothing_on_the_cpu():
    # The CPU has no TF32: with both switches on, the program and its numbers are the ones without them.
    assert _precisions("cpu", conv=True, gemm=True) == _precisions("cpu", conv=False, gemm=False)
    args = [jnp.asarray(a) for a in (X, W, V)]
    with _switches(conv=True, gemm=True):
        on = jax.jit(jax.grad(_loss, argnums=(0, 1, 2)))(*args)
    off = jax.jit(jax.grad(_loss, argnums=(0, 1, 2)))(*args)
    for a, b in zip(on, off):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bf16_products_ignore_the_switches(gpu_default_backend):
    # Under autocast the products take bf16 operands, which TF32 does not touch: the lowered program is the
    # same with the switches on and off.
    def loss(x, w, v):
        with amp.autocast():
            return _loss(x, w, v).astype(jnp.float32)

    texts = []
    for on in (False, True):
        with _switches(conv=on, gemm=on):
            args = [jnp.asarray(a) for a in (X, W, V)]
            texts.append(jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(*args).lower(
                lowering_platforms=("cuda",)).as_text())
    assert texts[0] == texts[1]
    assert "xbf16>, tensor<" in texts[0]  # the products are bf16 ones
