"""``device_prefetch``: overlap the host-to-device copy of batches with compute.

The JAX counterpart of torch's ``pin_memory`` thread (``_utils/pin_memory.py``):
a background thread takes batches from the loader and hands them on, here
already transferred with ``jax.device_put``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from jax_impl.data._worker import MP_STATUS_CHECK_INTERVAL

__all__ = ["device_prefetch"]


class _PrefetchError:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


def device_prefetch(
    iterable: Iterable[Any],
    size: int = 2,
    sharding: Any = None,
    devices: Sequence[Any] | None = None,
) -> Iterator[Any]:
    """Moves each batch (a pytree of numpy arrays) to device, keeping ``size`` batches in flight.

    A background thread pulls batches from ``iterable`` and ``jax.device_put``s
    them while the caller computes on earlier ones; exceptions raised by the
    iterable (or by the transfer) are re-raised in the caller at the batch
    where they happened. Leaving the loop early stops the thread.

    Args:
        iterable: the batches, e.g. a :class:`DataLoader`.
        size: how many transferred batches may wait ahead of the caller (>= 1).
        sharding: a ``jax.sharding.Sharding`` for every leaf, e.g.
            ``NamedSharding(mesh, P("data"))`` to split the leading (batch)
            axis over devices. Default: the default device.
        devices: for ``pmap``: reshape every leaf to
            ``(len(devices), batch // len(devices), ...)`` and put slice ``i`` on
            ``devices[i]``. Exclusive with ``sharding``.

    Yields:
        The batches, as ``jax.Array`` pytrees, in order.
    """
    if size < 1:
        raise ValueError(f"size should be at least 1, but got size={size}")
    if sharding is not None and devices is not None:
        raise ValueError("sharding and devices are mutually exclusive")
    import jax

    if devices is not None:
        devices = list(devices)
        mesh = jax.sharding.Mesh(np.array(devices), ("devices",))
        pmap_sharding = jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec("devices")
        )
        n = len(devices)

        def split(x: Any) -> Any:
            x = np.asarray(x)
            if x.ndim == 0 or x.shape[0] % n:
                raise ValueError(
                    f"a leaf of shape {x.shape} cannot be split over {n} devices along axis 0"
                )
            return jax.device_put(
                x.reshape(n, x.shape[0] // n, *x.shape[1:]), pmap_sharding
            )

        def put(batch: Any) -> Any:
            return jax.tree.map(split, batch)
    elif sharding is not None:

        def put(batch: Any) -> Any:
            return jax.device_put(batch, sharding)
    else:

        def put(batch: Any) -> Any:
            return jax.device_put(batch)

    buffer: queue.Queue = queue.Queue(maxsize=size)
    stop = threading.Event()

    def offer(item: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in iterable:
                if not offer(put(batch)):
                    return
        except BaseException as e:  # noqa: BLE001 - delivered to the consumer and raised there.
            offer(_PrefetchError(e))
            return
        offer(_END)

    thread = threading.Thread(
        target=produce, name="jax_impl_device_prefetch", daemon=True
    )
    thread.start()
    try:
        while True:
            item = buffer.get()
            if item is _END:
                return
            if isinstance(item, _PrefetchError):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(timeout=MP_STATUS_CHECK_INTERVAL)
