"""One-line descriptions of config files, for ``parity config list``.

A config's description is the first sentence of its leading YAML comment
(the shipped configs open with one saying what they run); a file without one
is described by its contents: ``lenet-digits: LeNet, Adam + StepLR, digits``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from parity.config.loader import load_config
from parity.config.shipped import shipped_configs
from parity.config.types import ConfigError

__all__ = ["describe_config", "list_configs"]

_SENTENCE = re.compile(r"^(.*?[.!?])(?:\s|$)")


def list_configs() -> list[tuple[str, str]]:
    """``(name, description)`` of every shipped config; the name is what ``parity run NAME`` takes."""
    return [(path.stem, describe_config(path)) for path in shipped_configs()]


def describe_config(path: str | os.PathLike[str]) -> str:
    """The first sentence of the file's leading comment, else its name, model, optimizer (+ scheduler) and data set.

    Never raises for a bad file: its description is then ``invalid: <the error>``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        return f"invalid: cannot read it ({error})"
    comment = leading_comment(text)
    if comment:
        match = _SENTENCE.match(comment)
        return match.group(1) if match else comment
    try:
        config = load_config(path)
    except ConfigError as error:
        where = f"{error.path}: " if error.path else ""
        return f"invalid: {where}{error.message}"
    scheduler = f" + {config.scheduler.name}" if config.scheduler is not None else ""
    return f"{config.name}: {config.model.name}, {config.optimizer.name}{scheduler}, {config.data.dataset.name}"


def leading_comment(text: str) -> str:
    """The first paragraph of the comment lines that open ``text``, joined into one line."""
    words: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            if stripped or words:
                break
            continue
        body = stripped.lstrip("#").strip()
        if not body:
            if words:
                break
            continue
        words.extend(body.split())
    return " ".join(words)
