"""jax_impl.parallel's step arguments: gradient accumulation takes 1 to k micro-batches (torch parity of the
accumulating step: tests/parity/test_parallel_runner.py, against torch DDP with ddp.no_sync())."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from jax_impl import nn, optim, parallel


class _Net(nnx.Module):
    def __init__(self) -> None:
        self.fc = nn.Linear(3, 2)

    def __call__(self, x):
        return self.fc(x)


def test_accumulate_takes_one_to_k_micro_batches() -> None:
    with pytest.raises(ValueError, match="accumulate must be a positive integer"):
        parallel.train_step_fn(None, nn.CrossEntropyLoss(), optim.sgd(lr=0.1), accumulate=0)
    graphdef, state = parallel.init_train_state(_Net(), optim.sgd(lr=0.1))
    step = parallel.vmap_train_step(graphdef, nn.CrossEntropyLoss(), optim.sgd(lr=0.1), accumulate=2)
    x, y = np.ones((2, 4, 3), np.float32), np.zeros((2, 4), np.int32)
    state, loss = step(parallel.replicate(state, copies=2), [(x, y), (x[:, :1], y[:, :1])])
    assert loss.shape == (2,) and np.isfinite(np.asarray(loss)).all()
    with pytest.raises(ValueError, match="expected 1 to 2 micro-batches, got 3"):
        step(state, [(x, y)] * 3)


def test_a_replicated_state_is_the_pmap_steps_own_sharding(caplog) -> None:
    """``replicate`` puts the state on a mesh axis of the step's ``axis_name``, the sharding ``pmap`` gives its
    outputs: the second step takes the first step's output state and reuses its compilation (on a mesh axis of
    another name it compiled twice)."""
    import logging

    import jax

    tx = optim.sgd(lr=0.1)
    graphdef, state = parallel.init_train_state(_Net(), tx)
    step = parallel.pmap_train_step(graphdef, nn.CrossEntropyLoss(), tx)
    state = parallel.replicate(state)
    x, y = np.ones((1, 4, 3), np.float32), np.zeros((1, 4), np.int32)
    with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax"):
        for _ in range(3):
            state, loss = step(state, x, y)
    compiles = [r for r in caplog.records if "Compiling" in r.getMessage() and "float32[1,4,3]" in r.getMessage()]
    assert len(compiles) == 1, [r.getMessage() for r in compiles]
