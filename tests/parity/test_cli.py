"""The `parity` CLI as a user runs it: console script and `python -m parity`, exit codes, no writes on bad input."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from parity.cli import default_config_path, main

ROOT = Path(__file__).resolve().parents[2]


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=cwd or ROOT, timeout=120)


def test_help_lists_config_command():
    result = run("--help")
    assert result.returncode == 0
    assert "config" in result.stdout


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "parity"
    assert script.exists(), "the `parity` console script is not installed in this environment"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "parity" in result.stdout


def test_a_finished_command_runs_every_exit_handler_then_ends_with_its_code(tmp_path):
    """``console`` skips the interpreter's teardown only after every other exit handler ran and the piped
    output was flushed; the command's exit code is the process's."""
    marker = tmp_path / "handler_ran"
    code = (
        "import atexit, sys\n"
        "import parity.cli as cli\n"
        "def main():\n"
        f"    atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
        "    print('x' * 100000)\n"
        "    return 2\n"
        "cli.main = main\n"
        "cli.console()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "x" * 100000 + "\n"
    assert marker.read_text() == "yes"


def test_validate_shipped_configs():
    files = sorted(str(p) for p in (ROOT / "configs").glob("*.yaml"))
    result = run("config", "validate", *files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok: ") == len(files)


def test_show_default_and_overrides(capsys):
    assert main(["config", "show", "optimizer.lr=0.2", "train.epochs=9"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["optimizer"]["lr"] == 0.2 and shown["train"]["epochs"] == 9
    assert shown["optimizer"]["name"] == "Adam" and shown["optimizer"]["eps"] == 1e-8  # torch's default filled in
    assert default_config_path().exists()


def test_misspelled_key_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: LeNet\noptimizer: {name: Adam, betas1: [0.9, 0.99]}\n")
    before = set(os.listdir(tmp_path))
    result = run("config", "show", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert "optimizer.betas1: unknown key; did you mean optimizer.betas?" in result.stderr
    assert result.stdout == ""
    assert set(os.listdir(tmp_path)) == before
    result = run("config", "validate", str(default_config_path()), str(bad), cwd=tmp_path)
    assert result.returncode == 2 and str(bad) in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["config", "show", "missing.yaml"], "no such config file: missing.yaml"),
        (["config", "show", "train.epochs=zero"], "train.epochs: expected int, got str ('zero')"),
        (["config", "validate", "missing.yaml"], "no such config file: missing.yaml"),
    ],
)
def test_bad_input_exit_codes(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_usage_errors_exit_2():
    assert run("nonsense").returncode == 2
    assert run("config").returncode == 2


def test_summary_prints_both_models_side_by_side(capsys):
    assert main(["summary"]) == 0
    out = capsys.readouterr().out
    assert "lenet-digits: LeNet" in out
    for layer in ("conv1", "conv2", "fc1", "fc2", "fc3"):
        assert layer in out
    # LeNet for 1x8x8: conv1 60 + conv2 880 + fc1 64*120+120 + fc2 120*84+84 + fc3 84*10+10 = 19,754
    assert "Total params: torch 19,754, jax 19,754" in out and "  !" not in out


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--coordinator", "127.0.0.1:29500"], "--coordinator, --num-processes and --process-id go together"),
        (["--coordinator", "29500", "--num-processes", "2", "--process-id", "0"], "must be HOST:PORT"),
        (["--coordinator", "h:29500", "--num-processes", "2", "--process-id", "2"], "process id must be in 0..1"),
        (["--coordinator", "h:65535", "--num-processes", "2", "--process-id", "0"], "it uses three ports"),
        (["--coordinator", "h:29500", "--num-processes", "2", "--process-id", "0", "parallel.world_size=3"],
         "parallel.processes: must divide world_size (3), got 2"),
        (["--coordinator", "h:29500", "--num-processes", "1", "--process-id", "0"],
         "--coordinator runs a data-parallel config"),
    ],
)
def test_bad_host_flags_exit_2_before_anything_starts(flags, message, tmp_path, capsys):
    """The launcher's flags are checked before any rank starts or any folder is written."""
    assert main(["run", "--no-progress", "--runs-dir", str(tmp_path / "runs"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
