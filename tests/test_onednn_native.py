"""oneDNN's custom calls run natively (jax_impl/_onednn_native.py, _onednn_compiled.py, _onednn_program.py).

A geometry's first call runs on the Python path and leaves its program; every later call runs that
program from the compiled handler, without the GIL. Its results are compared with torch's (the route's
bound, 1e-5 of the largest magnitude, measured in tests/nn/test_conv_onednn.py and
test_matmul_onednn.py) and with the first call's, bit for bit: the program is the same oneDNN calls on
the same primitives.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from jax_impl import _onednn_native, _onednn_program

pytestmark = pytest.mark.skipif(not _onednn_native.available(), reason="oneDNN or numba is not installed")


def _first_calls() -> int:
    return _onednn_native.python_calls()


# (N, C_in, C_out, (H, W), (kH, kW), stride, pads, channels_last): cut by samples (the weight gradient's
# partial sums added after the parts), by channels (ResNet-18's stage 3 at batch 4), the input gradient
# alone by input channels (the DCGAN generator's first layer), and the channels-last forward.
_CONVS = [
    (8, 16, 24, (12, 12), (3, 3), (1, 1), ((0, 0), (0, 0)), False),
    (3, 8, 8, (9, 9), (3, 3), (2, 2), ((1, 1), (1, 1)), False),
    (4, 256, 256, (14, 14), (3, 3), (1, 1), ((1, 1), (1, 1)), False),
    (32, 256, 100, (4, 4), (4, 4), (1, 1), ((0, 0), (0, 0)), False),
    (4, 64, 64, (16, 16), (3, 3), (1, 1), ((1, 1), (1, 1)), True),
]


def _conv_calls(case):
    from jax_impl.nn import _conv_onednn

    n, c_in, c_out, size, kernel, stride, pads, channels_last = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = rng.standard_normal((n, c_in, *size), dtype=np.float32)
    w = rng.standard_normal((c_out, c_in, *kernel), dtype=np.float32)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ty = TF.conv2d(tx, tw, stride=stride, padding=(pads[0][0], pads[1][0]))
    g = rng.standard_normal(tuple(ty.shape), dtype=np.float32)
    if channels_last:
        run = jax.jit(lambda a, b: _conv_onednn.conv2d_nhwc(a, b, stride, pads, (1, 1)))
        return (lambda: (np.asarray(run(x.transpose(0, 2, 3, 1), w)).transpose(0, 3, 1, 2),),
                (ty.detach().numpy(),))
    ty.backward(torch.from_numpy(g))

    def step(a, b, cotangent):
        y, vjp = jax.vjp(lambda p, q: _conv_onednn.conv2d(p, q, stride, pads, (1, 1)), a, b)
        return (y, *vjp(cotangent))

    run = jax.jit(step)
    return (lambda: tuple(np.asarray(v) for v in run(x, w, g)),
            (ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()))


def _matmul_calls(m, k, n, transpose_a, transpose_b, bias):
    from jax_impl.nn import _matmul_onednn

    rng = np.random.default_rng(m * k * n)
    a = rng.standard_normal((k, m) if transpose_a else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n), dtype=np.float32)
    c = rng.standard_normal(n, dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ref = (ta.T if transpose_a else ta) @ (tb.T if transpose_b else tb)
    if bias:
        run = jax.jit(lambda p, q, r: _matmul_onednn.matmul_bias(p, q, r, transpose_b=transpose_b))
        return (lambda: (np.asarray(run(a, b, c)),)), ((ref + torch.from_numpy(c)).numpy(),)
    run = jax.jit(lambda p, q: _matmul_onednn.matmul(p, q, transpose_a=transpose_a, transpose_b=transpose_b))
    return (lambda: (np.asarray(run(a, b)),)), (ref.numpy(),)


# (M, K, N, transpose_a, transpose_b, bias): cut by columns (M < N) and by rows, with and without a bias.
_MATMULS = [(64, 48, 80, False, False, False), (33, 70, 20, True, False, False), (128, 64, 96, False, True, True),
            (40, 64, 96, False, False, True)]


@pytest.mark.parametrize("call", [("conv", c) for c in _CONVS] + [("matmul", m) for m in _MATMULS],
                         ids=[f"conv{i}" for i in range(len(_CONVS))] + [f"matmul{i}" for i in range(len(_MATMULS))])
def test_later_calls_run_the_program_and_match_the_first_call_and_torch(call):
    kind, case = call
    run, refs = _conv_calls(case) if kind == "conv" else _matmul_calls(*case)
    first = run()
    before = _first_calls()
    later = [run() for _ in range(3)]
    assert _first_calls() == before  # no call went back to the Python path
    for results in later:
        for ours, python, ref in zip(results, first, refs, strict=True):
            np.testing.assert_array_equal(ours, python)
            assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


def test_calls_from_several_threads_get_their_own_results():
    """XLA may run a geometry's calls on several threads at once (two devices of one process, or a user's
    threads): each call's weight gradient (the parts' partial sums, added after the parts) is its own."""
    from jax_impl.nn import _conv_onednn

    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((8, 16, 12, 12), dtype=np.float32) for _ in range(6)]
    gs = [rng.standard_normal((8, 24, 10, 10), dtype=np.float32) for _ in range(6)]
    w = jnp.zeros((24, 16, 3, 3), jnp.float32)
    grad = jax.jit(lambda x, g: jax.vjp(lambda q: _conv_onednn.conv2d(x, q, (1, 1), ((0, 0), (0, 0)), (1, 1)), w)[1](g))
    alone = [np.asarray(grad(x, g)[0]) for x, g in zip(xs, gs)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda i: [np.asarray(grad(xs[i], gs[i])[0]) for _ in range(10)], range(6)))
    for i, results in enumerate(together):
        for result in results:
            np.testing.assert_array_equal(result, alone[i])


def test_a_full_table_is_emptied_and_its_geometries_run_again(monkeypatch):
    """Programs keep their geometry's primitives and buffers: past ``_MAX_PROGRAMS`` the table is emptied,
    and each geometry's next call leaves its program again, with the same results."""
    from jax_impl.nn import _conv_onednn

    monkeypatch.setattr(_onednn_native, "_MAX_PROGRAMS", 2)
    rng = np.random.default_rng(7)
    calls = []
    for c_out in (8, 16, 24):
        x = rng.standard_normal((4, 8, 10, 10), dtype=np.float32)
        w = rng.standard_normal((c_out, 8, 3, 3), dtype=np.float32)
        f = jax.jit(lambda a, b: _conv_onednn.conv2d(a, b, (1, 1), ((1, 1), (1, 1)), (1, 1)))
        ref = TF.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
        calls.append((f, x, w, ref, np.asarray(f(x, w))))
    for _ in range(3):
        for f, x, w, ref, first in calls:
            ours = np.asarray(f(x, w))
            np.testing.assert_array_equal(ours, first)
            assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()
            assert 1 <= _onednn_native.programs() <= 2


_SOURCES = [np.arange(1, 5, dtype=np.float32), np.full(4, 0.5, np.float32)]


def _copy_kernel(operands, results, attributes) -> None:
    (out,) = results
    view = np.ctypeslib.as_array((ctypes.c_float * 8).from_address(out.data))
    view[:4] = _SOURCES[0] + _SOURCES[1]
    view[4:] = _SOURCES[1]


def _copy_program(operands, results, attributes):
    p = _onednn_program
    first, second = (s.ctypes.data for s in _SOURCES)
    # Two empty parts (one handed to a lane), then the result's two halves: buffer 1 is the result.
    return p.Program([[], []], [p.COPY, 1, 0, first, 4, p.ADD, 1, 0, second, 4, p.COPY, 1, 16, second, 4])


def _failing_program(operands, results, attributes):
    # A null primitive: dnnl_primitive_execute returns dnnl_invalid_arguments (2) without touching anything.
    return _onednn_program.Program([[_onednn_program.EXECUTE, 0, 0, 0, 0]])


def _ffi(target: str):
    # Registered here, not at import: registering starts this process's native state (compiling it), which
    # a worker that never runs these tests should not pay for.
    _onednn_native.register_cpu_handler("jax_impl_test_native_copy", _copy_kernel, _copy_program)
    _onednn_native.register_cpu_handler("jax_impl_test_native_fail", _copy_kernel, _failing_program)
    return jax.jit(lambda x: jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((8,), jnp.float32))(x))


def test_copy_and_add_write_the_calls_result_at_its_offsets():
    expected = np.concatenate([_SOURCES[0] + _SOURCES[1], _SOURCES[1]])
    call = _ffi("jax_impl_test_native_copy")
    np.testing.assert_array_equal(np.asarray(call(jnp.ones(3))), expected)  # the Python kernel
    before = _first_calls()
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(call(jnp.ones(3))), expected)  # the program
    assert _first_calls() == before


def test_a_failing_onednn_call_raises_in_the_caller_with_its_status():
    call = _ffi("jax_impl_test_native_fail")
    jax.block_until_ready(call(jnp.ones(2)))  # the Python kernel, which leaves the failing program
    with pytest.raises(Exception, match=r"jax_impl_test_native_fail: oneDNN execution failed \(dnnl_status_t 2\)"):
        jax.block_until_ready(call(jnp.ones(2)))


def test_environment_variable_keeps_every_call_on_the_python_path():
    code = ("import jax, jax.numpy as jnp; from jax_impl import _onednn_native as n;"
            "from jax_impl.nn import _conv_onednn as c;"
            "f = jax.jit(lambda a, b: c.conv2d(a, b, (1, 1), ((0, 0), (0, 0)), (1, 1)));"
            "x, w = jnp.ones((2, 3, 8, 8)), jnp.ones((4, 3, 3, 3)); f(x, w); y = f(x, w);"
            "print(n.available(), n.running(), float(y[0, 0, 0, 0]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "JAX_IMPL_ONEDNN_NATIVE": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "27.0"]


_CACHED_RUN = """
import numpy as np, jax, torch
from jax_impl import _onednn_compiled, _onednn_native
from jax_impl.nn import _conv_onednn
rng = np.random.default_rng(3)
x, w = rng.standard_normal((4, 8, 10, 10), dtype=np.float32), rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
f = jax.jit(lambda a, b: _conv_onednn.conv2d(a, b, (1, 1), ((1, 1), (1, 1)), (1, 1)))
first, later = np.asarray(f(x, w)), np.asarray(f(x, w))
ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
assert _onednn_native.running() and _onednn_native.programs() == 1
assert np.array_equal(first, later) and np.abs(later - ref).max() <= 1e-5 * np.abs(ref).max()
print(*(c.cache_hits for c in _onednn_compiled.compiled().values()))
"""


# Slow tier: two fresh processes, the first compiling (about 12 s). Every test process after the first one
# of a run loads the code from the checkout's cache, so the default tier runs the cached code as well.
@pytest.mark.slow
def test_a_second_process_loads_the_compiled_code_from_numbas_cache(tmp_path):
    """The handler's core and the lanes hold no address of the process that compiled them: the first process
    compiles them into numba's cache, the next loads them (no compile) and its calls run natively, with the
    first call's results and torch's."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    hits = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CACHED_RUN], capture_output=True, text=True, timeout=300,
                             env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        hits.append(out.stdout.split())
    assert hits == [["0", "0"], ["1", "1"]]
