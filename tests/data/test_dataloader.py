"""jax_impl.data.DataLoader against torch.utils.data.DataLoader run beside it.

torch is imported lazily (``_torch()``): the dataset classes below are
unpickled by our forkserver workers, which import this module, and a torch
import per worker would cost seconds.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_impl.data import _shared_memory, _worker
from jax_impl.data import generator as jgen
from jax_impl.data.dataloader import DataLoader, device_prefetch, get_worker_info
from jax_impl.data.dataset import Dataset, IterableDataset, TensorDataset

_KEEP_ALIVE: list[Any] = []


def _torch() -> Any:
    import torch

    return torch


# --------------------------------------------------------------------------- datasets (picklable, no torch)


class SquaresDataset(Dataset):
    """Per-sample dataset without ``__getitems__``: ``(i, [i*i, -i] as float32)``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, np.ndarray]:
        return i, np.array([i * i, -i], dtype=np.float32)


class SeedProbe(Dataset):
    """Reports the worker's seed and draws from every RNG a worker seeds."""

    def __init__(self, n: int, torch_side: bool) -> None:
        self.n = n
        self.torch_side = torch_side

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if self.torch_side:
            torch = _torch()
            info = torch.utils.data.get_worker_info()
            global_draw = int(torch.empty((), dtype=torch.int64).random_().item())
        else:
            info = get_worker_info()
            global_draw = jgen.default_generator.random_int64()
        return np.array(
            [
                i,
                info.id,
                info.seed,
                info.num_workers,
                int(np.random.randint(0, 2**31 - 1)),
                random.getrandbits(62),
                global_draw,
            ],
            dtype=np.int64,
        )


class Failing(Dataset):
    """Raises ``ValueError`` at one index."""

    def __init__(self, n: int, bad: int) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise ValueError(f"bad index {i}")
        return i


class Killer(Dataset):
    """SIGKILLs the worker process at one index."""

    def __init__(self, n: int, bad: int) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


class Sleepy(Dataset):
    def __init__(self, n: int, slow: int, seconds: float) -> None:
        self.n, self.slow, self.seconds = n, slow, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.slow:
            time.sleep(self.seconds)
        return i


class Counting(IterableDataset):
    """``range(n)``, split between workers by ``get_worker_info`` (torch's documented recipe)."""

    def __init__(self, n: int, torch_side: bool = False) -> None:
        self.n = n
        self.torch_side = torch_side

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        info = (
            _torch().utils.data.get_worker_info()
            if self.torch_side
            else get_worker_info()
        )
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


# --------------------------------------------------------------------------- helpers


def _np(x: Any) -> Any:
    """A batch as nested lists of numpy arrays, for either side."""
    torch = _torch()
    if isinstance(x, torch.Tensor):
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return [_np(v) for v in x]
    if isinstance(x, dict):
        return {k: _np(v) for k, v in x.items()}
    return np.asarray(x)


def _assert_same(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        a, b = _np(a), _np(b)
        if isinstance(a, list):
            assert isinstance(b, list) and len(a) == len(b)
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(np.asarray(x), y)
                assert np.asarray(x).dtype == y.dtype
        else:
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype


@contextlib.contextmanager
def _global_rngs(seed: int) -> Iterator[None]:
    """Seeds torch's and our global generators alike, restoring both afterwards."""
    torch = _torch()
    torch_state, our_state = torch.get_rng_state(), jgen.get_rng_state()
    torch.manual_seed(seed)
    jgen.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        jgen.set_rng_state(our_state)


@contextlib.contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    """Fails the test instead of hanging (no pytest-timeout dependency)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"test exceeded {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _our_children() -> list[multiprocessing.process.BaseProcess]:
    return [
        p
        for p in multiprocessing.active_children()
        if p.name.startswith("jax_impl_data_worker")
    ]


def _run_pair(
    make_ours: Any, make_theirs: Any, epochs: int, seed: int, use_generator: bool
) -> tuple:
    """Iterates both loaders ``epochs`` times; returns batches and the RNG's next draw on each side."""
    torch = _torch()
    with _global_rngs(seed + 1):
        if use_generator:
            g_ours, g_theirs = (
                jgen.Generator().manual_seed(seed),
                torch.Generator().manual_seed(seed),
            )
        else:
            g_ours = g_theirs = None
        ours_loader, theirs_loader = make_ours(g_ours), make_theirs(g_theirs)
        ours = [list(ours_loader) for _ in range(epochs)]
        theirs = [list(theirs_loader) for _ in range(epochs)]
        if use_generator:
            after = (
                g_ours.random_int64(),
                int(torch.empty((), dtype=torch.int64).random_(generator=g_theirs)),
            )
        else:
            # Both global generators were seeded alike; each loader consumed from its own side.
            after = (
                jgen.default_generator.random_int64(),
                int(torch.empty((), dtype=torch.int64).random_()),
            )
    return ours, theirs, after


# --------------------------------------------------------------------------- single process: batches and RNG


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 40),
    batch_size=st.one_of(st.none(), st.integers(1, 9)),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32 + 10),
    epochs=st.integers(1, 3),
    use_generator=st.booleans(),
    getitems=st.booleans(),
)
def test_batches_and_rng_match_torch(
    n: int,
    batch_size: int | None,
    shuffle: bool,
    drop_last: bool,
    seed: int,
    epochs: int,
    use_generator: bool,
    getitems: bool,
) -> None:
    torch = _torch()
    if batch_size is None:
        drop_last = False
    x = np.arange(n, dtype=np.float32).reshape(n, 1) * 1.5
    y = np.arange(n, dtype=np.int64) * 7
    if getitems:
        ours_ds: Any = TensorDataset(x, y)
        theirs_ds: Any = torch.utils.data.TensorDataset(
            torch.from_numpy(x), torch.from_numpy(y)
        )
    else:
        ours_ds = SquaresDataset(n)
        theirs_ds = SquaresDataset(
            n
        )  # Same per-sample numpy items; torch's collate makes tensors.
    kwargs = {"batch_size": batch_size, "shuffle": shuffle, "drop_last": drop_last}
    ours, theirs, after = _run_pair(
        lambda g: DataLoader(ours_ds, generator=g, **kwargs),
        lambda g: torch.utils.data.DataLoader(theirs_ds, generator=g, **kwargs),
        epochs,
        seed,
        use_generator,
    )
    for a, b in zip(ours, theirs, strict=True):
        _assert_same(a, b)
    assert after[0] == after[1]
    assert len(DataLoader(ours_ds, **kwargs)) == len(
        torch.utils.data.DataLoader(theirs_ds, **kwargs)
    )


def test_iterable_dataset_single_process_matches_torch() -> None:
    torch = _torch()

    class TorchCounting(torch.utils.data.IterableDataset):
        def __init__(self, n: int) -> None:
            self.inner = Counting(n, torch_side=True)

        def __len__(self) -> int:
            return len(self.inner)

        def __iter__(self) -> Iterator[int]:
            return iter(self.inner)

    for bs, drop_last in [(4, False), (4, True), (None, False)]:
        ours_loader = DataLoader(Counting(10), batch_size=bs, drop_last=drop_last)
        theirs_loader = torch.utils.data.DataLoader(
            TorchCounting(10), batch_size=bs, drop_last=drop_last
        )
        _assert_same(list(ours_loader), list(theirs_loader))
        assert len(ours_loader) == len(theirs_loader)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": -1},
        {"timeout": -1},
        {"prefetch_factor": 2},
        {"num_workers": 1, "prefetch_factor": -1},
        {"persistent_workers": True},
        {"sampler": [0, 1], "shuffle": True},
        {"batch_sampler": [[0, 1]], "batch_size": 2},
        {"batch_sampler": [[0, 1]], "drop_last": True},
        {"batch_size": None, "drop_last": True},
        {"multiprocessing_context": "fork"},
        {"num_workers": 1, "multiprocessing_context": "no-such-method"},
        {"num_workers": 1, "multiprocessing_context": 3},
    ],
)
def test_validation_messages_match_torch(kwargs: dict) -> None:
    torch = _torch()
    with pytest.raises(Exception) as theirs:
        torch.utils.data.DataLoader(SquaresDataset(4), **kwargs)
    with pytest.raises(theirs.type) as ours:
        DataLoader(SquaresDataset(4), **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_iterable_dataset_validation_and_frozen_attributes() -> None:
    torch = _torch()
    with pytest.raises(
        ValueError, match="expected unspecified shuffle option, but got shuffle=True"
    ):
        DataLoader(Counting(3), shuffle=True)
    loader = DataLoader(SquaresDataset(3))
    with pytest.raises(
        ValueError,
        match="batch_size attribute should not be set after DataLoader is initialized",
    ):
        loader.batch_size = 2
    with pytest.raises(
        AssertionError
    ):  # torch refuses timeout without workers when iterating.
        iter(torch.utils.data.DataLoader(SquaresDataset(3), timeout=1))
    with pytest.raises(AssertionError):
        iter(DataLoader(SquaresDataset(3), timeout=1))


@settings(max_examples=30, deadline=None)
@given(base_seed=st.integers(0, 2**63 - 1), worker_id=st.integers(0, 64))
def test_generate_state_matches_torch(base_seed: int, worker_id: int) -> None:
    from torch.utils.data._utils.worker import _generate_state

    assert _worker.generate_state(base_seed, worker_id) == _generate_state(
        base_seed, worker_id
    )


# --------------------------------------------------------------------------- worker processes


@pytest.mark.parametrize(
    "shuffle,drop_last,persistent,use_generator",
    [(True, False, False, True), (True, True, True, False), (False, False, True, True)],
)
def test_two_workers_match_torch_and_single_process(
    shuffle: bool, drop_last: bool, persistent: bool, use_generator: bool
) -> None:
    torch = _torch()
    n, bs, epochs, seed = 23, 4, 2, 1234
    x = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    y = np.arange(n, dtype=np.int64)
    kwargs = {"batch_size": bs, "shuffle": shuffle, "drop_last": drop_last}
    with _alarm(60):
        ours, theirs, after = _run_pair(
            lambda g: DataLoader(
                TensorDataset(x, y),
                generator=g,
                num_workers=2,
                persistent_workers=persistent,
                **kwargs,
            ),
            lambda g: torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(
                    torch.from_numpy(x), torch.from_numpy(y)
                ),
                generator=g,
                num_workers=2,
                persistent_workers=persistent,
                multiprocessing_context="fork",
                **kwargs,
            ),
            epochs,
            seed,
            use_generator,
        )
        single, _, after_single = _run_pair(
            lambda g: DataLoader(TensorDataset(x, y), generator=g, **kwargs),
            lambda g: torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(torch.tensor([0.0]))
            ),
            epochs,
            seed,
            use_generator,
        )
    for a, b in zip(ours, theirs, strict=True):
        _assert_same(a, b)
    assert after[0] == after[1]
    if not persistent:  # Persistent workers draw base_seed once, so later epochs differ from num_workers=0.
        for a, c in zip(ours, single, strict=True):
            _assert_same(a, c)
        assert after_single[0] == after[0]


def test_memmap_dataset_is_reopened_not_copied(tmp_path: Any) -> None:
    path = tmp_path / "tokens.bin"
    np.arange(3 * 2**20, dtype=np.uint16).tofile(
        path
    )  # 6 MiB, above the sharing threshold
    tokens = np.memmap(path, dtype=np.uint16, mode="r").reshape(-1, 1024)
    exported, file = _shared_memory.export_dataset(TensorDataset(tokens), _shared_memory.ExportPool())
    assert file is None and len(exported.data) < 4096  # The file is reopened, not copied.
    loader = DataLoader(
        TensorDataset(tokens), batch_size=64, shuffle=True, num_workers=2
    )
    single = DataLoader(TensorDataset(tokens), batch_size=64, shuffle=True)
    with _alarm(60):
        with _global_rngs(5):
            ours = list(loader)
        with _global_rngs(5):
            _assert_same(ours, list(single))


def _our_shm_files() -> set[str]:
    shm = "/dev/shm"
    if not os.path.isdir(shm):
        return set()
    return {f for f in os.listdir(shm) if f.startswith("jax_impl_dataloader_")}


def _export_files_open() -> set[int]:
    """Inodes of the loader's export files (anonymous shared memory) this process holds descriptors of.

    Inodes, not descriptors: an ``mmap.mmap`` keeps a duplicate of the descriptor it maps.
    """
    prefix = f"/memfd:{_shared_memory.shared_name_prefix(os.getpid())}export_"
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
                found.add(os.stat(f"/proc/self/fd/{fd}").st_ino)
    return found


def test_kept_batches_stay_intact_and_writable() -> None:
    """Batches are views of shared slots: one the caller keeps is never overwritten by later ones."""
    x = np.arange(256 * 2048, dtype=np.float32).reshape(256, 2048)  # 128 KiB a batch: shared slots
    loader = DataLoader(TensorDataset(x), batch_size=16, num_workers=1)
    with _alarm(60):
        for _ in range(2):
            kept = [b[0] for b in loader]
            assert len(kept) == 16
            np.testing.assert_array_equal(np.concatenate(kept), x)
            kept[0][0, 0] = -1.0  # Writable, as torch's tensors are; the dataset is untouched.
            assert x[0, 0] == 0.0


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="counts memfd descriptors in /proc/self/fd")
def test_exported_arrays_are_reused_but_see_changes() -> None:
    """Later epochs reuse the loader's shared file, copying the data set's current contents in."""
    before, shm_before = _export_files_open(), _our_shm_files()
    x = np.zeros((2**19,), np.float32)  # 2 MiB: exported to a shared file
    loader = DataLoader(TensorDataset(x), batch_size=2**17, num_workers=2)
    with _alarm(60):
        first = np.concatenate([b[0] for b in loader])
        files = _export_files_open() - before
        x += 1.0
        second = np.concatenate([b[0] for b in loader])
        assert _export_files_open() - before == files and len(files) == 1
    assert (first == 0.0).all() and (second == 1.0).all()
    assert _our_shm_files() - shm_before == set()  # Anonymous: never a name in /dev/shm.
    del loader
    gc.collect()
    assert _export_files_open() - before == set()


_INIT_TAG: list[int] = []


def _tag_worker(worker_id: int) -> None:
    _INIT_TAG.append(100 + worker_id)


class Tagged(Dataset):
    """``(i, tag set by worker_init_fn)``."""

    def __len__(self) -> int:
        return 9

    def __getitem__(self, i: int) -> tuple[int, int]:
        return i, _INIT_TAG[-1] if _INIT_TAG else -1


def test_unbatched_worker_init_fn_and_out_of_order() -> None:
    torch = _torch()
    kwargs = {"batch_size": None, "num_workers": 2, "worker_init_fn": _tag_worker}
    with _alarm(60):
        ours = list(DataLoader(Tagged(), **kwargs))
        theirs = list(
            torch.utils.data.DataLoader(
                Tagged(), multiprocessing_context="fork", **kwargs
            )
        )
        unordered = list(
            DataLoader(Tagged(), batch_size=2, num_workers=2, in_order=False)
        )
    _assert_same(ours, theirs)  # default_convert per sample; tags 100/101 by worker.
    got = sorted(int(i) for batch in unordered for i in np.asarray(batch[0]))
    assert got == list(range(9))


def test_worker_seeds_match_torch() -> None:
    torch = _torch()
    with _alarm(60):
        ours = list(
            DataLoader(
                SeedProbe(6, False),
                batch_size=2,
                num_workers=2,
                generator=jgen.Generator().manual_seed(7),
            )
        )
        theirs = list(
            torch.utils.data.DataLoader(
                SeedProbe(6, True),
                batch_size=2,
                num_workers=2,
                generator=torch.Generator().manual_seed(7),
                multiprocessing_context="fork",
            )
        )
    _assert_same(ours, theirs)
    ids = np.concatenate([np.asarray(b)[:, 1] for b in ours])
    assert sorted(set(ids.tolist())) == [0, 1]


def test_iterable_dataset_two_workers_match_torch() -> None:
    torch = _torch()

    class TorchCounting(torch.utils.data.IterableDataset):
        def __init__(self, n: int) -> None:
            self.inner = Counting(n, torch_side=True)

        def __iter__(self) -> Iterator[int]:
            return iter(self.inner)

    with _alarm(60):
        for persistent in (False, True):
            ours_loader = DataLoader(
                Counting(11), batch_size=3, num_workers=2, persistent_workers=persistent
            )
            theirs_loader = torch.utils.data.DataLoader(
                TorchCounting(11),
                batch_size=3,
                num_workers=2,
                persistent_workers=persistent,
                multiprocessing_context="fork",
            )
            for _ in range(
                2
            ):  # A persistent worker must resume after its StopIteration.
                _assert_same(list(ours_loader), list(theirs_loader))


def test_worker_exception_reraised_with_type_and_message() -> None:
    torch = _torch()
    with pytest.raises(ValueError) as theirs:
        list(
            torch.utils.data.DataLoader(
                Failing(8, 5),
                batch_size=2,
                num_workers=2,
                multiprocessing_context="fork",
            )
        )
    start = time.monotonic()
    with _alarm(30), pytest.raises(ValueError) as ours:
        list(DataLoader(Failing(8, 5), batch_size=2, num_workers=2))
    assert time.monotonic() - start < 5
    # Same first line ("Caught ValueError in DataLoader worker process 0.") and original message.
    assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
    assert (
        str(ours.value).splitlines()[-1]
        == str(theirs.value).splitlines()[-1]
        == "ValueError: bad index 5"
    )
    assert "Traceback (most recent call last)" in str(ours.value)
    # The tracebacks hold the iterators: dropping ours shuts its workers down. torch's shutdown
    # of its iterator here takes ~10 s, so that one is kept until the session ends.
    _KEEP_ALIVE.append(theirs)
    del ours, theirs
    gc.collect()


def test_killed_worker_raises_runtime_error() -> None:
    start = time.monotonic()
    it = iter(DataLoader(Killer(8, 3), batch_size=2, num_workers=2))
    with (
        _alarm(30),
        pytest.raises(
            RuntimeError, match=r"DataLoader worker 1 .* exited unexpectedly .*SIGKILL"
        ),
    ):
        list(it)
    assert time.monotonic() - start < 5
    assert not any(
        w.is_alive() for w in it._workers
    )  # The survivors were shut down too.


def test_timeout_raises_like_torch() -> None:
    start = time.monotonic()
    with (
        _alarm(30),
        pytest.raises(RuntimeError, match=r"^DataLoader timed out after 0.5 seconds$"),
    ):
        for _ in DataLoader(
            Sleepy(4, 2, 3.0), batch_size=1, num_workers=1, timeout=0.5
        ):
            pass
    assert time.monotonic() - start < 2.5
    gc.collect()


def test_break_midway_leaves_no_workers() -> None:
    with _alarm(30):
        loader = DataLoader(SquaresDataset(200), batch_size=2, num_workers=2)
        it = iter(loader)
        next(it)
        pids = [w.pid for w in it._workers]
        del it
        gc.collect()
        deadline = time.monotonic() + 5
        while _our_children() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert _our_children() == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


class Words(Dataset):
    """Strings, so that a batch travels inline (a list, no shared slot): a large one fills a socket."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> str:
        return f"word{i:07d}"


def test_tasks_and_results_larger_than_a_socket_buffer_do_not_block() -> None:
    """Tasks of 60,000 indices (about 300 KB pickled) to a worker that answers with 900 KB lists: the main
    process never blocks handing out a task (a feeder thread writes, as a multiprocessing.Queue's does), so
    neither side waits on the other."""
    with _alarm(60):
        loader = DataLoader(Words(360_000), batch_size=60_000, num_workers=2, prefetch_factor=3)
        batches = list(loader)
    assert [len(b) for b in batches] == [60_000] * 6
    assert batches[0][0] == "word0000000" and batches[5][-1] == "word0359999"
    assert [b[0] for b in batches] == [f"word{60_000 * k:07d}" for k in range(6)]


# --------------------------------------------------------------------------- device_prefetch


def test_device_prefetch_moves_batches_in_order() -> None:
    import jax

    batches = [
        {"x": np.full((4, 2), i, np.float32), "y": np.arange(4) + i} for i in range(5)
    ]
    out = list(device_prefetch(batches, size=2))
    assert len(out) == 5
    for i, b in enumerate(out):
        assert isinstance(b["x"], jax.Array)
        np.testing.assert_array_equal(np.asarray(b["x"]), batches[i]["x"])
    devices = jax.local_devices()
    pmapped = next(device_prefetch(batches, devices=devices))
    assert pmapped["x"].shape == (len(devices), 4 // len(devices), 2)
    sharding = jax.sharding.SingleDeviceSharding(devices[0])
    assert next(device_prefetch(batches, sharding=sharding))["y"].sharding == sharding


def test_device_prefetch_propagates_exceptions_and_stops() -> None:
    def source() -> Iterator[np.ndarray]:
        yield np.zeros(2)
        raise KeyError("boom")

    it = device_prefetch(source())
    next(it)
    with pytest.raises(KeyError, match="boom"):
        next(it)
    before = threading.active_count()
    gen = device_prefetch(iter(np.zeros((100, 2))), size=1)
    next(gen)
    gen.close()
    assert threading.active_count() <= before
