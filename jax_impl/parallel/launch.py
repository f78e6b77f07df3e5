"""Run a function in N local processes joined by ``jax.distributed`` (torch's ``mp.spawn`` + ``init_process_group``).

``launch(fn, 2)`` starts two fresh interpreters (``spawn``: JAX's threads make
``fork`` unsafe), each with ``local_devices`` CPU devices, and in each calls
``jax.distributed.initialize(coordinator_address="127.0.0.1:<free port>",
num_processes=2, process_id=rank)`` with gloo CPU collectives, then
``fn(rank, world_size, *args)``. It returns the ranks' return values in rank
order. On a GPU host the same call gives each process its devices and XLA
uses NCCL. For several hosts, run your script once per host with
``jax.distributed.initialize`` (``init_from_env`` reads torchrun's variables).

A rank's standard output goes to the caller's standard error.

Failure: when a rank raises, its exception type, message and traceback reach
the caller as :class:`ProcessFailed` and the other ranks (possibly blocked in
a collective that will never complete) are terminated, so nothing hangs and
no process is left behind. A rank that dies without a word (killed, or
``os._exit``) is reported with its exit code the same way.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from jax_impl._xla_cpu import jaxlib_knows_flag

_COLLECTIVE_TIMEOUT = "xla_cpu_collective_call_terminate_timeout_seconds"

__all__ = ["ProcessFailed", "free_port", "init_from_env", "launch", "spawn"]

_ENV_LOCK = threading.Lock()


class ProcessFailed(RuntimeError):
    """A launched rank raised (or died); carries its rank, exception type name and traceback."""

    def __init__(self, rank: int, exc_type: str, message: str, tb: str = "") -> None:
        self.rank, self.exc_type, self.message, self.traceback = rank, exc_type, message, tb
        text = f"process {rank} failed: {exc_type}: {message}"
        super().__init__(text + (f"\n\n--- traceback of process {rank} ---\n{tb}" if tb else ""))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _initialize(coordinator: str, world_size: int, rank: int) -> None:
    import jax

    with contextlib.suppress(AttributeError, ValueError):  # an option of jaxlib builds with CPU collectives
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=world_size, process_id=rank)


def init_from_env() -> tuple[int, int]:
    """``jax.distributed.initialize`` from torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``).

    The JAX coordinator listens on ``MASTER_PORT + 1`` (torch's store holds
    ``MASTER_PORT``), so one ``torchrun`` command can start a script that uses
    both frameworks. Returns ``(rank, world_size)``.
    """
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    address = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500")) + 1
    _initialize(f"{address}:{port}", world_size, rank)
    return rank, world_size


def _jax_setup(rank: int, world_size: int, address: str, port: int) -> None:
    _initialize(f"{address}:{port}", world_size, rank)


def _jax_teardown() -> None:
    import jax

    jax.distributed.shutdown()


def _end_now() -> None:
    """A rank's last exit handler: flush the output streams and logging, then ``os._exit(0)``.

    A spawned rank ends with the interpreter's teardown, which only frees memory the process gives back
    anyway and takes one to two seconds once torch and XLA are loaded (as ``parity``'s command line,
    which ends the same way). Registered when the rank starts, so every handler the rank's own code
    registers runs first (``jax.distributed``'s shutdown among them); the result is delivered by then, and
    a failed rank has left through ``os._exit(1)`` already.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed stream
            pass
    os._exit(0)


def _child(fn: Callable[..., Any], rank: int, world_size: int, address: str, port: int, args: Sequence[Any],
           conn: multiprocessing.connection.Connection, setup: Callable[..., None] | None,
           teardown: Callable[[], None] | None) -> None:
    # A rank's standard output (gloo's connection lines among it) goes to stderr: the launcher's stdout
    # carries the launcher's own results, e.g. a report piped into a file.
    sys.stdout.flush()
    os.dup2(2, 1)
    atexit.register(_end_now)
    try:
        if setup is not None:
            setup(rank, world_size, address, port)
        result = fn(rank, world_size, *args)
        message = ("ok", pickle.dumps(result))
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it
        message = ("error", type(error).__name__, str(error), traceback.format_exc())
    try:
        conn.send(message)
    finally:
        conn.close()
    if message[0] == "error":
        os._exit(1)  # skip the teardown's barrier: the other ranks may never reach it
    if teardown is not None:
        with contextlib.suppress(Exception):  # the result is delivered; a failing goodbye changes nothing
            teardown()


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    *,
    local_devices: int = 1,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    ranks: Sequence[int] | None = None,
    address: str = "127.0.0.1",
    port: int | None = None,
) -> list[Any]:
    """Runs ``fn(rank, world_size, *args)`` in ``world_size`` processes joined by ``jax.distributed``.

    Args:
      fn: a picklable (module-level) function.
      world_size: number of processes.
      args: further arguments (picklable).
      local_devices: CPU devices per process
        (``--xla_force_host_platform_device_count``).
      timeout: seconds before the whole run is stopped with ``TimeoutError``.
      env: extra environment variables for the processes.
      ranks: the process ids to start on this host (default: all of them);
        the others run elsewhere with the same ``address`` and ``port``.
      address: the coordinator's host (process 0's).
      port: the coordinator's port (default: a free local one; give it when
        ranks run on several hosts).

    Returns:
      The return values of ``ranks``, in rank order.

    Raises:
      ProcessFailed: the first rank that raised or died; the others are terminated.
      TimeoutError: ``timeout`` passed.
    """
    return spawn(fn, world_size, args, setup=_jax_setup, teardown=_jax_teardown, local_devices=local_devices,
                 timeout=timeout, env=env, ranks=ranks, address=address, port=port)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM that arrive inside are delivered on exit (main thread; elsewhere a no-op).

    A ``KeyboardInterrupt`` raised inside ``Process.start`` can fall between starting the child and
    sending it its pickled target: the child then fails reading it and prints a traceback, and the parent
    never learns its pid to stop it. Held to the end of the starts, the signal interrupts a parent whose
    children have all started, and the caller's cleanup ends them.
    """
    names = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or any(signal.getsignal(s) is None for s in names):
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in names}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])


def spawn(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    *,
    setup: Callable[[int, int, str, int], None] | None = None,
    teardown: Callable[[], None] | None = None,
    local_devices: int = 1,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    ranks: Sequence[int] | None = None,
    address: str = "127.0.0.1",
    port: int | None = None,
) -> list[Any]:
    """The process manager behind :func:`launch` (and ``torch_ref.parallel.launch``).

    Each rank of ``ranks`` (default: all ``world_size``) gets a fresh
    interpreter that runs ``setup(rank, world_size, address, port)`` (one
    port shared by all ranks: a free local one unless given), then
    ``fn(rank, world_size, *args)``, then ``teardown()``; failures and
    timeouts are handled as :func:`launch` describes. Returns the values of
    ``ranks`` in order.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    ranks = list(range(world_size)) if ranks is None else list(ranks)
    if not ranks or any(not 0 <= r < world_size for r in ranks) or len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks must be distinct ranks of 0..{world_size - 1}, got {ranks}")
    ctx = multiprocessing.get_context("spawn")
    port = free_port() if port is None else port
    child_env = dict(env or {})
    flags = os.environ.get("XLA_FLAGS", "")
    flags = " ".join(f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count"))
    flags = f"{flags} --xla_force_host_platform_device_count={local_devices}"
    if _COLLECTIVE_TIMEOUT not in flags and jaxlib_knows_flag(_COLLECTIVE_TIMEOUT):
        # XLA:CPU aborts a process whose devices wait 40 s for each other in an all-reduce; on a loaded
        # 2-core host one device's thread can fall that far behind and still finish.
        flags += f" --{_COLLECTIVE_TIMEOUT}=600"
    child_env["XLA_FLAGS"] = flags.strip()
    procs: dict[int, Any] = {}
    conns: dict[int, multiprocessing.connection.Connection] = {}
    results: dict[int, Any] = {}
    try:
        with _ENV_LOCK, _signals_held():  # spawn children inherit os.environ as it is when they start
            saved = {k: os.environ.get(k) for k in child_env}
            os.environ.update(child_env)
            try:
                for rank in ranks:
                    reader, writer = ctx.Pipe(duplex=False)
                    p = ctx.Process(target=_child, name=f"parallel_rank_{rank}", daemon=True,
                                    args=(fn, rank, world_size, address, port, tuple(args), writer, setup, teardown))
                    p.start()
                    writer.close()
                    procs[rank] = p
                    conns[rank] = reader
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(results) < len(ranks):
            waiting = {conns[r]: r for r in ranks if r not in results}
            sentinels = {procs[r].sentinel: r for r in ranks if r not in results}
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait([*waiting, *sentinels], remaining)
            if not ready:
                raise TimeoutError(f"launch: {len(ranks)} processes did not finish within {timeout} s "
                                   f"(ranks {sorted(set(ranks) - set(results))} still running)")
            for obj in ready:
                rank = waiting.get(obj, sentinels.get(obj))
                if rank in results:
                    continue
                try:
                    message = conns[rank].recv()
                except (EOFError, OSError):
                    procs[rank].join(timeout=5)
                    raise ProcessFailed(rank, "ProcessExited",
                                        f"exited with code {procs[rank].exitcode} without a result") from None
                if message[0] == "error":
                    raise ProcessFailed(rank, *message[1:])
                results[rank] = pickle.loads(message[1])
        for p in procs.values():
            p.join(timeout=30)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.terminate()
        for p in procs.values():
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        for c in conns.values():
            c.close()
    return [results[r] for r in ranks]
