"""oneDNN's custom calls run without Python: an XLA FFI handler and lanes compiled by numba.

A handler written in Python (:mod:`jax_impl._xla_ffi`) takes the GIL at
every custom call, decodes the call frame, and hands the other cores' parts
of the call to Python threads, each of which takes the GIL in turn before
its oneDNN call. On a conv net's step (50 calls at ResNet-18's) most of
that is waiting for the GIL while another thread holds it (docs/notes.md,
"The price of a oneDNN call's hand-over"). Here the same work is a
*program*, made once per call geometry by the Python path, and run by
machine code that never takes the GIL:

- the handler (a numba ``cfunc``) reads the operands' and results'
  addresses from XLA's call frame, finds the call's program by a hash of
  its dims, attributes and target, and runs its parts: the part of the
  core it is on itself, the others on this module's lanes;
- a lane is a POSIX thread (``pthread_create`` on a numba ``cfunc``) kept
  on one core, woken by a semaphore, that runs its part (oneDNN's
  ``dnnl_memory_set_data_handle``, ``dnnl_primitive_execute``, the
  reorders) and posts its "done" semaphore;
- a program is a flat ``int64`` array of those calls, their oneDNN
  objects' addresses, and which of the call's buffers (plus a byte offset)
  each data handle points at; the parts' partial sums are added in part
  order after all parts are done (:class:`jax_impl._onednn_program.Program`).

A call whose program is not known yet (its first), a call in a forked
child, and XLA's registration-time metadata query go to the Python
handler, which runs the call the Python way and then registers its program
(``program(operands, results, attributes)``). A failed oneDNN call returns
XLA an error made by Python with oneDNN's status.

The handler's core and the lanes' code hold no address of this process
(they read them from a context array, :mod:`jax_impl._onednn_compiled`), so
numba keeps them in its on-disk cache: a process loads them when its first
oneDNN route is registered, and only the first process on a machine (or
after an upgrade) compiles them, about two seconds. ``JAX_IMPL_ONEDNN_NATIVE=0``,
or numba not installed, keeps every call on the Python path.
"""

from __future__ import annotations

import ctypes
import os
import threading
import traceback
import warnings
import zlib
from collections.abc import Callable

import numpy as np

from jax_impl import _onednn, _xla_ffi

__all__ = ["available", "programs", "python_calls", "register_cpu_handler", "running"]

_CAPACITY = 1024  # table slots (a power of 2: a key's low bits index it)
# Programs kept at most: each keeps its geometry's primitives and their buffers (activation-sized), as
# the Python path's caches of convolutions and matmuls keep 256 and 512; a full table is emptied.
_MAX_PROGRAMS = 256
_MAX_BUFFERS = 16  # operands and results of one call
# Trywaits (a few ns each) before a waiting thread sleeps on its semaphore: a caller whose lanes finish
# within a few microseconds of its own part does not pay a futex sleep and wake-up. Longer spins (30-100
# us) measured no faster on a conv net's step: they take the core from XLA's other thread.
_SPINS = 2000


def available() -> bool:
    """Whether oneDNN's custom calls run natively here: oneDNN, numba, not ``JAX_IMPL_ONEDNN_NATIVE=0``."""
    if os.environ.get("JAX_IMPL_ONEDNN_NATIVE", "1") == "0" or not _onednn.available():
        return False
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


_I64 = ctypes.c_int64
# The handler's ways back into Python: (frame address, key) for a call without a program, (frame address,
# dnnl status) for a failed one; each returns an XLA_FFI_Error* or 0.
_CALLBACK = ctypes.CFUNCTYPE(_I64, _I64, _I64)


def c_function(lib: ctypes.CDLL, name: str, restype, *argtypes):
    """A ctypes prototype of ``lib``'s ``name`` taking integers (pointers as addresses)."""
    address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


class _State:
    """This process's memory shared with the compiled code, its lanes and its compiled functions.

    ``words``, one int64 array: each lane's block (its two semaphores, go and done; the address of the
    stream it runs; that stream's status; its CPU mask's address; the context's address), the running
    call's buffer addresses,
    and the open-addressed table of programs (key, program address). The lock every oneDNN call holds is
    :func:`jax_impl._onednn.call_lock_address`'s.
    """

    lane_words = 12  # go (4 words), done (4), stream (8), status (9), CPU mask (10), context (11)
    capacity, max_buffers, spins = _CAPACITY, _MAX_BUFFERS, _SPINS

    def __init__(self) -> None:
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cpus = list(range(_onednn.workers()))
        self.pid, self.cpus, self.lock = os.getpid(), cpus, _onednn.call_lock_address()
        if self.lock is None:
            raise OSError("the process's oneDNN lock is not a POSIX semaphore here")
        self.lanes = len(cpus) if len(cpus) > 1 else 0  # one core: the caller runs the only part
        self.lanes_at = 0
        self.buffers_at = self.lanes * self.lane_words
        self.table_at = self.buffers_at + _MAX_BUFFERS
        self.words = np.zeros(self.table_at + 2 * _CAPACITY, np.int64)
        self.base = self.words.ctypes.data
        self.programs: dict[int, object] = {}
        self._masks = [np.zeros(16, np.uint64) for _ in range(self.lanes)]  # cpu_set_t, 1024 CPUs
        libc = ctypes.CDLL(None, use_errno=True)
        sem_init = c_function(libc, "sem_init", ctypes.c_int, _I64, ctypes.c_int, ctypes.c_uint)
        for i, (cpu, mask) in enumerate(zip(cpus, self._masks)):
            lane = self.lane(i)
            if sem_init(lane, 0, 0) != 0 or sem_init(lane + 32, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "sem_init failed for a oneDNN lane")
            mask[cpu // 64] = np.uint64(1) << np.uint64(cpu % 64)
            self.words[self.lanes_at + i * self.lane_words + 10] = mask.ctypes.data if _onednn.pinned() else 0
        from jax_impl import _onednn_compiled  # numba's import, paid when oneDNN's first route is registered

        self.ctx, self._ctx_arrays = _onednn_compiled.context(self)
        self.compiled = _onednn_compiled.compiled()
        self._threads = []
        for i in range(self.lanes):
            self.words[self.lanes_at + i * self.lane_words + _onednn_compiled.LANE_CONTEXT] = self.ctx.ctypes.data
            thread = ctypes.c_uint64()
            status = libc.pthread_create(ctypes.byref(thread), None, ctypes.c_void_p(self.compiled["lane"].address),
                                         ctypes.c_void_p(self.lane(i)))
            if status != 0:
                raise OSError(status, "pthread_create failed for a oneDNN lane")
            self._threads.append(thread)

    def lane(self, i: int) -> int:
        """The address of lane ``i``'s block."""
        return self.base + 8 * (self.lanes_at + i * self.lane_words)

    def add(self, key: int, program) -> None:
        """Put ``program`` (an :class:`jax_impl._onednn_program.Program`) in the table under ``key``; a table
        holding :data:`_MAX_PROGRAMS` is emptied first, under the process's oneDNN lock (a handler looks a
        program up and runs it under that lock, so none is running), and its programs are let go."""
        if key in self.programs:
            return
        if len(self.programs) >= _MAX_PROGRAMS:
            with _onednn.call_lock():
                self.words[self.table_at:] = 0
                self.programs.clear()
        slot = key & (_CAPACITY - 1)
        while self.words[self.table_at + 2 * slot + 1] != 0:
            slot = (slot + 1) & (_CAPACITY - 1)
        self.programs[key] = program
        # The key first, then the address the handler tests (x86-64 keeps stores in order, and the
        # handler loads with acquire): a handler sees no entry or a whole one.
        self.words[self.table_at + 2 * slot] = key
        self.words[self.table_at + 2 * slot + 1] = program.array.ctypes.data


_STATE: list = [None]
_STATE_LOCK = threading.Lock()


def _state() -> _State | None:
    """This process's state, made (the code compiled, the lanes started) on first use; ``None`` in a
    forked child of the process that made it (whose lanes did not survive the fork), and where it could
    not be made (a warning says why; every call then takes the Python path)."""
    if _STATE[0] is None:
        with _STATE_LOCK:
            if _STATE[0] is None:
                try:
                    _STATE[0] = _State()
                except Exception as exc:  # noqa: BLE001 - numba or the C library refused: the Python path works
                    warnings.warn(f"jax_impl: oneDNN's custom calls stay on the Python path (their native "
                                  f"handler could not be made: {type(exc).__name__}: {exc})", RuntimeWarning,
                                  stacklevel=2)
                    _STATE[0] = False
    state = _STATE[0]
    return state if state and state.pid == os.getpid() else None


def running() -> bool:
    """Whether this process runs oneDNN's custom calls natively (its handler made, its lanes started)."""
    state = _STATE[0]
    return bool(state) and state.pid == os.getpid()


def programs() -> int:
    """How many programs this process keeps (each a geometry whose calls run natively)."""
    state = _STATE[0]
    return len(state.programs) if state and state.pid == os.getpid() else 0


_PYTHON_CALLS = [0]


def python_calls() -> int:
    """How many calls of natively registered targets this process ran on the Python path (a geometry's
    first call, XLA's metadata queries, calls in a forked child)."""
    return _PYTHON_CALLS[0]


def register_cpu_handler(name: str, kernel: Callable, program: Callable) -> None:
    """Register the CPU custom-call target ``name``: natively where :func:`available`, else ``kernel`` on the
    Python path (:func:`jax_impl._xla_ffi.register_cpu_handler`).

    ``kernel(operands, results, attributes)`` runs a call the Python way; ``program(operands, results,
    attributes)`` returns the :class:`jax_impl._onednn_program.Program` that does the same for every later
    call of the geometry (``None``: it stays on the Python path).
    """
    state = _state() if available() else None
    if state is None:
        _xla_ffi.register_cpu_handler(name, kernel)
        return

    def first_call(frame: int, key: int) -> int:
        _PYTHON_CALLS[0] += 1
        try:
            call = _xla_ffi.decode(frame)
            if call is not None:
                kernel(*call)
                here = _state()
                made = program(*call) if key != 0 and here is not None else None
                if made is not None:
                    here.add(key, made)
            return 0
        except Exception as exc:  # noqa: BLE001 - every error goes back to XLA, which raises it in the caller
            return _xla_ffi.error(frame, f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}") or 0

    def failed(frame: int, status: int) -> int:
        return _xla_ffi.error(frame, f"{name}: oneDNN execution failed (dnnl_status_t {status})") or 0

    fallback, failure = _CALLBACK(first_call), _CALLBACK(failed)
    try:
        handler = _compiled_handler(state, zlib.crc32(name.encode()), fallback, failure)
    except Exception as exc:  # noqa: BLE001 - llvmlite refused: this target's calls take the Python path
        warnings.warn(f"jax_impl: {name}'s calls stay on the Python path (its native handler could not be made: "
                      f"{type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=2)
        _xla_ffi.register_cpu_handler(name, kernel)
        return
    _xla_ffi.register_cpu_target(name, handler.address, keep=(handler, fallback, failure))


def _compiled_handler(state: _State, target: int, fallback, failure):
    """A compiled handler for one target: the shared core with the target's number (part of every call's
    key) and its two Python callbacks."""
    from jax_impl import _onednn_compiled

    return _onednn_compiled.entry(state.ctx, target, ctypes.cast(fallback, ctypes.c_void_p).value,
                                  ctypes.cast(failure, ctypes.c_void_p).value)
