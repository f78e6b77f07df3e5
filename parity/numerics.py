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
@functools.cache
def probe_torch_sqrt(samples: int = 1 << 16) -> str | None:
    """Which sqrt the installed torch computes on CPU: ``"ieee"``, ``"mkl-avx512"`` or ``None``.

    Compares ``torch.sqrt`` on float32 values in [1, 4) (where MKL's
    AVX-512 kernel differs from IEEE in 0.6% of cases), at several lengths,
    with both candidates. ``None`` when torch is missing, or when neither
    matches at every length (then jax_impl cannot promise bit-identity).
    """
    torch = _torch_or_none()
    if torch is None:
        return None
    import jax
    import jax.numpy as jnp

    from jax_impl.optim._mkl_sqrt import torch_sqrt_f32

    # Several sizes: MKL dispatches by length (and by CPU vendor), so one size can look IEEE while
    # the small tensors an optimizer test uses are not (seen on an AMD EPYC: 65536 values IEEE, 37 not).
    rng = np.random.default_rng(0)
    samples_by_size = [np.linspace(1.0, 4.0, samples, endpoint=False, dtype=np.float32)]
    samples_by_size += [rng.uniform(1.0, 4.0, n).astype(np.float32) for n in (7, 37, 1000, 100003)]
    modes = set()
    for x in samples_by_size:
        got = torch.sqrt(torch.from_numpy(x)).numpy().view(np.uint32)
        if np.array_equal(got, np.sqrt(x).view(np.uint32)):
            modes.add("ieee")
        elif np.array_equal(got, np.asarray(jax.jit(torch_sqrt_f32)(jnp.asarray(x))).view(np.uint32)):
            modes.add("mkl-avx512")
        else:
            return None
    return modes.pop() if len(modes) == 1 else None


# When torch's sqrt is unrecognised, sqrt-based optimizers can only be held to issue #3's fallback bar.
_FALLBACK = {"float32": {"rtol": 1e-5, "atol": 1e-6}, "float64": {"rtol": 1e-12, "atol": 1e-13}}


def sqrt_tolerances(dtype: str = "float32", uses_sqrt: bool = True) -> dict[str, float]:
    """Tolerances for comparing a sqrt-based optimizer run with torch on this machine.

    ``{}`` (bit-identical) when :func:`probe_torch_sqrt` recognises torch's
    sqrt or the optimizer takes none; otherwise the fallback bar of issue #3
    (float32: rtol 1e-5, atol 1e-6; float64: rtol 1e-12, atol 1e-13), e.g. on
    an AMD EPYC, whose MKL sqrt is neither IEEE nor MKL's Intel AVX-512 kernel.
    """
    if not uses_sqrt or probe_torch_sqrt() is not None:
        return {}
    return dict(_FALLBACK[dtype])


def match_torch_sqrt() -> str | None:
    """Sets ``jax_impl.optim``'s sqrt mode to what :func:`probe_torch_sqrt` finds; returns it."""
    from jax_impl.optim import set_sqrt_mode

    mode = probe_torch_sqrt()
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
