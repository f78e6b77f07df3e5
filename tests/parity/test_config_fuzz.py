"""Fuzzing the config loader: whatever the file or the overrides, ``load_config`` returns a config or raises ``ConfigError``.

Never another exception (a traceback is a bug: the CLI promises one line naming
the problem and exit code 2), and the CLI's ``config validate`` answers 0 or 2.
Each example is a few milliseconds; the deadline catches a pathological slow path.
"""

import contextlib
import io
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parity.cli import main
from parity.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "configs").glob("*.yaml"))
TEXTS = [p.read_bytes() for p in SHIPPED]
RAWS = [yaml.safe_load(t) for t in TEXTS]

# 6 tests x 30 examples. The deadline is generous for a loaded test machine: an example
# normally takes milliseconds; what it catches is a pathological path (an alias bomb: hours).
FUZZ = settings(max_examples=30, deadline=1000, suppress_health_check=[HealthCheck.too_slow])

# YAML-representable values of every kind the loader may meet where it expects another.
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12) | st.sampled_from(["Adam", "LeNet", "StepLR", "digits", "every", "float64", "epoch"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4), max_leaves=12)


@pytest.fixture(scope="module")
def folder():
    load_config(SHIPPED[0])  # the first load reads torch's signatures; keep it out of the examples' deadline
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def load_or_config_error(path, overrides=()):
    try:
        load_config(path, overrides)
    except ConfigError as error:
        assert str(error) and "Traceback" not in str(error)


def paths_of(value, prefix=()):
    """Every key path into a parsed config (mappings and lists)."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths_of(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths_of(child, (*prefix, i))


def replaced(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(folder, data):
    path = folder / "bytes.yaml"
    path.write_bytes(data)
    load_or_config_error(path)


# Pieces of YAML's grammar (anchors, aliases, tags, merge keys, directives, block scalars) and of
# configs: random bytes rarely get past the tokenizer, these reach the parser and the schema.
TOKENS = ["model:", "optimizer:", "train:", "data:", "scheduler:", "name:", "lr:", "epochs:", "params:",
          "param_groups:", "LeNet", "Adam", "SGD", "StepLR", "digits", " ", "\n", "  ", "- ", "[", "]", "{", "}",
          ", ", ": ", "&a ", "*a", "&b ", "*b", "? ", "!!str ", "!!int ", "!!float ", "!!python/tuple ",
          "!!binary ", "!!timestamp ", "!!set ", "!!omap ", "!custom ", "<<: ", "'", '"', "# c", "1e-3", "-1",
          ".nan", ".inf", "null", "~", "yes", "2001-12-14", "---", "...", "%YAML 1.2\n", "|", ">", "\t", "0x1F",
          "1_000", "\\", "\u00e9", "\x00"]
SOUP = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)


@FUZZ
@given(text=SOUP)
def test_yaml_token_soup(folder, text):
    path = folder / "soup.yaml"
    path.write_text(text, encoding="utf-8")
    load_or_config_error(path)


@FUZZ
@given(which=st.integers(0, len(TEXTS) - 1), cut=st.integers(0, 2000), tail=st.binary(max_size=8))
def test_truncated_shipped_configs(folder, which, cut, tail):
    path = folder / "cut.yaml"
    path.write_bytes(TEXTS[which][:cut] + tail)
    load_or_config_error(path)


@FUZZ
@given(which=st.integers(0, len(RAWS) - 1), data=st.data(), value=VALUES)
def test_wrong_values_at_random_keys(folder, which, data, value):
    raw = RAWS[which]
    path = data.draw(st.sampled_from(list(paths_of(raw))))
    path_file = folder / "typed.yaml"
    path_file.write_text(yaml.safe_dump(replaced(raw, path, value)))
    load_or_config_error(path_file)


KEYS = sorted({".".join(map(str, p)) for raw in RAWS for p in paths_of(raw) if p})
OVERRIDE = (st.tuples(st.sampled_from(KEYS) | st.text(max_size=16), st.sampled_from(["=", "", "=="]),
                      st.text(max_size=16) | SOUP
                      | VALUES.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()))
            .map("".join))


@FUZZ
@given(which=st.integers(0, len(SHIPPED) - 1), overrides=st.lists(OVERRIDE, max_size=4))
def test_random_overrides(which, overrides):
    load_or_config_error(SHIPPED[which], overrides)


@FUZZ
@given(data=st.binary(max_size=200) | st.sampled_from(TEXTS).map(lambda t: t[: len(t) // 2])
       | SOUP.map(lambda t: t.encode()))
def test_cli_validate_answers_0_or_2(folder, data):
    path = folder / "cli.yaml"
    path.write_bytes(data)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["config", "validate", str(path)])
    assert code in (0, 2)
    assert (code == 2) == bool(err.getvalue()) and "Traceback" not in err.getvalue()
