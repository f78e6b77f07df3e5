"""The configs shipped in the checkout's ``configs/`` folder, found by name.

``parity run lenet_digits`` (or ``lenet_digits.yaml``) means
``configs/lenet_digits.yaml`` of this checkout when no such file is in the
working directory: a path that exists always wins, and only a bare name (no
folder part) is looked up among the shipped configs.
"""

from __future__ import annotations

import os
from pathlib import Path

from parity.config.types import ConfigError, suggest

__all__ = ["CONFIGS_DIR", "shipped_configs", "resolve_config_path"]

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"
"""``configs/`` of the checkout this package runs from (absent in an installed wheel)."""

_SUFFIXES = (".yaml", ".yml")


def shipped_configs() -> list[Path]:
    """The shipped config files, sorted by name (empty where there is no ``configs/`` folder)."""
    if not CONFIGS_DIR.is_dir():
        return []
    return sorted(p for p in CONFIGS_DIR.iterdir() if p.suffix in _SUFFIXES and p.is_file())


def resolve_config_path(file: str | os.PathLike[str]) -> Path:
    """The config file ``file`` names: the path itself if it exists, else the shipped config of that name.

    Raises:
      ConfigError: nothing exists at ``file`` and it is not a shipped config's
        name; the message lists the shipped configs.
    """
    text = os.fspath(file)
    if os.path.exists(text):  # also False for names no file system accepts (an embedded NUL)
        return Path(text)
    bare = text not in ("", ".", "..") and "\0" not in text and os.path.basename(text) == text
    if bare:
        for candidate in (CONFIGS_DIR / text, *(CONFIGS_DIR / (text + suffix) for suffix in _SUFFIXES)):
            if candidate.is_file():
                return candidate
    raise ConfigError(f"no such config file: {text}{_shipped_hint(text) if bare else ''}")


def _shipped_hint(name: str) -> str:
    names = [p.stem for p in shipped_configs()]
    if not names:
        return ""
    guess = suggest(Path(name).stem, names)
    hint = f"; did you mean {guess}?" if guess else ""
    return f"{hint} (shipped configs: {', '.join(names)}; `parity config list` describes them)"
