"""Every ```python block of README.md and docs/*.md runs as written.

Each block is saved as a script in a temporary folder and run in a fresh
interpreter, as a reader who copies it would run it: run as a script rather
than with ``python -c``, so a block that starts processes (a DataLoader with
workers, a launcher) meets multiprocessing's rules for a main module.

Blocks that are not meant to run use other fences (```text, ```console,
```bash, ```yaml). A block preceded by the line ``<!-- docs-test: slow -->``
belongs to the slow tier. Only Markdown is read: docs/*.py are scripts
(generators of docs pages), not examples.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLOW_MARK = "<!-- docs-test: slow -->"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

# A default-tier block imports jax, torch or both and runs a few small
# compiled steps: a few seconds each, with room for a loaded 2-core machine.
TIMEOUT_S = 180
SLOW_TIMEOUT_S = 600


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(line number, code, slow)`` for each ```python block of a Markdown text."""
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        preceding = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        blocks.append((line, match.group(1), preceding == SLOW_MARK))
    return blocks


def _cases() -> list:
    cases = []
    for path in doc_files():
        name = path.relative_to(ROOT).as_posix()
        for index, (line, code, slow) in enumerate(python_blocks(path.read_text(encoding="utf-8"))):
            # The README's blocks run in the default tier; the docs pages' in the slow tier (CI runs both).
            marks = [pytest.mark.slow] if slow or name != "README.md" else []
            cases.append(pytest.param(name, line, code, slow, id=f"{name}-{index}", marks=marks))
    return cases


@pytest.mark.parametrize(("name", "line", "code", "slow"), _cases())
def test_block_runs(name: str, line: int, code: str, slow: bool, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    try:
        result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=SLOW_TIMEOUT_S if slow else TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}, block at line {line}: still running after {SLOW_TIMEOUT_S if slow else TIMEOUT_S} s")
    assert result.returncode == 0, (
        f"{name}, block at line {line} exited with {result.returncode}:\n{result.stderr[-4000:]}")


def test_readme_has_examples() -> None:
    # The README shows one runnable example per package; losing the fences would silently test nothing.
    assert len(python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))) >= 6


def test_slow_marker_is_attached() -> None:
    text = f"x\n\n{SLOW_MARK}\n```python\nprint(1)\n```\n\n```python\nprint(2)\n```\n\n```text\nno\n```\n"
    assert python_blocks(text) == [(4, "print(1)\n", True), (8, "print(2)\n", False)]
