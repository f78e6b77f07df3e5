"""XLA FFI handlers written in Python: a ctypes mirror of XLA's FFI call frame.

``jax.ffi`` registers a C function ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``
as a custom-call target; the compiled computation then calls it with its
operands' and results' buffers in place (``xla/ffi/api/c_api.h``). A ctypes
``CFUNCTYPE`` is such a function, so a Python function can read the
operands and write the results directly in XLA's buffers: no host
callback, no copy of the arguments or the result (``jax.pure_callback``
copies its result into a new device buffer and forces the step through
the host-callback machinery, which also keeps it out of JAX's persistent
compilation cache). The handler runs on the XLA thread that executes the
custom call, taking the GIL for its Python parts.

Only what a CPU kernel needs is read: array operands and results (data
pointer, dtype, dims) and array or scalar attributes. The metadata query
XLA sends at registration is answered with the FFI API version this mirror
follows; the instantiate/prepare/initialize stages are no-ops.
"""

from __future__ import annotations

import ctypes
import time
import traceback
from collections.abc import Callable
from typing import NamedTuple

import ml_dtypes
import numpy as np

__all__ = ["ATTR_ARRAY", "ATTR_SCALAR", "HANDLER", "Buffer", "decode", "error", "frame_layout", "itemsizes",
           "register_cpu_handler", "register_cpu_no_op", "register_cpu_target"]

_P = ctypes.c_void_p

# The FFI API version whose structs this file mirrors (XLA_FFI_API_MAJOR/MINOR of the headers it
# was written against); XLA accepts a handler of an older minor version.
_API_MAJOR, _API_MINOR = 0, 1
_EXTENSION_METADATA = 1
_STAGE_EXECUTE = 3
ATTR_ARRAY, ATTR_SCALAR = 1, 3  # XLA_FFI_AttrType
_ERROR_INTERNAL = 13

# XLA_FFI_DataType -> numpy dtype (the types a CPU kernel here handles), made once: a handler decodes every call.
_DTYPES = {code: np.dtype(t) for code, t in {1: np.bool_, 4: np.int32, 5: np.int64, 10: np.float16, 11: np.float32,
                                              12: np.float64, 16: ml_dtypes.bfloat16}.items()}


class _ExtensionBase(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", _P)]


class _ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("major", ctypes.c_int),
                ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _ApiVersion), ("traits", ctypes.c_uint32),
                ("state_type_id", ctypes.c_int64)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("base", _ExtensionBase), ("metadata", ctypes.POINTER(_Metadata))]


class _Operands(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets share this layout
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("values", ctypes.POINTER(_P))]


class _ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_char_p), ("len", ctypes.c_size_t)]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("names", ctypes.POINTER(ctypes.POINTER(_ByteSpan))),
                ("values", ctypes.POINTER(_P))]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("api", _P), ("ctx", _P),
                ("stage", ctypes.c_int), ("args", _Operands), ("rets", _Operands), ("attrs", _Attrs),
                ("future", _P)]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("dtype", ctypes.c_int),
                ("data", _P), ("rank", ctypes.c_int64), ("dims", ctypes.POINTER(ctypes.c_int64))]


class _Array(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("size", ctypes.c_size_t), ("data", _P)]


class _Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", _P)]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("message", ctypes.c_char_p),
                ("errc", ctypes.c_int)]


_ERROR_CREATE = ctypes.CFUNCTYPE(_P, ctypes.POINTER(_ErrorCreateArgs))


class _Api(ctypes.Structure):  # XLA_FFI_Api up to its first function pointer
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("api_version", _ApiVersion),
                ("internal_api", _P), ("error_create", _ERROR_CREATE)]


class Buffer(NamedTuple):
    """An operand or result of the custom call: its data pointer in XLA's memory, dims and dtype."""

    data: int
    shape: tuple[int, ...]
    dtype: np.dtype


def _buffers(operands: _Operands) -> list[Buffer]:
    values = operands.values
    out = []
    for i in range(operands.size):
        b = _Buffer.from_address(values[i])
        out.append(Buffer(b.data or 0, tuple(b.dims[:b.rank]), _DTYPES.get(b.dtype) or np.dtype("V")))
    return out


def _attributes(attrs: _Attrs) -> dict[str, object]:
    out: dict[str, object] = {}
    for i in range(attrs.size):
        span = attrs.names[i].contents
        name = ctypes.string_at(span.ptr, span.len).decode()
        kind = attrs.types[i]
        if kind == ATTR_ARRAY:
            a = _Array.from_address(attrs.values[i])
            dtype = _DTYPES[a.dtype]
            out[name] = np.frombuffer(ctypes.string_at(a.data, a.size * dtype.itemsize), dtype).copy()
        elif kind == ATTR_SCALAR:
            s = _Scalar.from_address(attrs.values[i])
            dtype = _DTYPES[s.dtype]
            out[name] = np.frombuffer(ctypes.string_at(s.value, dtype.itemsize), dtype)[0].item()
    return out


def _error(api_address: int, message: str) -> int | None:
    """An ``XLA_FFI_Error*`` carrying ``message`` (XLA raises it in the caller as an XlaRuntimeError)."""
    if not api_address:
        return None
    api = _Api.from_address(api_address)
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None, message.encode(), _ERROR_INTERNAL)
    return api.error_create(ctypes.byref(args))


HANDLER = ctypes.CFUNCTYPE(_P, _P)  # XLA_FFI_Error* (*)(XLA_FFI_CallFrame*)
_KEEP_ALIVE: dict[str, object] = {}  # the ctypes function pointers XLA holds


def decode(frame_address: int) -> tuple[list[Buffer], list[Buffer], dict[str, object]] | None:
    """A call frame's operands, results and attributes; ``None`` for a frame with nothing to run (XLA's
    registration-time metadata query, answered here, or a stage other than execution)."""
    frame = _CallFrame.from_address(frame_address)
    if _answered_metadata(frame) or frame.stage != _STAGE_EXECUTE:
        return None
    return _buffers(frame.args), _buffers(frame.rets), _attributes(frame.attrs)


def error(frame_address: int, message: str) -> int | None:
    """An ``XLA_FFI_Error*`` for the call at ``frame_address``, which XLA raises in the caller as an
    XlaRuntimeError with ``message``."""
    return _error(_CallFrame.from_address(frame_address).api, message)


def frame_layout() -> dict[str, int]:
    """Byte offsets in XLA's call frame and buffer structs, for code that reads them without ctypes
    (:mod:`jax_impl._onednn_compiled`): the frame's ``extension_start``, ``stage``, ``args``, ``rets`` and
    ``attrs``; in an operand list ``size`` and ``values``; in the attributes ``attr_types`` and
    ``attr_values``; in a buffer ``buffer_dtype``, ``buffer_data``, ``buffer_rank`` and ``buffer_dims``;
    and ``execute``, the execution stage's number."""
    return {"extension_start": _CallFrame.extension_start.offset, "stage": _CallFrame.stage.offset,
            "args": _CallFrame.args.offset, "rets": _CallFrame.rets.offset, "attrs": _CallFrame.attrs.offset,
            "size": _Operands.size.offset, "values": _Operands.values.offset, "attr_types": _Attrs.types.offset,
            "attr_values": _Attrs.values.offset, "buffer_dtype": _Buffer.dtype.offset,
            "buffer_data": _Buffer.data.offset, "buffer_rank": _Buffer.rank.offset,
            "buffer_dims": _Buffer.dims.offset, "execute": _STAGE_EXECUTE}


def itemsizes() -> tuple[int, ...]:
    """Bytes per element of each ``XLA_FFI_DataType`` up to BF16 (0 where unknown), indexed by its code."""
    sizes = [0] * 17
    for code, size in {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 2, 8: 4, 9: 8, 10: 2, 11: 4, 12: 8, 16: 2}.items():
        sizes[code] = size
    return tuple(sizes)


def register_cpu_handler(name: str, kernel: Callable[[list[Buffer], list[Buffer], dict[str, object]], None]) -> None:
    """Register ``kernel(operands, results, attributes)`` as the CPU custom-call target ``name``.

    ``jax.ffi.ffi_call(name, ...)`` then calls it from a compiled
    computation; ``kernel`` writes each result through its ``data`` pointer.
    An exception inside ``kernel`` fails the computation with its message.
    Registering a name twice keeps the first handler.
    """
    def handle(frame_address: int) -> int | None:
        try:
            call = decode(frame_address)
            if call is not None:
                kernel(*call)
            return None
        except Exception as exc:  # noqa: BLE001 - every error goes back to XLA, which raises it in the caller
            return error(frame_address, f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    if name not in _KEEP_ALIVE:
        handler = HANDLER(handle)
        register_cpu_target(name, ctypes.cast(handler, _P).value, keep=handler)


def register_cpu_target(name: str, address: int, keep: object) -> None:
    """Register the C function at ``address`` (an FFI handler, ``XLA_FFI_Error* (*)(XLA_FFI_CallFrame*)``)
    as the CPU target ``name``, ``keep`` (what owns that function) held for the process's life. It answers
    XLA's metadata query itself (:func:`decode` does, for a handler that calls it). Registering a name
    twice keeps the first handler."""
    if name in _KEEP_ALIVE:
        return
    import jax

    if not _KEEP_ALIVE:
        _wait_at_exit()
    _KEEP_ALIVE[name] = keep
    function = ctypes.cast(ctypes.c_void_p(address), HANDLER)
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(function), platform="cpu")


def register_cpu_no_op(name: str) -> None:
    """Register a CPU custom-call target ``name`` that does nothing: its results must alias its operands.

    It reads none of its buffers, so a call costs only the callback itself (no operand is decoded).
    """
    def handle(frame_address: int) -> None:
        _answered_metadata(_CallFrame.from_address(frame_address))

    if name not in _KEEP_ALIVE:
        handler = HANDLER(handle)
        register_cpu_target(name, ctypes.cast(handler, _P).value, keep=handler)


def _answered_metadata(frame: _CallFrame) -> bool:
    """Answer XLA's registration-time metadata query (the FFI API version); whether ``frame`` was one."""
    if not frame.extension_start:
        return False
    extension = _ExtensionBase.from_address(frame.extension_start)
    if extension.type != _EXTENSION_METADATA:
        return False
    metadata = _MetadataExtension.from_address(frame.extension_start).metadata.contents
    metadata.api_version.struct_size = ctypes.sizeof(_ApiVersion)
    metadata.api_version.major, metadata.api_version.minor = _API_MAJOR, _API_MINOR
    metadata.traits = 0
    return True


def _finish_computations() -> None:
    """Wait (at most a minute) until XLA has computed every live array: a computation still running when
    the interpreter shuts down would call a Python handler that can no longer take the GIL, and the
    process would abort ("terminate called without an active exception") or hang."""
    try:
        import jax

        arrays = jax.extend.backend.get_backend("cpu").live_arrays()
    except Exception:  # noqa: BLE001 - no CPU backend (started), nothing of ours is running
        return
    # Polled with a deadline rather than blocked on: a computation waiting for a peer process that is gone
    # (a collective) would otherwise hold the process at exit for ever.
    deadline = time.monotonic() + _EXIT_WAIT_SECONDS
    pending = list(arrays)
    while pending and time.monotonic() < deadline:
        pending = [a for a in pending if not _ready(a)]
        if pending:
            time.sleep(0.001)


_EXIT_WAIT_SECONDS = 60.0


def _ready(array) -> bool:
    try:
        return array.is_ready()
    except Exception:  # noqa: BLE001 - a deleted or failed array has nothing left to wait for
        return True


def _wait_at_exit() -> None:
    # threading's exit hooks run before the interpreter joins its threads and executors (whose workers a
    # handler may still need) and long before it finalizes, when the oneDNN lanes (daemon threads) stop;
    # plain atexit hooks run after the former.
    import concurrent.futures.thread  # noqa: F401 - its exit hook (joining the executors) then runs after ours
    import threading

    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise AttributeError
        register(_finish_computations)
    except (AttributeError, RuntimeError):
        import atexit

        atexit.register(_finish_computations)
