"""Time torch's random draws on the host: ``jax_impl.random.Generator`` (torch's CPU stream) vs torch's own.

    python benchmarks/random_draws.py [--repeats N] [--json PATH] [--only randn_1m,...]

Each case is one call a training loop makes, drawn from a generator on each
side (the same numbers, bit for bit: tests/random): a VAE's
``randn_like(std)`` (128 x 20), a DCGAN's latents (64 x 100 x 1 x 1), a
diffusion step's noise (64 x 3 x 32 x 32), a million float32 and float64
normals, uniforms, a dropout mask, ``exponential_``, a categorical sample
over a 10,000-word vocabulary (``multinomial``, 32 rows) and an epoch's
shuffle (``randperm(60000)``). jax_impl's normal draws are compiled once a
size repeats (``jax_impl/random/_normal_xla.py``: from the second draw of a
small size, after a few of a large one): every case is warmed up first, as a
loop's steps are, until its draws run compiled.

Both sides are timed in alternating rounds of blocks (``_common.time_blocks``),
at least ``--repeats`` calls each and more for quick draws (about 0.2 s of
calls), and the ratio is paired by round: torch's time over ours, above 1 ours
is faster.

This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from jax_impl.random import Generator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

DEFAULT_JSON = Path(__file__).parent / "results" / "random_draws.json"


def cases(g: Generator, t: torch.Generator) -> dict[str, tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """``name -> (what, ours, torch's)``."""
    probs = np.random.default_rng(0).random((32, 10_000), dtype=np.float32)
    probs_t = torch.from_numpy(probs)
    return {
        "randn_128x20": ("VAE noise `randn(128, 20)`", lambda: g.randn((128, 20)),
                         lambda: torch.randn(128, 20, generator=t)),
        "randn_64x100": ("DCGAN latents `randn(64, 100, 1, 1)`", lambda: g.randn((64, 100, 1, 1)),
                         lambda: torch.randn(64, 100, 1, 1, generator=t)),
        "randn_64x3x32x32": ("diffusion noise `randn(64, 3, 32, 32)`", lambda: g.randn((64, 3, 32, 32)),
                             lambda: torch.randn(64, 3, 32, 32, generator=t)),
        "randn_1m": ("`randn(10**6)` float32", lambda: g.randn(1_000_000),
                     lambda: torch.randn(1_000_000, generator=t)),
        "randn_1m_f64": ("`randn(10**6)` float64", lambda: g.randn(1_000_000, np.float64),
                         lambda: torch.randn(1_000_000, generator=t, dtype=torch.float64)),
        "rand_1m": ("`rand(10**6)`", lambda: g.rand(1_000_000), lambda: torch.rand(1_000_000, generator=t)),
        "bernoulli_1m": ("dropout mask `bernoulli_(0.5)` over 10**6", lambda: g.bernoulli(1_000_000, 0.5),
                         lambda: torch.empty(1_000_000).bernoulli_(0.5, generator=t)),
        "exponential_1m": ("`exponential_()` over 10**6", lambda: g.exponential(1_000_000),
                           lambda: torch.empty(1_000_000).exponential_(generator=t)),
        "multinomial_32x10k": ("`multinomial(probs, 1)`, 32 x 10,000", lambda: g.multinomial(probs, 1),
                               lambda: torch.multinomial(probs_t, 1, generator=t)),
        "randperm_60k": ("an epoch's shuffle `randperm(60000)`", lambda: g.randperm(60_000),
                         lambda: torch.randperm(60_000, generator=t)),
    }


def _warm_draws(name: str) -> int:
    """Draws that bring a normal case to its compiled transform, as a loop's first steps do: a size of more
    than 16,384 normals is compiled once NumPy has transformed about 3.2 million normals of its size bucket
    (docs/random.md)."""
    sizes = {"randn_64x3x32x32": 64 * 3 * 32 * 32, "randn_1m": 1_000_000}
    return 2 + 3_200_000 // sizes[name] if name in sizes else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--only", default="", help="comma-separated cases (default: all)")
    args = parser.parse_args(argv)
    table = cases(Generator(0), torch.Generator().manual_seed(0))
    names = _common.chosen(parser, args.only, table)
    results: dict[str, Any] = {}
    for name in names:
        what, ours, theirs = table[name]
        # At least --repeats calls, more for quick draws (about 0.2 s of each side's calls), so that a block
        # of a round is more than its first call after the other side's block.
        for _ in range(_warm_draws(name)):
            ours()
        start = time.perf_counter()
        for draw in (ours, ours, theirs, theirs):
            draw()
        repeats = max(args.repeats, min(1000, int(0.8 / max(time.perf_counter() - start, 1e-6))))
        times = _common.time_blocks({"jax_impl": {"draw": ours}, "torch": {"draw": theirs}}, warmup=3,
                                    repeats=repeats, rounds=min(10, repeats))
        ratio = _common.paired_ratio(times["torch"]["draw"], times["jax_impl"]["draw"])
        results[name] = {"what": what, "jax_impl": times["jax_impl"]["draw"], "torch": times["torch"]["draw"],
                         "ratio": ratio}
        print(f"{name:22s} ours {times['jax_impl']['draw']['median_ms']:9.3f} ms  torch "
              f"{times['torch']['draw']['median_ms']:9.3f} ms  ratio {ratio:.2f}", flush=True)
    _common.write_json(args.json, {"benchmark": "random_draws", "machine": _common.machine_info(), "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
