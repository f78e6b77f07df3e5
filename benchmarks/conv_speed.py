"""Time conv2d forward and forward+backward: torch vs XLA's plain conv vs jax_impl.nn.functional.conv2d.

    python benchmarks/conv_speed.py [--repeats N] [--json PATH] [--only lenet_c1,...]
                                    [--xla-flags "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"]
                                    [--no-step]

For every shape (LeNet conv1/conv2 at batch 256; ResNet-18 at 64x64 batch 32:
stem, 3x3 64->64, 3x3 s2 128->256, 1x1 s2 downsample; ResNet-18 at 224 batch
8: stem and 3x3 64->64 on 56x56) it times

- ``fwd``: the conv alone (torch under ``no_grad``);
- ``fb``: forward plus the gradients w.r.t. input and weight for a fixed
  random cotangent (torch: ``autograd.grad``; jax: one jitted ``jax.vjp``).

Then the full LeNet train step (batch 256, forward, softmax cross entropy,
backward, SGD update lr=0.01) in torch eager and in plain jax with either conv.

Each jax function is one ``jax.jit``, warmed up (compilation included); the
jax variants are timed round-robin, torch on its own after them. Reported:
median (and min) over ``--repeats`` calls, with ``block_until_ready``.
``--xla-flags`` is appended to ``XLA_FLAGS`` before jax is imported (flags
must be set before the CPU backend starts). torch uses its default threads.

This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

SHAPES = {
    # name: (input shape, weight shape, stride, padding)
    "lenet_c1": ((256, 3, 32, 32), (6, 3, 5, 5), 1, 0),
    "lenet_c2": ((256, 6, 14, 14), (16, 6, 5, 5), 1, 0),
    "r18_64_stem": ((32, 3, 64, 64), (64, 3, 7, 7), 2, 3),
    "r18_64_3x3_64": ((32, 64, 16, 16), (64, 64, 3, 3), 1, 1),
    "r18_64_3x3s2_128_256": ((32, 128, 8, 8), (256, 128, 3, 3), 2, 1),
    "r18_64_1x1s2_64_128": ((32, 64, 16, 16), (128, 64, 1, 1), 2, 0),
    "r18_64_3x3s2_256_512": ((32, 256, 4, 4), (512, 256, 3, 3), 2, 1),  # last stage: 2x2 output
    "r18_64_3x3_512": ((32, 512, 2, 2), (512, 512, 3, 3), 1, 1),
    "r18_224_stem": ((8, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    "r18_224_3x3_64": ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "mnist_c1": ((64, 1, 28, 28), (32, 1, 3, 3), 1, 0),  # the PyTorch MNIST example's network, batch 64
    "mnist_c2": ((64, 32, 26, 26), (64, 32, 3, 3), 1, 0),
}


def _time(fn, repeats):
    fn()
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


def _jax_fns(jax, conv, s, p):
    fwd = jax.jit(lambda a, b: conv(a, b, stride=s, padding=p))
    fb = jax.jit(lambda a, b, c: jax.vjp(lambda u, v: conv(u, v, stride=s, padding=p), a, b)[1](c))
    return fwd, fb


def _bind(fn, args):
    import jax

    return lambda: jax.block_until_ready(fn(*args))


def _torch_fn(torch, mode, tx, tw, tg, s, p):
    conv = torch.nn.functional.conv2d
    if mode == "fwd":
        def tfn():
            with torch.no_grad():
                conv(tx, tw, stride=s, padding=p)
    else:
        def tfn():
            torch.autograd.grad(conv(tx, tw, stride=s, padding=p), (tx, tw), tg)
    return tfn


def _summ(ts):
    return {"median_ms": statistics.median(ts), "min_ms": min(ts)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" / "conv_speed.json"))
    ap.add_argument("--only", default="")
    ap.add_argument("--xla-flags", default="")
    ap.add_argument("--no-step", action="store_true")
    args = ap.parse_args(argv)
    if args.xla_flags:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + args.xla_flags).strip()

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from jax_impl.nn import functional as F

    def plain_conv2d(x, w, bias=None, stride=1, padding=0):
        """XLA's own convolution, without the routes of jax_impl/nn/_fast_conv.py (the baseline they are timed against)."""
        s, p = F._ntuple(stride, 2, "stride"), F._ntuple(padding, 2, "padding")
        y = jax.lax.conv_general_dilated(x, w, s, [(v, v) for v in p], dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                         precision=jax.lax.Precision.HIGHEST)
        return y if bias is None else y + bias[None, :, None, None]

    convs = {"plain": plain_conv2d, "fast": F.conv2d}
    names = [n for n in args.only.split(",") if n] or list(SHAPES)
    rows = {}
    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r} torch threads={torch.get_num_threads()} repeats={args.repeats}")
    hdr = (f"{'shape':22s} {'':4s} {'torch':>8s} {'plain':>8s} {'fast':>8s} "
           f"{'torch/plain':>11s} {'torch/fast':>10s}   (median ms)")
    print(hdr)
    for name in names:
        xs, ws, s, p = SHAPES[name]
        rng = np.random.default_rng(0)
        x = rng.standard_normal(xs, dtype=np.float32)
        w = (rng.standard_normal(ws, dtype=np.float32) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
        tx = torch.tensor(x, requires_grad=True)
        tw = torch.tensor(w, requires_grad=True)
        ty = torch.nn.functional.conv2d(tx, tw, stride=s, padding=p)
        g = rng.standard_normal(tuple(ty.shape), dtype=np.float32)
        tg = torch.tensor(g)
        jx, jw, jg = jnp.asarray(x), jnp.asarray(w), jnp.asarray(g)

        jf, jb = {}, {}
        for k, conv in convs.items():
            jf[k], jb[k] = _jax_fns(jax, conv, s, p)
            jax.block_until_ready((jf[k](jx, jw), jb[k](jx, jw, jg)))
        res = {}
        for mode, fns in (("fwd", jf), ("fb", jb)):
            calls = {k: _bind(fn, (jx, jw) if mode == "fwd" else (jx, jw, jg)) for k, fn in fns.items()}
            ts = {k: [] for k in calls}
            for f in calls.values():  # warm
                _time(f, 1)
            for _ in range(args.repeats):  # round-robin
                for k, f in calls.items():
                    t = time.perf_counter()
                    f()
                    ts[k].append((time.perf_counter() - t) * 1e3)
            tfn = _torch_fn(torch, mode, tx, tw, tg, s, p)
            res[mode] = {"torch": _summ(_time(tfn, args.repeats)), **{k: _summ(v) for k, v in ts.items()}}
            r = res[mode]
            t, pl, fa = (r[k]["median_ms"] for k in ("torch", "plain", "fast"))
            r["torch_over_plain"] = t / pl
            r["torch_over_fast"] = t / fa
            print(f"{name:22s} {mode:4s} {t:8.2f} {pl:8.2f} {fa:8.2f} {t / pl:11.2f} {t / fa:10.2f}", flush=True)
        rows[name] = {"input": xs, "weight": ws, "stride": s, "padding": p, **res}

    step = None if args.no_step else _lenet_step(args.repeats, convs, jax, jnp, np, torch, F)
    out = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                    "loadavg_at_end": os.getloadavg()},
        "versions": {"jax": jax.__version__, "torch": torch.__version__},
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "torch_threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "convs": rows,
        "lenet_step": step,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.json}")


def _lenet_step(repeats, convs, jax, jnp, np, torch, F):
    """Full LeNet SGD step, batch 256 3x32x32, 10 classes."""
    rng = np.random.default_rng(0)
    shapes = {"c1w": (6, 3, 5, 5), "c1b": (6,), "c2w": (16, 6, 5, 5), "c2b": (16,),
              "f1w": (120, 400), "f1b": (120,), "f2w": (84, 120), "f2b": (84,), "f3w": (10, 84), "f3b": (10,)}
    params = {k: (rng.standard_normal(v, dtype=np.float32) * 0.1).astype(np.float32) for k, v in shapes.items()}
    x = rng.standard_normal((256, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, 10, 256)
    lr = 0.01

    # torch eager
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(3, 6, 5), torch.nn.Conv2d(6, 16, 5)
            self.f1, self.f2, self.f3 = torch.nn.Linear(400, 120), torch.nn.Linear(120, 84), torch.nn.Linear(84, 10)

        def forward(self, t):
            t = torch.nn.functional.max_pool2d(torch.relu(self.c1(t)), 2)
            t = torch.nn.functional.max_pool2d(torch.relu(self.c2(t)), 2)
            t = t.flatten(1)
            return self.f3(torch.relu(self.f2(torch.relu(self.f1(t)))))

    net = Net()
    with torch.no_grad():
        for (k, mod), attr in zip([(k, getattr(net, k[:2])) for k in shapes], ["weight", "bias"] * 5):
            getattr(mod, attr).copy_(torch.tensor(params[k]))
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    tx, ty = torch.tensor(x), torch.tensor(y)

    def tstep():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(tx), ty).backward()
        opt.step()

    out = {"torch_eager": _summ(_time(tstep, repeats))}

    def make(conv):
        def fwd(p, xb):
            t = conv(xb, p["c1w"], p["c1b"])
            t = F.max_pool2d(jax.nn.relu(t), 2)
            t = F.max_pool2d(jax.nn.relu(conv(t, p["c2w"], p["c2b"])), 2)
            t = t.reshape(t.shape[0], -1)
            t = jax.nn.relu(t @ p["f1w"].T + p["f1b"])
            t = jax.nn.relu(t @ p["f2w"].T + p["f2b"])
            return t @ p["f3w"].T + p["f3b"]

        def loss(p, xb, yb):
            logits = fwd(p, xb)
            m = jnp.max(logits, axis=1, keepdims=True)
            lse = jnp.log(jnp.sum(jnp.exp(logits - m), axis=1)) + m[:, 0]
            return jnp.mean(lse - jnp.take_along_axis(logits, yb[:, None], axis=1)[:, 0])

        @jax.jit
        def step(p, xb, yb):
            g = jax.grad(loss)(p, xb, yb)
            return jax.tree.map(lambda a, b: a - lr * b, p, g)

        return step

    jp = {k: jnp.asarray(v) for k, v in params.items()}
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    steps = {k: make(c) for k, c in convs.items()}
    for k, st in steps.items():
        jax.block_until_ready(st(jp, jx, jy))
        out[f"jax_{k}"] = _summ(_time(lambda st=st: jax.block_until_ready(st(jp, jx, jy)), repeats))
    t = out["torch_eager"]["median_ms"]
    print(f"LeNet step (median ms): torch {t:.2f}  jax plain {out['jax_plain']['median_ms']:.2f} "
          f"(torch/plain {t / out['jax_plain']['median_ms']:.2f})  jax fast {out['jax_fast']['median_ms']:.2f} "
          f"(torch/fast {t / out['jax_fast']['median_ms']:.2f})")
    return out


if __name__ == "__main__":
    main()
