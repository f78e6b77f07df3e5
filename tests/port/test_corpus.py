"""Models nobody here wrote port as written: the official PyTorch examples' classes and public model definitions
(nanoGPT, ConvNeXt with timm's stochastic depth) in ``tests/port/corpus``, copied verbatim, each ported from its example input and checked against torch in float64 and float32
(eval and train forward with torch's dropout masks and noise, buffers, gradients, one SGD step). Their
building blocks (fast neural style's reflection-padded ``ConvLayer`` and ``ResidualBlock``, super-resolution's
``PixelShuffle`` and orthogonal init) port as parts of these whole models."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import parity
import tests.port.corpus as corpus

_CASES = {}
for _info in pkgutil.iter_modules(corpus.__path__):
    _CASES.update(importlib.import_module(f"{corpus.__name__}.{_info.name}").CASES)

# The example's forward builds its LSTM states with dtype=torch.double: torch itself runs it in float64 only.
_FLOAT64_ONLY = {"time_sequence_prediction.Sequence"}

# tests/port/test_translation.py ports the same verbatim Translator in both dtypes, its inputs built inside the
# ported forward by the example's own create_mask on padded batches, and holds float32 to the 1e-5 tolerance
# without the floor: the stronger check of the same model, so the corpus does not run it a second time.
_PORTED_IN_ITS_OWN_TEST = {"language_translation.Translator"}

# A few light models run in the default tier; the whole corpus in both dtypes is the slow tier's.
_DEFAULT_TIER = {"regression.Regression", "gcn.GCN"}


def _params():
    for name in sorted(set(_CASES) - _PORTED_IN_ITS_OWN_TEST):
        for dtype in ("float64", "float32"):
            if dtype == "float32" and name in _FLOAT64_ONLY:
                continue
            marks = () if name in _DEFAULT_TIER and dtype == "float64" else (pytest.mark.slow,)
            yield pytest.param(name, dtype, id=f"{name}-{dtype}", marks=marks)


@pytest.mark.parametrize(("name", "dtype"), list(_params()))
def test_the_example_ports_as_written(name, dtype, x64):
    factory, inputs = _CASES[name]
    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    model = factory().to(torch_dtype)
    example = inputs(torch.Generator().manual_seed(1), torch_dtype)
    check = parity.port.check_port(model, example_input=example)
    assert check.passed, check.table()


def test_the_corpus_holds_at_least_fifteen_example_models():
    assert len(_CASES) >= 15, sorted(_CASES)
