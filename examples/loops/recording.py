"""What the loops share: stepping a loader over epochs, and recording each step's values.

Each loop returns its records (one ``{name: number or array}`` dict per step,
state dicts flattened to ``net.key`` names) and, given a folder, hands the
same values to ``parity.Recorder`` (state dicts as nested dicts, which the
recorder names ``net.key`` too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["epochs", "kept", "record", "recorder"]


def epochs(loader: Any, steps: int) -> Iterator[tuple[int, int, bool, Any]]:
    """``(step, i, last_of_epoch, batch)`` over as many epochs of ``loader`` as ``steps`` needs.

    ``i`` counts batches within the epoch, as ``enumerate(dataloader)`` in the examples; ``last_of_epoch``
    is true for an epoch's final batch (``i == len(loader) - 1``, where an example's per-epoch code runs
    after the step). Each epoch is a fresh ``iter(loader)``, which draws the loader's seeds from the global
    stream, as a ``for`` loop over a torch ``DataLoader`` does.
    """
    step = 0
    while True:
        for i, batch in enumerate(loader):
            yield step, i, i == len(loader) - 1, batch
            step += 1
            if step == steps:
                return


def kept(step: int, steps: int, keep_every: int) -> bool:
    """Whether the full state is recorded at ``step``: every ``keep_every``-th step and the last."""
    return step % keep_every == 0 or step == steps - 1


def recorder(folder: Any, framework: str, meta: dict[str, Any], *, keep_every: int,
             keep_steps: Iterable[int] = ()) -> contextlib.AbstractContextManager:
    """``parity.Recorder`` on ``folder`` keeping tensors every ``keep_every`` steps and at ``keep_steps``
    (where a loop records samples between them); a context holding ``None`` without a folder."""
    if folder is None:
        return contextlib.nullcontext(None)
    import parity

    return parity.Recorder(folder, framework, keep_every=keep_every, keep_steps=keep_steps, meta=meta)


def record(records: list[dict[str, Any]], rec: Any, step: int, values: dict[str, Any],
           modules: dict[str, Any] | None = None) -> None:
    """Appends the step's values to ``records`` (dicts flattened to ``name.key``) and hands them to ``rec``.

    ``modules`` (a torch or ``flax.nnx`` module under the name of its flattened state dict in ``values``)
    go to the recorder in place of those dicts: it names their entries as the dicts do, and knows their
    0-d counters for state, not scalars.
    """
    flat: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, dict):
            flat.update({f"{name}.{key}": v for key, v in value.items()})
        else:
            flat[name] = value
    records.append(flat)
    if rec is not None:
        rec.step(step, **{**values, **(modules or {})})
