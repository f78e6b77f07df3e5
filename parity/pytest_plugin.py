"""pytest plugin (entry point ``pytest11: parity``): fixtures and a marker for parity tests.

Write your own torch-vs-JAX tests with it::

    @pytest.mark.parity(rtol=1e-5, max_ulp=2)
    def test_my_layer(parity_numerics, parity_seed, assert_parity_marked):
        torch_out = ...; jax_out = ...
        assert_parity_marked(torch_out, jax_out)

Fixtures:
  parity_numerics: strict numerics for the test (``parity.strict_numerics``:
    JAX "highest" matmul precision, torch TF32 off, deterministic algorithms,
    seeds set); restored afterwards.
  parity_seed: the seed for this test (``--parity-seed``, default 0, or
    ``@pytest.mark.parity(seed=...)``).
  np_rng: a ``numpy.random.Generator`` seeded with ``parity_seed``.
  torch_generator: a ``torch.Generator`` seeded with ``parity_seed`` (skips
    the test if torch is not installed).
  assert_parity_marked: ``parity.assert_parity`` with the tolerances of the
    test's ``parity`` marker as defaults.
  parity_record: ``parity_record(name, report)`` stores a comparison's measured
    agreement; with ``--parity-report=FILE`` all records are written as JSON at
    the end of the session (input for docs/parity.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parity.compare import ComparisonReport, assert_parity
from parity.numerics import strict_numerics

_RECORDS_KEY = pytest.StashKey[list[dict[str, Any]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("parity", "torch/JAX parity")
    group.addoption("--parity-seed", type=int, default=0, help="seed for the parity fixtures (default 0)")
    group.addoption(
        "--parity-report",
        default=None,
        metavar="FILE",
        help="write the agreement recorded through the parity_record fixture to FILE (JSON)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "parity(rtol=0, atol=0, max_ulp=None, seed=None): a torch-vs-JAX parity test; "
        "the tolerances are the defaults of the assert_parity_marked fixture",
    )
    config.stash[_RECORDS_KEY] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--parity-report", default=None)
    records = session.config.stash.get(_RECORDS_KEY, [])
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(records, indent=1, default=str))


def _marker_kwargs(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker("parity")
    return dict(marker.kwargs) if marker is not None else {}


@pytest.fixture
def parity_seed(request: pytest.FixtureRequest) -> int:
    seed = _marker_kwargs(request).get("seed")
    return int(seed) if seed is not None else int(request.config.getoption("--parity-seed"))


@pytest.fixture
def parity_numerics(parity_seed: int) -> Iterator[None]:
    with strict_numerics(seed=parity_seed):
        yield


@pytest.fixture
def np_rng(parity_seed: int) -> np.random.Generator:
    return np.random.default_rng(parity_seed)


@pytest.fixture
def torch_generator(parity_seed: int) -> Any:
    torch = pytest.importorskip("torch")
    return torch.Generator().manual_seed(parity_seed)


@pytest.fixture
def assert_parity_marked(request: pytest.FixtureRequest) -> Callable[..., ComparisonReport]:
    defaults = {k: v for k, v in _marker_kwargs(request).items() if k in ("rtol", "atol", "max_ulp", "equal_nan", "check_dtype")}

    def check(torch_obj: Any, jax_obj: Any, **overrides: Any) -> ComparisonReport:
        return assert_parity(torch_obj, jax_obj, **{**defaults, **overrides})

    return check


@pytest.fixture
def parity_record(request: pytest.FixtureRequest) -> Callable[..., None]:
    records = request.config.stash[_RECORDS_KEY]

    def record(name: str, report: ComparisonReport, **extra: Any) -> None:
        worst = report.worst
        records.append(
            {
                "test": request.node.nodeid,
                "name": name,
                "max_abs": report.max_abs,
                "max_rel": report.max_rel,
                "max_ulp": report.max_ulp,
                "worst_leaf": worst.key if worst else None,
                "rtol": report.rtol,
                "atol": report.atol,
                "max_ulp_allowed": report.max_ulp_allowed,
                **extra,
            }
        )

    return record
