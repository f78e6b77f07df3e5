"""Type checking of YAML values against Python annotations, with path-naming errors.

``coerce(value, annotation, path)`` checks a value parsed from YAML against an
annotation (``int``, ``float``, ``bool``, ``str``, ``X | None``,
``tuple[float, float]``, ``list[int]``, ``Literal[...]``, ``dict[str, Any]``,
``torch.Tensor`` given as numbers) and returns it normalised (lists become
tuples where a tuple is expected, ints become floats where a float is
expected). Anything else raises :class:`ConfigError` naming the dotted path and
the expected type. Bools are never accepted as numbers, nor numbers as bools.
"""

from __future__ import annotations

import collections.abc
import difflib
import reprlib
import types
import typing
from collections.abc import Iterable
from typing import Any

__all__ = ["ConfigError", "coerce", "describe_value", "type_name", "suggest", "unknown_key_error"]


class ConfigError(ValueError):
    """An invalid experiment configuration. ``str()`` names where it came from and the key path.

    Attributes:
      message: what is wrong.
      path: the dotted key path (``optimizer.lr``), if the problem has one.
      source: the config file the problem is in.
      override: the command-line ``key=value`` override the problem is in;
        it takes the place of the file in ``str()``:
        ``override 'optimizer.lrr=0.1' (command line): optimizer.lrr: unknown key; ...``.
    """

    def __init__(self, message: str, *, path: str | None = None, source: str | None = None,
                 override: str | None = None) -> None:
        self.path = path
        self.source = source
        self.override = override
        self.message = message
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.path}: " if self.path else ""
        if self.override is not None:
            origin = f"override {self.override!r} (command line): "
        else:
            origin = f"{self.source}: " if self.source else ""
        return f"{origin}{where}{self.message}"

    def with_source(self, source: str) -> ConfigError:
        """The same error, located in the config file ``source`` (an override's error stays the override's)."""
        return ConfigError(self.message, path=self.path, source=source, override=self.override)

    def with_override(self, override: str) -> ConfigError:
        """The same error, located in the command-line override ``override`` (``key=value``)."""
        return ConfigError(self.message, path=self.path, source=self.source, override=override)


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``word`` (difflib ratio >= 0.6), or ``None``."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    if matches:
        return matches[0]
    lowered = {c.lower(): c for c in candidates}
    return lowered.get(word.lower())


def unknown_key_error(prefix: str, key: str, valid: Iterable[str]) -> ConfigError:
    """``"optimizer.betas1: unknown key; did you mean optimizer.betas?"``."""
    path = f"{prefix}.{key}" if prefix else key
    valid = sorted(valid)
    guess = suggest(key, valid)
    if guess is not None:
        hint = f"did you mean {prefix + '.' if prefix else ''}{guess}?"
    else:
        hint = "valid keys: " + ", ".join(valid)
    return ConfigError(f"unknown key; {hint}", path=path)


def _is_tensor_type(annotation: Any) -> bool:
    return getattr(annotation, "__name__", None) == "Tensor" and "torch" in getattr(annotation, "__module__", "")


def type_name(annotation: Any) -> str:
    """A readable name for an annotation: ``float``, ``tuple[float, float]``, ``'cos' | 'linear'``."""
    if annotation is Any:
        return "any value"
    if _is_tensor_type(annotation):
        return "a number or list of numbers (tensor)"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if isinstance(annotation, list):  # the argument list of Callable[[int], float]
        return "[" + ", ".join(type_name(a) for a in annotation) + "]"
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


# A repr that stops after a few items and levels: a value from YAML may hold
# aliases that repeat it a billion times, or refer to itself.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxlist, _SHORT_REPR.maxdict = 3, 4, 4
_SHORT_REPR.maxstring = _SHORT_REPR.maxlong = _SHORT_REPR.maxother = 40


def describe_value(value: Any) -> str:
    """``"str ('three')"``: a value's type and (shortened) repr, for error messages."""
    text = _SHORT_REPR.repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} ({text})"


def coerce(value: Any, annotation: Any, path: str) -> Any:
    """Checks ``value`` against ``annotation``; returns the normalised value or raises ``ConfigError``."""
    try:
        return _coerce(value, annotation, path)
    except _Mismatch:
        raise ConfigError(f"expected {type_name(annotation)}, got {describe_value(value)}", path=path) from None


class _Mismatch(Exception):
    pass


def _coerce(value: Any, annotation: Any, path: str) -> Any:
    if annotation is Any or annotation is object:
        return value
    if _is_tensor_type(annotation):
        if isinstance(value, bool) or not (
            isinstance(value, (int, float)) or (isinstance(value, list) and all(_is_number(v) for v in value))
        ):
            raise _Mismatch
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise _Mismatch
    if origin in (typing.Union, types.UnionType):
        # Try the most specific members first so that 1 stays an int for int | float.
        for member in sorted(args, key=_specificity):
            try:
                return _coerce(value, member, path)
            except (_Mismatch, ConfigError):
                continue
        raise _Mismatch
    if annotation is type(None) or annotation is None:
        if value is None:
            return None
        raise _Mismatch
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if annotation is float:
        if _is_number(value):
            return float(value)
        raise _Mismatch
    if annotation is str:
        if isinstance(value, str):
            return value
        raise _Mismatch
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(v, args[0], f"{path}.{i}") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise ConfigError(f"expected {type_name(annotation)} ({len(args)} items), got {len(value)} items", path=path)
        return tuple(coerce(v, a, f"{path}.{i}") for i, (v, a) in enumerate(zip(value, args or [Any] * len(value))))
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence) or annotation is list:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        item = args[0] if args else Any
        return [coerce(v, item, f"{path}.{i}") for i, v in enumerate(value)]
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        return dict(value)
    raise ConfigError(f"a value of type {type_name(annotation)} cannot be given in a config", path=path)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _specificity(annotation: Any) -> int:
    order = {type(None): 0, bool: 1, int: 2, float: 3, str: 4}
    return order.get(annotation, 5)
