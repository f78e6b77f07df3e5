"""``jax_impl.optim.lbfgs``: torch's closure-based LBFGS is explicitly unsupported."""

import pytest
import torch

import jax_impl.optim


def test_lbfgs_raises_not_implemented():
    torch.optim.LBFGS([torch.nn.Parameter(torch.zeros(2))])  # the torch class exists and takes these arguments
    with pytest.raises(NotImplementedError, match="LBFGS"):
        jax_impl.optim.lbfgs()
    with pytest.raises(NotImplementedError, match="LBFGS"):
        jax_impl.optim.lbfgs(lr=1, max_iter=20, history_size=100)
