"""Fix the numerics of both frameworks for a parity comparison.

``strict_numerics()`` is one context manager that makes torch and JAX compute
what a parity test compares, and restores every setting it touched on exit:

- JAX: ``jax_default_matmul_precision = "highest"`` (no bf16/TF32 passes in
  float32 dots and convolutions); optionally ``jax_enable_x64`` for float64 runs.
- torch: TF32 off for matmul and cuDNN, ``set_float32_matmul_precision("highest")``,
  ``use_deterministic_algorithms(True)`` and ``cudnn.deterministic``, with
  ``CUBLAS_WORKSPACE_CONFIG`` set as torch requires for deterministic cuBLAS.
- Seeds: Python's ``random``, NumPy's global RNG and ``torch.manual_seed``.
- The ``sqrt`` that ``jax_impl.optim`` emulates, probed from the installed
  torch (:func:`match_torch_sqrt`): MKL's AVX-512 VML sqrt on such CPUs, IEEE
  elsewhere.

torch is optional: without it only the JAX and Python/NumPy settings apply.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["match_torch_sqrt", "probe_torch_sqrt", "seed_everything", "sqrt_tolerances", "strict_numerics"]


def seed_everything(seed: int) -> None:
    """Seeds Python's ``random``, NumPy's global RNG and torch (if installed)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = _torch_or_none()
    if torch is not None:
        torch.manual_seed(seed)


def _torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


@functools.cache
def torch_sqrt_table() -> np.ndarray | None:
    """``torch.sqrt`` of every float32 in [1, 4) (``2**24`` values, 64 MiB), for sqrt mode ``"table"``.

    ``None`` without torch. See ``jax_impl.optim.torch_sqrt``'s table mode for why this
    table determines torch's float32 sqrt everywhere.
    """
    torch = _torch_or_none()
    if torch is None:
        return None
    table = np.empty(1 << 24, np.float32)
    # In runs of 2**20 inputs, each written into its place: the kernels do not depend on the length or the
    # position (jax_impl/optim/_table_sqrt.py), and a 64 MiB array of inputs would be as many fresh pages
    # to fault in again.
    run = 1 << 20
    out = torch.from_numpy(table)
    for start in range(0, 1 << 24, run):
        inputs = np.arange(0x3F800000 + start, 0x3F800000 + start + run, dtype=np.uint32).view(np.float32)
        torch.sqrt(torch.from_numpy(inputs), out=out[start:start + run])
    return table


def _probe_inputs(samples: int) -> list[np.ndarray]:
    # Several sizes (MKL may dispatch by length) and, beyond [1, 4), the whole exponent range.
    rng = np.random.default_rng(0)
    out = [np.linspace(1.0, 4.0, samples, endpoint=False, dtype=np.float32)]
    out += [rng.uniform(1.0, 4.0, n).astype(np.float32) for n in (7, 37, 1000, 100003)]
    wide = (np.abs(rng.standard_normal(100003)) * 10.0 ** rng.integers(-37, 38, 100003)).astype(np.float32)
    out.append(wide[np.isfinite(wide) & (wide >= np.finfo(np.float32).tiny)])  # no subnormals: XLA flushes them
    return out


@functools.lru_cache(maxsize=1)
def probe_torch_sqrt(samples: int = 1 << 16) -> str | None:
    """Which sqrt the installed torch computes on CPU: ``"ieee"``, ``"mkl-avx512"``, ``"table"`` or ``None``.

    Compares ``torch.sqrt`` (float32, several lengths, the whole exponent
    range) with IEEE, with the emulated MKL AVX-512 kernel, and with the
    table of torch's own values on [1, 4) (``"table"``: any other kernel
    that is scale-invariant, e.g. MKL's SSE path on AMD CPUs; float32 only,
    see :func:`torch_sqrt_float64_exact`). ``None`` when torch is missing or
    nothing matches (then jax_impl cannot promise bit-identity).
    """
    torch = _torch_or_none()
    if torch is None:
        return None
    import jax
    import jax.numpy as jnp

    from jax_impl.optim import torch_sqrt

    inputs = _probe_inputs(samples)
    got = [torch.sqrt(torch.from_numpy(x)).numpy().view(np.uint32) for x in inputs]
    # XLA:CPU flushes subnormal outputs and inputs; none of these inputs or results is subnormal.
    if all(np.array_equal(g, np.sqrt(x).view(np.uint32)) for g, x in zip(got, inputs)):
        return "ieee"
    # Both candidates are elementwise: each runs once on all the inputs end to end (one compile, not one
    # per length), and is compared with torch's per-length results joined the same way.
    want, joined = np.concatenate(got), jnp.asarray(np.concatenate(inputs))
    mkl = jax.jit(lambda x: torch_sqrt(x, "mkl-avx512"))
    if np.array_equal(want, np.asarray(mkl(joined)).view(np.uint32)):
        return "mkl-avx512"
    table = jax.jit(lambda x, t: torch_sqrt(x, "table", t))
    if np.array_equal(want, np.asarray(table(joined, torch_sqrt_table())).view(np.uint32)):
        return "table"
    return None


@functools.lru_cache(maxsize=1)
def torch_sqrt_float64_exact() -> bool:
    """Whether jax_impl's float64 sqrt under the probed mode equals torch's (IEEE, or MKL AVX-512 emulated).

    Mode ``"table"`` covers float32 only; its float64 sqrt is IEEE, which
    torch's is not on every CPU (not on an AMD EPYC).
    """
    torch = _torch_or_none()
    mode = probe_torch_sqrt()
    if torch is None or mode is None:
        return False
    if mode == "mkl-avx512":
        return True
    x = np.random.default_rng(1).uniform(0.0, 4.0, 100003)
    return bool(np.array_equal(torch.sqrt(torch.from_numpy(x)).numpy(), np.sqrt(x)))


# When torch's sqrt is unrecognised, sqrt-based optimizers are held to the reduction bar (1e-5 / 1e-12 relative):
# a 1-ULP sqrt difference per step stays far inside it.
_FALLBACK = {"float32": {"rtol": 1e-5, "atol": 1e-6}, "float64": {"rtol": 1e-12, "atol": 1e-13}}


def sqrt_tolerances(dtype: str = "float32", uses_sqrt: bool = True) -> dict[str, float]:
    """Tolerances for comparing a sqrt-based optimizer run with torch on this machine.

    ``{}`` (bit-identical) when jax_impl reproduces torch's sqrt in ``dtype``
    on this machine (:func:`probe_torch_sqrt`, :func:`torch_sqrt_float64_exact`)
    or the optimizer takes none; otherwise the fallback bar
    (float32: rtol 1e-5, atol 1e-6; float64: rtol 1e-12, atol 1e-13), e.g.
    float64 on an AMD EPYC, whose MKL double sqrt is neither IEEE nor MKL's
    Intel AVX-512 kernel (its float32 sqrt is reproduced by mode ``"table"``).
    """
    exact = probe_torch_sqrt() is not None if dtype == "float32" else torch_sqrt_float64_exact()
    if not uses_sqrt or exact:
        return {}
    return dict(_FALLBACK[dtype])


def match_torch_sqrt() -> str | None:
    """Sets ``jax_impl.optim``'s sqrt mode to what :func:`probe_torch_sqrt` finds; returns it."""
    from jax_impl.optim import set_sqrt_mode, set_sqrt_table

    mode = probe_torch_sqrt()
    if mode == "table":
        set_sqrt_table(torch_sqrt_table())
    if mode is not None:
        set_sqrt_mode(mode)
    return mode


@contextlib.contextmanager
def strict_numerics(seed: int | None = 0, *, x64: bool | None = None, match_sqrt: bool = True) -> Iterator[None]:
    """Context manager: parity numerics on entry, previous settings on exit.

    Args:
      seed: seeds Python, NumPy and torch on entry (``None`` leaves them alone).
        The RNG states are not restored on exit.
      x64: if not ``None``, sets ``jax_enable_x64`` for the duration (needed for
        float64 comparisons; ``None`` leaves it as it is).
      match_sqrt: set ``jax_impl.optim``'s sqrt mode to the installed torch's
        (:func:`match_torch_sqrt`) for optimizers built inside the block.
    """
    import jax

    from jax_impl.optim import get_sqrt_mode, set_sqrt_mode

    saved_sqrt = get_sqrt_mode()
    if match_sqrt:
        match_torch_sqrt()

    saved_jax = {"jax_default_matmul_precision": jax.config.jax_default_matmul_precision}
    jax.config.update("jax_default_matmul_precision", "highest")
    if x64 is not None:
        saved_jax["jax_enable_x64"] = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", x64)

    torch = _torch_or_none()
    saved_torch: dict[str, Any] = {}
    saved_env = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if torch is not None:
        saved_torch = {
            "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "matmul_precision": torch.get_float32_matmul_precision(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        }
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.set_float32_matmul_precision("highest")
        torch.use_deterministic_algorithms(True)
    if seed is not None:
        seed_everything(seed)
    try:
        yield
    finally:
        set_sqrt_mode(saved_sqrt)
        for name, value in saved_jax.items():
            jax.config.update(name, value)
        if torch is not None:
            torch.backends.cuda.matmul.allow_tf32 = saved_torch["matmul_tf32"]
            torch.backends.cudnn.allow_tf32 = saved_torch["cudnn_tf32"]
            torch.backends.cudnn.deterministic = saved_torch["cudnn_deterministic"]
            torch.backends.cudnn.benchmark = saved_torch["cudnn_benchmark"]
            torch.set_float32_matmul_precision(saved_torch["matmul_precision"])
            torch.use_deterministic_algorithms(saved_torch["deterministic"], warn_only=saved_torch["deterministic_warn_only"])
            if saved_env is None:
                os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
