"""Fixtures of the optimizer tests."""

from __future__ import annotations

import pytest

from tests.optim import _harness as H

# The modules that test the scalar table itself keep its real length.
_REAL_TABLES = {"test_scalar_table", "test_fixed_horizon"}


@pytest.fixture(autouse=True)
def _tables_of_the_steps_a_test_runs(request):
    """Every other test tabulates at most ``_harness.TABLE_STEPS`` host-scalar rows (why: ``_harness``)."""
    if request.module.__name__.rpartition(".")[2] in _REAL_TABLES:
        yield
        return
    with H.short_scalar_tables():
        yield
