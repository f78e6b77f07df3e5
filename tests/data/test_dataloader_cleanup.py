"""No worker process and no shared-memory file outlives a DataLoader, whichever way its process ends.

Each test runs ``tests/data/_loader_scenarios.py`` in a subprocess with a
live 2-worker loader (dataset exported to shared memory, batches in shared
slots). At ``READY`` it records the subprocess's descendants (workers, fork
server, resource tracker) and checks that the loader's shared memory is in
use but has no name in ``/dev/shm``, and that none of the processes maps a
file under a name there (no ``sem.mp-*``: the workers' tasks travel over
their sockets, not through a ``multiprocessing.Queue``). After the
scenario's way out, every recorded process must be gone and no
``/dev/shm`` file named for the subprocess may exist, even when the whole
process group was killed at once, so that no process was left to clean up.

torch's DataLoader is not run beside these: its workers under ``fork`` stop
by the same parent check, and what is tested here (cleanup of processes and
shared files) has no value to compare.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jax_impl.data._shared_memory import shared_name_prefix

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="inspects processes through /proc")

_REPO = Path(__file__).resolve().parents[2]
# Seconds a scenario subprocess may take in all (start, fork server, workers, exit) before the test fails.
_SCENARIO_TIMEOUT = 60
# The bound: workers exit within 5 s of the loader's process dying, by any signal.
_WORKER_EXIT_BOUND = 5.0
# Seconds after the loader's process is gone within which its fork server and resource tracker must be too.
_TREE_EXIT_BOUND = 10.0


def _stat(pid: int) -> tuple[int, str, int] | None:
    """``(ppid, state, start time)`` from ``/proc/<pid>/stat``; ``None`` if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """Every live descendant of ``root``: pid -> start time (so a reused pid is not mistaken for it)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            children.setdefault(st[0], []).append((int(entry), st[2]))
    found, todo = {}, [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            found[pid] = start
            todo.append(pid)
    return found


def _alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st[2] == start and st[1] != "Z"  # A zombie has exited.


def _wait_gone(procs: dict[int, int], bound: float) -> list[int]:
    """Waits up to ``bound`` s for all ``procs`` to exit; returns those still running."""
    deadline = time.monotonic() + bound
    while (left := [p for p, s in procs.items() if _alive(p, s)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _shared_memory_in_use(pids: list[int], owner: int) -> list[str]:
    """The loader's shared files (by ``owner``'s name prefix) that ``pids`` hold open or mapped."""
    prefix = shared_name_prefix(owner)
    objects = []
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if prefix in target:
                        objects.append(target)
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
            objects += [line.split(None, 5)[5].strip() for line in f if prefix in line]
    return objects


def _named_shm_mapped(pids: list[int]) -> set[str]:
    """Files in ``/dev/shm`` that ``pids`` map under a name (multiprocessing's semaphores: ``sem.mp-*``)."""
    names = set()
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
            for line in f:
                fields = line.split(None, 5)
                path = fields[5].strip() if len(fields) == 6 else ""  # Anonymous mappings have no path.
                if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
                    names.add(path)
    return names


def _shm_files(owner: int) -> list[str]:
    """Files in ``/dev/shm`` named for the loader running in process ``owner``."""
    if not os.path.isdir("/dev/shm"):
        return []
    return [f for f in os.listdir("/dev/shm") if f.startswith(shared_name_prefix(owner))]


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not result:
        proc.kill()
        raise AssertionError(f"no line from the scenario within {timeout} s")
    return result[0]


@contextlib.contextmanager
def _scenario(name: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, dict[str, Any], dict[int, int]]]:
    """Starts a scenario, waits for READY, and checks the shared memory and processes it runs with.

    Yields:
        The process, its READY record (``pid``, ``workers``) and its descendants (pid -> start time).
    """
    stderr = open(tmp_path / f"{name}.stderr", "w+")  # noqa: SIM115 - read back on failure
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.data._loader_scenarios", name],
        cwd=_REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
        start_new_session=True,  # Its own process group, which a test may kill whole.
    )
    tree: dict[int, int] = {}
    try:
        line = _read_line(proc, _SCENARIO_TIMEOUT)
        assert line.startswith("READY "), f"{line!r}; stderr: {(tmp_path / f'{name}.stderr').read_text()}"
        ready = json.loads(line.split(" ", 1)[1])
        tree = _descendants(proc.pid)
        assert set(ready["workers"]) <= set(tree) and len(tree) >= 3  # Workers, fork server, tracker.
        # Before: shared memory is in use (export file, result slots), and none of it has a name in /dev/shm.
        in_use = _shared_memory_in_use([proc.pid, *tree], proc.pid)
        assert any("export" in o for o in in_use) and any("batch" in o for o in in_use), in_use
        assert all(o.startswith("/memfd:") or o.endswith("(deleted)") for o in in_use), in_use
        assert _shm_files(proc.pid) == []
        # Nor does anything else the processes share: a name would outlive a SIGKILL of all of them.
        assert _named_shm_mapped([proc.pid, *tree]) == set()
        yield proc, ready, tree
        assert _wait_gone(tree, _TREE_EXIT_BOUND) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(_SCENARIO_TIMEOUT)
        for pid, start in tree.items():  # A failed test leaves no process behind either.
            if _alive(pid, start):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        stderr.close()


def _assert_all_gone(proc: subprocess.Popen, tree: dict[int, int], workers: list[int]) -> None:
    assert _wait_gone({w: tree[w] for w in workers}, _WORKER_EXIT_BOUND) == []
    assert _wait_gone(tree, _TREE_EXIT_BOUND) == []
    assert _shm_files(proc.pid) == []


def _finish(proc: subprocess.Popen, feed: str | None = "\n") -> int:
    if feed is not None:
        proc.stdin.write(feed)
        proc.stdin.flush()
    return proc.wait(_SCENARIO_TIMEOUT)


def test_worker_exception_uncaught_leaves_nothing(tmp_path: Path) -> None:
    with _scenario("worker_exception", tmp_path) as (proc, ready, tree):
        assert _finish(proc) == 1
        assert "ValueError: bad index 20" in (tmp_path / "worker_exception.stderr").read_text()
        _assert_all_gone(proc, tree, ready["workers"])


def test_iterator_alive_at_interpreter_exit_leaves_nothing(tmp_path: Path) -> None:
    with _scenario("alive_at_exit", tmp_path) as (proc, ready, tree):
        assert _finish(proc) == 0
        _assert_all_gone(proc, tree, ready["workers"])


def test_sigint_of_the_main_process_leaves_nothing(tmp_path: Path) -> None:
    with _scenario("signal", tmp_path) as (proc, ready, tree):
        proc.send_signal(signal.SIGINT)
        assert _finish(proc, None) == -signal.SIGINT  # Uncaught KeyboardInterrupt: Python exits by SIGINT.
        assert "KeyboardInterrupt" in (tmp_path / "signal.stderr").read_text()
        _assert_all_gone(proc, tree, ready["workers"])


def test_sigkill_of_the_main_process_stops_workers(tmp_path: Path) -> None:
    """Workers (children of the fork server, not of the killed process) exit; so do the server and tracker."""
    with _scenario("signal", tmp_path) as (proc, ready, tree):
        proc.kill()
        assert _finish(proc, None) == -signal.SIGKILL
        _assert_all_gone(proc, tree, ready["workers"])


def test_sigkill_of_the_whole_process_group_leaves_nothing(tmp_path: Path) -> None:
    """The loader's process, its fork server, resource tracker and workers killed at once (a job scheduler's
    kill, ``kill -9 -PGID``): no process runs on, and nothing is left in ``/dev/shm`` for anyone to clean."""
    with _scenario("signal", tmp_path) as (proc, ready, tree):
        before = set(os.listdir("/dev/shm"))
        os.killpg(proc.pid, signal.SIGKILL)
        assert _finish(proc, None) == -signal.SIGKILL
        _assert_all_gone(proc, tree, ready["workers"])
        left = {f for f in set(os.listdir("/dev/shm")) - before if str(proc.pid) in f}
        assert left == set()


def test_gc_of_a_live_iterator_stops_workers_and_unmaps(tmp_path: Path) -> None:
    with _scenario("gc", tmp_path) as (proc, ready, tree):
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert _read_line(proc, _SCENARIO_TIMEOUT) == "COLLECTED\n"
        assert _wait_gone({w: tree[w] for w in ready["workers"]}, _WORKER_EXIT_BOUND) == []
        # The loader, its iterator and the batch are gone: the process maps no shared file any more.
        assert _shared_memory_in_use([proc.pid], proc.pid) == []
        assert _shm_files(proc.pid) == []
        assert _finish(proc) == 0
        _assert_all_gone(proc, tree, ready["workers"])
