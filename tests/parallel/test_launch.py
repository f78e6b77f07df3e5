"""Process launchers: results in rank order, a failing rank fails the run fast, nothing left behind."""

from __future__ import annotations

import time

import pytest

from jax_impl.parallel import ProcessFailed, free_port, launch, spawn
from tests.parallel import _workers
from torch_ref import parallel as tp


def _children_alive() -> set[int]:
    import multiprocessing

    return {p.pid for p in multiprocessing.active_children()}


@pytest.fixture(autouse=True)
def _no_new_children():
    """Every launch leaves no process behind (children other tests left, e.g. loader workers, are not ours)."""
    before = _children_alive()
    yield
    assert _children_alive() - before == set()


def test_jax_processes_join_one_mesh() -> None:
    """Two processes, jax.distributed with gloo: one global mesh of 2 devices, a cross-process sum."""
    results = launch(_workers.jax_ranks, 2, timeout=120)
    assert results == [(0, 2, 2, 6.0), (1, 2, 2, 6.0)]  # 2 x 1.0 + 2 x 2.0


@pytest.mark.slow  # ~6 s: six processes, two of them JAX
def test_each_host_starts_its_own_ranks() -> None:
    """Two "hosts" (two launches of this process, as two machines would each run one): each starts only its
    ranks, they meet at the given address and port, and each gets its own ranks' results."""
    from concurrent.futures import ThreadPoolExecutor

    jax_port, torch_port = free_port(), free_port()
    with ThreadPoolExecutor(4) as pool:
        jax_hosts = [pool.submit(launch, _workers.jax_ranks, 2, ranks=[r], port=jax_port, timeout=120)
                     for r in (1, 0)]
        torch_hosts = [pool.submit(tp.launch, _workers.torch_all_reduce, 4, backend="gloo", local_world_size=2,
                                   node_rank=n, master_port=torch_port, timeout=120) for n in (1, 0)]
        assert [h.result() for h in jax_hosts] == [[(1, 2, 2, 6.0)], [(0, 2, 2, 6.0)]]
        assert [h.result() for h in torch_hosts] == [[(2, 4, "1", 10.0), (3, 4, "1", 10.0)],
                                                     [(0, 4, "0", 10.0), (1, 4, "0", 10.0)]]
    with pytest.raises(ValueError, match="distinct ranks of 0..1"):
        spawn(_workers.jax_ranks, 2, ranks=[2])
    with pytest.raises(ValueError, match="node_rank 2 is not a host"):
        tp.launch(_workers.torch_all_reduce, 4, local_world_size=2, node_rank=2)


@pytest.mark.parametrize("launcher", ["jax", "torch"])
def test_a_raising_rank_fails_the_run_with_its_error(launcher: str) -> None:
    start = time.monotonic()
    with pytest.raises(ProcessFailed) as failed:
        if launcher == "jax":
            spawn(_workers.raise_on_rank_one, 2, timeout=60)
        else:  # rank 0 is blocked in a gloo all_reduce that rank 1 never joins
            tp.launch(_workers.torch_collective_then_raise, 2, backend="gloo", timeout=60)
    assert failed.value.rank == 1 and failed.value.exc_type == "ValueError"
    assert "rank 1 gives up" in str(failed.value) and "Traceback" in str(failed.value)
    assert time.monotonic() - start < 30


def test_a_dying_rank_is_reported() -> None:
    with pytest.raises(ProcessFailed, match="exited with code 3"):
        spawn(_workers.die_on_rank_one, 2, timeout=60)


def test_timeout() -> None:
    with pytest.raises(TimeoutError, match="did not finish within 2"):
        spawn(_workers.die_on_rank_one, 1, timeout=2)  # rank 0 sleeps 60 s


def test_auto_backend_and_wrap_device_checks() -> None:
    """Without CUDA "auto" is gloo whatever the world size; NCCL is named only with a GPU per rank; a bad
    device is refused (never a silent CPU run)."""
    import torch

    from torch_ref import parallel as tp

    if not torch.cuda.is_available():
        assert tp.resolve_backend("auto") == tp.resolve_backend("auto", world_size=4) == "gloo"
    else:
        gpus = torch.cuda.device_count()
        assert tp.resolve_backend("auto", world_size=gpus + 1) == "gloo"
    assert tp.resolve_backend("nccl") == "nccl"
    with pytest.raises(ValueError, match="backend must be"):
        tp.resolve_backend("mpi")
    with pytest.raises(ValueError, match="device must be"):
        tp.wrap(torch.nn.Linear(2, 2), device="tpu")


def test_a_signal_while_ranks_start_stops_every_started_rank(monkeypatch) -> None:
    """Ctrl-C (or SIGTERM turned into KeyboardInterrupt) landing inside the start of a rank is held until
    every rank has started, then raised: no rank is left half-started (it would read a truncated target
    and print a traceback) and the launcher ends all of them (the fixture checks none is left)."""
    import multiprocessing.context
    import signal

    started = []
    start = multiprocessing.context.SpawnProcess.start

    def start_then_signal(self):
        start(self)
        started.append(self.pid)
        if len(started) == 1:
            signal.raise_signal(signal.SIGINT)  # Python's default handler: KeyboardInterrupt

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start_then_signal)
    # Python's own SIGINT handler, whatever this process inherited (a shell's background job ignores SIGINT).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            spawn(_workers.raise_on_rank_one, 3, timeout=60)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(started) == 3
