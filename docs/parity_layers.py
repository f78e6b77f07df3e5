"""The layers and models sections of docs/parity.md (imported by docs/generate_parity.py).

For every ``jax_impl.nn`` layer family a seeded grid of configurations is
drawn (the same kinds of draws as the tests: kernel, stride, padding,
dilation, groups, modes, shapes); each configuration is built in torch and in
JAX after the same seed, run forward and backward on the same input with the
same cotangent, in float32 and float64. The tables give, per family, the
worst relative error (``max |ours - torch| / max |torch|`` per array) of the
forward output and of the gradients (input and every parameter), and whether
the initial weights were bit-identical (torch-identical init).

The models section converts torch's LeNet / ResNet weights into the JAX
models and reports logits agreement in eval and train mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
import torch

import jax_impl.nn as jnn
from parity.layer_check import build_pair, compare_module

CONFIGS_PER_FAMILY = 24

Case = tuple[str, Callable[[Any], Any], Callable[[Any], Any], tuple[int, ...], dict]


def _conv_cases(rng: np.random.Generator) -> Iterator[Case]:
    for _ in range(CONFIGS_PER_FAMILY):
        nd = int(rng.integers(1, 4))
        groups = int(rng.integers(1, 3))
        c_in, c_out = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 4))
        k = tuple(int(rng.integers(1, {1: 6, 2: 4, 3: 3}[nd])) for _ in range(nd))
        d = tuple(int(rng.integers(1, 3)) for _ in range(nd))
        mode = str(rng.choice(["zeros", "reflect", "replicate", "circular"]))
        pad = str(rng.choice(["int", "same", "valid"]))
        s = (1,) * nd if pad == "same" else tuple(int(rng.integers(1, 3)) for _ in range(nd))
        padding = int(rng.integers(0, 3)) if pad == "int" else pad
        kw = dict(stride=s, padding=padding, dilation=d, groups=groups, bias=bool(rng.integers(0, 2)), padding_mode=mode)
        size = tuple(di * (ki - 1) + int(rng.integers(3, 7)) for ki, di in zip(k, d))
        name = f"Conv{nd}d"
        yield (name, lambda td, n=name, kw=kw, a=(c_in, c_out, k): getattr(torch.nn, n)(*a, **kw, dtype=td),
               lambda jd, n=name, kw=kw, a=(c_in, c_out, k): getattr(jnn, n)(*a, **kw, dtype=jd), (2, c_in, *size), {})


def _conv_route_cases(rng: np.random.Generator) -> Iterator[Case]:
    """Conv2d at shapes that take jax_impl's CPU routes (jax_impl/nn/_fast_conv.py), batch as benchmarked:
    the fused loop over flattened rows (LeNet conv1, stride 1; and strided), the packed input
    gradient (LeNet conv2), im2col + GEMM for
    outputs no larger than the kernel (ResNet-18's last stage at 64x64) and for N*Ho*Wo <= C_out
    (its last stage at 224x224, batch 4), the GEMM forward with XLA's derivatives for
    N*Ho*Wo <= 4*C_out (its third stage at 224x224, batch 4), the phase-split weight gradient
    (a ResNet stem over a batch of 2), the block-split one (its first stage at 224x224, batch 4),
    and strided 1x1 convs as a dot (its downsamples at 224x224, batch 4, and at 64x64, batch 32)."""
    shapes = [  # (c_in, c_out, kernel, stride, padding, input shape)
        (3, 6, 5, 1, 0, (256, 3, 32, 32)),
        (3, 6, 5, 1, 2, (64, 3, 32, 32)),
        (3, 8, 3, 2, 1, (256, 3, 32, 32)),
        (6, 16, 5, 1, 0, (256, 6, 14, 14)),
        (512, 512, 3, 1, 1, (32, 512, 2, 2)),
        (256, 512, 3, 2, 1, (32, 256, 4, 4)),
        (512, 512, 3, 1, 1, (4, 512, 7, 7)),
        (256, 256, 3, 1, 1, (4, 256, 14, 14)),
        (3, 64, 7, 2, 3, (2, 3, 64, 64)),
        (64, 64, 3, 1, 1, (4, 64, 56, 56)),
        (128, 256, 1, 2, 0, (4, 128, 28, 28)),
        (64, 128, 1, 2, 0, (32, 64, 16, 16)),
    ]
    for c_in, c_out, k, st, pad, shape in shapes:
        kw = dict(stride=st, padding=pad, bias=True)
        yield ("Conv2d", lambda td, kw=kw, a=(c_in, c_out, k): torch.nn.Conv2d(*a, **kw, dtype=td),
               lambda jd, kw=kw, a=(c_in, c_out, k): jnn.Conv2d(*a, **kw, dtype=jd), shape, {})


def _conv_transpose_cases(rng: np.random.Generator) -> Iterator[Case]:
    produced = 0
    while produced < CONFIGS_PER_FAMILY:
        nd = int(rng.integers(1, 4))
        groups = int(rng.integers(1, 3))
        c_in, c_out = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 4))
        k = tuple(int(rng.integers(1, {1: 5, 2: 4, 3: 3}[nd])) for _ in range(nd))
        d = tuple(int(rng.integers(1, 3)) for _ in range(nd))
        s = tuple(int(rng.integers(1, 4)) for _ in range(nd))
        p = tuple(int(rng.integers(0, di * (ki - 1) + 1)) for ki, di in zip(k, d))
        op = tuple(int(rng.integers(0, max(si, di))) for si, di in zip(s, d))
        size = tuple(int(rng.integers(1, 5)) for _ in range(nd))
        if any((n - 1) * si - 2 * pi + di * (ki - 1) + 1 + o < 1 for n, si, pi, di, ki, o in zip(size, s, p, d, k, op)):
            continue
        produced += 1
        kw = dict(stride=s, padding=p, output_padding=op, groups=groups, bias=bool(rng.integers(0, 2)), dilation=d)
        name = f"ConvTranspose{nd}d"
        yield (name, lambda td, n=name, kw=kw, a=(c_in, c_out, k): getattr(torch.nn, n)(*a, **kw, dtype=td),
               lambda jd, n=name, kw=kw, a=(c_in, c_out, k): getattr(jnn, n)(*a, **kw, dtype=jd), (2, c_in, *size), {})


def _linear_cases(rng: np.random.Generator) -> Iterator[Case]:
    for _ in range(CONFIGS_PER_FAMILY):
        a = (int(rng.integers(1, 65)), int(rng.integers(1, 65)), bool(rng.integers(0, 2)))
        yield ("Linear", lambda td, a=a: torch.nn.Linear(*a, dtype=td), lambda jd, a=a: jnn.Linear(*a, dtype=jd),
               (int(rng.integers(1, 9)), a[0]), {})


def _pool_cases(rng: np.random.Generator) -> Iterator[Case]:
    produced = 0
    while produced < CONFIGS_PER_FAMILY:
        nd = int(rng.integers(1, 4))
        kind = str(rng.choice(["Max", "Avg"]))
        k = tuple(int(rng.integers(1, 4)) for _ in range(nd))
        s = tuple(int(rng.integers(1, 3)) for _ in range(nd))
        p = tuple(int(rng.integers(0, ki // 2 + 1)) for ki in k)
        kw: dict[str, Any] = dict(kernel_size=k, stride=s, padding=p, ceil_mode=bool(rng.integers(0, 2)))
        if kind == "Max":
            kw["dilation"] = tuple(int(rng.integers(1, 3)) for _ in range(nd))
        else:
            kw["count_include_pad"] = bool(rng.integers(0, 2))
        size = tuple(int(rng.integers(6, 9)) for _ in range(nd))
        name = f"{kind}Pool{nd}d"
        try:
            getattr(torch.nn, name)(**kw)(torch.zeros((1, 1, *size)))
        except RuntimeError:
            continue
        produced += 1
        yield (name, lambda td, n=name, kw=kw: getattr(torch.nn, n)(**kw), lambda jd, n=name, kw=kw: getattr(jnn, n)(**kw),
               (2, 3, *size), {})
    for _ in range(CONFIGS_PER_FAMILY // 2):
        nd = int(rng.integers(1, 4))
        kind = str(rng.choice(["Max", "Avg"]))
        out = tuple(int(rng.integers(1, 6)) for _ in range(nd))
        name = f"Adaptive{kind}Pool{nd}d"
        yield (name, lambda td, n=name, o=out: getattr(torch.nn, n)(o), lambda jd, n=name, o=out: getattr(jnn, n)(o),
               (2, 3, *(int(rng.integers(1, 10)) for _ in range(nd))), {})


def _batchnorm_cases(rng: np.random.Generator) -> Iterator[Case]:
    for _ in range(CONFIGS_PER_FAMILY):
        nd = int(rng.integers(1, 4))
        c = int(rng.integers(1, 7))
        spatial = () if nd == 1 and rng.integers(0, 2) else tuple(int(rng.integers(2, 5)) for _ in range(nd))
        kw = dict(eps=float(rng.choice([1e-5, 1e-3])), momentum=[0.1, 0.5, None][int(rng.integers(0, 3))],
                  affine=bool(rng.integers(0, 2)), track_running_stats=bool(rng.integers(0, 2)))
        name = f"BatchNorm{nd}d"
        yield (name, lambda td, n=name, kw=kw, c=c: getattr(torch.nn, n)(c, **kw, dtype=td),
               lambda jd, n=name, kw=kw, c=c: getattr(jnn, n)(c, **kw, dtype=jd), (4, c, *spatial), {})


_ACTIVATIONS = [("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("ELU", (0.7,)), ("SELU", ()), ("CELU", (1.3,)),
                ("GELU", ()), ("SiLU", ()), ("Mish", ()), ("Softplus", ()), ("Sigmoid", ()), ("Tanh", ()),
                ("Hardtanh", ()), ("Hardsigmoid", ()), ("Hardswish", ()), ("LogSigmoid", ()), ("Softsign", ()),
                ("Tanhshrink", ()), ("Softmax", (1,)), ("LogSoftmax", (1,))]


def _activation_cases(rng: np.random.Generator) -> Iterator[Case]:
    for name, args in _ACTIVATIONS:
        yield (name, lambda td, n=name, a=args: getattr(torch.nn, n)(*a), lambda jd, n=name, a=args: getattr(jnn, n)(*a),
               (3, 5, 4), {})


FAMILIES: dict[str, Callable[[np.random.Generator], Iterator[Case]]] = {
    "Conv1d/2d/3d (stride, int/'same'/'valid' padding, dilation, groups, bias, 4 padding modes)": _conv_cases,
    "Conv2d on jax_impl's CPU routes at benchmark shapes (fused loop: LeNet conv1 at batch 256/64, a strided one; "
    "packed input gradient: LeNet conv2 at batch 256; im2col + GEMM: ResNet-18's last stage at 64x64 and at 224x224, batch 4; "
    "GEMM forward: its third stage at 224x224, batch 4; "
    "phase-split weight gradient: a ResNet stem at batch 2; block-split weight gradient: its first stage at 224x224, batch 4; "
    "strided 1x1 as a dot: its downsamples at 224x224, batch 4, and 64x64, batch 32)": _conv_route_cases,
    "ConvTranspose1d/2d/3d (stride, padding, output_padding, groups, dilation, bias)": _conv_transpose_cases,
    "Linear": _linear_cases,
    "MaxPool/AvgPool 1-3d (ceil_mode, dilation, count_include_pad), adaptive pools": _pool_cases,
    "BatchNorm1d/2d/3d, training (affine, track_running_stats, momentum incl. None, eps)": _batchnorm_cases,
    "activations (20 modules, inputs include the kinks)": _activation_cases,
}


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def measure(extra_families: dict | None = None, seed: int = 0) -> list[tuple[str, int, dict[str, float], bool]]:
    """Per family: ``(label, configurations, worst errors by dtype and kind, init bit-identical)``."""
    rows = []
    for label, cases in {**FAMILIES, **(extra_families or {})}.items():
        worst = {"f32 fwd": 0.0, "f32 grad": 0.0, "f64 fwd": 0.0, "f64 grad": 0.0}
        n = 0
        for case_seed, (_, make_t, make_j, shape, call) in enumerate(cases(np.random.default_rng(seed))):
            n += 1
            for dtype, tag in ((np.float32, "f32"), (np.float64, "f64")):
                with jax.enable_x64(dtype == np.float64):
                    # build_pair asserts the initial parameters are bit-identical to torch's.
                    t_mod, j_mod = build_pair(case_seed, make_t, make_j, dtype)
                    x = np.random.default_rng(case_seed).standard_normal(shape).astype(dtype)
                    errors = compare_module(t_mod, j_mod, x, case_seed, call)
                worst[f"{tag} fwd"] = max(worst[f"{tag} fwd"], errors.pop("forward"))
                worst[f"{tag} grad"] = max([worst[f"{tag} grad"], *errors.values()])
        rows.append((label, n, worst, True))
    return rows


def layers_section(extra_families: dict | None = None) -> str:
    lines = [
        "## Layers",
        "",
        "Seeded grids of configurations per family, built in torch and `jax_impl.nn` after the same seed, run "
        "forward and backward (VJP w.r.t. input and every parameter, random cotangent) on the same input. "
        "Errors are `max |ours - torch| / max |torch|` per array, worst over the grid. Issue #5's bars: forward "
        "<= 1e-5 (float32) / 1e-12 (float64), gradients <= 1e-4 / 1e-10.",
        "",
        "| family | configs | init bit-identical | f32 forward | f32 grads | f64 forward | f64 grads |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for label, n, worst, init_equal in measure(extra_families):
        lines.append(
            f"| {label} | {n} | {'yes' if init_equal else 'no'} | {_fmt(worst['f32 fwd'])} | {_fmt(worst['f32 grad'])} "
            f"| {_fmt(worst['f64 fwd'])} | {_fmt(worst['f64 grad'])} |"
        )
    lines.append("")
    return "\n".join(lines)


def models_section() -> str:
    """LeNet and ResNet-18/34/50: torch weights converted, logits and one SGD step compared."""
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import jax_impl.models as jm
    import torch_ref.models as tm
    from jax_impl import optim as jopt
    from jax_impl.nn import _functional_loss as JF
    from parity.convert import load_torch_state_dict, to_torch_state_dict
    from parity.models import compare_models

    models = {
        "LeNet (1x8x8)": (lambda: tm.LeNet(10, 1, 8), lambda: jm.LeNet(10, 1, 8, rngs=nnx.Rngs(0)), (8, 1, 8, 8)),
        "LeNet (3x32x32)": (lambda: tm.LeNet(10, 3, 32), lambda: jm.LeNet(10, 3, 32, rngs=nnx.Rngs(0)), (8, 3, 32, 32)),
        "ResNet-18": (lambda: tm.resnet18(10), lambda: jm.resnet18(10, rngs=nnx.Rngs(0)), (4, 3, 64, 64)),
        "ResNet-34 (zero_init_residual)": (lambda: tm.resnet34(10, zero_init_residual=True),
                                           lambda: jm.resnet34(10, zero_init_residual=True, rngs=nnx.Rngs(0)),
                                           (4, 3, 64, 64)),
        "ResNet-50 (zero_init_residual)": (lambda: tm.resnet50(10, zero_init_residual=True),
                                           lambda: jm.resnet50(10, zero_init_residual=True, rngs=nnx.Rngs(0)),
                                           (4, 3, 64, 64)),
    }
    lines = [
        "## Models",
        "",
        "torch_ref.models built after `torch.manual_seed(0)`, weights converted into jax_impl.models with "
        "`parity.convert.load_torch_state_dict`; input: standard normal images. Logits: max abs error relative "
        "to max |logit| (issue #6 bars: 1e-5 eval, 1e-4 train); worst layer: the largest per-layer relative "
        "error in train mode (`parity.compare_models`); SGD step: parameters after one step of SGD(lr=0.1, "
        "momentum=0.9, weight_decay=1e-4) on cross entropy in train mode, worst relative error over all "
        "parameters and buffers (bar 1e-5). Logits, eval, jitted: the model called whole under `jax.jit`, "
        "which in eval mode on CPU runs the ResNets channels-last (`jax_impl/nn/_channels_last.py`; "
        "`compare_models` runs module by module).",
        "",
        "| model | logits, eval | logits, eval, jitted | logits, train | worst layer, train | one SGD step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, (make_t, make_j, shape) in models.items():
        row = []
        for train in (False, True):
            torch.manual_seed(0)
            t, j = make_t(), make_j()
            load_torch_state_dict(j, t.state_dict())
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            report = compare_models(t, j, x, train=train, rtol=1.0, atol=0.0)
            row.append(report.layers[-1].max_rel_err)
            worst = max(r.max_rel_err for r in report.layers)
            if not train:
                t.eval()
                j.eval()
                with torch.no_grad():
                    want = t(torch.from_numpy(x)).numpy().astype(np.float64)
                graphdef, state = nnx.split(j)
                got = np.asarray(jax.jit(lambda s, a: nnx.merge(graphdef, s)(a))(state, jnp.asarray(x)), np.float64)
                row.append(float(np.abs(got - want).max() / np.abs(want).max()))
        torch.manual_seed(0)
        t, j = make_t(), make_j()
        load_torch_state_dict(j, t.state_dict())
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        y = np.random.default_rng(1).integers(0, 10, shape[0])
        t.train()
        opt = torch.optim.SGD(t.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        torch.nn.functional.cross_entropy(t(torch.tensor(x)), torch.tensor(y)).backward()
        opt.step()
        j.train()
        tx = jopt.sgd(lr=0.1, momentum=0.9, weight_decay=1e-4)
        opt_state = tx.init(nnx.state(j, nnx.Param))

        @nnx.jit
        def step(model, opt_state, x, y, tx=tx):
            grads = nnx.grad(lambda m: JF.cross_entropy(m(x), y))(model)
            params = nnx.state(model, nnx.Param)
            updates, opt_state = tx.update(grads, opt_state, params)
            nnx.update(model, optax.apply_updates(params, updates))
            return opt_state

        step(j, opt_state, jnp.asarray(x), jnp.asarray(y))
        got = to_torch_state_dict(j)
        sgd = max(
            float(np.abs(got[k].numpy().astype(np.float64) - v.numpy()).max() / max(np.abs(v.numpy()).max(), 1e-30))
            for k, v in t.state_dict().items()
        )
        lines.append(f"| {label} | {_fmt(row[0])} | {_fmt(row[1])} | {_fmt(row[2])} | {_fmt(worst)} | {_fmt(sgd)} |")
    lines.append("")
    return "\n".join(lines)
