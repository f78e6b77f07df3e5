"""examples/loops/dcgan.py: pytorch/examples' DCGAN loop on torch against the same loop on JAX.

Both sides draw every number from torch's stream in the example's order (layer inits, ``weights_init``'s
normals, the fixed noise, the loader's shuffles, a latent batch per step) and step D on real and detached
fake batches, then G through the stepped D, with both networks in train mode (D's BatchNorm statistics move
three times a step). Compared: the five per-step scalars, the networks' state dicts every 10 steps and at
the last, the fixed-noise samples at each epoch's start.
"""

from __future__ import annotations

import pytest

import parity
from examples.loops import dcgan
from parity.floor import FLOOR_FACTOR
from tests.examples.floor_verdict import floor_ratios
from tests.examples.histories import worst
from tests.examples.torch_threads import one_thread
from tests.port.corpus import dcgan as corpus


def _torch(**kwargs):
    with one_thread():
        return dcgan.train_torch(**kwargs)


@pytest.mark.slow  # one step compile, ~7 s; the default tier records 2 steps through the command line below
def test_three_steps_float64_match_torch():
    """Smoke: three steps (a sample at step 0, states at 0 and 2), every value within 1e-12 of torch's
    (measured 1.5e-15, G's first BatchNorm bias)."""
    name, value = worst(dcgan.train_jax(steps=3), _torch(steps=3))
    assert value <= 1e-12, (name, value)


def test_torch_side_builds_the_examples_networks():
    """At 64x64 the torch side's networks are the example's own (copied verbatim in tests/port/corpus)."""
    config = dcgan.Config(nz=corpus.nz, ngf=corpus.ngf, ndf=corpus.ndf, nc=corpus.nc, image_size=64)
    Generator, Discriminator, _ = dcgan.torch_networks(config)
    assert repr(Generator()) == repr(corpus.Generator(corpus.ngpu))
    assert repr(Discriminator()) == repr(corpus.Discriminator(corpus.ngpu))


@pytest.mark.slow
def test_the_examples_own_networks_float64_match_torch():
    """The example's layers (64x64 RGB, five transposed convolutions, four BatchNorms in G, three in D) for six
    steps, an epoch of five batches and a new one: within 1e-10 (measured 2.8e-15, a running mean of D)."""
    config = dcgan.Config(nc=3, image_size=64, num_images=40, batch_size=8)
    name, value = worst(dcgan.train_jax(steps=6, config=config), _torch(steps=6, config=config))
    assert value <= 1e-10, (name, value)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])  # measured on 0-3; two of them for the slow tier's time
def test_fifty_steps_float64_match_torch(seed):
    """50 steps, nearly four epochs of 13 batches (the last of 8 images): every scalar, state and sample within
    1e-10 of torch's relative to its scale (measured 9.5e-16 to 6.6e-15 over these seeds)."""
    torch_run = _torch(steps=50, seed=seed)
    assert sum("fake_fixed" in r for r in torch_run) == 4 and any(r["D_x"] != torch_run[0]["D_x"] for r in torch_run)
    name, value = worst(dcgan.train_jax(steps=50, seed=seed), torch_run)
    assert value <= 1e-10, (name, value)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])  # measured on 0-3; two of them for the slow tier's time
def test_fifty_steps_float32_within_torchs_floor(seed):
    """float32: every recorded value within FLOOR_FACTOR times torch's own float32 distance from its float64
    twin (the same float32 draws, computed in float64), grouped as parity.compare_runs groups them (a step's
    tensors against their worst floor, scalars against the worst scalar floor so far). Measured: largest
    ratio 1.4 to 2.3 over these seeds (the D(x) / D(G(z)) means)."""
    torch32 = _torch(steps=50, dtype="float32", seed=seed)
    torch64 = _torch(steps=50, dtype="float64", draw_dtype="float32", seed=seed)
    ratios = floor_ratios(dcgan.train_jax(steps=50, dtype="float32", seed=seed), torch32, torch64)
    over = {key: ratio for key, ratio in ratios.items() if ratio > FLOOR_FACTOR}
    assert not over, over


@pytest.mark.slow  # ~7 s of compiling; the default tier records the VAE, word LM, REINFORCE this way
def test_command_line_records_both_sides_and_compare_runs_passes(tmp_path):
    """``python -m examples.loops.dcgan`` on each side, then ``parity.compare_runs`` on the two folders: the
    networks, samples and scalars, and the two Adams' states under torch's names (BatchNorm weights and
    biases in torch's order)."""
    with one_thread():
        dcgan.main(["--framework", "torch", "--out", str(tmp_path / "torch"), "--steps", "2"])
    dcgan.main(["--framework", "jax", "--out", str(tmp_path / "jax"), "--steps", "2"])
    report = parity.compare_runs(tmp_path / "torch", tmp_path / "jax")
    assert report.passed, report
    assert {"optD.state.2.exp_avg", "optG.state.2.exp_avg_sq", "fake_fixed"} <= set(report.recordings["last"])


@pytest.mark.slow
def test_float32_recordings_pass_compare_runs_against_torchs_floor(tmp_path):
    """The command-line float32 path over 15 steps (into the second epoch): torch float32, its float64 twin
    (``--draw-dtype float32``) as the floor, JAX float32; ``parity.compare_runs`` passes."""
    runs = {"t32": ("torch", "float32", []), "t64": ("torch", "float64", ["--draw-dtype", "float32"]),
            "j32": ("jax", "float32", [])}
    for name, (framework, dtype, extra) in runs.items():
        with one_thread():
            dcgan.main(["--framework", framework, "--out", str(tmp_path / name), "--dtype", dtype, "--steps", "15",
                        *extra])
    report = parity.compare_runs(tmp_path / "t32", tmp_path / "j32", floor=tmp_path / "t64")
    assert report.passed, report.recordings["first_divergence"]
