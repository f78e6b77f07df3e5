"""Main scripts as users write them: without ``if __name__ == "__main__":``, read from stdin, or guarded.

Each test runs a real script in a subprocess with our DataLoader and, where
torch's behaviour is the reference, the same script with torch's DataLoader
(which forks its workers on Linux), and compares what they print.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
# Seconds a script may take (interpreter start, jax or torch import, workers, two epochs).
_SCRIPT_TIMEOUT = 120

_SCRIPT = """\
import json
import sys

import numpy as np
from {package} import DataLoader, Dataset

print(f"main script imported as {{__name__}}", file=sys.stderr)  # One write: workers interleave.


class Squares(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.array([i, i * i], dtype=np.int64)

{prelude}
{body}
"""

_LOOP = """\
epochs = []
for epoch in range(2):
    epochs.append([np.asarray(b).tolist() for b in DataLoader(Squares(), batch_size=3, num_workers=2)])
print(json.dumps(epochs))
"""

_GUARDED_LOOP = 'if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in _LOOP.splitlines())

_START_JAX = "import jax.numpy as jnp\njnp.ones(1).block_until_ready()  # XLA's threads are running from here on.\n"


def _script(package: str, body: str = _LOOP, prelude: str = "") -> str:
    return _SCRIPT.format(package=package, prelude=prelude, body=body)


def _run(script: str, tmp_path: Path, stdin: bool = False) -> subprocess.CompletedProcess:
    path = tmp_path / "ex.py"
    path.write_text(script)
    args = [sys.executable, "-"] if stdin else [sys.executable, str(path)]
    return subprocess.run(
        args, input=script if stdin else None, cwd=tmp_path, capture_output=True, text=True,
        timeout=_SCRIPT_TIMEOUT, env=_env(),
    )


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
    return env


def _output(result: subprocess.CompletedProcess) -> list:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_unguarded_script_runs_like_torch(tmp_path: Path, stdin: bool) -> None:
    """torch forks its workers, so a script without a main guard works, even from stdin; ours too."""
    ours = _output(_run(_script("jax_impl.data"), tmp_path, stdin))
    theirs = _output(_run(_script("torch.utils.data"), tmp_path, stdin))
    assert ours == theirs
    assert ours[0][0] == [[0, 0], [1, 1], [2, 4]]


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_unguarded_script_with_jax_running_fails_at_once_in_one_line(tmp_path: Path, stdin: bool) -> None:
    """fork is unsafe once XLA's threads run: the loader refuses in one line that names the guard."""
    start = time.monotonic()
    result = _run(_script("jax_impl.data", prelude=_START_JAX), tmp_path, stdin)
    elapsed = time.monotonic() - start
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: DataLoader workers cannot start: ")
    assert 'if __name__ == "__main__":' in last
    assert "main script imported as __mp_main__" not in result.stderr  # No worker ever started.
    assert elapsed < _SCRIPT_TIMEOUT / 2


@pytest.mark.parametrize("jax_running", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["jax_idle", "jax_running"])
def test_guarded_script_runs_like_torch_without_forking_xla_threads(tmp_path: Path, jax_running: bool) -> None:
    """A guarded script: workers come from the fork server, which imports the script once if that is safe.

    With JAX idle at the first ``iter()``, the server imports the script once
    (two epochs of two workers would otherwise import it four times). With
    JAX running, the script's top level may be what started it, so the server
    does not import it (each worker does): no process forks XLA's threads.
    """
    prelude = _START_JAX if jax_running else ""
    result = _run(_script("jax_impl.data", body=_GUARDED_LOOP, prelude=prelude), tmp_path)
    theirs = _output(_run(_script("torch.utils.data", body=_GUARDED_LOOP), tmp_path))
    assert _output(result) == theirs
    assert result.stderr.count("main script imported as __mp_main__") == (4 if jax_running else 1), result.stderr
    assert "os.fork() was called" not in result.stderr  # JAX's warning for a fork of its threads.
