"""``parity port``: writes the twin, checks it, prints the table; exit 0 / 1 / 2."""

from __future__ import annotations

import torch

import parity.port.check
from parity.cli import main

FACTORY = "tests.port.models:MnistNet"


def test_writes_checks_and_exits_0(tmp_path, capsys):
    out = tmp_path / "twin.py"
    code = main(["port", FACTORY, "--kwargs", '{"side": 12}', "--input-shape", "2,1,12,12", "--dtype", "float64",
                 "-o", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "class MnistNet(nn.Module):" in out.read_text()
    assert "eval forward" in printed and "SGD step" in printed and "the twin matches torch" in printed


def test_differences_beyond_tolerance_exit_1(tmp_path, capsys, monkeypatch):
    # Zero tolerance and no allowance for torch's float32 floor: float32 reductions in a different order
    # than torch's cannot all be bit-identical.
    monkeypatch.setitem(parity.port.check.TOLERANCES, torch.float32, (0.0, 0.0))
    monkeypatch.setattr(parity.port.check, "FLOOR_FACTOR", 0.0)
    code = main(["port", FACTORY, "--input-shape", "2,1,12,12", "-o", str(tmp_path / "twin.py")])
    assert code == 1
    assert "DIFFERS" in capsys.readouterr().out


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    cases = [
        ["tests.port.no_such_module:Net", "--input-shape", "1,1,12,12"],
        [FACTORY, "--input-shape", "1,x"],
        [FACTORY, "--kwargs", "[1]", "--input-shape", "1,1,12,12"],
        ["tests.port.models:Untraceable", "--input-shape", "2,4"],
    ]
    for args in cases:
        assert main(["port", *args, "-o", str(tmp_path / "twin.py")]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("parity: error:") and "Traceback" not in err, err
    assert "node 'gt'" in err


def test_a_model_with_its_own_train_method_ports(tmp_path, capsys):
    """forward-forward's layers override ``train`` with another signature: the port sets the mode as
    ``nn.Module.train`` does, without calling it, and the twin matches."""
    code = main(["port", "tests.port.models:ForwardForwardNet", "--input-shape", "3,6", "--dtype", "float64",
                 "-o", str(tmp_path / "twin.py")])
    assert code == 0, capsys.readouterr()


def test_a_failing_factory_is_bad_input(tmp_path, capsys):
    assert main(["port", "tests.port.models:failing_factory", "--input-shape", "1,2",
                 "-o", str(tmp_path / "twin.py")]) == 2
    err = capsys.readouterr().err
    assert "RuntimeError: CUDA is required" in err and "Traceback" not in err
