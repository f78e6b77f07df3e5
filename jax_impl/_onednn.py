"""oneDNN's 2-D convolution and matmul (the library behind ``torch.backends.mkldnn``) through its C API and ctypes.

torch's CPU ``conv2d`` runs oneDNN (``aten/src/ATen/native/mkldnn/Conv.cpp``):
the primitive is created with ``format_tag::any`` for its source, weights and
destination, so oneDNN picks its blocked layouts (``nChw16c`` on AVX-512),
and the NCHW tensors are reordered into them and the result back. This
module does the same with oneDNN's C API (``dnnl.h``, ABI-stable across
oneDNN 3.x) on raw pointers: forward (``forward_training``), backward data
and backward weights, each a primitive cached per geometry with its
reorders. On this path the sums are oneDNN's: a forward on the same
oneDNN kernel gives torch's float32 result bit for bit.

The library comes from the ``onednn-cpu-gomp`` wheel (``lib/libdnnl.so.3``
under the environment's prefix); :func:`library` is ``None`` where it is
absent, cannot be loaded, or ``JAX_IMPL_MKLDNN=0``. oneDNN's OpenMP runtime
is the process's ``libgomp.so.1`` (torch's, when torch is loaded first).
Each call runs one oneDNN thread per core on a part of the batch or of
the channels (the calling thread runs one part, jax_impl's lanes the
others), and calls are serialised by a lock: XLA may run two custom
calls at once on its two threads, and each call already uses every core.
What a call runs is also written out as a program
(:mod:`jax_impl._onednn_program`), which :mod:`jax_impl._onednn_native`
runs without Python for every later call of the geometry.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import math
import os
import queue
import sys
import threading
from collections.abc import Callable, Sequence

import numpy as np

from jax_impl import _onednn_program

__all__ = ["Convolution", "LSTMLayer", "Matmul", "available", "call_lock", "call_lock_address", "convolution",
           "library", "lstm_layer", "matmul", "pinned", "workers"]

_P = ctypes.c_void_p
_PP = ctypes.POINTER(_P)
_DIMS = ctypes.c_int64 * 12  # dnnl_dims_t (DNNL_MAX_NDIMS)

# dnnl_types.h
_CPU = 1
_F32 = 3
_FORMAT_ANY, _FORMAT_ABCD = 1, 5
_FORWARD_TRAINING = 64
_CONVOLUTION_DIRECT = 1
_QUERY_SRC, _QUERY_DIFF_SRC, _QUERY_WEIGHTS, _QUERY_DIFF_WEIGHTS, _QUERY_DST, _QUERY_DIFF_DST = 129, 130, 131, 132, 133, 134
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_DIFF_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS = 1, 17, 33, 129, 145, 161
_ARG_FROM, _ARG_TO = 1, 17
_STREAM_DEFAULT = 1
_MEMORY_ALLOCATE = _P(ctypes.c_size_t(-1).value)  # DNNL_MEMORY_ALLOCATE
_QUERY_IMPL_INFO_STR = 8
_QUERY_SCRATCHPAD = 136
_ARG_SCRATCHPAD = 80
_SCRATCHPAD_USER = 1

_SIGNATURES = {
    "dnnl_engine_create": [_PP, ctypes.c_int, ctypes.c_size_t],
    "dnnl_stream_create": [_PP, _P, ctypes.c_uint],
    "dnnl_memory_desc_create_with_tag": [_PP, ctypes.c_int, _P, ctypes.c_int, ctypes.c_int],
    "dnnl_memory_desc_create_with_strides": [_PP, ctypes.c_int, _P, ctypes.c_int, _P],
    "dnnl_convolution_forward_primitive_desc_create": [_PP, _P, ctypes.c_int, ctypes.c_int] + [_P] * 9,
    "dnnl_convolution_backward_data_primitive_desc_create": [_PP, _P, ctypes.c_int] + [_P] * 9,
    "dnnl_convolution_backward_weights_primitive_desc_create": [_PP, _P, ctypes.c_int] + [_P] * 10,
    "dnnl_reorder_primitive_desc_create": [_PP, _P, _P, _P, _P, _P],
    "dnnl_matmul_primitive_desc_create": [_PP, _P, _P, _P, _P, _P, _P],
    "dnnl_lstm_forward_primitive_desc_create": [_PP, _P, ctypes.c_int, ctypes.c_int] + [_P] * 11 + [ctypes.c_uint, _P],
    "dnnl_lstm_backward_primitive_desc_create": [_PP, _P, ctypes.c_int, ctypes.c_int] + [_P] * 22
                                                + [ctypes.c_uint, _P, _P],
    "dnnl_primitive_desc_query_md": [_P, ctypes.c_int, ctypes.c_int],
    "dnnl_primitive_desc_query": [_P, ctypes.c_int, ctypes.c_int, _P],
    "dnnl_primitive_create": [_PP, _P],
    "dnnl_primitive_execute": [_P, _P, ctypes.c_int, _P],
    "dnnl_memory_create": [_PP, _P, _P, _P],
    "dnnl_memory_set_data_handle": [_P, _P],
    "dnnl_memory_get_data_handle": [_P, _PP],
    "dnnl_memory_desc_equal": [_P, _P],
    "dnnl_stream_wait": [_P],
    "dnnl_primitive_attr_create": [_PP],
    "dnnl_primitive_attr_set_scratchpad_mode": [_P, ctypes.c_int],
    "dnnl_memory_desc_get_size": [_P],
}


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _P)]


def _candidates() -> list[str]:
    """Where pip puts the wheel's ``libdnnl.so.3``: ``<prefix>/lib``, and the wheel's own file list."""
    paths = [os.path.join(sys.prefix, "lib", "libdnnl.so.3")]
    try:
        from importlib import metadata

        for dist in ("onednn-cpu-gomp", "onednn-cpu-iomp", "onednn-cpu-tbb"):
            try:
                files = metadata.files(dist) or []
            except metadata.PackageNotFoundError:
                continue
            paths += [str(f.locate()) for f in files if f.name == "libdnnl.so.3"]
    except Exception:  # noqa: BLE001 - a broken distribution's metadata only hides the library
        pass
    return paths + glob.glob(os.path.join(sys.prefix, "lib*", "libdnnl.so.3"))


@functools.cache
def library() -> ctypes.CDLL | None:
    """oneDNN's shared library, or ``None`` (not installed, not loadable, not Linux, or ``JAX_IMPL_MKLDNN=0``)."""
    if os.environ.get("JAX_IMPL_MKLDNN", "1") == "0" or not sys.platform.startswith("linux"):
        return None
    for path in _candidates():
        if not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name, argtypes in _SIGNATURES.items():
            getattr(lib, name).argtypes = argtypes
        lib.dnnl_primitive_desc_query_md.restype = _P
        lib.dnnl_memory_desc_equal.restype = ctypes.c_int
        lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        lib.omp_set_num_threads.argtypes = [ctypes.c_int]  # found through libdnnl's own libgomp
        lib.omp_get_max_threads.restype = ctypes.c_int
        return lib
    return None


# Calls of a few instructions (storing a pointer, the CPU stream's no-op wait, OpenMP's thread count).
_QUICK = ("dnnl_memory_set_data_handle", "dnnl_stream_wait", "omp_set_num_threads", "omp_get_max_threads")


@functools.cache
def _quick() -> ctypes.PyDLL:
    """:func:`library` again, its :data:`_QUICK` functions called with the GIL held.

    ctypes lets go of the GIL around every foreign call and takes it back after; with a conv's parts
    running on two threads, taking it back often waits for the other thread and a wake-up. Calls this
    short keep it; the reorders, which take longer, let go of it (docs/notes.md, "The GIL between
    oneDNN's calls").
    """
    lib = library()
    quick = ctypes.PyDLL(lib._name)
    for name in _QUICK:
        fn, source = getattr(quick, name), getattr(lib, name)
        fn.argtypes, fn.restype = source.argtypes, source.restype
    return quick


def available() -> bool:
    """Whether oneDNN can run here."""
    return library() is not None and _engine() is not None


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"oneDNN {what} failed (dnnl_status_t {status})")


def _dims(values: Sequence[int]) -> _DIMS:
    out = _DIMS()
    for i, v in enumerate(values):
        out[i] = int(v)
    return out


@functools.cache
def _engine() -> tuple[_P, _P] | None:
    lib = library()
    if lib is None:
        return None
    engine, stream = _P(), _P()
    if lib.dnnl_engine_create(ctypes.byref(engine), _CPU, 0) != 0:
        return None
    _check(lib.dnnl_stream_create(ctypes.byref(stream), engine, _STREAM_DEFAULT), "stream creation")
    return engine, stream


def _desc(shape: Sequence[int], tag: int) -> _P:
    md = _P()
    _check(library().dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(shape), _dims(shape), _F32, tag),
           "memory descriptor")
    return md


def _strided_desc(shape: Sequence[int], strides: Sequence[int]) -> _P:
    md = _P()
    _check(library().dnnl_memory_desc_create_with_strides(ctypes.byref(md), len(shape), _dims(shape), _F32,
                                                          _dims(strides)), "memory descriptor")
    return md


def _plain_desc(shape: Sequence[int]) -> _P:
    """A C-order (row-major) descriptor of any rank."""
    return _strided_desc(shape, [math.prod(shape[i + 1:]) for i in range(len(shape))])


def _nhwc_desc(shape: Sequence[int]) -> _P:
    """An NCHW-indexed descriptor of an array stored channels-last (C-order ``(N, H, W, C)``)."""
    n, c, h, w = shape
    return _strided_desc(shape, (h * w * c, 1, w * c, c))


def _out_size(x_shape, w_shape, stride, pads, dilation) -> tuple[int, int]:
    """The output's spatial size, as torch computes it (``pads`` as ``((top, bottom), (left, right))``)."""
    return tuple((x_shape[2 + a] + pads[a][0] + pads[a][1] - dilation[a] * (w_shape[2 + a] - 1) - 1) // stride[a] + 1
                 for a in range(2))


def _slice_desc(shape: Sequence[int], full: Sequence[int]) -> _P:
    """A descriptor of a ``shape`` block of a C-order array of shape ``full`` (a run of channels of it)."""
    if tuple(shape) == tuple(full):
        return _desc(shape, _FORMAT_ABCD)
    return _strided_desc(shape, [math.prod(full[i + 1:]) for i in range(len(full))])


def _memory(desc, handle=_MEMORY_ALLOCATE) -> _P:
    mem = _P()
    _check(library().dnnl_memory_create(ctypes.byref(mem), desc, _engine()[0], handle), "memory creation")
    return mem


@functools.cache
def _user_scratchpad() -> _P:
    """Primitive attributes with a scratchpad the caller provides.

    oneDNN's default scratchpad is one global buffer shared by every
    primitive, which two primitives running at once on two threads would
    both write: each primitive here gets its own (:class:`_Primitive`).
    """
    attr = _P()
    _check(library().dnnl_primitive_attr_create(ctypes.byref(attr)), "attribute creation")
    _check(library().dnnl_primitive_attr_set_scratchpad_mode(attr, _SCRATCHPAD_USER), "scratchpad mode")
    return attr


class _Primitive:
    """A primitive and its own scratchpad memory (none if it needs none)."""

    def __init__(self, pd) -> None:
        lib = library()
        self.handle = _P()
        _check(lib.dnnl_primitive_create(ctypes.byref(self.handle), pd), "primitive creation")
        md = lib.dnnl_primitive_desc_query_md(pd, _QUERY_SCRATCHPAD, 0)
        self.scratchpad = _memory(md) if md and lib.dnnl_memory_desc_get_size(md) > 0 else None

    def bound(self, args: Sequence[tuple[int, _P]]) -> _Bound:
        """Its execution on these memory objects, the argument list packed once: a call then changes
        only their data handles (:meth:`_Operand.bind`), and a step's Python work stays small."""
        if self.scratchpad is not None:
            args = [*args, (_ARG_SCRATCHPAD, self.scratchpad)]
        return _Bound(self, (_ExecArg * len(args))(*[_ExecArg(k, v) for k, v in args]))


class _Bound:
    """A primitive's execution on fixed memory objects: ``dnnl_primitive_execute`` with a packed argument
    list. :meth:`instruction` is the same call for a native program (:mod:`jax_impl._onednn_program`)."""

    __slots__ = ("_primitive", "_packed", "_execute", "_stream")

    def __init__(self, primitive: _Primitive, packed) -> None:
        self._primitive, self._packed = primitive, packed
        self._execute, self._stream = library().dnnl_primitive_execute, _engine()[1]

    def __call__(self) -> None:
        _check(self._execute(self._primitive.handle, self._stream, len(self._packed), self._packed), "execution")

    def instruction(self) -> list[int]:
        """``[EXECUTE, primitive, stream, count, arguments]`` (the addresses of oneDNN's objects)."""
        return [_onednn_program.EXECUTE, self._primitive.handle.value, _engine()[1].value, len(self._packed),
                ctypes.addressof(self._packed)]


class _Operand:
    """A plain (C-order, 4-D) array at a caller's pointer, seen by a primitive in the layout it chose.

    If the primitive's layout is not the plain one, a buffer of that layout
    and the reorder between them are made once; ``to_primitive`` says which
    way the data goes (an input is reordered in, a result out).
    """

    def __init__(self, shape: Sequence[int], chosen, to_primitive: bool, plain=None) -> None:
        lib = library()
        plain = _desc(shape, _FORMAT_ABCD) if plain is None else plain
        self.user = _memory(plain, _P(0))
        self.inner = self.user
        # The reorder, packed once, into the primitive's layout (run by bind) or out of it (run by finish).
        self._reorder_in = self._reorder_out = None
        if not lib.dnnl_memory_desc_equal(plain, chosen):
            self.inner = _memory(chosen)
            src, dst = (plain, chosen) if to_primitive else (chosen, plain)
            pd = _P()
            engine = _engine()[0]
            _check(lib.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src, engine, dst, engine,
                                                          _user_scratchpad()), "reorder")
            ends = (self.user, self.inner) if to_primitive else (self.inner, self.user)
            reorder = _Primitive(pd).bound([(_ARG_FROM, ends[0]), (_ARG_TO, ends[1])])
            if to_primitive:
                self._reorder_in = reorder
            else:
                self._reorder_out = reorder

    def bind(self, address: int) -> None:
        _quick().dnnl_memory_set_data_handle(self.user, _P(address))
        if self._reorder_in is not None:
            self._reorder_in()

    def finish(self) -> None:
        if self._reorder_out is not None:
            self._reorder_out()

    def bind_instructions(self, buffer: int, offset: int) -> list[int]:
        """:meth:`bind` as a native program's instructions, the address the call's buffer ``buffer`` plus
        ``offset`` bytes (or ``offset`` itself, for ``buffer`` :data:`jax_impl._onednn_program.ABSOLUTE`)."""
        words = [_onednn_program.SET, self.user.value, buffer, offset]
        return words + (self._reorder_in.instruction() if self._reorder_in is not None else [])

    def finish_instructions(self) -> list[int]:
        return self._reorder_out.instruction() if self._reorder_out is not None else []


def _bind_steps(steps: dict) -> dict:
    """``{step: (primitive, argument kinds, operands)}`` -> ``{step: (its execution on the operands' memory
    objects, packed once, operands)}``."""
    return {step: (prim.bound([(arg, op.inner) for arg, op in zip(args, ops)]), ops)
            for step, (prim, args, ops) in steps.items()}


class _Kernels:
    """The primitives of one geometry (and their reorders), for one worker: not thread-safe.

    ``channels_last=False``: forward, backward data and backward weights on NCHW arrays, each in the
    layouts oneDNN chooses (``format_tag::any``, as torch's ``mkldnn_convolution``). ``channels_last=True``:
    the forward only, its input and result stored NHWC and given to oneDNN as such (its ``nxc`` kernels
    read and write them in place, no reorder), the weight OIHW.
    """

    def __init__(self, x_shape, w_shape, stride, pads, dilation, channels_last: bool = False,
                 full: tuple | None = None) -> None:
        lib, (engine, _) = library(), _engine()
        self.x_shape, self.w_shape = tuple(x_shape), tuple(w_shape)
        self.y_shape = (x_shape[0], w_shape[0], *_out_size(x_shape, w_shape, stride, pads, dilation))
        # The plain arrays these operands are blocks of (a run of channels of a larger array), if any.
        x_full, w_full, y_full = full or (self.x_shape, self.w_shape, self.y_shape)
        x_plain, w_plain, y_plain = (_slice_desc(self.x_shape, x_full), _slice_desc(self.w_shape, w_full),
                                     _slice_desc(self.y_shape, y_full))
        w_any = _desc(self.w_shape, _FORMAT_ANY)
        if channels_last:
            x_any, y_any = _nhwc_desc(self.x_shape), _nhwc_desc(self.y_shape)
        else:
            x_any, y_any = _desc(self.x_shape, _FORMAT_ANY), _desc(self.y_shape, _FORMAT_ANY)
        # oneDNN's dilation counts the gaps (torch's dilation - 1).
        geometry = [_dims(stride), _dims([d - 1 for d in dilation]), _dims([p[0] for p in pads]),
                    _dims([p[1] for p in pads])]
        fwd = _P()
        _check(lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(fwd), engine, _FORWARD_TRAINING, _CONVOLUTION_DIRECT, x_any, w_any, None, y_any, *geometry,
            _user_scratchpad()), "convolution forward")
        md = lambda pd, what: lib.dnnl_primitive_desc_query_md(pd, what, 0)  # noqa: E731
        if channels_last:
            self.pds = (fwd,)
            self._steps = _bind_steps({
                "forward": (_Primitive(fwd), (_ARG_SRC, _ARG_WEIGHTS, _ARG_DST),
                            (_Operand(self.x_shape, md(fwd, _QUERY_SRC), True, plain=x_any),
                             _Operand(self.w_shape, md(fwd, _QUERY_WEIGHTS), True, plain=w_plain),
                             _Operand(self.y_shape, md(fwd, _QUERY_DST), False, plain=y_any))),
            })
            return
        bwd_data, bwd_weights = _P(), _P()
        _check(lib.dnnl_convolution_backward_data_primitive_desc_create(
            ctypes.byref(bwd_data), engine, _CONVOLUTION_DIRECT, x_any, w_any, y_any, *geometry, fwd,
            _user_scratchpad()), "convolution backward data")
        _check(lib.dnnl_convolution_backward_weights_primitive_desc_create(
            ctypes.byref(bwd_weights), engine, _CONVOLUTION_DIRECT, x_any, w_any, None, y_any, *geometry, fwd,
            _user_scratchpad()), "convolution backward weights")
        self.pds = (fwd, bwd_data, bwd_weights)
        self._steps = _bind_steps({
            "forward": (_Primitive(fwd), (_ARG_SRC, _ARG_WEIGHTS, _ARG_DST),
                        (_Operand(self.x_shape, md(fwd, _QUERY_SRC), True, plain=x_plain),
                         _Operand(self.w_shape, md(fwd, _QUERY_WEIGHTS), True, plain=w_plain),
                         _Operand(self.y_shape, md(fwd, _QUERY_DST), False, plain=y_plain))),
            "input_grad": (_Primitive(bwd_data), (_ARG_DIFF_DST, _ARG_WEIGHTS, _ARG_DIFF_SRC),
                           (_Operand(self.y_shape, md(bwd_data, _QUERY_DIFF_DST), True, plain=y_plain),
                            _Operand(self.w_shape, md(bwd_data, _QUERY_WEIGHTS), True, plain=w_plain),
                            _Operand(self.x_shape, md(bwd_data, _QUERY_DIFF_SRC), False, plain=x_plain))),
            "weight_grad": (_Primitive(bwd_weights), (_ARG_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS),
                            (_Operand(self.x_shape, md(bwd_weights, _QUERY_SRC), True, plain=x_plain),
                             _Operand(self.y_shape, md(bwd_weights, _QUERY_DIFF_DST), True, plain=y_plain),
                             _Operand(self.w_shape, md(bwd_weights, _QUERY_DIFF_WEIGHTS), False, plain=w_plain))),
        })

    def run(self, step: str, a: int, b: int, out: int) -> None:
        execute, (op_a, op_b, op_out) = self._steps[step]
        op_a.bind(a)
        op_b.bind(b)
        op_out.bind(out)
        execute()
        op_out.finish()
        _quick().dnnl_stream_wait(_engine()[1])

    def instructions(self, step: str, a: tuple[int, int], b: tuple[int, int], out: tuple[int, int]) -> list[int]:
        """:meth:`run` as a native program's stream, each operand a ``(buffer, byte offset)`` of the call."""
        bound, (op_a, op_b, op_out) = self._steps[step]
        return [*op_a.bind_instructions(*a), *op_b.bind_instructions(*b), *op_out.bind_instructions(*out),
                *bound.instruction(), *op_out.finish_instructions(), _onednn_program.WAIT, _engine()[1].value]


def workers() -> int:
    """Threads a oneDNN call runs on: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _single_threaded() -> None:
    # Each worker runs oneDNN on one thread: no OpenMP team is ever started, so the process's libgomp
    # (torch's, when torch is loaded) keeps only its own threads. More OpenMP threads than cores make
    # libgomp throttle every team's spin-wait, which slows torch's own parallel regions by a fifth.
    library().omp_set_num_threads(1)


def pinned() -> bool:
    """Whether each oneDNN lane is kept on its core (``JAX_IMPL_ONEDNN_PIN`` is not ``0``)."""
    return os.environ.get("JAX_IMPL_ONEDNN_PIN", "1") != "0"


def _start_lane(cpu: int) -> None:
    _single_threaded()
    if pinned():
        # One lane per core, each kept on its core: a conv's parts then start at once (a woken thread is
        # not queued on its waker's core), and part i of every conv meets on one core the data that part i
        # of the op before it left in that core's cache.
        try:
            os.sched_setaffinity(0, {cpu})  # 0: the calling thread only
        except OSError:  # a sandbox that forbids it: the lane floats
            pass


class _Job:
    """A part handed to a lane: ``fn(*args)``, and a lock its caller blocks on until the lane has run it."""

    __slots__ = ("_fn", "_args", "_done", "_error", "_value")

    def __init__(self, fn: Callable, args: tuple) -> None:
        self._fn, self._args, self._error, self._value = fn, args, None, None
        self._done = threading.Lock()
        self._done.acquire()

    def run(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller, by result()
            self._error = exc
        finally:
            self._done.release()

    def wait(self) -> None:
        """Block until the lane has run the part."""
        with self._done:
            pass

    def result(self):
        """The part's return value, or its exception raised here, once it has run."""
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


class _Lane:
    """A thread that runs the parts handed to it, one at a time, kept on one core (:func:`_start_lane`).

    Lighter than a one-thread ``ThreadPoolExecutor`` (a queue and a lock per part): every conv hands
    parts over, and on a step of small convs the Python of the hand-over shows. The thread is a daemon:
    it holds nothing to flush, and ``_xla_ffi`` waits for running computations before the interpreter
    shuts down.
    """

    def __init__(self, index: int, cpu: int) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, args=(cpu,), name=f"jax_impl-onednn-{index}", daemon=True).start()

    def _serve(self, cpu: int) -> None:
        _start_lane(cpu)
        while True:
            self._jobs.get().run()

    def submit(self, fn: Callable, *args) -> _Job:
        job = _Job(fn, args)
        self._jobs.put(job)
        return job


_LANES: list = [None, [], []]  # (pid, lanes, their CPUs): a forked child starts its own threads


def _lanes() -> list[_Lane]:
    """One lane per core this process may use; part ``i`` of every call runs on lane ``i``."""
    if _LANES[0] != os.getpid():
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cpus = list(range(workers()))
        _LANES[:] = [os.getpid(), [_Lane(i, cpu) for i, cpu in enumerate(cpus)], cpus]
    return _LANES[1]


def _on_lane(i: int, fn: Callable, *args) -> _Job:
    lanes = _lanes()
    return lanes[i % len(lanes)].submit(fn, *args)


@functools.cache
def _sched_getcpu() -> Callable[[], int] | None:
    try:
        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (AttributeError, OSError):  # pragma: no cover - not glibc
        return None
    getcpu.restype, getcpu.argtypes = ctypes.c_int, []
    return getcpu


def _own_part(parts: int) -> int:
    """The part the calling thread runs itself: the one whose lane is kept on the core it runs on now.

    That core is then busy with the caller's part, and the other cores' lanes wake for the others; a
    part handed to the caller's own core would wait for the caller to sleep, and every hand-over costs a
    wake-up. A caller on a core without a lane of this call (or where that cannot be told) runs part 0.
    """
    getcpu = _sched_getcpu()
    cpus = _LANES[2] if _LANES[0] == os.getpid() else []
    cpu = getcpu() if getcpu is not None else -1
    lane = cpus.index(cpu) if cpu in cpus else 0
    return lane if lane < parts else 0


def _run_here(fn: Callable, *args) -> None:
    """``fn(*args)`` on the calling thread with oneDNN single-threaded, the thread's OpenMP setting kept.

    The caller may be a thread that runs torch too (a user's main thread): its ``omp_set_num_threads`` is
    put back, so torch's next parallel region there still starts its whole team.
    """
    lib = _quick()
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(1)
    try:
        fn(*args)
    finally:
        lib.omp_set_num_threads(before)


class _ProcessLock:
    """A lock that compiled code can take too: a POSIX semaphore (``sem_t``) in memory this object owns.

    Taken from Python, the GIL is let go while waiting (a ctypes call); :mod:`jax_impl._onednn_native`'s
    handler takes it at :attr:`address` without the GIL. Off Linux (where oneDNN is not loaded and nothing
    compiled runs) it is a plain ``threading.Lock`` and :attr:`address` is ``None``.
    """

    def __init__(self) -> None:
        self.address: int | None = None
        self._lock = threading.Lock()
        if not sys.platform.startswith("linux"):
            return
        libc = ctypes.CDLL(None, use_errno=True)
        self._memory = np.zeros(8, np.int64)  # a sem_t is 32 bytes on x86-64 Linux
        self._wait, self._post = libc.sem_wait, libc.sem_post
        for fn in (libc.sem_init, self._wait, self._post):
            fn.restype = ctypes.c_int
        libc.sem_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint]
        self._wait.argtypes = self._post.argtypes = [ctypes.c_void_p]
        if libc.sem_init(self._memory.ctypes.data, 0, 1) == 0:
            self.address = self._memory.ctypes.data

    def __enter__(self) -> None:
        if self.address is None:
            self._lock.acquire()
            return
        while self._wait(self.address) != 0:  # EINTR: a signal arrived while waiting
            pass

    def __exit__(self, *exc) -> None:
        if self.address is None:
            self._lock.release()
        else:
            self._post(self.address)


# Every oneDNN call of the process: XLA may run two custom calls at once on its two threads, and each
# call already uses every core (one part per lane).
_CALLS = _ProcessLock()


def call_lock() -> _ProcessLock:
    """The lock every oneDNN call of this process holds while it runs (a context manager)."""
    return _CALLS


def call_lock_address() -> int | None:
    """The address of the ``sem_t`` every oneDNN call of this process holds while it runs (``None`` off
    Linux, where that lock is Python's)."""
    return _CALLS.address


def _run_parts(calls, then: Callable[[], None] | None = None) -> None:
    """Run ``calls`` (``(fn, *args)``, one per part), part ``i`` on lane ``i``, under :data:`_CALLS`.

    The calling XLA thread runs the part of the core it is on (:func:`_own_part`) and sleeps for the rest:
    one hand-over, and one wake-up, fewer per call than all parts on lanes. ``then`` reads what the parts
    wrote into the caller's own buffers, so it runs under the lock too: a second caller (another device of
    this process) would overwrite them.
    """
    with _CALLS:
        own = _own_part(len(calls))
        jobs = [_on_lane(i, *call) for i, call in enumerate(calls) if i != own]
        try:
            _run_here(*calls[own])
        finally:
            for job in jobs:
                job.wait()  # every lane done before the lock is let go, even on an error
        for job in jobs:
            job.result()
        if then is not None:
            then()


# oneDNN's AVX-512 kernels block channels by 16: a channel split keeps every part a multiple of it.
_CHANNEL_BLOCK = 16


def _bounds(total: int, parts: int, block: int = 1) -> list[tuple[int, int]]:
    """``(start, size)`` of ``parts`` contiguous runs of ``total`` items, each a multiple of ``block``."""
    units = total // block
    cuts = [units * i // parts * block for i in range(parts)] + [total]
    return [(lo, hi - lo) for lo, hi in zip(cuts[:-1], cuts[1:])]


# A batch with at most this many output pixels per output channel is cut by channels (ResNet's last two
# stages at 224x224 and batch 4).
_FEW_PIXELS_PER_CHANNEL = 4


def splits_channels(batch_pixels: int, c_in: int, c_out: int) -> bool:
    """Whether :class:`Convolution` cuts a conv by channels rather than by samples: more than one core, at
    most 4 output pixels per output channel in the batch (``N*Ho*Wo <= 4*C_out``), and input and output
    channels that cut into runs of 16 per core.

    Cut by samples, such a conv gives each core whole samples: each reorders the whole weight (at 512
    channels that costs as much as its sums) and the weight gradient adds per-core partial sums. Cut by
    channels, each core reorders its share of the weight and computes whole sums over the batch, as
    torch's one OpenMP team does, and the weight gradient is torch's bit for bit.
    """
    return splits_input_channels(batch_pixels, c_in, c_out) and c_out % (_CHANNEL_BLOCK * workers()) == 0


def splits_input_channels(batch_pixels: int, c_in: int, c_out: int) -> bool:
    """Whether :class:`Convolution` cuts the input gradient by input channels: :func:`splits_channels`'
    conditions less the divisibility of the output channels, which the input gradient sums over whole.

    A transposed conv's forward is this gradient: the DCGAN generator's first layer (100 latent
    channels to 256 at 4x4, batch 32) cut by samples has each core reorder the whole 1.6 MB weight,
    longer than the sums themselves.
    """
    parts = workers()
    return parts > 1 and batch_pixels <= _FEW_PIXELS_PER_CHANNEL * c_out and c_in % (_CHANNEL_BLOCK * parts) == 0


class Convolution:
    """One float32 2-D convolution geometry: NCHW input ``x_shape``, OIHW weight ``w_shape``, no bias.

    :meth:`forward`, :meth:`input_grad` and :meth:`weight_grad` read and
    write C-order float32 arrays at the given addresses, as torch's
    ``mkldnn_convolution``, ``mkldnn_convolution_backward_input`` and
    ``..._backward_weights`` compute them. The work is cut into one part per
    core, each run by oneDNN on one thread: part ``i`` on lane ``i``, kept
    on core ``i`` (``JAX_IMPL_ONEDNN_PIN=0`` lets the lanes float), except
    the part of the core the caller runs on, which the caller runs itself:

    - by samples (contiguous chunks of the batch): per sample, the forward
      and the input gradient are the same sums as one call over the batch;
      the weight gradient adds the chunks' partial sums in chunk order;
    - by channels, for a batch with few output pixels per output channel
      (:func:`splits_channels`): the forward and the weight gradient by
      output channels, the input gradient by input channels; each part is
      the whole sum for its channels, so nothing is added afterwards. The
      input gradient alone is cut by input channels also where only the
      output channels do not cut into runs of 16 per core
      (:func:`splits_input_channels`; ``input_split`` says which).

    ``channels_last=True``: the forward only, on an input and a result
    stored NHWC (``x_shape`` and the result shape still name the NCHW
    dimensions), which oneDNN reads and writes in place.
    """

    _lock = _CALLS

    def __init__(self, x_shape, w_shape, stride, pads, dilation, channels_last: bool = False) -> None:
        self.x_shape, self.w_shape = tuple(x_shape), tuple(w_shape)
        n, c_in = self.x_shape[:2]
        c_out, taps = self.w_shape[0], math.prod(self.w_shape[2:])
        geometry = (stride, pads, dilation, channels_last)

        def kernels(lane, x_shape, w_shape, full=None):
            # Made on its lane: creating a primitive may run an OpenMP region on the creating thread.
            return _on_lane(lane, _Kernels, x_shape, w_shape, *geometry, full).result()

        self.y_shape = (n, c_out, *_out_size(self.x_shape, self.w_shape, stride, pads, dilation))
        x_pixels, y_pixels = math.prod(self.x_shape[2:]), math.prod(self.y_shape[2:])
        by_channels = not channels_last and splits_channels(n * y_pixels, c_in, c_out)
        self.split = "channels" if by_channels else "batch"
        inputs_by_channels = not channels_last and splits_input_channels(n * y_pixels, c_in, c_out)
        self.input_split = "channels" if inputs_by_channels else "batch"
        full = (self.x_shape, self.w_shape, self.y_shape)
        ins = _bounds(c_in, workers(), _CHANNEL_BLOCK)

        def input_grad_by_channels():
            by_in = [kernels(i, (n, size, *self.x_shape[2:]), (c_out, size, *self.w_shape[2:]), full)
                     for i, (_, size) in enumerate(ins)]
            return [(k, 0, 4 * lo * taps, 4 * lo * x_pixels) for k, (lo, _) in zip(by_in, ins)]

        self._partials = []
        # Per step: (kernels, byte offsets of the two operands and of the result) of each part.
        if self.split == "batch":
            parts = _bounds(n, min(workers(), n))
            ks = [kernels(i, (size, *self.x_shape[1:]), self.w_shape) for i, (_, size) in enumerate(parts)]
            xs, ys = 4 * c_in * x_pixels, 4 * c_out * y_pixels  # bytes per sample
            self._partials = [np.empty(self.w_shape, np.float32) for _ in parts] if len(parts) > 1 else []
            self._plans = {
                "forward": [(k, lo * xs, 0, lo * ys) for k, (lo, _) in zip(ks, parts)],
                "input_grad": [(k, lo * ys, 0, lo * xs) for k, (lo, _) in zip(ks, parts)],
                "weight_grad": [(k, lo * xs, lo * ys, 0) for k, (lo, _) in zip(ks, parts)],  # into the partials
            }
            if inputs_by_channels:
                self._plans["input_grad"] = input_grad_by_channels()
        else:
            outs = _bounds(c_out, workers(), _CHANNEL_BLOCK)
            by_out = [kernels(i, self.x_shape, (size, *self.w_shape[1:]), full) for i, (_, size) in enumerate(outs)]
            self._plans = {
                "forward": [(k, 0, 4 * lo * c_in * taps, 4 * lo * y_pixels) for k, (lo, _) in zip(by_out, outs)],
                "input_grad": input_grad_by_channels(),
                "weight_grad": [(k, 0, 4 * lo * y_pixels, 4 * lo * c_in * taps) for k, (lo, _) in zip(by_out, outs)],
            }
        self._kernels = [plan[0] for plan in self._plans["forward"]]

    def implementations(self) -> tuple[str, str, str]:
        """oneDNN's names of the kernels it chose (``jit:avx512_core``, ``gemm:jit``, ...)."""
        names = []
        for pd in self._kernels[0].pds:
            s = ctypes.c_char_p()
            library().dnnl_primitive_desc_query(pd, _QUERY_IMPL_INFO_STR, 0, ctypes.byref(s))
            names.append(s.value.decode())
        return tuple(names)

    def _parallel(self, calls, then: Callable[[], None] | None = None) -> None:
        _run_parts(calls, then)

    def _run(self, step: str, a: int, b: int, out: int) -> None:
        self._parallel([(k.run, step, a + da, b + db, out + do) for k, da, db, do in self._plans[step]])

    def program(self, step: str) -> _onednn_program.Program:
        """The native program of ``step`` (``forward``, ``input_grad``, ``weight_grad``) for a call whose
        operands are buffers 0 and 1 and whose result is buffer 2, as :meth:`forward` and the others run it."""
        prog = _onednn_program
        plans = self._plans[step]
        if step == "weight_grad" and self._partials:
            parts = [k.instructions(step, (0, da), (1, db), (prog.ABSOLUTE, p.ctypes.data))
                     for (k, da, db, _), p in zip(plans, self._partials)]
            count = math.prod(self.w_shape)
            after = [prog.COPY, 2, 0, self._partials[0].ctypes.data, count]
            for p in self._partials[1:]:
                after += [prog.ADD, 2, 0, p.ctypes.data, count]
            return prog.Program(parts, after, keep=self)
        return prog.Program([k.instructions(step, (0, da), (1, db), (2, do)) for k, da, db, do in plans], keep=self)

    def forward(self, x: int, w: int, y: int) -> None:
        """``y = conv(x, w)``."""
        self._run("forward", x, w, y)

    def input_grad(self, g: int, w: int, dx: int) -> None:
        """``dx``: the transposed convolution of the output gradient ``g`` with ``w``."""
        self._run("input_grad", g, w, dx)

    def weight_grad(self, x: int, g: int, dw: int) -> None:
        """``dw``: the correlation of the input ``x`` with the output gradient ``g``, summed over the batch."""
        if not self._partials:
            self._run("weight_grad", x, g, dw)
            return

        def add_partials() -> None:
            out = np.ctypeslib.as_array((ctypes.c_float * math.prod(self.w_shape)).from_address(dw))
            np.copyto(out, self._partials[0].reshape(-1))
            for partial in self._partials[1:]:
                out += partial.reshape(-1)

        self._parallel([(k.run, "weight_grad", x + da, g + db, p.ctypes.data)
                        for (k, da, db, _), p in zip(self._plans["weight_grad"], self._partials)], then=add_partials)


@functools.lru_cache(maxsize=256)
def convolution(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, int],
                pads: tuple[tuple[int, int], tuple[int, int]], dilation: tuple[int, int],
                channels_last: bool = False) -> Convolution:
    """The cached :class:`Convolution` of a geometry (its primitives are created once)."""
    return Convolution(x_shape, w_shape, stride, pads, dilation, channels_last)


class _MatmulKernel:
    """One oneDNN matmul primitive, ``C = A @ B (+ bias)`` on 2-D float32 views given by their strides, for
    one lane; the bias is a row of ``n`` values added to every row of the sums."""

    def __init__(self, m: int, k: int, n: int, a_strides, b_strides, c_strides, bias: bool = False) -> None:
        lib, (engine, _) = library(), _engine()
        descs = [_strided_desc((m, k), a_strides), _strided_desc((k, n), b_strides), _strided_desc((m, n), c_strides)]
        bias_desc = _strided_desc((1, n), (n, 1)) if bias else None
        self.pd = _P()
        _check(lib.dnnl_matmul_primitive_desc_create(ctypes.byref(self.pd), engine, descs[0], descs[1], bias_desc,
                                                     descs[2], _user_scratchpad()), "matmul")
        args = [_ARG_SRC, _ARG_WEIGHTS, _ARG_DST]
        if bias:
            descs.append(bias_desc)
            args.append(_ARG_BIAS)
        self._memories = [_memory(d, _P(0)) for d in descs]
        self._execute = _Primitive(self.pd).bound(list(zip(args, self._memories)))

    def instructions(self, places: Sequence[tuple[int, int]]) -> list[int]:
        """:meth:`run` as a native program's stream, ``places`` the ``(buffer, byte offset)`` of A, B, C
        (and the bias)."""
        words = []
        for memory, (buffer, offset) in zip(self._memories, places, strict=True):
            words += [_onednn_program.SET, memory.value, buffer, offset]
        return [*words, *self._execute.instruction(), _onednn_program.WAIT, _engine()[1].value]

    def run(self, a: int, b: int, c: int, bias: int | None = None) -> None:
        quick = _quick()
        addresses = (a, b, c) if bias is None else (a, b, c, bias)
        for memory, address in zip(self._memories, addresses):
            quick.dnnl_memory_set_data_handle(memory, _P(address))
        self._execute()
        quick.dnnl_stream_wait(_engine()[1])


# oneDNN's AVX-512 matmul kernels block the output's columns by 16: a column split keeps parts a multiple of it.
_COLUMN_BLOCK = 16


class Matmul:
    """``C = op(A) @ op(B)`` for C-order float32 arrays, as torch's CPU ``mm`` computes it.

    ``op(A)`` is ``(M, K)``: ``A`` stored ``(M, K)``, or ``(K, M)`` with ``transpose_a``; ``op(B)`` is
    ``(K, N)``: ``B`` stored ``(K, N)``, or ``(N, K)`` with ``transpose_b``; ``C`` is ``(M, N)``. The
    transposes are strides of oneDNN's memory descriptors (no copy). The work is cut into one part per
    core along the longer of ``C``'s two sides (rows, or columns in runs of 16), each part a matmul
    with whole sums over ``K`` run by oneDNN on one thread (the lanes of :class:`Convolution`).
    """

    def __init__(self, m: int, k: int, n: int, transpose_a: bool, transpose_b: bool, bias: bool = False) -> None:
        a_strides = (1, m) if transpose_a else (k, 1)
        b_strides = (1, k) if transpose_b else (n, 1)
        a_row, b_column = 4 * (1 if transpose_a else k), 4 * (k if transpose_b else 1)  # bytes per step
        if m >= n:
            parts = _bounds(m, max(1, min(workers(), m)))
            plan = [(size, n, lo * a_row, 0, 4 * lo * n, 0) for lo, size in parts]  # rows of op(A) and C
        else:
            parts = _bounds(n, max(1, min(workers(), n // _COLUMN_BLOCK)), _COLUMN_BLOCK)
            plan = [(m, size, 0, lo * b_column, 4 * lo, 4 * lo) for lo, size in parts]  # columns of op(B), C, bias
        self._bias = bias
        self._plan = []
        for i, (rows, cols, da, db, dc, dbias) in enumerate(plan):
            kernel = _on_lane(i, _MatmulKernel, rows, k, cols, a_strides, b_strides, (n, 1), bias).result()
            self._plan.append((kernel, da, db, dc, dbias))

    def implementation(self) -> str:
        """oneDNN's name of the kernel it chose (``brg:avx512_core``, ...)."""
        s = ctypes.c_char_p()
        library().dnnl_primitive_desc_query(self._plan[0][0].pd, _QUERY_IMPL_INFO_STR, 0, ctypes.byref(s))
        return s.value.decode()

    def program(self) -> _onednn_program.Program:
        """The native program of a call whose operands are A, B (and the bias), buffers 0, 1 (and 2), and
        whose result C is the next buffer, as :meth:`__call__` runs it."""
        c = 3 if self._bias else 2
        return _onednn_program.Program(
            [kernel.instructions([(0, da), (1, db), (c, dc), *([(2, dbias)] if self._bias else [])])
             for kernel, da, db, dc, dbias in self._plan], keep=self)

    def __call__(self, a: int, b: int, c: int, bias: int | None = None) -> None:
        """Write ``op(A) @ op(B)`` (plus the ``n`` values at ``bias`` on every row, for a :class:`Matmul`
        made with ``bias``) at address ``c`` from the arrays at ``a`` and ``b``."""
        if (bias is not None) != self._bias:
            raise ValueError("a bias address is given exactly when the Matmul was made with bias=True")
        _run_parts([(kernel.run, a + da, b + db, c + dc, None if bias is None else bias + dbias)
                    for kernel, da, db, dc, dbias in self._plan])


@functools.lru_cache(maxsize=512)
def matmul(m: int, k: int, n: int, transpose_a: bool, transpose_b: bool, bias: bool = False) -> Matmul:
    """The cached :class:`Matmul` of a shape (its primitives are created once)."""
    return Matmul(m, k, n, transpose_a, transpose_b, bias)


# dnnl_types.h: RNN directions, the workspace query and the RNN execution arguments.
_LEFT2RIGHT, _RIGHT2LEFT = 1, 2
_FORWARD_INFERENCE, _BACKWARD = 96, 128
_QUERY_WORKSPACE, _QUERY_EXEC_ARG = 135, 255
_ARG_SRC_ITER, _ARG_SRC_ITER_C, _ARG_DST_ITER, _ARG_DST_ITER_C = 2, 3, 18, 19
_ARG_WEIGHTS_ITER, _ARG_BIAS, _ARG_WORKSPACE = 34, 41, 64
_ARG_DIFF_SRC_ITER, _ARG_DIFF_SRC_ITER_C, _ARG_DIFF_DST_ITER, _ARG_DIFF_DST_ITER_C = 130, 131, 146, 147
_ARG_DIFF_WEIGHTS_ITER, _ARG_DIFF_BIAS = 162, 169


def _gates_desc(inputs: int, hidden: int) -> _P:
    """torch's ``(4H, C)`` LSTM weight as oneDNN's ``ldigo`` dims stored ``ldgoi`` (torch's layout)."""
    g = 4 * hidden * inputs
    return _strided_desc((1, 1, inputs, 4, hidden), (g, g, 1, hidden * inputs, inputs))


class _LSTMKernels:
    """oneDNN's LSTM forward (training or inference) and backward for one dense ``(T, N, C)`` problem, with
    buffers of its own, for one lane: not thread-safe."""

    def __init__(self, t: int, n: int, c: int, hidden: int, reverse: bool, train: bool) -> None:
        lib, (engine, _) = library(), _engine()
        self.shapes = {"w_ih": (4 * hidden, c), "w_hh": (4 * hidden, hidden)}
        direction = _RIGHT2LEFT if reverse else _LEFT2RIGHT
        x, y = _plain_desc((t, n, c)), _plain_desc((t, n, hidden))
        state = _plain_desc((1, 1, n, hidden))
        w_ih, w_hh, bias = _gates_desc(c, hidden), _gates_desc(hidden, hidden), _plain_desc((1, 1, 4, hidden))
        any_ih, any_hh = _desc((1, 1, c, 4, hidden), _FORMAT_ANY), _desc((1, 1, hidden, 4, hidden), _FORMAT_ANY)
        fwd = _P()
        _check(lib.dnnl_lstm_forward_primitive_desc_create(
            ctypes.byref(fwd), engine, _FORWARD_TRAINING if train else _FORWARD_INFERENCE, direction, x, state, state,
            any_ih, any_hh, None, None, bias, y, state, state, 0, _user_scratchpad()), "LSTM forward")
        md = lambda pd, arg: lib.dnnl_primitive_desc_query_md(pd, _QUERY_EXEC_ARG, arg)  # noqa: E731
        self.workspace_bytes = 0
        if train:
            ws = lib.dnnl_primitive_desc_query_md(fwd, _QUERY_WORKSPACE, 0)
            self.workspace_bytes = int(lib.dnnl_memory_desc_get_size(ws)) if ws else 0
        # The arrays the steps read and write, C-order numpy buffers (a part of the caller's batch); the
        # weights are read where the caller keeps them (the reorders into oneDNN's layout read them there).
        self.arrays = {name: np.empty(shape, np.float32) for name, shape in (
            ("x", (t, n, c)), ("h0", (1, 1, n, hidden)), ("c0", (1, 1, n, hidden)), ("y", (t, n, hidden)),
            ("hT", (1, 1, n, hidden)), ("cT", (1, 1, n, hidden)), ("bias", (4 * hidden,)))}
        a = self.arrays

        def plain(desc, array):
            return _memory(desc, _P(array.ctypes.data))

        self._fwd_ih = _Operand(self.shapes["w_ih"], md(fwd, _ARG_WEIGHTS), True, plain=w_ih)
        self._fwd_hh = _Operand(self.shapes["w_hh"], md(fwd, 34), True, plain=w_hh)
        fwd_args = [(_ARG_SRC, plain(x, a["x"])), (_ARG_SRC_ITER, plain(state, a["h0"])),
                    (_ARG_SRC_ITER_C, plain(state, a["c0"])), (_ARG_WEIGHTS, self._fwd_ih.inner),
                    (_ARG_WEIGHTS_ITER, self._fwd_hh.inner),
                    (_ARG_BIAS, plain(bias, a["bias"])), (_ARG_DST, plain(y, a["y"])),
                    (_ARG_DST_ITER, plain(state, a["hT"])), (_ARG_DST_ITER_C, plain(state, a["cT"]))]
        self._workspaces = []  # the forward's and the backward's memory objects over the caller's workspace
        if train:
            self._workspaces.append(_memory(lib.dnnl_primitive_desc_query_md(fwd, _QUERY_WORKSPACE, 0), _P(0)))
            fwd_args.append((_ARG_WORKSPACE, self._workspaces[-1]))
        self._forward = _Primitive(fwd).bound(fwd_args)
        self.pds = [fwd]
        if not train:
            return
        for name, shape in (("dy", (t, n, hidden)), ("dhT", (1, 1, n, hidden)), ("dcT", (1, 1, n, hidden)),
                            ("dx", (t, n, c)), ("dh0", (1, 1, n, hidden)), ("dc0", (1, 1, n, hidden)),
                            ("dw_ih", (4 * hidden, c)), ("dw_hh", (4 * hidden, hidden)), ("dbias", (4 * hidden,))):
            a[name] = np.empty(shape, np.float32)
        bwd = _P()
        _check(lib.dnnl_lstm_backward_primitive_desc_create(
            ctypes.byref(bwd), engine, _BACKWARD, direction, x, state, state, any_ih, any_hh, None, None, bias,
            y, state, state, x, state, state, any_ih, any_hh, None, None, bias, y, state, state, 0, fwd,
            _user_scratchpad()), "LSTM backward")
        self.pds.append(bwd)
        self._bwd_ih = _Operand(self.shapes["w_ih"], md(bwd, _ARG_WEIGHTS), True, plain=w_ih)
        self._bwd_hh = _Operand(self.shapes["w_hh"], md(bwd, 34), True, plain=w_hh)
        # oneDNN adds the weight gradients into these: they are zeroed before each backward.
        diffs = (("w_ih", _ARG_DIFF_WEIGHTS, _gates_desc(c, hidden)),
                 ("w_hh", _ARG_DIFF_WEIGHTS_ITER, _gates_desc(hidden, hidden)))
        self._dw = [_Operand(self.shapes[k], md(bwd, arg), False, plain=desc) for k, arg, desc in diffs]
        self._dw_sizes = [int(lib.dnnl_memory_desc_get_size(md(bwd, arg))) for _, arg, _ in diffs]
        bwd_args = [(_ARG_SRC, plain(x, a["x"])), (_ARG_SRC_ITER, plain(state, a["h0"])),
                    (_ARG_SRC_ITER_C, plain(state, a["c0"])), (_ARG_WEIGHTS, self._bwd_ih.inner),
                    (_ARG_WEIGHTS_ITER, self._bwd_hh.inner), (_ARG_BIAS, plain(bias, a["bias"])),
                    (_ARG_DST, plain(y, a["y"])), (_ARG_DST_ITER, plain(state, a["hT"])),
                    (_ARG_DST_ITER_C, plain(state, a["cT"])),
                    (_ARG_WORKSPACE, self._workspaces[0]),
                    (_ARG_DIFF_SRC, plain(x, a["dx"])), (_ARG_DIFF_SRC_ITER, plain(state, a["dh0"])),
                    (_ARG_DIFF_SRC_ITER_C, plain(state, a["dc0"])), (_ARG_DIFF_WEIGHTS, self._dw[0].inner),
                    (_ARG_DIFF_WEIGHTS_ITER, self._dw[1].inner), (_ARG_DIFF_BIAS, plain(bias, a["dbias"])),
                    (_ARG_DIFF_DST, plain(y, a["dy"])), (_ARG_DIFF_DST_ITER, plain(state, a["dhT"])),
                    (_ARG_DIFF_DST_ITER_C, plain(state, a["dcT"]))]
        self._backward = _Primitive(bwd).bound(bwd_args)

    @staticmethod
    def _address(memory) -> int:
        handle = _P()
        library().dnnl_memory_get_data_handle(memory, ctypes.byref(handle))
        return handle.value

    def _bind_workspace(self, workspace: int) -> None:
        for memory in self._workspaces:
            _quick().dnnl_memory_set_data_handle(memory, _P(workspace))

    def forward(self, w_ih: int, w_hh: int, workspace: int = 0) -> None:
        """``y, hT, cT`` in :attr:`arrays` (and the workspace at ``workspace``, training) from ``x, h0, c0, bias``
        in :attr:`arrays` and the C-order weights at ``w_ih`` and ``w_hh``."""
        self._fwd_ih.bind(w_ih)
        self._fwd_hh.bind(w_hh)
        self._bind_workspace(workspace)
        self._forward()
        _quick().dnnl_stream_wait(_engine()[1])

    def backward(self, w_ih: int, w_hh: int, workspace: int) -> None:
        """``dx, dh0, dc0, dw_ih, dw_hh, dbias`` in :attr:`arrays` from the forward's arrays, its workspace and
        ``dy, dhT, dcT``."""
        self._bwd_ih.bind(w_ih)
        self._bwd_hh.bind(w_hh)
        self._bind_workspace(workspace)
        for op, name, size in zip(self._dw, ("dw_ih", "dw_hh"), self._dw_sizes):
            op.bind(self.arrays[name].ctypes.data)
            ctypes.memset(self._address(op.inner), 0, size)
        self.arrays["dbias"][:] = 0
        self._backward()
        for op in self._dw:
            op.finish()
        _quick().dnnl_stream_wait(_engine()[1])


def _view(address: int, shape: Sequence[int]) -> np.ndarray:
    """The C-order float32 array of ``shape`` at ``address`` (a caller's buffer), without a copy."""
    return np.ctypeslib.as_array((ctypes.c_float * max(math.prod(shape), 1)).from_address(address))[
        :math.prod(shape)].reshape(shape)


_LSTM_MIN_PART = 16


class LSTMLayer:
    """One direction of one LSTM layer as torch's CPU ``mkldnn_rnn_layer`` runs it: oneDNN's LSTM primitive.

    ``x`` is time-first ``(T, N, C)``, the states ``(N, H)``, the weights torch's ``(4H, C)`` and ``(4H, H)``
    (gates ``i, f, g, o``), the bias torch's ``b_ih + b_hh``. The batch is cut into one part per core (of
    at least 16 samples each), each run by oneDNN on one thread on its lane (:class:`Convolution`'s
    lanes): per sample the results are one call's, the weight gradients add the parts' partial sums in
    part order. The forward of a training step writes oneDNN's workspace (:attr:`workspace_bytes`, the
    parts' one after the other) for the backward.
    """

    def __init__(self, t: int, n: int, c: int, hidden: int, reverse: bool, train: bool) -> None:
        self.t, self.n, self.c, self.hidden = t, n, c, hidden
        # Parts of at least 16 samples: on fewer, oneDNN's kernels for a part's GEMMs sum in another order
        # than for the whole batch (torch's one call), and the work would not pay for the hand-over.
        parts = _bounds(n, max(1, min(workers(), n // _LSTM_MIN_PART)))
        self._parts = []
        offset = 0
        for i, (lo, size) in enumerate(parts):
            kernels = _on_lane(i, _LSTMKernels, t, size, c, hidden, reverse, train).result()
            self._parts.append((lo, size, kernels, offset))
            offset += -(-kernels.workspace_bytes // 64) * 64  # each part's workspace 64-byte aligned
        self.workspace_bytes = offset

    def _inputs(self, kernels, lo: int, size: int, arrays: dict[str, np.ndarray]) -> None:
        for name, value in arrays.items():
            target = kernels.arrays[name]
            if name in ("x", "y", "dy", "dx"):
                target[...] = value[:, lo:lo + size]
            elif name == "bias":
                target[...] = value
            else:  # a state (N, H)
                target.reshape(size, -1)[...] = value[lo:lo + size]

    def forward(self, x: int, h0: int, c0: int, w_ih: int, w_hh: int, bias: int, y: int, h_t: int, c_t: int,
                workspace: int = 0) -> None:
        """Write ``y, hT, cT`` (and the workspace, training) from the arrays at the given addresses."""
        t, n, c, h = self.t, self.n, self.c, self.hidden
        ins = {"x": _view(x, (t, n, c)), "h0": _view(h0, (n, h)), "c0": _view(c0, (n, h)),
               "bias": _view(bias, (4 * h,))}
        outs = {"y": _view(y, (t, n, h)), "hT": _view(h_t, (n, h)), "cT": _view(c_t, (n, h))}

        def part(lo, size, kernels, offset):
            self._inputs(kernels, lo, size, ins)
            kernels.forward(w_ih, w_hh, workspace + offset if workspace else 0)
            outs["y"][:, lo:lo + size] = kernels.arrays["y"]
            outs["hT"][lo:lo + size] = kernels.arrays["hT"].reshape(size, h)
            outs["cT"][lo:lo + size] = kernels.arrays["cT"].reshape(size, h)

        _run_parts([(part, *p) for p in self._parts])

    def backward(self, x: int, h0: int, c0: int, w_ih: int, w_hh: int, bias: int, y: int, h_t: int, c_t: int,
                 workspace: int, dy: int, dh_t: int, dc_t: int, dx: int, dh0: int, dc0: int, dw_ih: int, dw_hh: int,
                 dbias: int) -> None:
        """Write ``dx, dh0, dc0, dw_ih, dw_hh, dbias`` from the forward's arrays, its workspace and the output
        gradients ``dy, dhT, dcT``."""
        t, n, c, h = self.t, self.n, self.c, self.hidden
        ins = {"x": _view(x, (t, n, c)), "h0": _view(h0, (n, h)), "c0": _view(c0, (n, h)),
               "bias": _view(bias, (4 * h,)), "y": _view(y, (t, n, h)), "hT": _view(h_t, (n, h)),
               "cT": _view(c_t, (n, h)), "dy": _view(dy, (t, n, h)), "dhT": _view(dh_t, (n, h)), "dcT": _view(dc_t, (n, h))}
        outs = {"dx": _view(dx, (t, n, c)), "dh0": _view(dh0, (n, h)), "dc0": _view(dc0, (n, h))}

        def part(lo, size, kernels, offset):
            self._inputs(kernels, lo, size, ins)
            kernels.backward(w_ih, w_hh, workspace + offset)
            outs["dx"][:, lo:lo + size] = kernels.arrays["dx"]
            outs["dh0"][lo:lo + size] = kernels.arrays["dh0"].reshape(size, h)
            outs["dc0"][lo:lo + size] = kernels.arrays["dc0"].reshape(size, h)

        def add_partials() -> None:
            for name, address, shape in (("dw_ih", dw_ih, (4 * h, c)), ("dw_hh", dw_hh, (4 * h, h)),
                                         ("dbias", dbias, (4 * h,))):
                out = _view(address, shape)
                np.copyto(out, self._parts[0][2].arrays[name])
                for _, _, kernels, _ in self._parts[1:]:
                    out += kernels.arrays[name]

        _run_parts([(part, *p) for p in self._parts], then=add_partials)


@functools.lru_cache(maxsize=64)
def lstm_layer(t: int, n: int, c: int, hidden: int, reverse: bool, train: bool) -> LSTMLayer:
    """The cached :class:`LSTMLayer` of a shape (its primitives are created once)."""
    return LSTMLayer(t, n, c, hidden, reverse, train)
