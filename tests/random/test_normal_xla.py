"""jax_impl.random._normal_xla: the compiled NormalFill16 gives the NumPy module's numbers, and torch's.

The NumPy module (:mod:`jax_impl.random._normal`) is torch's kernel bit for bit (test_normal.py). Here the
compiled transform is held to it on every float32 uniform torch can draw (slow tier), on seeded grids of
blocks, means and stds, on the zero and subnormal results that XLA:CPU's flushed denormals could touch, and
through the generator against torch itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jax_impl.random import Generator, _normal, _normal_xla

pytestmark = pytest.mark.skipif(_normal_xla._kernels() is None,
                                reason="torch takes the C library's functions on this CPU: no compiled route")


def _uniforms(rng: np.random.Generator, rows: int) -> np.ndarray:
    return rng.integers(0, 2**24, (rows, 16)).astype(np.float32) * np.float32(2.0**-24)


def _compiled(blocks: np.ndarray, mean: float, std: float) -> tuple[np.ndarray, bool]:
    """The kernel itself on ``blocks`` (a power-of-two row count), without :func:`fill16`'s policy."""
    return _normal_xla._kernels()(blocks, blocks.shape[0], np.float32(mean), np.float32(std))


@pytest.fixture
def fresh_buckets(monkeypatch):
    """Every bucket asked for anew and compiled from its second request, whatever its size, and the route on,
    whatever ran before in this process."""
    monkeypatch.setattr(_normal_xla, "_SPENT", {})
    monkeypatch.setattr(_normal_xla, "_CHECKED", set())
    monkeypatch.setattr(_normal_xla, "_BROKEN", [])
    monkeypatch.setattr(_normal_xla, "_COMPILE_BLOCKS", 0)
    monkeypatch.setattr(_normal_xla, "_HALVES_CHECKED", set())


def test_large_buckets_are_compiled_once_numpy_has_spent_a_compiles_time(fresh_buckets, monkeypatch):
    """A bucket of at most ``_EAGER_BLOCKS`` rows compiles from its second request; a larger one stays in NumPy
    until NumPy has transformed ``_COMPILE_BLOCKS`` rows of it (a model's initial weights pay no compile), and
    every result is NumPy's either way."""
    monkeypatch.setattr(_normal_xla, "_COMPILE_BLOCKS", 5000)
    rng = np.random.default_rng(11)
    small = _uniforms(rng, _normal_xla._EAGER_BLOCKS)
    assert _normal_xla.fill16(small, 0.0, 1.0) is None
    assert _normal_xla.fill16(small, 0.0, 1.0) is not None
    large = _uniforms(rng, 2000)  # bucket 2048: compiled from the fourth request (3 x 2000 rows >= 5000)
    for _ in range(3):
        assert _normal_xla.fill16(large, 0.0, 1.0) is None
    got = _normal_xla.fill16(large, 0.0, 1.0)
    np.testing.assert_array_equal(got.view(np.uint32), _normal.fill16(large, 0.0, 1.0).view(np.uint32))
    assert _normal_xla._SPENT[2048] == 6000


@pytest.mark.slow
def test_every_uniform_torch_draws_gives_numpys_numbers():
    """All 2**24 float32 uniforms ``k / 2**24`` as ``u1`` (the logarithm's input ``1 - u``) and, shuffled, as ``u2``
    (the sine and cosine's): both compiled programs' results are NumPy's, bit for bit."""
    everything = np.arange(2**24, dtype=np.int64).astype(np.float32) * np.float32(2.0**-24)
    shuffled = np.random.default_rng(0).permutation(everything)
    blocks = np.concatenate([everything.reshape(-1, 8), shuffled.reshape(-1, 8)], axis=1)
    for start in range(0, blocks.shape[0], 1 << 16):
        run = blocks[start:start + (1 << 16)]
        expected = _normal.fill16(run, 0.0, 1.0)
        low = np.abs(expected) < np.finfo(np.float32).tiny
        # Both compiled programs: halves joined by XLA (large draws) and by the host (runs of 512 rows).
        got, normal = _compiled(run, 0.0, 1.0)
        parts = [_compiled(run[i:i + 512], 0.0, 1.0) for i in range(0, run.shape[0], 512)]
        assert normal == (not low.any()) == all(part_normal for _, part_normal in parts)
        np.testing.assert_array_equal(got.view(np.uint32)[~low], expected.view(np.uint32)[~low])
        joined = np.concatenate([part for part, _ in parts])
        np.testing.assert_array_equal(joined.view(np.uint32)[~low], expected.view(np.uint32)[~low])


@pytest.mark.parametrize("rows", [1, 5, 16, 17, 100, 1023, 1024, 1025, 5000, 70000])
def test_fill16_is_numpys_for_every_bucket_mean_and_std(rows, fresh_buckets):
    """The first call of a bucket is NumPy's (``None``), the next ones compiled; padded, cut into runs of
    2**16 rows, zero uniforms (exact zero results with mean 0) included."""
    rng = np.random.default_rng(rows)
    assert _normal_xla.fill16(_uniforms(rng, rows), 0.0, 1.0) is None
    for mean, std in ((0.0, 1.0), (0.5, 0.01), (-3.0, 7.0), (0.0, 1e-30), (1e30, 1e30), (0.0, 0.0)):
        blocks = _uniforms(rng, rows)
        blocks[0, 3] = blocks[-1, 12] = 0  # u1 = 1 (radius 0) and u2 = 0 (sine 0)
        got = _normal_xla.fill16(blocks, mean, std)
        assert got is not None
        np.testing.assert_array_equal(got.view(np.uint32), _normal.fill16(blocks, mean, std).view(np.uint32))


def test_results_a_flushed_denormal_could_touch_are_numpys(fresh_buckets):
    """A mean of minus a result gives results near zero; subnormal means and stds are left to NumPy."""
    rng = np.random.default_rng(3)
    blocks = _uniforms(rng, 64)
    first = float(_normal.fill16(blocks, 0.0, 1.0)[0, 0])
    tiny = float(np.finfo(np.float32).tiny)
    for mean, std in ((-first, 1.0), (-first * (1 + 2.0**-23), 1.0), (tiny / 3, 1.0), (0.0, tiny / 5)):
        _normal_xla.fill16(blocks, mean, std)  # the bucket's first request
        got = _normal_xla.fill16(blocks, mean, std)
        expected = _normal.fill16(blocks, mean, std)
        if got is None:  # subnormal mean or std
            assert 0 < abs(np.float32(mean)) < tiny or 0 < abs(np.float32(std)) < tiny
            continue
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_a_compiled_result_that_is_not_numpys_turns_the_route_off(fresh_buckets, monkeypatch):
    rng = np.random.default_rng(4)
    blocks = _uniforms(rng, 32)
    kernels = _normal_xla._kernels()
    monkeypatch.setattr(_normal_xla, "_kernels", lambda: lambda b, *a: (lambda r: (r[0] + 1, r[1]))(kernels(b, *a)))
    assert _normal_xla.fill16(blocks, 0.0, 1.0) is None  # first request
    assert _normal_xla.fill16(blocks, 0.0, 1.0) is None  # checked, not NumPy's: off
    assert _normal_xla._BROKEN and _normal_xla.fill16(blocks, 0.0, 1.0) is None


@pytest.mark.parametrize("n", [16, 40, 4099, 2**20 + 37])
def test_repeated_draws_through_the_compiled_route_are_torchs(n, fresh_buckets):
    """A step's noise: the same size drawn again and again (compiled from the second draw), float32 and the
    half types whose uniforms are float32 too, against torch's generator, state bytes included."""
    for np_dtype, torch_dtype in ((np.float32, torch.float32), (np.float16, torch.float16)):
        t, g = torch.Generator().manual_seed(n), Generator(n)
        for mean, std in ((0.0, 1.0), (0.0, 1.0), (0.0, 1.0), (2.0, 0.5)):
            theirs = torch.empty(n, dtype=torch_dtype).normal_(mean, std, generator=t)
            ours = g.normal(n, mean, std, np_dtype)
            assert ours.tobytes() == theirs.numpy().tobytes()
            assert bytes(g.get_state()) == bytes(t.get_state().numpy())


def test_draws_inside_a_host_callback_stay_in_numpy(fresh_buckets, monkeypatch):
    """Under a plain ``jax.jit`` a staged normal is an ordered host callback, which must not dispatch a
    computation of its own: the callback's draws take NumPy's transform, and are torch's."""
    import jax
    import jax.numpy as jnp

    import jax_impl.random as jr
    from jax_impl.random import staged

    calls = []
    original = _normal_xla.fill16
    monkeypatch.setattr(_normal_xla, "fill16", lambda *a: calls.append(a) or original(*a))
    jr.manual_seed(5)
    torch.manual_seed(5)
    step = jax.jit(lambda x: staged.randn_like(x) * 2 + staged.randn_like(x))
    x = jnp.zeros((64, 20))
    for _ in range(3):
        ours = np.asarray(step(x))
        theirs = (torch.randn(64, 20) * 2 + torch.randn(64, 20)).numpy()
        np.testing.assert_array_equal(ours, theirs)
    assert not calls
    assert _normal_xla.fill16 is not original and jr.randn(64, 20).shape == (64, 20) and calls  # outside: asked


def test_host_draws_made_while_a_function_is_traced_are_values(fresh_buckets):
    """A ported forward that calls ``torch.randn`` draws on the host while jax traces it: the compiled
    transform runs then and there (its result a value, not an operation of the traced function)."""
    import jax
    import jax.numpy as jnp

    t, g = torch.Generator().manual_seed(9), Generator(9)
    drawn = []

    def forward(x):
        noise = g.randn((64, 20))
        drawn.append(noise)
        return x + jnp.asarray(noise)

    for i in range(3):
        jax.make_jaxpr(lambda x: forward(x))(jnp.zeros((64, 20)))  # a new function: traced again
        assert len(drawn) == i + 1 and drawn[-1].tobytes() == torch.randn(64, 20, generator=t).numpy().tobytes()
    assert _normal_xla._CHECKED  # the later draws took the compiled route


@pytest.mark.parametrize("shape", [(128, 20), (64, 100, 1, 1), (7, 9), (16,), (33,), (3, 5, 7), (8192,)])
def test_a_steps_noise_in_halves_is_torchs(shape, fresh_buckets):
    """A step's ``randn`` as ``jit_with_host_draws`` hands it over: the transform's halves (NumPy's for a size's
    first draws, then arrays left on the device), joined in the step into torch's numbers, the redrawn last
    block of a size that is not a multiple of 16 included; the generator's state is torch's at every draw."""
    import jax

    from jax_impl.random.host_draws import Draw

    t, g = torch.Generator().manual_seed(len(shape)), Generator(len(shape))
    draw = Draw("normal", (shape, 0.0, 1.0, "float32"), shape, "float32")
    form = g.fed_form(draw)
    join = jax.jit(lambda fed: g.from_fed(draw, fed))
    on_device = []
    for _ in range(4):
        fed = g.feed(draw)
        assert [(h.shape, h.dtype) for h in fed] == [(f.shape, f.dtype) for f in form]
        on_device.append(isinstance(fed[0], jax.Array))
        ours, theirs = join(fed), torch.randn(*shape, generator=t)
        assert np.asarray(ours).tobytes() == theirs.numpy().tobytes()
        assert bytes(g.get_state()) == bytes(t.get_state().numpy())
    assert not on_device[0] and on_device[2:] == [True, True]  # once the size's bucket is compiled and checked


def test_only_small_standard_float32_normals_come_in_halves():
    from jax_impl.random.host_draws import Draw

    g = Generator(0)
    assert g.fed_form(Draw("normal", ((8, 1024), 0.0, 1.0, "float32"), (8, 1024), "float32")) is not None
    for args, shape in [(((8, 1025), 0.0, 1.0, "float32"), (8, 1025)), (((15,), 0.0, 1.0, "float32"), (15,)),
                        (((64,), 0.5, 1.0, "float32"), (64,)), (((64,), 0.0, 2.0, "float32"), (64,)),
                        (((64,), 0.0, 1.0, "float64"), (64,))]:
        assert g.fed_form(Draw("normal", args, shape, args[-1])) is None, args


def test_device_halves_that_are_not_numpys_are_replaced_and_turn_the_route_off(fresh_buckets, monkeypatch):
    """The first device halves of a bucket are checked: wrong ones give NumPy's numbers, and later draws stay
    on the host."""
    import jax

    from jax_impl.random.host_draws import Draw

    kernels = _normal_xla._kernels()

    class Wrong:
        def __call__(self, *args):
            return kernels(*args)

        def halves(self, blocks, rows):
            (c, s), flag = kernels.halves(blocks, rows)
            return (c + 1, s), flag

    monkeypatch.setattr(_normal_xla, "_kernels", lambda: Wrong())
    monkeypatch.setattr(_normal_xla, "_HALVES_CHECKED", set())
    t, g = torch.Generator().manual_seed(2), Generator(2)
    draw = Draw("normal", ((40, 12), 0.0, 1.0, "float32"), (40, 12), "float32")
    for _ in range(4):
        fed = g.feed(draw)
        ours = np.asarray(jax.jit(lambda f: g.from_fed(draw, f))(fed))
        assert ours.tobytes() == torch.randn(40, 12, generator=t).numpy().tobytes()
    assert _normal_xla._BROKEN and isinstance(fed[0], np.ndarray)
