"""Research training loops from pytorch/examples, each written twice: on torch and on this project's JAX API.

Each module holds ``train_torch`` and ``train_jax`` with the same signature.
Both draw every random number from torch's stream in torch's order (the JAX
side through :mod:`jax_impl.random`), so the two runs are the same run: their
per-step records agree to float64 rounding (README.md in this folder).
"""
