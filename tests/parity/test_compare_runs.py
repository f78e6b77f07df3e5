"""parity.compare_runs and `parity compare`: two recordings of the GAN loop (torch and jax_impl + flax.nnx).

The float64 pair agrees within 1e-10; a torch run perturbed after step 7 parts at step 7 at the perturbed
tensor; a float32 pair passes by torch's own float32-vs-float64 distance; names and steps on one side
only are listed; the CLI exits 0 / 1 / 2.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import parity
from parity.cli import main
from parity.floor import FLOOR_FACTOR
from parity.recording import RecordingError
from tests.parity._gan_loops import jax_gan, torch_gan
from tests.parity.test_recorder import gan_recordings


@pytest.fixture(scope="module")
def gan(tmp_path_factory):
    return gan_recordings(tmp_path_factory)


def test_float64_pair_passes_within_1e10(gan, tmp_path):
    """Measured worst 1.2e-15 (optD.state.3.exp_avg at step 19); the losses 2.2e-16."""
    report = parity.compare_runs(gan["torch"], gan["jax"], out=tmp_path / "out")
    assert report.passed and report.passed_by == "tolerance" and report.rtol == 1e-10
    assert report.first_divergent_step is None and report.recordings["first_divergent_name"] is None
    assert [e.steps for e in report.epochs] == [0, 5, 7, 10, 15, 19]
    assert max(e.param_max_rel for e in report.epochs) <= 1e-10
    assert len(report.steps) == 20 and report.steps[0]["torch_loss"] == pytest.approx(report.steps[0]["jax_loss"])
    assert report.verdict().startswith("PASSED: parameters within rtol 1e-10")
    data = json.loads((tmp_path / "out" / "report.json").read_text())  # strict JSON: json.loads refuses NaN
    assert data["passed"] and data["recordings"]["names_only_in_a"] == [] and data["verdict"] == report.verdict()
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"report.json", "report.md", "loss.png",
                                                              "divergence.png"}


def test_a_perturbation_is_named_at_its_step(gan, tmp_path):
    """torch's G gets 1e-3 on its last bias after step 7's update: the report names step 7 and netG.2.bias (the
    first name in recording order that parts there); the losses part from step 8."""
    report = parity.compare_runs(gan["perturbed"], gan["jax"], out=tmp_path)
    assert not report.passed and report.first_divergent_step == 7
    assert report.recordings["first_divergent_name"] == report.first_divergent_layer == "netG.2.bias"
    assert [m["name"] for m in report.recordings["divergent_step_names"]] == ["netG.2.bias"]
    assert report.verdict().startswith("FAILED: the runs part at step 7: netG.2.bias first")
    assert report.steps[7]["torch_loss"] == pytest.approx(report.steps[7]["jax_loss"], rel=1e-12)
    assert report.steps[8]["torch_loss"] != pytest.approx(report.steps[8]["jax_loss"], rel=1e-6)
    text = (tmp_path / "report.md").read_text()
    assert "First divergent step: 7; the first name that parts there: `netG.2.bias`" in text


def test_names_and_steps_on_one_side_only_are_listed(tmp_path):
    with parity.Recorder(tmp_path / "a", "numpy", keep_every=2) as rec:
        for i in range(6):
            rec.step(i, loss=1.0 / (i + 1), w=np.full(3, float(i)), extra_a=np.zeros(2))
    with parity.Recorder(tmp_path / "b", "numpy", keep_every=2) as rec:
        for i in range(2, 9):
            rec.step(i, loss=1.0 / (i + 1), w=np.full(3, float(i)), only_b=float(i), shaped=np.zeros(2))
    report = parity.compare_runs(tmp_path / "a", tmp_path / "b", out=tmp_path / "out")
    assert report.passed, report.message
    rec = report.recordings
    assert rec["names_only_in_a"] == ["extra_a"] and rec["names_only_in_b"] == ["only_b", "shaped"]
    assert rec["steps_only_in_a"] == [0, 1] and rec["steps_only_in_b"] == [6, 7, 8]
    assert rec["tensor_steps_compared"] == [2, 4]  # a's last (5) is not among b's kept steps
    assert "steps only in A: 0-1" in report.message and "steps only in B: 6-8" in report.message
    text = (tmp_path / "out" / "report.md").read_text()
    assert "Names only in B (not compared): `only_b`, `shaped`." in text and "Steps only in A: 0-1." in text
    unclosed = parity.Recorder(tmp_path / "c", "numpy", keep_every=2)  # a run killed before close()
    for i in range(3):
        unclosed.step(i, loss=1.0 / (i + 1), w=np.full(3, float(i)))
    report = parity.compare_runs(tmp_path / "a", tmp_path / "c")
    assert report.passed and "recording B was not closed (interrupted at step 2)" in report.message
    assert report.recordings["tensor_steps_compared"] == [0, 2]


def test_nan_and_shape_differences_part(tmp_path):
    for name, w in (("a", np.array([1.0, np.nan])), ("b", np.array([1.0, 2.0])), ("c", np.ones(3))):
        with parity.Recorder(tmp_path / name, "numpy", keep_every=1) as rec:
            rec.step(0, loss=float(np.nan) if name == "a" else 1.0, w=w)
    report = parity.compare_runs(tmp_path / "a", tmp_path / "b")
    assert not report.passed and report.first_divergent_layer == "loss"
    assert math.isinf(report.recordings["first_divergence"]["ours"])
    report = parity.compare_runs(tmp_path / "b", tmp_path / "c")
    assert not report.passed and report.first_divergent_layer == "w"
    assert parity.compare_runs(tmp_path / "a", tmp_path / "a").passed  # NaN on both sides is no difference


def test_recordings_without_a_common_step_are_bad_input(tmp_path):
    for name, steps in (("a", range(0, 3)), ("b", range(5, 7))):
        with parity.Recorder(tmp_path / name, "numpy") as rec:
            for i in steps:
                rec.step(i, loss=1.0)
    with pytest.raises(RecordingError, match="share no recorded step"):
        parity.compare_runs(tmp_path / "a", tmp_path / "b")


def test_cli_exit_codes(gan, tmp_path, capsys):
    assert main(["compare", str(gan["torch"]), str(gan["jax"]), "--out", str(tmp_path / "ok")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**PASSED: parameters within rtol 1e-10") and (tmp_path / "ok" / "report.md").exists()
    assert main(["compare", str(gan["perturbed"]), str(gan["jax"]), "--out", str(tmp_path / "bad")]) == 1
    assert "FAILED: the runs part at step 7: netG.2.bias first" in capsys.readouterr().out
    assert main(["compare", str(gan["perturbed"]), str(gan["jax"]), "--rtol", "1", "--out",
                 str(tmp_path / "loose")]) == 0
    capsys.readouterr()
    for args, message in (([str(tmp_path / "missing"), str(gan["jax"])], "recording not found"),
                          ([str(tmp_path), str(gan["jax"])], "is not a parity recording"),
                          ([str(gan["torch"]), str(gan["jax"]), "--rtol", "-1"], "--rtol must be >= 0"),
                          ([str(gan["torch"]), str(gan["jax"]), "--floor", str(tmp_path / "nope")], "not found")):
        assert main(["compare", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow  # four more GAN runs, two of them float32 JAX compiles: about 8 s
def test_float32_pair_passes_by_torchs_floor(tmp_path):
    """torch float32 vs JAX float32, 40 steps, judged at rtol 1e-7 (below float32's spread after one Adam step):
    beyond rtol, within FLOOR_FACTOR x torch's own float32-vs-float64 distance. Measured: the worst tensor
    1.4e-6 (netD.2.bias, step 39) against torch's own worst 4.3e-6; the largest ratio 1.8 (loss_d at step 22
    against the worst scalar floor so far), tensors 1.5 (step 0: Adam's exp_avg_sq). Without the floor the
    same pair fails at rtol 1e-7 and passes at float32's default 1e-4; a run perturbed by 1e-3 after step 7
    fails at step 7 even with the floor."""
    from parity import strict_numerics

    kw = {"steps": 40, "keep_every": 10, "keep_steps": [7]}
    with strict_numerics(0, x64=True):
        torch_gan(tmp_path / "t64", dtype="float64", **kw)
    with strict_numerics(0, x64=False):  # torch's sqrt matched for jax_impl's float32 Adam
        torch_gan(tmp_path / "t32", dtype="float32", **kw)
        torch_gan(tmp_path / "t32-perturbed", dtype="float32", perturb_at=7, **kw)
        jax_gan(tmp_path / "j32", dtype="float32", **kw)
    report = parity.compare_runs(tmp_path / "t32", tmp_path / "j32", floor=tmp_path / "t64", rtol=1e-7,
                                 out=tmp_path / "out")
    assert report.passed and report.passed_by == "floor", report.message
    assert report.verdict().startswith("PASSED by torch's float32 floor")
    for rec in report.epochs:
        assert 0 < rec.param_max_rel <= FLOOR_FACTOR * rec.floor_max_rel, (rec.steps, rec.param_max_rel)
    assert "| torch f32 vs f64 |" in (tmp_path / "out" / "report.md").read_text()
    assert not parity.compare_runs(tmp_path / "t32", tmp_path / "j32", rtol=1e-7).passed
    assert parity.compare_runs(tmp_path / "t32", tmp_path / "j32").passed  # float32's default rtol 1e-4
    # The perturbed run as a port with a bug (the floor is torch's own float32 run against float64)
    bad = parity.compare_runs(tmp_path / "t32", tmp_path / "t32-perturbed", floor=tmp_path / "t64")
    assert not bad.passed and bad.first_divergent_step == 7 and bad.first_divergent_layer == "netG.2.bias"
