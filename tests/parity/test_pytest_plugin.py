"""The pytest plugin as a user sees it: registered through the entry point, fixtures and marker work."""

import json
from importlib.metadata import entry_points

import pytest


def test_entry_point_registered():
    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("parity") == "parity.pytest_plugin"


def test_user_parity_test(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        import torch

        @pytest.mark.parity(max_ulp=1, seed=5)
        def test_passes(parity_numerics, parity_seed, np_rng, torch_generator, assert_parity_marked, parity_record):
            import jax
            assert jax.config.jax_default_matmul_precision == "highest"
            assert torch.are_deterministic_algorithms_enabled()
            assert parity_seed == 5
            assert np_rng.integers(1000) == np.random.default_rng(5).integers(1000)
            assert torch.rand(1, generator=torch_generator).item() == torch.rand(1, generator=torch.Generator().manual_seed(5)).item()
            one = np.float32(1)
            report = assert_parity_marked(torch.tensor([one]), np.array([np.nextafter(one, np.float32(2))]))
            parity_record("one-ulp", report, note="hand-made")

        @pytest.mark.parity(max_ulp=0)
        def test_fails(assert_parity_marked):
            assert_parity_marked({"w": torch.ones(2)}, {"w": np.float32([1, 1.5])})
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--parity-report=report.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*worst leaf: w*"])
    records = json.loads((pytester.path / "report.json").read_text())
    assert records[0]["name"] == "one-ulp" and records[0]["max_ulp"] == 1 and records[0]["note"] == "hand-made"


def test_marker_is_documented(pytester: pytest.Pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.parity(*"])
