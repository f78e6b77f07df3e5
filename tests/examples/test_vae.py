"""examples/loops/vae.py: pytorch/examples' VAE loop on torch against the same loop on JAX.

Both sides draw every number from torch's stream in the example's order (Linear inits, the loader's
shuffles, ``randn_like(std)`` in every forward, the test passes' noise, the samples' latents). Compared:
the per-step loss, the model's state dict every 10 steps and at the last, each epoch's test loss and sample.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import parity
from examples.loops import vae
from parity.floor import FLOOR_FACTOR
from tests.examples.floor_verdict import floor_ratios
from tests.examples.histories import worst
from tests.examples import torch_variants
from tests.examples.torch_threads import one_thread
from tests.port.corpus import vae as corpus

def _torch(**kwargs):
    with one_thread():
        return vae.train_torch(**kwargs)


# torch's float32 matmuls are MKL's sgemm, whose kernel (and so its summation order) MKL picks by the CPU: an
# Intel Xeon's AVX-512 kernel and an AMD EPYC's kernel round otherwise. MKL's conditional-numerical-
# reproducibility branch COMPATIBLE (``MKL_CBWR=COMPATIBLE``: SSE2 code, documented to return the same results
# on Intel and compatible CPUs at a fixed thread count) is a torch float32 code path whose rounding does not
# depend on the CPU's maker. The branch is fixed when MKL loads, so the run is a subprocess.
_MKL_COMPATIBLE_ENV = {"MKL_CBWR": "COMPATIBLE"}


@pytest.mark.slow  # the default tier records 2 steps through the command line below
def test_three_steps_float64_match_torch():
    """Smoke: three steps (states at the first and last), every value within 1e-12 of torch's."""
    name, value = worst(vae.train_jax(steps=3), _torch(steps=3))
    assert value <= 1e-12, (name, value)


def test_torch_side_builds_the_examples_model():
    """At 784 inputs the torch side's model is the example's own (copied verbatim in tests/port/corpus)."""
    import torch

    assert repr(vae.torch_vae(vae.Config(features=784), torch.float32)()) == repr(corpus.VAE())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 0])  # measured on 0-3; the example's seed and one more for the time
def test_fifty_steps_float64_match_torch(seed):
    """50 steps of batch 128, four epochs and two batches (each ending with the held-out loss and a sample):
    every value within 1e-10 of torch's relative to its scale (measured 1.7e-15 to 5.8e-15 over these seeds)."""
    torch_run = _torch(steps=50, seed=seed)
    assert sum("test_loss" in r for r in torch_run) == 4
    name, value = worst(vae.train_jax(steps=50, seed=seed), torch_run)
    assert value <= 1e-10, (name, value)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 0])  # measured on 0-3; the example's seed and one more for the time
def test_fifty_steps_float32_within_torchs_floor(seed):
    """float32: every recorded value within FLOOR_FACTOR times torch's own float32 distance from its float64
    twin (the same float32 draws, computed in float64), grouped as parity.compare_runs groups them, the floor
    taken over two of torch's float32 code paths: MKL's default branch (the distances are measured from this
    run) and its COMPATIBLE branch; a name's floor is the farther of the two from float64.

    One path's floor is one draw of rounding, and on seed 1 (the example's default) one ill-conditioned entry
    draws it: fc1's weight of hidden unit 10 and pixel 6 (a border pixel few digits touch). Its first gradient
    is a sum over the batch whose terms cancel (sum of |terms| 0.021, sum 8.9e-8: condition number 2.4e5, the
    next largest of the 25600 entries 6.3e3), so float32 carries it to about 1.4% at best, and Adam's first
    step g / (|g| + 1e-8) at |g| = 9e-8 passes that on to the weight (the step's sensitivity to that rounding
    is 1.3e-3 lr there, 3.5e-7 lr at most elsewhere). Where each float32 run puts the entry is chance, and it
    stays there: 8.7e-7 from float64 under MKL's default branch on an AMD EPYC, 6.3e-6 on an Intel Xeon, 4.9e-6
    under COMPATIBLE, 1.6e-5 for JAX. Against the default branch alone the largest ratio is 3.6 on the Xeon and
    17.9 on the EPYC; with COMPATIBLE in the floor, 3.2 on the EPYC (fc1's weight at step 10), and on the Xeon
    no more than its 3.6 (the floor only grows). Other seeds on the EPYC: 1.9 on seed 0, 2.3 on 2, 2.0 on 3
    (the samples). torch's other paths on the EPYC (2 threads, mkldnn off, MKL_ENABLE_INSTRUCTIONS=AVX2,
    SSE4_2 or AVX512, ATEN_CPU_CAPABILITY=avx2) run bit for bit as the default; ATEN_CPU_CAPABILITY=default
    moves some of fc1's entries by whole Adam steps from step 20 on (6.7e-2 from float64 at step 49 on seed 1),
    a floor that would judge nothing at those steps, so it is not taken. The BCE sum adds in torch's order
    (jax_impl's loss reductions): in XLA's order the loss of each epoch's last batch of 30 reached 5 to 7 times
    the floor."""
    compatible = torch_variants.start("vae", _MKL_COMPATIBLE_ENV, steps=50, dtype="float32", seed=seed)
    torch32 = _torch(steps=50, dtype="float32", seed=seed)
    torch64 = _torch(steps=50, dtype="float64", draw_dtype="float32", seed=seed)
    run = vae.train_jax(steps=50, dtype="float32", seed=seed)
    ratios = floor_ratios(run, torch32, torch64, spread=[torch_variants.records_of(compatible)])
    over = {key: ratio for key, ratio in ratios.items() if ratio > FLOOR_FACTOR}
    assert not over, over


def test_command_line_records_both_sides_and_compare_runs_passes(tmp_path):
    """``python -m examples.loops.vae`` on each side, then ``parity.compare_runs`` on the two folders, Adam's
    state included under torch's names."""
    with one_thread():
        vae.main(["--framework", "torch", "--out", str(tmp_path / "torch"), "--steps", "2"])
    vae.main(["--framework", "jax", "--out", str(tmp_path / "jax"), "--steps", "2"])
    report = parity.compare_runs(tmp_path / "torch", tmp_path / "jax")
    assert report.passed, report
    assert {"optimizer.state.0.exp_avg", "optimizer.state.9.exp_avg_sq"} <= set(report.recordings["last"])


@pytest.mark.slow
def test_float32_recordings_pass_compare_runs_against_torchs_floor(tmp_path):
    """The command-line float32 path: torch float32, its float64 twin (``--draw-dtype float32``) as the floor,
    JAX float32; ``parity.compare_runs`` passes by the floor (``rtol=0``: every name judged against
    FLOOR_FACTOR times torch's own float32 distance). torch's float32 recording runs under MKL's COMPATIBLE
    branch (``MKL_CBWR=COMPATIBLE``, one thread), which MKL documents as rounding alike on Intel and AMD
    CPUs; compare_runs takes one floor recording, and under MKL's default branch that floor is where one
    ill-conditioned entry of fc1's weight lands by chance (see the test above: largest ratio 3.6 on an Intel
    Xeon, 17.9 on an AMD EPYC). Measured: largest ratio 2.4 (fc1's weight at step 10; 7.2e-5 against its floor
    3.0e-5 at the last step). The same comparison on other seeds (not run here, the command line's seed is
    1): 2.1 on seed 0, 2.4 on 3, but parted on 2 at step 30 (fc1's weight 2.0e-5 against a floor of 7.7e-7),
    where JAX and the default branch share one hidden unit's departure from float64 (unit 256: 2.9e-6 in fc1's
    weight) that COMPATIBLE and float64 do not take: a single branch's floor is a draw, which the test above
    judges over both branches (2.3 on seed 2)."""
    runs = {"t64": ("torch", "float64", ["--draw-dtype", "float32"]), "j32": ("jax", "float32", [])}
    t32 = subprocess.Popen([sys.executable, "-m", "examples.loops.vae", "--framework", "torch",
                            "--out", str(tmp_path / "t32"), "--dtype", "float32"],
                           env=torch_variants.subprocess_env(_MKL_COMPATIBLE_ENV), cwd=torch_variants.ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for name, (framework, dtype, extra) in runs.items():
        with one_thread():
            vae.main(["--framework", framework, "--out", str(tmp_path / name), "--dtype", dtype, *extra])
    _, err = t32.communicate()
    assert t32.returncode == 0, err.decode()
    report = parity.compare_runs(tmp_path / "t32", tmp_path / "j32", floor=tmp_path / "t64", rtol=0.0)
    assert report.passed and report.passed_by == "floor", report.recordings["first_divergence"]
