"""parity.Recorder: names on both sides, the keep policy, the files, and interrupted recordings.

The GAN pair (tests/parity/_gan_loops.py) trains the same two MLPs with two Adams in torch and in
jax_impl + flax.nnx, each side recorded; both record the same names and agree in float64.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

import parity
from parity.recorder import torch_parameter_order
from parity.recording import RecordingError, read_recording
from tests.parity._gan_loops import jax_gan, torch_gan

ROOT = Path(__file__).resolve().parents[2]
_CACHE: dict[str, Path] = {}


def gan_recordings(tmp_path_factory) -> dict[str, Path]:
    """The float64 GAN recorded in torch, in JAX, and in torch perturbed after step 7 (20 steps; tensors at
    every 5th step, the last, and step 7): recorded once per session, for this file and test_compare_runs."""
    if not _CACHE:
        root = tmp_path_factory.mktemp("gan")
        kw = {"steps": 20, "keep_every": 5, "keep_steps": [7]}
        torch_gan(root / "torch", **kw)
        torch_gan(root / "torch-perturbed", perturb_at=7, **kw)
        with jax.enable_x64(True):
            jax_gan(root / "jax", **kw)
        _CACHE.update(torch=root / "torch", jax=root / "jax", perturbed=root / "torch-perturbed")
    return _CACHE


@pytest.fixture(scope="module")
def gan(tmp_path_factory):
    return gan_recordings(tmp_path_factory)


def test_both_sides_record_torchs_names_and_agree_in_float64(gan):
    """Module state, optimizer state (JAX's through parity.optimizer_record) and latents under the same names;
    every tensor at every kept step within 1e-10 of torch (measured 1.2e-15: optD.state.3.exp_avg at step 19)."""
    a, b = read_recording(gan["torch"]), read_recording(gan["jax"])
    assert set(a.names) == set(b.names)
    assert [n for n in a.names if a.names[n]["kind"] == "scalar"] == ["loss_d", "loss_g", "optD.lr", "optG.lr"]
    assert {"netG.2.bias", "netD.0.weight", "z", "optD.state.3.exp_avg_sq", "optG.state.0.step"} <= set(a.names)
    assert a.names == {n: b.names[n] for n in a.names}  # kinds, shapes and dtypes too
    assert a.tensor_steps == b.tensor_steps == [0, 5, 7, 10, 15, 19]
    assert a.steps == b.steps == list(range(20)) and a.complete and b.complete
    assert a.framework == "torch" and b.framework == "jax" and a.dtype == b.dtype == "float64"
    worst = 0.0
    for step in a.tensor_steps:
        ta, tb = a.tensors(step), b.tensors(step)
        for name in ta:
            assert ta[name].shape == tb[name].shape, name
            scale = max(float(np.abs(ta[name]).max()), 1e-300)
            worst = max(worst, float(np.abs(ta[name].astype(np.float64) - tb[name]).max()) / scale)
    assert worst <= 1e-10
    for step in a.steps:
        for name, value in a.scalars[step].items():
            assert abs(b.scalars[step][name] - value) <= 1e-12 * abs(value), (step, name)  # measured 2.2e-16


def test_keep_policy_first_every_kth_extra_and_last(tmp_path):
    with parity.Recorder(tmp_path / "r", "numpy", keep_every=4, keep_steps=[6]) as rec:
        for i in range(3, 14):
            rec.step(i, loss=float(i), w=np.full(3, i, np.float32))
    r = read_recording(tmp_path / "r")
    assert r.tensor_steps == [3, 4, 6, 8, 12, 13]  # first, every 4th, keep_steps, last (written at close)
    assert r.steps == list(range(3, 14)) and r.tensors(13)["w"].tolist() == [13, 13, 13]
    assert r.meta["first_step"] == 3 and r.meta["last_step"] == 13 and r.meta["steps"] == 11
    with parity.Recorder(tmp_path / "s", "numpy", keep_every=4, keep_last=False) as rec:
        for i in range(6):
            rec.step(i, w=np.zeros(2))
    assert read_recording(tmp_path / "s").tensor_steps == [0, 4]
    with pytest.raises(RecordingError, match="step 5 was not kept"):
        read_recording(tmp_path / "s").tensors(5)


def test_values_names_and_dtypes(tmp_path):
    """Numbers and 0-d tensors are scalars; nested dicts/lists join names with '.'; a torch module's 0-d buffer
    stays with the tensors; bfloat16 and complex arrays come back bit for bit."""
    bn = torch.nn.BatchNorm1d(3)
    bf16 = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    c128 = np.array([1 + 2j, -3.5j])
    with parity.Recorder(tmp_path / "r", "torch", keep_every=1) as rec:
        rec.step(0, a=1, b=2.5, c=torch.tensor(0.25, dtype=torch.float64), d=np.float32(0.5), e=jax.numpy.array(3.0),
                 nested={"x": [np.ones(2), {"y": 7}]}, bn=bn, h=bf16, k=c128, t=torch.ones(2, dtype=torch.bfloat16),
                 nan=float("nan"), none=None)
    r = read_recording(tmp_path / "r")
    assert r.scalars[0] == {"a": 1, "b": 2.5, "c": 0.25, "d": 0.5, "e": 3.0, "nested.x.1.y": 7,
                            "nan": pytest.approx(float("nan"), nan_ok=True)}
    tensors = r.tensors(0)
    assert set(tensors) == {"nested.x.0", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                            "bn.num_batches_tracked", "h", "k", "t"}
    assert tensors["h"].dtype == ml_dtypes.bfloat16 and tensors["h"].tobytes() == bf16.tobytes()
    assert tensors["t"].dtype == ml_dtypes.bfloat16 and tensors["t"].tolist() == [1.0, 1.0]
    assert tensors["k"].dtype == np.complex128 and np.array_equal(tensors["k"], c128)
    assert r.names["bn.num_batches_tracked"] == {"kind": "tensor", "shape": [], "dtype": "int64"}
    assert r.names["c"] == {"kind": "scalar", "shape": [], "dtype": "float64"}
    assert r.dtype == "float64"  # the first floating value's


def test_bad_use_raises(tmp_path):
    with parity.Recorder(tmp_path / "r", "torch") as rec:
        rec.step(0, x=1.0)
        with pytest.raises(ValueError, match="steps must increase: step 0 after step 0"):
            rec.step(0, x=1.0)
        with pytest.raises(TypeError, match="cannot record a builtins.object"):
            rec.step(1, x=object())
        with pytest.raises(ValueError, match="two values are recorded as 'a.b'"):
            rec.step(2, a={"b": 1.0}, **{"a.b": 2.0})
    with pytest.raises(ValueError, match="the recorder is closed"):
        rec.step(3, x=1.0)
    with pytest.raises(FileExistsError, match="holds a recording already"):
        parity.Recorder(tmp_path / "r", "torch")
    with pytest.raises(ValueError, match="keep_every"):
        parity.Recorder(tmp_path / "s", "torch", keep_every=0)
    with pytest.raises(ValueError, match="JSON"):
        parity.Recorder(tmp_path / "t", "torch", meta={"x": object()})


def test_optimizer_record_needs_torchs_order_for_a_plain_pytree():
    """A model gives torch's parameter order (assignment order: weight before bias); a pytree needs the names."""
    from flax import nnx

    import jax_impl.nn as jnn
    from jax_impl import optim

    model = jnn.Sequential(jnn.Linear(2, 3), jnn.Tanh(), jnn.Linear(3, 1))
    params = nnx.state(model, nnx.Param)
    state = optim.adam(lr=0.1).init(params)
    by_model = parity.optimizer_record(state, model, name="Adam", hyperparameters={"lr": 0.1})
    assert by_model.state_dict["param_groups"][0]["lr"] == 0.1 and by_model.state_dict["state"] == {}
    assert torch_parameter_order(model) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    named = parity.optimizer_record(state, params, name="Adam", param_names=["0.weight", "0.bias", "2.weight",
                                                                             "2.bias"])
    assert named.state_dict["param_groups"][0]["params"] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="'0.kernel' is not a parameter"):
        parity.optimizer_record(state, params, name="Adam", param_names=["0.kernel", "0.bias", "2.weight", "2.bias"])


def test_optimizer_record_of_a_pure_dict_state_is_the_nnx_states():
    """A state built on pure dicts (jax_impl.train.init_train_state's form), recorded with the model or with its
    nnx.State parameters and their names, gives the same torch state_dict as the same state built on nnx.State,
    and torch's Adam loads it."""
    from flax import nnx

    import jax_impl.nn as jnn
    from jax_impl import optim

    model = jnn.Sequential(jnn.Linear(2, 3), jnn.Tanh(), jnn.Linear(3, 1))
    tx = optim.adam(lr=0.1)
    records = []
    for params in (nnx.state(model, nnx.Param), nnx.to_pure_dict(nnx.state(model, nnx.Param))):
        grads = jax.tree.map(lambda p: p * 0.5 + 1.0, params)
        _, state = tx.step(grads, tx.init(params), params)
        records.append(parity.optimizer_record(state, model, name="Adam", hyperparameters={"lr": 0.1}).state_dict)
    # The parameters as an nnx.State with a pure-dict state, named by hand, are read as the pure dict.
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    records.append(parity.optimizer_record(state, nnx.state(model, nnx.Param), name="Adam", param_names=names,
                                           hyperparameters={"lr": 0.1}).state_dict)
    by_state, by_dict, by_names = records
    for other in (by_dict, by_names):
        assert other["param_groups"] == by_state["param_groups"] and other["state"].keys() == by_state["state"].keys()
        for i, entry in by_state["state"].items():
            for key, value in entry.items():
                assert torch.equal(other["state"][i][key], value), (i, key)
    torch_model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    torch.optim.Adam(torch_model.parameters(), lr=0.1).load_state_dict(by_dict)
    # The converter itself takes the params as given: the other form is a one-line error, not a pytree dump.
    from parity.convert import optimizer_state_to_torch

    with pytest.raises(ValueError, match="'exp_avg' is a pure dict and params an nnx.State: pass params in the form"):
        optimizer_state_to_torch(state, nnx.state(model, nnx.Param), name="Adam")


# torch's pair of each jax_impl.nn layer in a model: (jax_impl.nn class name, args), built in both frameworks.
ORDER_LAYERS = [("Linear", (3, 3))] * 11 + [
    ("Conv2d", (1, 2, 3)), ("BatchNorm2d", (2,)), ("LayerNorm", (4,)), ("GroupNorm", (1, 2)), ("RMSNorm", (3,)),
    ("ConvTranspose2d", (2, 2, 3)), ("Bilinear", (2, 3, 4)), ("Embedding", (5, 3)), ("PReLU", ()),
    # torch registers MultiheadAttention's own parameters before its out_proj: named_parameters() lists them first.
    ("MultiheadAttention", (4, 2)), ("TransformerEncoderLayer", (4, 2, 8)),
]


def test_torch_parameter_order_of_a_model_rebuilt_by_nnx_merge():
    """nnx.merge rebuilds a module with its attributes sorted (bias before weight, "10" before "2"): the order
    comes from the containers' kept names, an RNN's _all_weights, or the class's __init__ source; torch's
    named_parameters() is the reference. A class whose source does not name its parameters raises."""
    from flax import nnx

    import jax_impl.nn as jnn
    from jax_impl import optim

    def merged(model):
        return nnx.merge(*nnx.split(model))

    assert [k for k, v in vars(merged(jnn.Linear(2, 3))).items() if isinstance(v, nnx.Param)] == ["bias", "weight"]
    for build in (lambda nn: nn.Sequential(*[getattr(nn, name)(*args) for name, args in ORDER_LAYERS]),
                  lambda nn: nn.LSTM(3, 4, num_layers=2, bidirectional=True), lambda nn: nn.GRUCell(3, 4)):
        model, twin = build(jnn), build(torch.nn)
        expected = [name for name, _ in twin.named_parameters()]
        assert torch_parameter_order(model) == expected
        rebuilt = merged(model)
        if isinstance(model, jnn.GRUCell):  # its parameters are set by a helper under computed names
            with pytest.raises(ValueError, match=r"GRUCell\): its attributes \['bias_hh', 'bias_ih', 'weight_hh', "
                                                 r"'weight_ih'\] are in sorted order, .* pass param_names"):
                torch_parameter_order(rebuilt)
            continue
        assert torch_parameter_order(rebuilt) == expected
    # The optimizer state of the rebuilt model is numbered as torch numbers it: index 0 is 0.weight, not 0.bias.
    model = merged(jnn.Sequential(jnn.Linear(2, 3), jnn.Tanh(), jnn.Linear(3, 1)))
    params = nnx.state(model, nnx.Param)
    tx = optim.adam(lr=0.1)
    state = tx.init(params)
    _, state = tx.step(jax.tree.map(lambda p: p + 1.0, params), state, params)[:2]
    record = parity.optimizer_record(state, model, name="Adam", hyperparameters={"lr": 0.1})
    shapes = {i: tuple(np.shape(entry["exp_avg"])) for i, entry in record.state_dict["state"].items()}
    assert shapes == {0: (3, 2), 1: (3,), 2: (1, 3), 3: (1,)}


def test_an_unclosed_recording_reads_up_to_its_last_step(tmp_path):
    rec = torch_gan(tmp_path / "r", steps=9, keep_every=5, close=False)
    r = read_recording(tmp_path / "r")
    assert not r.complete and r.meta["status"] == "recording" and r.steps == list(range(9))
    assert r.tensor_steps == [0, 5]  # the last step's tensors are written at close
    rec.close()
    assert read_recording(tmp_path / "r").tensor_steps == [0, 5, 8]


def test_a_killed_recording_is_readable(tmp_path):
    """SIGKILL in the middle of a run, and a last line cut short as a killed write leaves it."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from parity.recorder import Recorder
        rec = Recorder({str(tmp_path / "r")!r}, "numpy", keep_every=10)
        for i in range(1000):
            rec.step(i, loss=1.0 / (i + 1), w=np.full((4, 4), i, np.float64))
            if i == 25:
                os.kill(os.getpid(), signal.SIGKILL)
        """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    with open(tmp_path / "r" / "scalars.jsonl", "a") as file:
        file.write('{"step": 26, "scal')
    r = read_recording(tmp_path / "r")
    assert not r.complete and r.steps == list(range(26)) and r.tensor_steps == [0, 10, 20]
    assert r.scalars[25] == {"loss": 1 / 26} and r.tensors(20)["w"][0, 0] == 20
    with open(tmp_path / "r" / "scalars.jsonl", "a") as file:
        file.write('ar": 1}}\n{"step": 27, "scalars": {}}\n')  # the cut line completed badly: damaged
    with pytest.raises(RecordingError, match="line 27 is damaged"):
        read_recording(tmp_path / "r")


def test_not_a_recording(tmp_path):
    with pytest.raises(RecordingError, match="not found"):
        read_recording(tmp_path / "missing")
    with pytest.raises(RecordingError, match="is not a parity recording"):
        read_recording(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(RecordingError, match="not of format 'parity-recording'"):
        read_recording(tmp_path)


@pytest.mark.slow  # 10,000 steps: about 2 s of recording
def test_ten_thousand_steps_stay_small(tmp_path):
    """Scalars every step and a 577-parameter MLP with its Adam state every 100th step: measured 1.6 MB
    (scalars.jsonl 0.76 MB, 101 tensor files 0.83 MB)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    with parity.Recorder(tmp_path / "r", "torch", keep_every=100) as rec:
        for i in range(10_000):
            rec.step(i, loss=1.0 / (i + 1), model=model, opt=opt)
    size = sum(f.stat().st_size for f in (tmp_path / "r").rglob("*") if f.is_file())
    assert size < 2_000_000, size
    assert len(read_recording(tmp_path / "r").tensor_steps) == 101


def test_param_groups_record_torchs_names(tmp_path):
    """SGD with momentum over two param groups (the second at its own lr): jax_impl.optim.param_groups's state
    recorded under torch's names (opt.state.<i>, opt.lr, opt.lr.1), equal to torch's after 3 float64 steps
    (measured 7.3e-16)."""
    from flax import nnx

    import jax_impl.nn as jnn
    from jax_impl import optim

    hyper = [{"lr": 0.1, "momentum": 0.9}, {"lr": 0.05, "momentum": 0.9}]
    x = np.random.default_rng(0).standard_normal((5, 2))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)).double()
    opt = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.05}],
                          lr=0.1, momentum=0.9)
    with parity.Recorder(tmp_path / "t", "torch", keep_every=1) as rec:
        for i in range(3):
            opt.zero_grad()
            model(torch.from_numpy(x)).square().mean().backward()
            opt.step()
            rec.step(i, model=model, opt=opt)
    with jax.enable_x64(True):
        from jax_impl import random

        random.manual_seed(0)
        jmodel = jnn.Sequential(jnn.Linear(2, 3), jnn.Tanh(), jnn.Linear(3, 1))
        nnx.update(jmodel, jax.tree.map(lambda p: p.astype(np.float64), nnx.state(jmodel, nnx.Param)))
        tx = optim.param_groups(optim.sgd, [{"params": "0.*"}, {"params": "2.*", "lr": 0.05}], lr=0.1, momentum=0.9)
        graphdef, params = nnx.split(jmodel, nnx.Param)
        state = tx.init(params)
        with parity.Recorder(tmp_path / "j", "jax", keep_every=1) as rec:
            for i in range(3):
                grads = jax.grad(lambda p: jax.numpy.mean(nnx.merge(graphdef, p)(x) ** 2))(params)
                params, state = tx.step(grads, state, params)
                nnx.update(jmodel, params)
                rec.step(i, model=jmodel, opt=parity.optimizer_record(
                    state, jmodel, name="SGD", groups=[["0.weight", "0.bias"], ["2.weight", "2.bias"]],
                    group_hyperparameters=hyper))
    a, b = read_recording(tmp_path / "t"), read_recording(tmp_path / "j")
    assert set(a.names) == set(b.names)
    assert a.scalars[2] == b.scalars[2] == {"opt.lr": 0.1, "opt.lr.1": 0.05}
    assert {"opt.state.0.momentum_buffer", "opt.state.3.momentum_buffer"} <= set(a.names)
    report = parity.compare_runs(tmp_path / "t", tmp_path / "j", rtol=1e-12)
    assert report.passed, report.message
