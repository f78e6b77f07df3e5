import pytest

from parity import strict_numerics


@pytest.fixture
def x64():
    """float64 on both sides: jax x64 on, parity's strict numerics (highest matmul precision, no TF32)."""
    with strict_numerics(0, x64=True):
        yield


@pytest.fixture
def f32():
    with strict_numerics(0, x64=False):
        yield
