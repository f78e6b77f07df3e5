"""``torch.backends.mkldnn``: whether float32 2-D convolutions (and large linear layers) on the CPU run oneDNN.

torch's CPU ``conv2d`` runs oneDNN (formerly MKL-DNN) unless
``torch.backends.mkldnn.enabled`` is ``False``. jax_impl's convolutions do
the same when the ``onednn-cpu-gomp`` wheel is installed (a dependency on
Linux x86-64): the forward and both gradients become XLA custom calls into
oneDNN's kernels (``jax_impl/nn/_conv_onednn.py``), for the convs large
enough to pay for a call (``jax_impl.nn._fast_conv.takes_onednn``). A float32
``linear`` of at least ``2**28`` multiply-adds runs oneDNN's matmul, forward and
gradients (``jax_impl.nn._gemm.takes_onednn_matmul``), and a float32 ``LSTM``
layer oneDNN's LSTM primitive, as torch's ``mkldnn_rnn_layer``
(``jax_impl.nn._functional_rnn.takes_onednn_lstm``). Off, or where oneDNN is
absent, XLA's own convolutions and dots run, and the LSTM is a ``lax.scan``. The choice is read when
a function is traced, so a jitted function keeps the one it was traced with.

``JAX_IMPL_MKLDNN=0`` in the environment turns it off for the process.
After a geometry's first call, its calls run from a handler numba compiles
(no Python, no GIL: ``jax_impl/_onednn_native.py``);
``JAX_IMPL_ONEDNN_NATIVE=0`` keeps them on the Python path, same results.

Example::

    from jax_impl.backends import mkldnn

    mkldnn.is_available()          # oneDNN found and loadable
    with mkldnn.flags(enabled=False):
        ...                        # traced here: XLA's convolutions
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from jax_impl.backends import switches

__all__ = ["enabled", "flags", "is_available", "is_enabled"]

enabled: bool = True
"""Whether convolutions may run oneDNN (``torch.backends.mkldnn.enabled``)."""


def is_available() -> bool:
    """Whether oneDNN is installed, loads, and its custom calls are registered with XLA (imports jax)."""
    from jax_impl.nn import _conv_onednn, _lstm_onednn, _matmul_onednn

    return _conv_onednn.registered() and _matmul_onednn.registered() and _lstm_onednn.registered()


def is_enabled() -> bool:
    """:data:`enabled` and :func:`is_available`."""
    return enabled and is_available()


@contextlib.contextmanager
def flags(enabled: bool = False, deterministic: bool = False) -> Iterator[None]:
    """Set :data:`enabled` inside a ``with`` block (``torch.backends.mkldnn.flags``).

    ``deterministic`` is accepted for torch's signature: jax_impl's oneDNN
    calls are always deterministic (fixed batch chunks, one thread each,
    partial weight gradients added in chunk order).
    """
    with switches.set_within(globals(), "enabled", bool(enabled)):
        yield
