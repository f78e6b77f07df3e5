"""Where a config comes from and where its errors point: shipped names, unreadable files, command-line overrides."""

from pathlib import Path

import pytest
import yaml

from parity.cli import main
from parity.config import ConfigError, load_config
from parity.config.shipped import CONFIGS_DIR, resolve_config_path, shipped_configs

ROOT = Path(__file__).resolve().parents[2]
GOOD = "model: LeNet\noptimizer: {name: Adam, lr: 0.001}\n"


def error_of(path, overrides=()) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return info.value


# Bare names resolve against the checkout's configs/ folder.

def test_configs_dir_is_the_checkouts():
    assert CONFIGS_DIR == ROOT / "configs"
    assert [p.name for p in shipped_configs()] == sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("name", ["lenet_digits", "lenet_digits.yaml"])
def test_bare_name_is_a_shipped_config(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no such file here
    assert resolve_config_path(name) == ROOT / "configs" / "lenet_digits.yaml"
    assert load_config(name).name == "lenet-digits"


def test_cli_takes_bare_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show", "lenet_digits", "train.epochs=7"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["name"] == "lenet-digits" and shown["train"]["epochs"] == 7
    assert main(["config", "validate", "lenet_digits.yaml", "resnet18_synthetic_sgd"]) == 0


def test_existing_path_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lenet_digits.yaml").write_text("name: mine\n" + GOOD)
    assert load_config("lenet_digits.yaml").name == "mine"
    assert load_config("lenet_digits").name == "lenet-digits"  # no file of that exact name here


def test_unknown_name_lists_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = str(error_of("lenet_digit"))
    assert text.startswith("no such config file: lenet_digit; did you mean lenet_digits?")
    assert "lenet_digits_ddp" in text and "resnet18_synthetic_sgd" in text and "parity config list" in text
    # A path with a folder part is a path: no look-up among the shipped configs.
    assert str(error_of("sub/lenet_digits.yaml")) == "no such config file: sub/lenet_digits.yaml"


def test_folder_is_not_a_config(tmp_path):
    assert "is a folder, not a config file" in str(error_of(tmp_path))


# Files that hold no config.

def test_empty_file(tmp_path):
    for text in ("", "\n  \n"):
        (tmp_path / "empty.yaml").write_text(text)
        assert str(error_of(tmp_path / "empty.yaml")) == f"config file {tmp_path / 'empty.yaml'} is empty"
    (tmp_path / "comments.yaml").write_text("# nothing yet\n")
    assert "holds no settings" in str(error_of(tmp_path / "comments.yaml"))


@pytest.mark.parametrize("text, got", [("- a\n- b\n", "got list (['a', 'b'])"), ("just words\n", "got str ('just words')"),
                                       ("3\n", "got int (3)")])
def test_top_level_not_a_mapping(tmp_path, text, got):
    (tmp_path / "c.yaml").write_text(text)
    message = str(error_of(tmp_path / "c.yaml"))
    assert message.startswith(f"{tmp_path / 'c.yaml'}: expected a mapping at the top level") and message.endswith(got)


def test_binary_and_non_utf8_files(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"model: LeNet\noptimizer: \xff\xfe\n")
    assert str(error_of(path)) == (f"config file {path} is not UTF-8 text (byte 0xff at offset 24); a config is a "
                                   "YAML file")
    path.write_bytes(b"\x00\x01\x02binary")
    assert "invalid YAML" in str(error_of(path))
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())  # a UTF-8 byte-order mark is fine
    assert load_config(path).model.name == "LeNet"


def test_unhashable_and_deep_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("? [a, b]\n: 1\n")
    assert "a key must be a name, got a list (line 1)" in str(error_of(path))
    path.write_text("model: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "invalid YAML" in str(error_of(path))


def test_alias_bombs_and_cycles(tmp_path):
    path = tmp_path / "c.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10**9 values
    path.write_text("\n".join(lines) + "\nmodel: LeNet\noptimizer: Adam\n")
    assert "over 100,000 values: do YAML aliases (*name) repeat a large list or mapping?" in str(error_of(path))
    path.write_text("model: LeNet\noptimizer: Adam\nx: &a [1, *a]\n")
    assert str(error_of(path)) == f"{path}: a YAML alias (*name) refers to a list or mapping that contains it"
    error = error_of(ROOT / "configs" / "lenet_digits.yaml", ["optimizer.betas=&b [0.9, *b]"])
    assert str(error).startswith("override 'optimizer.betas=&b [0.9, *b]' (command line): optimizer.betas: a YAML alias")
    # Aliases that stay small are YAML as usual.
    path.write_text("model: LeNet\noptimizer: {name: Adam, lr: &lr 0.01}\nscheduler: {name: StepLR, step_size: 1, "
                    "gamma: *lr}\n")
    assert load_config(path).scheduler.kwargs["gamma"] == 0.01


@pytest.mark.parametrize("value", ["!!int", "!!timestamp x", "!!float x", "!!binary ?", "!!python/tuple [1]"])
def test_malformed_tagged_scalars(tmp_path, value):
    path = tmp_path / "c.yaml"
    path.write_text(f"model: LeNet\noptimizer: {{name: Adam, lr: {value}}}\n")
    assert str(error_of(path)).startswith(f"{path}: invalid YAML")
    assert str(error_of(ROOT / "configs" / "lenet_digits.yaml", [f"optimizer.lr={value}"])).startswith(
        f"override 'optimizer.lr={value}' (command line): optimizer.lr: cannot parse the value as YAML")


def test_yaml_errors_are_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: [unclosed\n")
    message = str(error_of(path))
    assert "\n" not in message
    assert message == (f"{path}: invalid YAML: while parsing a flow sequence: expected ',' or ']', but got "
                       "'<stream end>' (line 2, column 1)")


# Errors in overrides name the command line, not the file.

@pytest.mark.parametrize(
    "override, message",
    [
        ("optimizer.lrr=0.1", "optimizer.lrr: unknown key; did you mean optimizer.lr?"),
        ("train.epochs=zero", "train.epochs: expected int, got str ('zero')"),
        ("train.epochs=0", "train.epochs: must be >= 1, got 0"),
        ("optimizer.name=Adamm", "optimizer.name: unknown optimizer 'Adamm'; did you mean 'Adam'?"),
        ("optimizer.lr=[1", "optimizer.lr: cannot parse the value as YAML: while parsing a flow sequence: expected "
         "',' or ']', but got '<stream end>' (line 1, column 3)"),
        ("optimizer.lr", "not of the form dotted.key=value"),
        ("model.name.x=1", "model.name.x: cannot set: model.name is a str, not a mapping"),
        ("model.x.y=1", "model.x: unknown key"),
        ("train=[1]", "train: expected a mapping, got list ([1])"),
        ("scheduler.name=ExponentialLR", "scheduler.step_size: unknown key"),  # the file's StepLR keys no longer fit
    ],
)
def test_override_errors_name_the_command_line(override, message):
    error = error_of(ROOT / "configs" / "lenet_digits.yaml", ["train.seed=1", override])
    assert str(error).startswith(f"override {override!r} (command line): {message}")
    assert error.override == override and str(ROOT) not in str(error)


def test_file_errors_stay_the_files_with_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: LeNet\noptimizer: {name: Adam, betas1: 3}\ntrain: {epochs: 2}\n")
    # Overrides elsewhere, or in the same section but not at the bad key, leave the error the file's.
    for overrides in ([], ["train.epochs=3"], ["optimizer.lr=0.1"], ["optimizer.betas=[0.8, 0.9]"]):
        assert str(error_of(path, overrides)) == f"{path}: optimizer.betas1: unknown key; did you mean optimizer.betas?"


def test_override_error_through_the_cli(capsys):
    assert main(["config", "show", "optimizer.lrr=0.1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("parity: error: override 'optimizer.lrr=0.1' (command line): optimizer.lrr: unknown key; "
                           "did you mean optimizer.lr?")
