"""A oneDNN custom call as a program: the oneDNN calls of each part, as int64 words that compiled code runs.

:mod:`jax_impl._onednn` writes them (``Convolution.program``,
``Matmul.program``) and :mod:`jax_impl._onednn_compiled` runs them without
the GIL. A stream is a list of instructions, each an opcode and its
operands:

- ``SET memory buffer offset``: ``dnnl_memory_set_data_handle(memory,
  address)``, the address that of the call's buffer ``buffer`` (its
  operands, then its results) plus ``offset`` bytes, or ``offset`` itself
  where ``buffer`` is :data:`ABSOLUTE`;
- ``EXECUTE primitive stream count arguments``: ``dnnl_primitive_execute``;
- ``WAIT stream``: ``dnnl_stream_wait``;
- ``COPY buffer offset source count`` and ``ADD ...``: ``count`` float32
  values at address ``source`` copied into (added to) the buffer's, in
  index order;
- ``END``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ABSOLUTE", "ADD", "COPY", "END", "EXECUTE", "SET", "WAIT", "Program"]

END, SET, EXECUTE, WAIT, COPY, ADD = 0, 1, 2, 3, 4, 5
ABSOLUTE = -1  # SET's buffer for an address given whole (a part's own partial sums)


class Program:
    """What every call of one geometry runs: one stream per part, and one after all the parts.

    Part ``i`` runs on the lane of core ``i`` (or on the calling thread, when it is on that core); the
    ``after`` stream (the parts' partial sums added in part order) runs on the calling thread once every
    part is done. ``array`` is ``[parts, offset of each stream (parts, then after), streams...]``, offsets
    in words from its start. ``keep`` holds the objects whose oneDNN objects and arrays the streams
    point at, for as long as the program is kept.
    """

    def __init__(self, parts: Sequence[Sequence[int]], after: Sequence[int] = (), keep: object = None) -> None:
        if not parts:
            raise ValueError("a program has at least one part")
        streams = [*parts, after]
        offsets, words = [], []
        start = 1 + len(streams)
        for stream in streams:
            offsets.append(start + len(words))
            words += [*stream, END]
        self.array = np.array([len(parts), *offsets, *words], np.int64)
        self.keep = keep
