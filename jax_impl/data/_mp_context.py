"""The start method of DataLoader workers when ``multiprocessing_context`` is ``None``.

torch uses the platform default, ``fork`` on Linux. Once JAX's backend has
started, the process runs XLA's thread pools, and ``fork`` of a multithreaded
process can deadlock the child (JAX warns when it happens). So the default
here is ``forkserver`` (Python 3.14's default on Linux; ``spawn`` where it is
unavailable), with this package and the main script preloaded in the fork
server: each worker costs a fork of a process that has already imported
everything (Python < 3.14 never preloads ``__main__`` itself). The script is
preloaded only if JAX's backend has not started when the server does (its
top level, run again in the server, could start it there); otherwise every
worker imports it, as under ``spawn``.

forkserver and spawn children import the main script (as ``__mp_main__``)
to unpickle what it defines. A script that creates the loader's iterator
outside ``if __name__ == "__main__":`` would run again in every child, and
one read from stdin cannot be imported at all. For those, fork is used, as
torch does, while it is safe (JAX's backend has not started); once it is not,
the iterator fails at once with one line naming the fix.
"""

from __future__ import annotations

import ast
import functools
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import sys
import threading
import tokenize
from types import ModuleType

__all__ = ["default_context", "prepare_main_in_forkserver"]

_FORKSERVER_MAIN_ENV = "JAX_IMPL_DATALOADER_FORKSERVER_MAIN"
# Imported by the fork server only; its import runs prepare_main_in_forkserver there.
_PRELOAD_MODULE = "jax_impl.data._forkserver_preload"
_GUARD = '`if __name__ == "__main__":`'

_preload_lock = threading.Lock()
_preload_set = False


def default_context() -> multiprocessing.context.BaseContext:
    """The workers' context: forkserver with the main script preloaded; fork for scripts forkserver cannot serve.

    Raises:
        RuntimeError: the main script cannot be imported by a child without
            running this loop again (or at all), and fork is unsafe because
            JAX's backend is running threads.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - non-POSIX
        return multiprocessing.get_context("spawn")
    problem = _main_reimport_problem()
    if problem is None:
        return _forkserver_context()
    if _jax_backend_running():
        reason, fix = problem
        raise RuntimeError(
            f"DataLoader workers cannot start: {reason}, and fork is unsafe once JAX's backend runs "
            f"threads; {fix} (or pass multiprocessing_context='fork' to take the risk)"
        )
    return multiprocessing.get_context("fork")


def _jax_backend_running() -> bool:
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    if xla_bridge is None:  # jax never imported: no XLA threads.
        return False
    initialized = getattr(xla_bridge, "backends_are_initialized", None)
    if initialized is not None:
        return bool(initialized())
    return bool(getattr(xla_bridge, "_backends", None))  # pragma: no cover - older jax


def _main_reimport_problem() -> tuple[str, str] | None:
    """Why forkserver/spawn children cannot import the main script, and the fix; ``None`` if they can."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return None  # -c, an interactive session or a notebook: children do not import it.
    if getattr(main.__spec__, "name", None) is None:  # Run as a path (not -m): the children use the path.
        if not os.path.isabs(path) and multiprocessing.process.ORIGINAL_DIR is not None:
            path = os.path.join(multiprocessing.process.ORIGINAL_DIR, path)
        if not os.path.isfile(path):
            return (
                f"the main script ({main.__file__}) is not a file that worker processes can import",
                f"save it to a file with its entry point under {_GUARD}",
            )
    line = _running_main_line(main)
    if line is None or not os.path.isfile(path):
        return None  # The script has finished its top level; importing it runs nothing of this loop.
    guarded = _guarded_lines(path, os.stat(path).st_mtime_ns)
    if guarded is None or any(first <= line <= last for first, last in guarded):
        return None
    return (
        f"the main script starts them outside {_GUARD} (line {line}), so each would run it again",
        f"put the script's entry point under {_GUARD}",
    )


def _running_main_line(main: ModuleType) -> int | None:
    """The line the main script's top-level code is executing in the main thread; ``None`` once it has finished."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    main_globals = vars(main)
    while frame is not None:
        if frame.f_globals is main_globals and frame.f_code.co_name == "<module>":
            return frame.f_lineno
        frame = frame.f_back
    return None


@functools.lru_cache(maxsize=8)
def _guarded_lines(path: str, mtime_ns: int) -> tuple[tuple[int, int], ...] | None:
    """Line spans of the bodies of ``if __name__ == "__main__":`` blocks in ``path``; ``None`` if unreadable."""
    try:
        with tokenize.open(path) as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            spans.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
    return tuple(spans)


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    constants = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and constants == ["__main__"]


def _forkserver_context() -> multiprocessing.context.BaseContext:
    """``forkserver``, its server (started here once) preloading this package and the main script."""
    global _preload_set
    ctx = multiprocessing.get_context("forkserver")
    with _preload_lock:
        if not _preload_set:
            _preload_set = True
            from multiprocessing import forkserver, spawn

            # Preloading only takes effect if the server has not started yet; keep the user's list.
            current = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
            if _PRELOAD_MODULE not in current:
                ctx.set_forkserver_preload([*current, _PRELOAD_MODULE])
            # Before Python 3.14 the server never preloads __main__ (it looks for a "main_path"
            # key that get_preparation_data does not produce), so every worker would re-run the
            # user's script and its imports: seconds per worker and epoch with torch or jax.
            # _PRELOAD_MODULE, imported in the server, runs it there once instead (see
            # prepare_main_in_forkserver); forked workers then find it already imported.
            # Not if JAX's backend already runs here: the script's top level may be what started
            # it, and would start it in the server too, whose every fork would then copy a
            # multithreaded process. Each worker then imports the script itself, as under spawn.
            data = spawn.get_preparation_data("ignore")
            main = {k: v for k, v in data.items() if k.startswith("init_main_from_")}
            if main and not _jax_backend_running():
                os.environ[_FORKSERVER_MAIN_ENV] = repr(main)
                try:
                    forkserver.ensure_running()
                finally:
                    os.environ.pop(_FORKSERVER_MAIN_ENV, None)
    return ctx


def prepare_main_in_forkserver() -> None:
    """In the fork server only: import the main script as ``__mp_main__``, as a spawned child would."""
    spec = os.environ.pop(_FORKSERVER_MAIN_ENV, None)
    if spec is None:
        return
    from multiprocessing import process, spawn

    process.current_process()._inheriting = True
    try:
        spawn.prepare(ast.literal_eval(spec))
    except BaseException:  # noqa: BLE001, S110 - keep the server alive; workers then import it.
        pass
    finally:
        del process.current_process()._inheriting
