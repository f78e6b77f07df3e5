"""`parity config list`: every shipped config by the name `parity run` takes, with a one-line description."""

from pathlib import Path

from parity.cli import main
from parity.config import describe_config, list_configs, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_lists_every_shipped_config_once(capsys):
    assert main(["config", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
    assert [line.split()[0] for line in lines] == names
    default = next(line for line in lines if line.split()[0] == "lenet_digits")
    assert default.endswith("The default experiment: LeNet on scikit-learn's bundled 8x8 digits (offline).")
    for name, description in list_configs():
        assert description and "\n" not in description and not description.startswith("invalid")
        load_config(name)  # each listed name is one `parity run NAME` accepts


def test_description_is_the_leading_comments_first_sentence(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("\n#   SGD, lr 1.5e-2, on the\n# digits. Second sentence.\n#\n# Other paragraph.\nmodel: LeNet\n"
                    "optimizer: SGD\n")
    assert describe_config(path) == "SGD, lr 1.5e-2, on the digits."


def test_description_without_comment_names_the_contents(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: tiny\nmodel: LeNet\noptimizer: {name: SGD, lr: 0.1}\n"
                    "scheduler: {name: StepLR, step_size: 1}\n# trailing comment\n")
    assert describe_config(path) == "tiny: LeNet, SGD + StepLR, digits"
    path.write_text("model: LeNet\n")
    assert describe_config(path) == "invalid: optimizer: missing required key"
    path.write_bytes(b"\xff")
    assert describe_config(path).startswith("invalid: cannot read it")
