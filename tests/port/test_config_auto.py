"""``model: {torch: "pkg:Net", jax: auto}``: the JAX model is ``parity.port``'s twin of the torch model."""

from __future__ import annotations

import pytest

from parity.cli import main
from parity.config import ConfigError, load_config
from parity.experiment import run_experiment

AUTO = ["model.jax=auto", "model.kwargs={c1: 4, c2: 8, hidden: 16, image_size: 28}"]


@pytest.mark.slow  # a parity run's compile and data set: several seconds
def test_a_ported_twin_trains_in_float64_strictly():
    """configs/mnist_example.yaml (dropout masks, Adadelta, float64) with the twin ported from
    ``examples.mnist_net:Net``: 3 steps measured 3.6e-16 max rel (the conv/matmul summation orders
    differ); bar the config's 1e-10."""
    cfg = load_config("mnist_example", AUTO)
    assert cfg.model.ported and cfg.model.to_dict()["jax"] == "auto"
    report = run_experiment(cfg, max_steps=3, write=False, progress=False)
    assert report.passed and report.passed_by == "tolerance", report.message
    assert report.epochs[-1].param_max_rel <= 1e-10 and len(report.steps) == 3
    assert report.config["model"]["jax"] == "auto"


def test_init_seed_with_auto_is_a_config_error():
    with pytest.raises(ConfigError, match="init: seed") as error:
        load_config("mnist_example", [*AUTO, "model.init=seed"])
    assert error.value.path == "model.init"


def test_a_model_that_cannot_be_ported_exits_2_in_one_line(tmp_path, capsys):
    # torch.nn.ChannelShuffle's forward calls torch.channel_shuffle, which jax_impl lacks: the port's error on
    # model.jax (groups=1, as the example input has one channel).
    args = ["run", "--no-progress", "--runs-dir", str(tmp_path), "mnist_example",
            'model={torch: "torch.nn:ChannelShuffle", jax: auto, kwargs: {groups: 1}}']
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "model.jax" in err and "channel_shuffle" in err and len(err.strip().splitlines()) == 1


def test_summary_with_auto(capsys):
    assert main(["summary", "mnist_example", *AUTO]) == 0
    out = capsys.readouterr().out
    assert "fc2" in out and "!" not in out.split("Total params")[0].replace("=", "")


@pytest.mark.slow  # a transformer's compile: several seconds
def test_the_char_gpt_recipe_with_a_ported_twin():
    """configs/char_gpt.yaml's CharGPT (TransformerEncoderLayers with dropout, a causal mask built in forward,
    a tied head through F.linear), ported instead of its hand-written twin; float64, 3 AdamW steps: measured
    5.8e-11 max rel (blocks.0.self_attn.in_proj_bias, Adam's first steps on gradients near zero); bar 1e-9."""
    cfg = load_config("char_gpt", ["model.jax=auto", "train.dtype=float64",
                                   "train.tolerance={rtol: 1.0e-9, atol: 1.0e-12}",
                                   "model.kwargs={vocab_size: 96, block_size: 32, dim: 16, depth: 1, heads: 2, "
                                   "mlp_dim: 32, dropout: 0.1}"])
    report = run_experiment(cfg, max_steps=3, write=False, progress=False)
    assert report.passed and report.passed_by == "tolerance", report.message


@pytest.mark.slow  # a parity run's compile and data set: several seconds
def test_a_model_with_tied_weights_trains_as_torch_trains_it():
    """A shared weight and a layer appended twice, ported and trained with Adam in float64: one parameter each
    on both sides, so every step moves them as torch's; 6 steps measured 5.1e-14 max rel (the summation orders
    of the dots), bar 1e-10."""
    cfg = load_config("lenet_digits", ['model={torch: "tests.port.models:TiedClassifier", jax: auto}',
                                       "train.dtype=float64", "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, max_steps=6, write=False, progress=False)
    assert report.passed and report.passed_by == "tolerance", report.message
    assert report.epochs[-1].param_max_rel <= 1e-10
