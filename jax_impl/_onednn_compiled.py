"""The machine code of :mod:`jax_impl._onednn_native`: its handler, lanes and program runner, by numba.

Everything here runs without the GIL: memory is read and written through
raw addresses (LLVM loads and stores), C functions are called through
ctypes prototypes that numba calls directly, and Python is reached only
through the two ctypes callbacks the handler is given (a call without a
program, a failed oneDNN call), which take the GIL themselves. The
addresses of the process's state are constants of the compiled code, so
it is compiled once per process (:func:`compile_for`).
"""

from __future__ import annotations

import ctypes

from jax_impl import _onednn, _onednn_program, _xla_ffi

__all__ = ["c_function", "compile_for"]


def c_function(lib: ctypes.CDLL, name: str, restype, *argtypes):
    """A ctypes prototype of ``lib``'s ``name`` taking integers (pointers as addresses): numba calls such a
    prototype directly, without the GIL, and Python can call it too."""
    address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def _intrinsics():
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    i64, i32 = ir.IntType(64), ir.IntType(32)

    @intrinsic
    def load64(typingctx, address):
        def codegen(context, builder, sig, args):
            return builder.load_atomic(builder.inttoptr(args[0], i64.as_pointer()), "acquire", 8)
        return types.int64(types.int64), codegen

    @intrinsic
    def load32(typingctx, address):
        def codegen(context, builder, sig, args):
            return builder.sext(builder.load(builder.inttoptr(args[0], i32.as_pointer())), i64)
        return types.int64(types.int64), codegen

    @intrinsic
    def load8(typingctx, address):
        def codegen(context, builder, sig, args):
            byte = ir.IntType(8)
            return builder.zext(builder.load(builder.inttoptr(args[0], byte.as_pointer())), i64)
        return types.int64(types.int64), codegen

    @intrinsic
    def store64(typingctx, address, value):
        def codegen(context, builder, sig, args):
            builder.store_atomic(args[1], builder.inttoptr(args[0], i64.as_pointer()), "release", 8)
            return context.get_dummy_value()
        return types.void(types.int64, types.int64), codegen

    @intrinsic
    def call2(typingctx, function, a, b):
        """``function(a, b)`` for a C function ``int64 (int64, int64)`` at an address known only at run time."""
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(i64, [i64, i64])
            return builder.call(builder.inttoptr(args[0], fnty.as_pointer()), [args[1], args[2]])
        return types.int64(types.int64, types.int64, types.int64), codegen

    @intrinsic
    def call4(typingctx, function, a, b, c, d):
        """``function(a, b, c, d)`` for a C function ``int64 (int64, int64, int64, int64)`` at an address."""
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(i64, [i64] * 4)
            return builder.call(builder.inttoptr(args[0], fnty.as_pointer()), list(args[1:]))
        return types.int64(*[types.int64] * 5), codegen

    @intrinsic
    def float_pointer(typingctx, address):
        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], ir.FloatType().as_pointer())
        return types.CPointer(types.float32)(types.int64), codegen

    return load64, load32, load8, store64, call2, call4, float_pointer


def compile_for(state) -> dict:
    """Compile the runner, the handler's core and the lanes' main function for ``state`` (a
    :class:`jax_impl._onednn_native._State`): ``{"handle": the handlers' core, "handler": a function making a
    target's handler, "lane": the lanes' main function}``."""
    from numba import carray, cfunc, njit, types

    load64, load32, load8, store64, call2, call4, float_pointer = _intrinsics()
    libc, dnnl = ctypes.CDLL(None, use_errno=True), _onednn.library()
    i64, i32 = ctypes.c_int64, ctypes.c_int
    sem_wait = c_function(libc, "sem_wait", i32, i64)
    sem_trywait = c_function(libc, "sem_trywait", i32, i64)
    sem_post = c_function(libc, "sem_post", i32, i64)
    getpid = c_function(libc, "getpid", i32)
    sched_getcpu = c_function(libc, "sched_getcpu", i32)
    sched_setaffinity = c_function(libc, "sched_setaffinity", i32, i32, i64, i64)
    set_handle = c_function(dnnl, "dnnl_memory_set_data_handle", i32, i64, i64)
    execute = c_function(dnnl, "dnnl_primitive_execute", i32, i64, i64, i32, i64)
    stream_wait = c_function(dnnl, "dnnl_stream_wait", i32, i64)
    omp_get_max_threads = c_function(dnnl, "omp_get_max_threads", i32)
    omp_set_num_threads = c_function(dnnl, "omp_set_num_threads", None, i32)

    base, lock, pid, spins = state.base, state.lock, state.pid, state.spins
    lanes_at, lane_words, buffers_at, table_at = state.lanes_at, state.lane_words, state.buffers_at, state.table_at
    lanes, cpus = state.lanes, tuple(state.cpus)
    capacity, max_buffers = state.capacity, state.max_buffers
    prog = _onednn_program
    end, set_, execute_, wait_, copy, absolute = prog.END, prog.SET, prog.EXECUTE, prog.WAIT, prog.COPY, prog.ABSOLUTE
    layout = _xla_ffi.frame_layout()
    # Byte offsets in XLA's call frame (at_...) and the execution stage's number.
    at_args, at_rets, at_attrs, at_extension_start, at_stage = (
        layout[n] for n in ("args", "rets", "attrs", "extension_start", "stage"))
    at_size, at_values, at_attr_types, at_attr_values = (layout[n] for n in ("size", "values", "attr_types",
                                                                               "attr_values"))
    at_buffer_rank, at_buffer_dims, at_buffer_dtype, at_buffer_data = (
        layout[n] for n in ("buffer_rank", "buffer_dims", "buffer_dtype", "buffer_data"))
    execute_stage = layout["execute"]
    itemsizes = _xla_ffi.itemsizes()
    attr_array, attr_scalar = _xla_ffi.ATTR_ARRAY, _xla_ffi.ATTR_SCALAR

    @njit(nogil=True)
    def wait(semaphore):
        for _ in range(spins):
            if sem_trywait(semaphore) == 0:
                return
        while sem_wait(semaphore) != 0:
            pass

    @njit(nogil=True)
    def run(pc, buffers):
        """Run the stream at ``pc``; the first failing oneDNN call's status, or 0."""
        while True:
            op = load64(pc)
            if op == end:
                return 0
            if op == set_:
                buffer, offset = load64(pc + 16), load64(pc + 24)
                address = offset if buffer == absolute else load64(buffers + 8 * buffer) + offset
                set_handle(load64(pc + 8), address)
                pc += 32
            elif op == execute_:
                status = execute(load64(pc + 8), load64(pc + 16), load64(pc + 24), load64(pc + 32))
                if status != 0:
                    return status
                pc += 40
            elif op == wait_:
                stream_wait(load64(pc + 8))
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

    @njit(nogil=True)
    def itemsize(dtype):
        # 0 for a type the table does not know: its values are then left out of the key (not read).
        return itemsizes[dtype] if 0 <= dtype < len(itemsizes) else 0

    @njit(nogil=True)
    def mix(h, value):
        # FNV-1a over 64-bit words.
        return (h ^ value) * 1099511628211

    @njit(nogil=True)
    def key_of(f, target):
        """A hash of the call: the target, every operand's and result's dims, every attribute's value."""
        h = mix(-3750763034362895579, target)
        for operands in (at_args, at_rets):
            count = load64(f + operands + at_size)
            values = load64(f + operands + at_values)
            h = mix(h, count)
            for i in range(count):
                buffer = load64(values + 8 * i)
                rank = load64(buffer + at_buffer_rank)
                dims = load64(buffer + at_buffer_dims)
                h = mix(h, load32(buffer + at_buffer_dtype))
                h = mix(h, rank)
                for d in range(rank):
                    h = mix(h, load64(dims + 8 * d))
        attrs = f + at_attrs
        count = load64(attrs + at_size)
        types_ = load64(attrs + at_attr_types)
        values = load64(attrs + at_attr_values)
        h = mix(h, count)
        for i in range(count):
            kind = load32(types_ + 4 * i)
            value = load64(values + 8 * i)
            h = mix(h, kind)
            if kind == attr_array:
                dtype = load32(value)
                size = load64(value + 8) * itemsize(dtype)
                data = load64(value + 16)
                h = mix(h, dtype)
                h = mix(h, size)
                for b in range(size):
                    h = mix(h, load8(data + b))
            elif kind == attr_scalar:
                dtype = load32(value)
                data = load64(value + 8)
                h = mix(h, dtype)
                for b in range(itemsize(dtype)):
                    h = mix(h, load8(data + b))
        return h

    @njit(nogil=True)
    def lookup(key):
        slot = key & (capacity - 1)
        for _ in range(capacity):
            entry = base + 8 * (table_at + 2 * slot)
            program = load64(entry + 8)
            if program == 0:
                return 0
            if load64(entry) == key:
                return program
            slot = (slot + 1) & (capacity - 1)
        return 0

    @njit(nogil=True)
    def own_part(parts):
        cpu = sched_getcpu()
        for i in range(len(cpus)):
            if cpus[i] == cpu:
                return i if i < parts else 0
        return 0

    @njit(nogil=True)
    def handle(f, target, fallback, failure):
        if load64(f + at_extension_start) != 0:
            return call2(fallback, f, 0)  # the metadata query
        if load32(f + at_stage) != execute_stage:
            return 0
        if getpid() != pid:
            return call2(fallback, f, 0)  # a forked child: its lanes are Python's
        n_args = load64(f + at_args + at_size)
        n_rets = load64(f + at_rets + at_size)
        if n_args + n_rets > max_buffers:
            return call2(fallback, f, 0)
        key = key_of(f, target)
        # The process's lock before the lookup: the table is emptied (its programs freed) under it.
        wait(lock)
        program = lookup(key)
        if program == 0:
            sem_post(lock)
            return call2(fallback, f, key)
        buffers = base + 8 * buffers_at
        arg_values = load64(f + at_args + at_values)
        for i in range(n_args):
            store64(buffers + 8 * i, load64(load64(arg_values + 8 * i) + at_buffer_data))
        ret_values = load64(f + at_rets + at_values)
        for i in range(n_rets):
            store64(buffers + 8 * (n_args + i), load64(load64(ret_values + 8 * i) + at_buffer_data))
        parts = load64(program)
        own = own_part(parts)
        handed = min(parts, lanes)
        for p in range(handed):
            if p != own:
                lane = base + 8 * (lanes_at + p * lane_words)
                store64(lane + 64, program + 8 * load64(program + 8 * (1 + p)))
                sem_post(lane)
        before = omp_get_max_threads()
        omp_set_num_threads(1)
        status = run(program + 8 * load64(program + 8 * (1 + own)), buffers)
        for p in range(handed, parts):  # parts beyond the lanes (the cores this process may use shrank)
            if p != own and status == 0:
                status = run(program + 8 * load64(program + 8 * (1 + p)), buffers)
        omp_set_num_threads(before)
        for p in range(handed):
            if p != own:
                lane = base + 8 * (lanes_at + p * lane_words)
                wait(lane + 32)
                if status == 0:
                    status = load64(lane + 72)
        if status == 0:
            status = run(program + 8 * load64(program + 8 * (1 + parts)), buffers)
        sem_post(lock)
        if status != 0:
            return call2(failure, f, status)
        return 0

    @cfunc(types.int64(types.int64), nopython=True)
    def lane_main(index):
        lane = base + 8 * (lanes_at + index * lane_words)
        mask = load64(lane + 80)
        if mask != 0:
            sched_setaffinity(0, 128, mask)
        omp_set_num_threads(1)
        buffers = base + 8 * buffers_at
        while True:
            wait(lane)
            store64(lane + 72, run(load64(lane + 64), buffers))
            sem_post(lane + 32)
        return 0

    handle_c = cfunc(types.int64(types.int64, types.int64, types.int64, types.int64), nopython=True)(handle)
    core = handle_c.address

    def handler(target: int, fallback: int, failure: int):
        """A target's handler, ``XLA_FFI_Error* (XLA_FFI_CallFrame*)``: the compiled core called with the
        target's number and callbacks as constants (a small function: the core is compiled once)."""

        @cfunc(types.int64(types.int64), nopython=True)
        def entry(f):
            return call4(core, f, target, fallback, failure)

        return entry

    return {"handle": handle_c, "handler": handler, "lane": lane_main}
