"""The machine code of :mod:`jax_impl._onednn_native`: its handler, lanes and program runner, by numba.

Everything here runs without the GIL: memory is read and written through
raw addresses (LLVM loads and stores), C functions are called through their
addresses, and Python is reached only through the two ctypes callbacks a
target's handler is given (a call without a program, a failed oneDNN call),
which take the GIL themselves.

The compiled code holds no address of this process: every address and
number it needs (the process's state, the C functions it calls, the layout
of XLA's call frame, the program opcodes) is a word of a *context*, an int64
array (:func:`context`) whose address the code is given at run time. So
numba keeps the code in its on-disk cache (``cache=True``, beside this file
or in numba's user-wide cache folder) and a process loads it rather than
compiling it (about two seconds on two cores). What is made per process is
one small function per custom-call target (:func:`entry`, by llvmlite):
XLA calls a handler with the call frame alone, and the entry calls the
shared core with the frame and the target's own context (the process's
context, the target's number, its two callbacks).

This module imports numba: :mod:`jax_impl._onednn_native` imports it when it
first makes its state.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from typing import Any

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core.errors import NumbaWarning
from numba.extending import intrinsic

from jax_impl import _onednn, _onednn_program, _xla_ffi

__all__ = ["LANE_CONTEXT", "Entry", "compiled", "context", "entry"]

# The context's words. Everything the compiled code reads at run time; numba's cache keys the code on
# this file, so a change here compiles it anew.
(BASE, LOCK, PID, SPINS, LANES_AT, LANE_WORDS, BUFFERS_AT, TABLE_AT, LANES, CAPACITY, MAX_BUFFERS, CPUS,
 N_CPUS, SEM_WAIT, SEM_TRYWAIT, SEM_POST, GETPID, SCHED_GETCPU, SCHED_SETAFFINITY, SET_HANDLE, EXECUTE,
 STREAM_WAIT, OMP_GET_MAX_THREADS, OMP_SET_NUM_THREADS, OP_END, OP_SET, OP_EXECUTE, OP_WAIT, OP_COPY,
 OP_ABSOLUTE, AT_ARGS, AT_RETS, AT_ATTRS, AT_EXTENSION_START, AT_STAGE, AT_SIZE, AT_VALUES, AT_ATTR_TYPES,
 AT_ATTR_VALUES, AT_BUFFER_RANK, AT_BUFFER_DIMS, AT_BUFFER_DTYPE, AT_BUFFER_DATA, EXECUTE_STAGE, ITEMSIZES,
 N_ITEMSIZES, ATTR_ARRAY, ATTR_SCALAR, CONTEXT_WORDS) = range(49)
# The word of a lane's block that holds the context's address (the lane's thread is given its block).
LANE_CONTEXT = 11
# A target's context: the process's context, the target's number, its two callbacks.
T_CONTEXT, T_TARGET, T_FALLBACK, T_FAILURE = range(4)

_I64, _I32 = ir.IntType(64), ir.IntType(32)


# -- memory and calls by address --------------------------------------------------------------------------------------


@intrinsic
def load64(typingctx, address):
    def codegen(context, builder, sig, args):
        return builder.load_atomic(builder.inttoptr(args[0], _I64.as_pointer()), "acquire", 8)
    return types.int64(types.int64), codegen


@intrinsic
def load32(typingctx, address):
    def codegen(context, builder, sig, args):
        return builder.sext(builder.load(builder.inttoptr(args[0], _I32.as_pointer())), _I64)
    return types.int64(types.int64), codegen


@intrinsic
def load8(typingctx, address):
    def codegen(context, builder, sig, args):
        byte = ir.IntType(8)
        return builder.zext(builder.load(builder.inttoptr(args[0], byte.as_pointer())), _I64)
    return types.int64(types.int64), codegen


@intrinsic
def store64(typingctx, address, value):
    def codegen(context, builder, sig, args):
        builder.store_atomic(args[1], builder.inttoptr(args[0], _I64.as_pointer()), "release", 8)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


def _call_codegen(returns_int: bool, arity: int):
    """The signature and codegen of ``f(function, a1, ..., an)``: a call of the C function at address
    ``function`` with int64 arguments. ``returns_int``: it returns a C ``int`` (or nothing, a result not
    read), sign-extended here; else an int64. On x86-64 an int64 argument passes a C ``int`` parameter in
    its low half, as the callee reads it."""
    def codegen(context, builder, sig, values):
        fnty = ir.FunctionType(_I32 if returns_int else _I64, [_I64] * arity)
        result = builder.call(builder.inttoptr(values[0], fnty.as_pointer()), list(values[1:]))
        return builder.sext(result, _I64) if returns_int else result
    return types.int64(*[types.int64] * (arity + 1)), codegen


@intrinsic
def cint0(typingctx, function):
    return _call_codegen(True, 0)


@intrinsic
def cint1(typingctx, function, a):
    return _call_codegen(True, 1)


@intrinsic
def cint2(typingctx, function, a, b):
    return _call_codegen(True, 2)


@intrinsic
def cint3(typingctx, function, a, b, c):
    return _call_codegen(True, 3)


@intrinsic
def cint4(typingctx, function, a, b, c, d):
    return _call_codegen(True, 4)


@intrinsic
def call2(typingctx, function, a, b):
    """``function(a, b)`` for a C function ``int64 (int64, int64)`` (a Python callback) at an address."""
    return _call_codegen(False, 2)


@intrinsic
def float_pointer(typingctx, address):
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.FloatType().as_pointer())
    return types.CPointer(types.float32)(types.int64), codegen


# -- the compiled code ------------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def word(ctx, i):
    """The context's word ``i``."""
    return load64(ctx + 8 * i)


@njit(nogil=True, cache=True)
def wait(ctx, semaphore):
    trywait = word(ctx, SEM_TRYWAIT)
    for _ in range(word(ctx, SPINS)):
        if cint1(trywait, semaphore) == 0:
            return
    sem_wait = word(ctx, SEM_WAIT)
    while cint1(sem_wait, semaphore) != 0:
        pass


@njit(nogil=True, cache=True)
def run(ctx, pc, buffers):
    """Run the stream at ``pc``; the first failing oneDNN call's status, or 0."""
    end, set_, execute_ = word(ctx, OP_END), word(ctx, OP_SET), word(ctx, OP_EXECUTE)
    wait_, copy, absolute = word(ctx, OP_WAIT), word(ctx, OP_COPY), word(ctx, OP_ABSOLUTE)
    while True:
        op = load64(pc)
        if op == end:
            return 0
        if op == set_:
            buffer, offset = load64(pc + 16), load64(pc + 24)
            address = offset if buffer == absolute else load64(buffers + 8 * buffer) + offset
            cint2(word(ctx, SET_HANDLE), load64(pc + 8), address)
            pc += 32
        elif op == execute_:
            status = cint4(word(ctx, EXECUTE), load64(pc + 8), load64(pc + 16), load64(pc + 24), load64(pc + 32))
            if status != 0:
                return status
            pc += 40
        elif op == wait_:
            cint1(word(ctx, STREAM_WAIT), load64(pc + 8))
            pc += 16
        else:  # copy, add
            count = load64(pc + 32)
            out = carray(float_pointer(load64(buffers + 8 * load64(pc + 8)) + load64(pc + 16)), (count,))
            source = carray(float_pointer(load64(pc + 24)), (count,))
            if op == copy:
                for i in range(count):
                    out[i] = source[i]
            else:
                for i in range(count):
                    out[i] = out[i] + source[i]
            pc += 40


@njit(nogil=True, cache=True)
def itemsize(ctx, dtype):
    # 0 for a type the table does not know: its values are then left out of the key (not read).
    return load64(word(ctx, ITEMSIZES) + 8 * dtype) if 0 <= dtype < word(ctx, N_ITEMSIZES) else 0


@njit(nogil=True, cache=True)
def mix(h, value):
    # FNV-1a over 64-bit words.
    return (h ^ value) * 1099511628211


@njit(nogil=True, cache=True)
def key_of(ctx, f, target):
    """A hash of the call: the target, every operand's and result's dims, every attribute's value."""
    at_size, at_values = word(ctx, AT_SIZE), word(ctx, AT_VALUES)
    at_rank, at_dims, at_dtype = word(ctx, AT_BUFFER_RANK), word(ctx, AT_BUFFER_DIMS), word(ctx, AT_BUFFER_DTYPE)
    h = mix(-3750763034362895579, target)
    for operands in (word(ctx, AT_ARGS), word(ctx, AT_RETS)):
        count = load64(f + operands + at_size)
        values = load64(f + operands + at_values)
        h = mix(h, count)
        for i in range(count):
            buffer = load64(values + 8 * i)
            rank = load64(buffer + at_rank)
            dims = load64(buffer + at_dims)
            h = mix(h, load32(buffer + at_dtype))
            h = mix(h, rank)
            for d in range(rank):
                h = mix(h, load64(dims + 8 * d))
    attrs = f + word(ctx, AT_ATTRS)
    count = load64(attrs + at_size)
    types_ = load64(attrs + word(ctx, AT_ATTR_TYPES))
    values = load64(attrs + word(ctx, AT_ATTR_VALUES))
    attr_array, attr_scalar = word(ctx, ATTR_ARRAY), word(ctx, ATTR_SCALAR)
    h = mix(h, count)
    for i in range(count):
        kind = load32(types_ + 4 * i)
        value = load64(values + 8 * i)
        h = mix(h, kind)
        if kind == attr_array:
            dtype = load32(value)
            size = load64(value + 8) * itemsize(ctx, dtype)
            data = load64(value + 16)
            h = mix(h, dtype)
            h = mix(h, size)
            for b in range(size):
                h = mix(h, load8(data + b))
        elif kind == attr_scalar:
            dtype = load32(value)
            data = load64(value + 8)
            h = mix(h, dtype)
            for b in range(itemsize(ctx, dtype)):
                h = mix(h, load8(data + b))
    return h


@njit(nogil=True, cache=True)
def lookup(ctx, key):
    capacity = word(ctx, CAPACITY)
    slot = key & (capacity - 1)
    table = word(ctx, BASE) + 8 * word(ctx, TABLE_AT)
    for _ in range(capacity):
        entry = table + 16 * slot
        program = load64(entry + 8)
        if program == 0:
            return 0
        if load64(entry) == key:
            return program
        slot = (slot + 1) & (capacity - 1)
    return 0


@njit(nogil=True, cache=True)
def own_part(ctx, parts):
    cpu = cint0(word(ctx, SCHED_GETCPU))
    cpus = word(ctx, CPUS)
    for i in range(word(ctx, N_CPUS)):
        if load64(cpus + 8 * i) == cpu:
            return i if i < parts else 0
    return 0


@njit(nogil=True, cache=True)
def lane_block(ctx, p):
    return word(ctx, BASE) + 8 * (word(ctx, LANES_AT) + p * word(ctx, LANE_WORDS))


def _handle(f, target_ctx):
    ctx = load64(target_ctx + 8 * T_CONTEXT)
    target = load64(target_ctx + 8 * T_TARGET)
    fallback, failure = load64(target_ctx + 8 * T_FALLBACK), load64(target_ctx + 8 * T_FAILURE)
    if load64(f + word(ctx, AT_EXTENSION_START)) != 0:
        return call2(fallback, f, 0)  # the metadata query
    if load32(f + word(ctx, AT_STAGE)) != word(ctx, EXECUTE_STAGE):
        return 0
    if cint0(word(ctx, GETPID)) != word(ctx, PID):
        return call2(fallback, f, 0)  # a forked child: its lanes are Python's
    at_size, at_values, at_data = word(ctx, AT_SIZE), word(ctx, AT_VALUES), word(ctx, AT_BUFFER_DATA)
    at_args, at_rets = word(ctx, AT_ARGS), word(ctx, AT_RETS)
    n_args = load64(f + at_args + at_size)
    n_rets = load64(f + at_rets + at_size)
    if n_args + n_rets > word(ctx, MAX_BUFFERS):
        return call2(fallback, f, 0)
    key = key_of(ctx, f, target)
    # The process's lock before the lookup: the table is emptied (its programs freed) under it.
    lock, sem_post = word(ctx, LOCK), word(ctx, SEM_POST)
    wait(ctx, lock)
    program = lookup(ctx, key)
    if program == 0:
        cint1(sem_post, lock)
        return call2(fallback, f, key)
    buffers = word(ctx, BASE) + 8 * word(ctx, BUFFERS_AT)
    arg_values = load64(f + at_args + at_values)
    for i in range(n_args):
        store64(buffers + 8 * i, load64(load64(arg_values + 8 * i) + at_data))
    ret_values = load64(f + at_rets + at_values)
    for i in range(n_rets):
        store64(buffers + 8 * (n_args + i), load64(load64(ret_values + 8 * i) + at_data))
    parts = load64(program)
    own = own_part(ctx, parts)
    handed = min(parts, word(ctx, LANES))
    for p in range(handed):
        if p != own:
            lane = lane_block(ctx, p)
            store64(lane + 64, program + 8 * load64(program + 8 * (1 + p)))
            cint1(sem_post, lane)
    before = cint0(word(ctx, OMP_GET_MAX_THREADS))
    cint1(word(ctx, OMP_SET_NUM_THREADS), 1)
    status = run(ctx, program + 8 * load64(program + 8 * (1 + own)), buffers)
    for p in range(handed, parts):  # parts beyond the lanes (the cores this process may use shrank)
        if p != own and status == 0:
            status = run(ctx, program + 8 * load64(program + 8 * (1 + p)), buffers)
    cint1(word(ctx, OMP_SET_NUM_THREADS), before)
    for p in range(handed):
        if p != own:
            lane = lane_block(ctx, p)
            wait(ctx, lane + 32)
            if status == 0:
                status = load64(lane + 72)
    if status == 0:
        status = run(ctx, program + 8 * load64(program + 8 * (1 + parts)), buffers)
    cint1(sem_post, lock)
    if status != 0:
        return call2(failure, f, status)
    return 0


def _lane_main(lane):
    """A lane's thread, given its block: run each stream it is handed, post its status, forever."""
    ctx = load64(lane + 8 * LANE_CONTEXT)
    mask = load64(lane + 80)
    if mask != 0:
        cint3(word(ctx, SCHED_SETAFFINITY), 0, 128, mask)
    cint1(word(ctx, OMP_SET_NUM_THREADS), 1)
    buffers = word(ctx, BASE) + 8 * word(ctx, BUFFERS_AT)
    sem_post = word(ctx, SEM_POST)
    while True:
        wait(ctx, lane)
        store64(lane + 72, run(ctx, load64(lane + 64), buffers))
        cint1(sem_post, lane + 32)
    return 0


@functools.cache
def compiled() -> dict[str, Any]:
    """The handlers' core, ``int64 (frame, target context)``, and the lanes' main function, ``int64 (lane
    block)``, as numba ``cfunc`` objects: loaded from numba's cache, or compiled (and cached) when there is
    none for this file, this numba and this CPU."""
    def make(signature, function):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NumbaWarning)  # no writable cache folder: compiled each time
                return cfunc(signature, nopython=True, cache=True)(function)
        except RuntimeError:  # numba found no folder to cache in at all
            return cfunc(signature, nopython=True)(function)

    return {"handle": make(types.int64(types.int64, types.int64), _handle),
            "lane": make(types.int64(types.int64), _lane_main)}


def context(state) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The context of ``state`` (a :class:`jax_impl._onednn_native._State`): an int64 array of
    ``CONTEXT_WORDS`` words, and the arrays its words point at (the caller keeps them alive with it)."""
    ctx = np.zeros(CONTEXT_WORDS, np.int64)
    libc, dnnl = ctypes.CDLL(None, use_errno=True), _onednn.library()

    def address(lib: ctypes.CDLL, name: str) -> int:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value

    cpus, itemsizes = np.asarray(state.cpus, np.int64), np.asarray(_xla_ffi.itemsizes(), np.int64)
    layout = _xla_ffi.frame_layout()
    prog = _onednn_program
    words = {
        BASE: state.base, LOCK: state.lock, PID: state.pid, SPINS: state.spins, LANES_AT: state.lanes_at,
        LANE_WORDS: state.lane_words, BUFFERS_AT: state.buffers_at, TABLE_AT: state.table_at,
        LANES: state.lanes, CAPACITY: state.capacity, MAX_BUFFERS: state.max_buffers,
        CPUS: cpus.ctypes.data, N_CPUS: len(cpus),
        SEM_WAIT: address(libc, "sem_wait"), SEM_TRYWAIT: address(libc, "sem_trywait"),
        SEM_POST: address(libc, "sem_post"), GETPID: address(libc, "getpid"),
        SCHED_GETCPU: address(libc, "sched_getcpu"), SCHED_SETAFFINITY: address(libc, "sched_setaffinity"),
        SET_HANDLE: address(dnnl, "dnnl_memory_set_data_handle"), EXECUTE: address(dnnl, "dnnl_primitive_execute"),
        STREAM_WAIT: address(dnnl, "dnnl_stream_wait"), OMP_GET_MAX_THREADS: address(dnnl, "omp_get_max_threads"),
        OMP_SET_NUM_THREADS: address(dnnl, "omp_set_num_threads"),
        OP_END: prog.END, OP_SET: prog.SET, OP_EXECUTE: prog.EXECUTE, OP_WAIT: prog.WAIT, OP_COPY: prog.COPY,
        OP_ABSOLUTE: prog.ABSOLUTE,
        AT_ARGS: layout["args"], AT_RETS: layout["rets"], AT_ATTRS: layout["attrs"],
        AT_EXTENSION_START: layout["extension_start"], AT_STAGE: layout["stage"], AT_SIZE: layout["size"],
        AT_VALUES: layout["values"], AT_ATTR_TYPES: layout["attr_types"], AT_ATTR_VALUES: layout["attr_values"],
        AT_BUFFER_RANK: layout["buffer_rank"], AT_BUFFER_DIMS: layout["buffer_dims"],
        AT_BUFFER_DTYPE: layout["buffer_dtype"], AT_BUFFER_DATA: layout["buffer_data"],
        EXECUTE_STAGE: layout["execute"], ITEMSIZES: itemsizes.ctypes.data, N_ITEMSIZES: len(itemsizes),
        ATTR_ARRAY: _xla_ffi.ATTR_ARRAY, ATTR_SCALAR: _xla_ffi.ATTR_SCALAR,
    }
    assert len(words) == CONTEXT_WORDS
    for index, value in words.items():
        ctx[index] = value
    return ctx, (cpus, itemsizes)


class Entry:
    """One target's handler, ``XLA_FFI_Error* (XLA_FFI_CallFrame*)``, at ``address``: it calls the core
    with the frame and ``target_context`` (:data:`T_CONTEXT` ...), both constants of its machine code."""

    def __init__(self, core: int, target_context: np.ndarray) -> None:
        import llvmlite.binding as llvm

        self.target_context = target_context  # the entry reads it at every call
        module = ir.Module(name="jax_impl_onednn_entry")
        module.triple = llvm.get_process_triple()
        function = ir.Function(module, ir.FunctionType(_I64, [_I64]), name="entry")
        builder = ir.IRBuilder(function.append_basic_block())
        core_type = ir.FunctionType(_I64, [_I64, _I64])
        callee = builder.inttoptr(ir.Constant(_I64, core), core_type.as_pointer())
        result = builder.call(callee, [function.args[0], ir.Constant(_I64, target_context.ctypes.data)], tail=True)
        builder.ret(result)
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
        # A target machine of its own: the engine owns it and frees it with itself.
        self._engine = llvm.create_mcjit_compiler(parsed, _target_machine())
        self._engine.finalize_object()
        self.address = self._engine.get_function_address("entry")


def _target_machine():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_default_triple().create_target_machine()


def entry(ctx: np.ndarray, target: int, fallback: int, failure: int) -> Entry:
    """The handler of one target: the core, with the process's context ``ctx``, the target's number (part of
    every call's key) and its two callbacks' addresses."""
    target_context = np.zeros(4, np.int64)
    target_context[[T_CONTEXT, T_TARGET, T_FALLBACK, T_FAILURE]] = ctx.ctypes.data, target, fallback, failure
    return Entry(compiled()["handle"].address, target_context)
