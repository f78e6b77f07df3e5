"""``jax_impl.amp.autocast`` against ``torch.autocast("cpu", dtype=torch.bfloat16)``: dtypes, values, gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jax_impl import amp
from jax_impl.nn import functional as JF
from tests._cpu import AVX512


def _r(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def test_policy_lists_are_torchs_autocast_cpu_kernels():
    # Every aten op torch's dispatcher gives an AutocastCPU kernel, and no other, is on one of the lists.
    names = torch._C._dispatch_get_all_op_names()
    torch_ops = {n.split("::")[1].split(".")[0] for n in names
                 if torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCPU")}
    assert amp.LOWER_PRECISION_FP | amp.FP32 | amp.PROMOTE == torch_ops
    assert not (amp.LOWER_PRECISION_FP & amp.FP32 or amp.FP32 & amp.PROMOTE or amp.LOWER_PRECISION_FP & amp.PROMOTE)


X4, W4, X2 = _r(2, 3, 6, 6), _r(4, 3, 3, 3, scale=0.2), _r(4, 5)
X5 = _r(1, 2, 4, 4, 4)
Y = np.arange(4) % 5
# (name, torch call, jax call, inputs): each op's output dtype under autocast, from float32 and from bf16 inputs.
OPS = [
    ("linear", lambda x: F.linear(x, torch.ones(3, 5)), lambda x: JF.linear(x, jnp.ones((3, 5))), X2),
    ("conv1d", lambda x: F.conv1d(x, torch.ones(2, 4, 3)), lambda x: JF.conv1d(x, jnp.ones((2, 4, 3))), _r(2, 4, 7)),
    ("conv2d", lambda x: F.conv2d(x, torch.from_numpy(W4)), lambda x: JF.conv2d(x, W4), X4),
    ("conv3d", lambda x: F.conv3d(x, torch.ones(1, 2, 2, 2, 2)), lambda x: JF.conv3d(x, jnp.ones((1, 2, 2, 2, 2))),
     X5),
    ("conv_transpose2d", lambda x: F.conv_transpose2d(x, torch.ones(3, 2, 2, 2)),
     lambda x: JF.conv_transpose2d(x, jnp.ones((3, 2, 2, 2))), X4),
    ("prelu", lambda x: F.prelu(x, torch.tensor([0.25])), lambda x: JF.prelu(x, jnp.array([0.25])), X4),
    ("sdpa", lambda x: F.scaled_dot_product_attention(x, x, x), lambda x: JF.scaled_dot_product_attention(x, x, x),
     X4),
    ("relu", F.relu, JF.relu, X4),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda x: JF.max_pool2d(x, 2), X4),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2), lambda x: JF.max_pool3d(x, 2), X5),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2), lambda x: JF.avg_pool2d(x, 2), X4),
    ("avg_pool3d", lambda x: F.avg_pool3d(x, 2), lambda x: JF.avg_pool3d(x, 2), X5),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, 1), lambda x: JF.adaptive_avg_pool3d(x, 1), X5),
    ("pad reflect", lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"),
     lambda x: JF.pad(x, (1, 1, 1, 1), mode="reflect"), X4),
    ("pad replicate", lambda x: F.pad(x, (1, 1), mode="replicate"), lambda x: JF.pad(x, (1, 1), mode="replicate"),
     _r(2, 3, 6)),
    ("softmax", lambda x: F.softmax(x, -1), lambda x: JF.softmax(x, -1), X2),
    ("log_softmax", lambda x: F.log_softmax(x, -1), lambda x: JF.log_softmax(x, -1), X2),
    ("layer_norm", lambda x: F.layer_norm(x, (5,)), lambda x: JF.layer_norm(x, (5,)), X2),
    ("cross_entropy", lambda x: F.cross_entropy(x, torch.from_numpy(Y)), lambda x: JF.cross_entropy(x, Y), X2),
    ("nll_loss", lambda x: F.nll_loss(x, torch.from_numpy(Y)), lambda x: JF.nll_loss(x, Y), X2),
    ("mse_loss", lambda x: F.mse_loss(x, x * 2), lambda x: JF.mse_loss(x, x * 2), X2),
    ("l1_loss", lambda x: F.l1_loss(x, x * 2), lambda x: JF.l1_loss(x, x * 2), X2),
    ("smooth_l1_loss", lambda x: F.smooth_l1_loss(x, x * 2), lambda x: JF.smooth_l1_loss(x, x * 2), X2),
    ("huber_loss", lambda x: F.huber_loss(x, x * 2), lambda x: JF.huber_loss(x, x * 2), X2),
    ("kl_div", lambda x: F.kl_div(x, x.exp(), reduction="sum"), lambda x: JF.kl_div(x, jnp.exp(x), reduction="sum"),
     X2),
    ("binary_cross_entropy", lambda x: F.binary_cross_entropy(x.sigmoid(), x.sigmoid()),
     lambda x: JF.binary_cross_entropy(jax.nn.sigmoid(x), jax.nn.sigmoid(x)), X2),
    ("bce_with_logits", lambda x: F.binary_cross_entropy_with_logits(x, x.sigmoid()),
     lambda x: JF.binary_cross_entropy_with_logits(x, jax.nn.sigmoid(x)), X2),
]


# bf16 inputs in the slow tier (the default tier's time budget): float32 inputs are what autocast casts.
@pytest.mark.parametrize("input_dtype", ["float32", pytest.param("bfloat16", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name,torch_fn,jax_fn,x", OPS, ids=[op[0] for op in OPS])
def test_output_dtype_follows_torchs_policy(name, torch_fn, jax_fn, x, input_dtype):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch_fn(torch.from_numpy(x).to(getattr(torch, input_dtype))).dtype
    with amp.autocast(jnp.bfloat16):
        got = jax_fn(jnp.asarray(x, input_dtype)).dtype
    assert str(got) == str(expected).removeprefix("torch.")


def test_float64_and_disabled_are_left_alone():
    with jax.enable_x64(True), amp.autocast():
        assert JF.linear(jnp.ones((2, 3), jnp.float64), jnp.ones((4, 3), jnp.float64)).dtype == jnp.float64  # torch's autocast never casts float64
    with amp.autocast():
        assert amp.is_autocast_enabled() and amp.get_autocast_dtype() == jnp.bfloat16
        with amp.autocast(enabled=False):
            assert JF.linear(jnp.ones((2, 3)), jnp.ones((4, 3))).dtype == jnp.float32
        assert JF.linear(jnp.ones((2, 3)), jnp.ones((4, 3))).dtype == jnp.bfloat16
    assert not amp.is_autocast_enabled()
    with pytest.raises(ValueError, match="bfloat16 and float16"):
        with amp.autocast(jnp.float32):
            pass


def _forward_and_grads(torch_fn, jax_fn, arrays):
    """Both sides' bf16 output and float32 input gradients under autocast, for the same output cotangent."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_t = torch_fn(*ts)
    g = torch.from_numpy(_r(*y_t.shape, seed=7))
    (y_t.float() * g).sum().backward()

    def loss(*js):
        with amp.autocast():
            y = jax_fn(*js)
        return (y.astype(jnp.float32) * jnp.asarray(g.numpy())).sum(), y

    (_, y_j), grads = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(arrays))), has_aux=True))(
        *map(jnp.asarray, arrays))
    pairs = [(y_t.detach().float().numpy(), np.asarray(y_j.astype(jnp.float32)))]
    return pairs + [(t.grad.numpy(), np.asarray(j)) for t, j in zip(ts, grads)]


GEMMS = [
    ("linear", F.linear, JF.linear, (_r(64, 120), _r(84, 120, scale=0.1), _r(84))),
    ("conv1d", F.conv1d, JF.conv1d, (_r(4, 3, 20), _r(5, 3, 3), _r(5))),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda x, w, b: JF.conv2d(x, w, b, padding=1),
     (_r(16, 6, 8, 8), _r(16, 6, 3, 3, scale=0.2), _r(16))),
    ("conv3d", F.conv3d, JF.conv3d, (_r(2, 3, 6, 6, 6), _r(4, 3, 2, 2, 2), _r(4))),
    ("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
     lambda x, w, b: JF.conv_transpose2d(x, w, b, stride=2), (_r(2, 4, 5, 5), _r(4, 3, 3, 3), _r(3))),
]


@pytest.mark.parametrize("name,torch_fn,jax_fn,arrays", GEMMS, ids=[g[0] for g in GEMMS])
def test_bf16_gemm_and_conv_match_torchs_kernels(name, torch_fn, jax_fn, arrays):
    # torch's oneDNN bf16 kernels sum in float32 and round once, bias included; so does jax_impl. Measured
    # (jitted): outputs and float32 gradients bit-identical, except 1 of conv2d's 16384 outputs and 1 of its
    # 864 weight-gradient elements, where a float32 sum in another order lands across a bf16 rounding
    # boundary (1 bf16 ULP). Bound: 1 element, or 1 in 1000.
    if not AVX512 and name != "linear":
        pytest.skip("torch runs bf16 convolutions on oneDNN only on CPUs with AVX-512 (mkldnn_bf16_device_check); "
                    "elsewhere its slow_conv kernels, which jax_impl does not reproduce")
    (y_t, y_j), *grads = _forward_and_grads(torch_fn, jax_fn, arrays)
    assert np.count_nonzero(y_t != y_j) <= max(1, y_t.size // 1000)
    np.testing.assert_allclose(y_j, y_t, rtol=2.0 ** -8, atol=0)
    for g_t, g_j in grads:
        assert np.count_nonzero(g_t != g_j) <= max(1, g_t.size // 1000)
        np.testing.assert_allclose(g_j, g_t, rtol=2.0 ** -7, atol=1e-6 * np.abs(g_t).max())


def test_bf16_softmax_rounds_once_like_torch():
    # torch's CPU softmax loads bf16 into float32 and rounds the result once: bit-identical forward.
    (y_t, y_j), (g_t, g_j) = _forward_and_grads(lambda x: F.softmax(x.bfloat16(), -1),
                                                lambda x: JF.softmax(x.astype(jnp.bfloat16), -1), (_r(8, 5),))
    np.testing.assert_array_equal(y_j, y_t)
    # The backward here works from the unrounded float32 output, torch's from the bf16 one: measured max
    # difference 0.0035 of the largest gradient (bf16's epsilon is 0.0078).
    assert np.abs(g_j - g_t).max() <= 2.0 ** -7 * np.abs(g_t).max()


def test_bf16_attention_within_bf16_rounding():
    # torch runs bf16 attention in its CPU flash kernel (blockwise softmax in float32, the probabilities
    # rounded to bf16 before the product with v); jax_impl runs the math path on bf16 inputs. Measured:
    # output 0.0054, input gradients 0.0064 / 0.0094 / 0.0066 of their largest element; bound 4 bf16 epsilons.
    q, k, v = _r(2, 3, 7, 8), _r(2, 3, 7, 8, seed=1), _r(2, 3, 7, 8, seed=2, scale=2.0)
    pairs = _forward_and_grads(F.scaled_dot_product_attention, JF.scaled_dot_product_attention, (q, k, v))
    for t, j in pairs:
        assert np.abs(j - t).max() <= 4 * 2.0 ** -8 * np.abs(t).max()


def _product_operand_types(platform: str) -> list[str]:
    """The operand types of every convolution and dot in a bf16 conv2d + linear train step lowered for ``platform``."""
    x, w, b, v = _r(4, 3, 6, 6), _r(8, 3, 3, 3, scale=0.2), _r(8), _r(5, 8 * 36, scale=0.05)

    def loss(x, w, b, v):
        with amp.autocast():
            y = JF.relu(JF.conv2d(x, w, b, padding=1))
            return (JF.linear(y.reshape(4, -1), v).astype(jnp.float32) ** 2).sum()

    text = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).trace(x, w, b, v).lower(
        lowering_platforms=(platform,)).as_text()
    return [line.split(":")[-1].strip() for line in text.splitlines()
            if "stablehlo.convolution" in line or "stablehlo.dot_general" in line]


def test_bf16_products_take_torchs_gpu_form_off_the_cpu():
    # On the CPU: torch's CPU kernels' form, checked against torch above (bf16 operands, float32 sums rounded
    # once after the bias; the gradient products are float32 transposes of the bf16 values). Off the CPU:
    # torch's GPU form. Gradient GEMMs and convolutions take bf16 operands (tensor cores), and a convolution
    # returns bf16 (cuDNN's rounding; the bias is added after it), while a GEMM keeps its float32 output for
    # the bias (cuBLAS's epilogue). Lowered for CUDA here, which needs no GPU.
    cuda, cpu = _product_operand_types("cuda"), _product_operand_types("cpu")
    assert len(cuda) == len(cpu) == 6  # conv and linear: forward, input gradient, weight gradient
    operands = lambda ops: ops.split("->")[0]  # noqa: E731
    assert all(operands(ops).count("bf16") == 2 for ops in cuda), cuda
    assert [ops.split("->")[1].count("bf16") for ops in cuda[:2]] == [1, 0], cuda  # conv forward bf16, linear f32
    assert sum(operands(ops).count("bf16") == 2 for ops in cpu) == 2, cpu  # the forwards; the gradients are f32
    assert all("bf16" not in ops.split("->")[1] for ops in cpu[:2]), cpu


def test_bf16_products_keep_forward_mode():
    # The bf16 products carry a custom JVP, not a custom VJP, so forward mode (jvp, jacfwd, hessian) works
    # through them. The two modes round differently: each bf16 cast rounds the tangent going forward
    # (the input direction, the conv's and the linear's outputs) and the cotangent coming back, 2**-8
    # relative each. Measured: the jvp and the gradient's dot with the direction 0.64% apart; bound 4 roundings.
    x, w, v = _r(2, 3, 6, 6), _r(4, 3, 3, 3, scale=0.2), _r(2, 3, 6, 6, seed=3)

    def f(x):
        with amp.autocast():
            y = JF.conv2d(x, w, padding=1)
            return (JF.linear(y.reshape(2, -1), jnp.ones((5, 144)) * 0.01).astype(jnp.float32) ** 2).sum()

    _, forward = jax.jit(lambda x, v: jax.jvp(f, (x,), (v,)))(x, v)
    reverse = jnp.vdot(jax.jit(jax.grad(f))(x), v)
    np.testing.assert_allclose(float(forward), float(reverse), rtol=4 * 2.0 ** -8)
