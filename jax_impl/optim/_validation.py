"""Hyperparameter checks with torch's exact error messages."""

from __future__ import annotations

from typing import Any

__all__ = ["check_non_negative", "check_not_negative", "check_beta", "check_range"]


def check_non_negative(value: Any, message: str) -> None:
    """``ValueError(message.format(value))`` if a float ``value`` is negative (schedules pass)."""
    if not callable(value) and not 0.0 <= value:
        raise ValueError(message.format(value))


def check_not_negative(value: Any, message: str) -> None:
    """SGD's form of the check, ``if value < 0.0``: unlike ``not 0.0 <= value`` it lets NaN through, as torch does."""
    if not callable(value) and value < 0.0:
        raise ValueError(message.format(value))


def check_beta(value: Any, index: int) -> None:
    """torch's ``Invalid beta parameter at index {i}: {beta}`` for a beta outside [0, 1)."""
    if not callable(value) and not 0.0 <= value < 1.0:
        raise ValueError(f"Invalid beta parameter at index {index}: {value}")


def check_range(value: Any, low: float, high: float, message: str) -> None:
    """``ValueError(message.format(value))`` unless ``low <= value <= high``."""
    if not callable(value) and not low <= value <= high:
        raise ValueError(message.format(value))
