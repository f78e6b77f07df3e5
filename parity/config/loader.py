"""Load, override and validate experiment configs.

``load_config("configs/x.yaml", ["optimizer.lr=0.1"])`` reads the YAML
(duplicate keys are an error, not a silent overwrite), applies dotted
``key=value`` overrides (values parsed as YAML scalars), and builds the typed
:class:`~parity.config.schema.ExperimentConfig`. A bare name
(``lenet_digits``) that is no file here is a shipped config
(:mod:`parity.config.shipped`). Every problem raises
:class:`~parity.config.types.ConfigError` naming where it is (the file, or the
command-line override that caused it) and the full key path, with the closest
valid key for a misspelling.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from parity.config import registry
from parity.config.shipped import resolve_config_path
from parity.config.schema import ExperimentConfig, ModelConfig, NamedSection, ParamGroupConfig, SchedulerConfig
from parity.config.types import ConfigError, coerce, describe_value, suggest, unknown_key_error

__all__ = ["load_config", "config_from_dict", "apply_overrides", "parse_override", "read_yaml"]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise ConfigError(f"a key must be a name, got a {type(key).__name__} (line {key_node.start_mark.line + 1})") from None
        if key in mapping:
            raise ConfigError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# PyYAML follows YAML 1.1, where `1e-3` (no dot) is a *string*; every
# researcher writes `lr: 1e-3`. Resolve YAML 1.2 floats as floats.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a YAML mapping; ``ConfigError`` for a missing, unreadable, empty or non-UTF-8 file, bad YAML or a non-mapping."""
    source = os.fspath(path)
    if os.path.isdir(source):
        raise ConfigError(f"{source} is a folder, not a config file")
    if not os.path.isfile(source):
        raise ConfigError(f"no such config file: {source}")
    try:
        with open(source, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ConfigError(f"cannot read config file {source}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8-sig")  # a leading byte-order mark is allowed, as YAML allows it
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {source} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                          f"{error.start}); a config is a YAML file") from None
    if not text.strip():
        raise ConfigError(f"config file {source} is empty")
    try:
        raw = _parse(text)
    except ConfigError as error:
        raise error.with_source(source) from None
    if raw is None:
        raise ConfigError(f"config file {source} holds no settings (only comments or a null document)")
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping at the top level (sections such as model: and optimizer:), got "
                          f"{describe_value(raw)}", source=source)
    return raw


def _parse(text: str) -> Any:
    """One YAML document; ``ConfigError`` (without a source) for anything YAML cannot read."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        # One line: PyYAML's own text spans several, with an excerpt and a caret.
        mark = error.problem_mark or error.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        context = f"{error.context}: " if error.context else ""
        raise ConfigError(f"invalid YAML: {context}{error.problem}{where}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"invalid YAML: {' '.join(str(error).split())}") from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply") from None
    except ConfigError:
        raise
    except Exception as error:
        # PyYAML's constructors fail with plain Python errors on malformed tagged scalars
        # (`!!int` alone: IndexError, `!!timestamp x`: AttributeError, `!!float x`: ValueError).
        raise ConfigError(f"invalid YAML: a value cannot be read ({type(error).__name__}: {error})") from None


def parse_override(text: str) -> tuple[str, Any]:
    """``"optimizer.betas=[0.9, 0.99]"`` -> ``("optimizer.betas", [0.9, 0.99])``.

    Errors name the override (``ConfigError.override``), not a config file.
    """
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError("not of the form dotted.key=value", override=text)
    try:
        parsed = _parse(value) if value.strip() else None
    except ConfigError as error:
        problem = error.message.removeprefix("invalid YAML: ")
        raise ConfigError(f"cannot parse the value as YAML: {problem}", path=key, override=text) from None
    return key, parsed


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Returns a copy of ``raw`` with each ``dotted.key=value`` set (intermediate mappings created)."""
    copier = _Copier()
    result = copier.copy(raw)
    for text in overrides:
        key, value = parse_override(text)
        try:
            value = copier.copy(value)
        except ConfigError as error:
            raise ConfigError(error.message, path=key, override=text) from None
        parts = key.split(".")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif isinstance(child, str) and part != "name":
                child = node[part] = {"name": child}  # the shorthand of a named section
            elif not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"cannot set: {where} is a {type(child).__name__}, not a mapping", path=key,
                                  override=text)
            node = child
        node[parts[-1]] = value
    return result


class _Copier:
    """Deep copies of parsed YAML, refusing what YAML aliases can make of a few lines.

    An alias repeats a list or mapping by reference, so ten lines of aliases
    of aliases hold a billion values (and an alias inside its own anchor, a
    cycle): copying, validating or printing them would never end.
    """

    MAX_VALUES = 100_000  # a config holds hundreds; ample for any hand-written one

    def __init__(self) -> None:
        self.left = self.MAX_VALUES
        self.open: set[int] = set()  # the lists and mappings being copied: an alias back to one is a cycle

    def copy(self, value: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise ConfigError(f"over {self.MAX_VALUES:,} values: do YAML aliases (*name) repeat a large list or "
                              "mapping?")
        if not isinstance(value, (dict, list)):
            return value
        if id(value) in self.open:
            raise ConfigError("a YAML alias (*name) refers to a list or mapping that contains it")
        self.open.add(id(value))
        try:
            if isinstance(value, dict):
                return {k: self.copy(v) for k, v in value.items()}
            return [self.copy(v) for v in value]
        finally:
            self.open.discard(id(value))


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Reads, overrides and validates one config file (a path, or a shipped config's name).

    An error that the overrides cause names the override (``override
    'optimizer.lrr=0.1' (command line): optimizer.lrr: unknown key; ...``);
    one the file has with or without them names the file.
    """
    source = os.fspath(resolve_config_path(path))
    raw = read_yaml(source)
    try:
        return config_from_dict(apply_overrides(raw, overrides))
    except ConfigError as error:
        raise _locate(error, raw, overrides, source) from None


def _locate(error: ConfigError, raw: dict[str, Any], overrides: Sequence[str], source: str) -> ConfigError:
    """``error`` attributed to the override that caused it, else to the config file."""
    if error.override is not None:
        return error
    culprit = _override_near(error.path, overrides)
    if culprit is not None:
        try:
            config_from_dict(raw)
            in_file = False
        except ConfigError as plain:
            in_file = (plain.path, plain.message) == (error.path, error.message)
        if not in_file:
            return error.with_override(culprit)
    return error.with_source(source)


def _override_near(path: str | None, overrides: Sequence[str]) -> str | None:
    """The override whose key shares the longest dotted prefix with ``path`` (the last of equals), if any."""
    if not path:
        return None
    target = path.split(".")
    best, best_len = None, 0
    for text in overrides:
        key = parse_override(text)[0].split(".")
        common = next((i for i, (a, b) in enumerate(zip(key, target)) if a != b), min(len(key), len(target)))
        if common and common >= best_len:
            best, best_len = text, common
    return best


def config_from_dict(raw: Mapping[str, Any]) -> ExperimentConfig:
    """Validates a plain mapping (already parsed YAML) into an :class:`ExperimentConfig`."""
    return _build(ExperimentConfig, raw, "")


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _dataclass_of(annotation: Any) -> type | None:
    """The dataclass inside ``X`` or ``X | None``, if any."""
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _build(cls: type, raw: Any, path: str) -> Any:
    if issubclass(cls, NamedSection):
        return _build_named(cls, raw, path)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"expected a mapping, got {describe_value(raw)}", path=path or None)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if not isinstance(key, str) or key not in fields:
            raise unknown_key_error(path, str(key), fields)
    values: dict[str, Any] = {}
    for name, field in fields.items():
        key_path = _join(path, name)
        if name not in raw:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError("missing required key", path=key_path)
            continue
        value = raw[name]
        listed = _listed_section(hints[name])
        if listed is not None and value is not None:
            values[name] = _build_list(listed, value, key_path)
            continue
        nested = _dataclass_of(hints[name])
        if nested is not None and not (value is None and type(None) in typing.get_args(hints[name])):
            by_import_path = isinstance(value, Mapping) and any(k in value for k in ("torch", "jax", "arrays"))
            if issubclass(nested, NamedSection) and isinstance(value, Mapping) and "name" not in value \
                    and not by_import_path:
                default = _default_of(field)
                if default is not None:  # e.g. `train.loss.label_smoothing=0.1` keeps the default loss
                    value = {"name": default.name, **value}
            values[name] = _build(nested, value, key_path)
        else:
            values[name] = coerce(value, hints[name], key_path)
    try:
        return cls(**values)
    except ConfigError as error:
        raise ConfigError(error.message, path=_join(path, error.path or "")) from None


def _listed_section(annotation: Any) -> type[NamedSection] | None:
    """The section class of a ``tuple[Section, ...]`` (or ``... | None``) field, e.g. ``data.transform``."""
    members = typing.get_args(annotation) if typing.get_origin(annotation) is not tuple else ()
    for candidate in members or (annotation,):
        if typing.get_origin(candidate) is tuple:
            args = typing.get_args(candidate)
            if args and isinstance(args[0], type) and issubclass(args[0], NamedSection):
                return args[0]
    return None


def _build_list(cls: type[NamedSection], raw: Any, path: str) -> tuple[NamedSection, ...]:
    """A list of sections, each a name or ``{name: X, **kwargs}`` (``[ToTensor, {name: Normalize, ...}]``)."""
    if isinstance(raw, (str, Mapping)):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"expected a list of {registry.SECTIONS[cls.section]}s, got {describe_value(raw)}", path=path)
    return tuple(_build_named(cls, item, _join(path, str(i))) for i, item in enumerate(raw))


def _default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _build_named(cls: type[NamedSection], raw: Any, path: str) -> NamedSection:
    """Builds a section that names a class: ``{name: X, **X's keyword arguments}``."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"expected a mapping with a 'name' key, or a name, got {type(raw).__name__}", path=path)
    section = cls.section
    kind = registry.SECTIONS[section]
    if section == "model" and ("torch" in raw or "jax" in raw):
        return _user_model(cls, raw, path)
    if section == "dataset" and "arrays" in raw:
        return _user_dataset(cls, raw, path)
    if "name" not in raw:
        raise ConfigError(f"missing required key 'name' (the {kind} class name)", path=path)
    name = raw["name"]
    valid_names = registry.names(section)
    if not isinstance(name, str) or name not in valid_names:
        guess = suggest(str(name), valid_names)
        hint = f"did you mean {guess!r}?" if guess else "choose one of: " + ", ".join(valid_names)
        shown = repr(name) if isinstance(name, str) else describe_value(name)
        raise ConfigError(f"unknown {kind} {shown}; {hint}", path=_join(path, "name"))
    extra_fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in ("name", "kwargs")}
    hints = typing.get_type_hints(cls)
    params = registry.signature(section, name).params
    kwargs: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "name":
            continue
        key_path = _join(path, str(key))
        if section == "optimizer" and key == "param_groups":
            extras[key] = _param_groups(value, params, key_path)
        elif key in extra_fields:
            extras[key] = coerce(value, hints[key], key_path)
        elif key in params:
            kwargs[key] = _coerce_kwarg(section, params[key], value, key_path)
        else:
            raise unknown_key_error(path, str(key), [*params, *extra_fields, "name"])
    for key, param in params.items():
        if param.required and key not in kwargs:
            raise ConfigError(f"missing required key (an argument of {name} without a default)", path=_join(path, key))
    return cls(name=name, kwargs=kwargs, **extras)


def _import_paths(raw: Mapping[str, Any], path: str, keys: tuple[str, ...], what: str) -> dict[str, Any]:
    """Checks a section given by import paths (``keys``) plus ``kwargs``; returns the kwargs."""
    allowed = (*keys, "kwargs")
    for key in raw:
        if key not in allowed:
            raise unknown_key_error(path, str(key), allowed)
    for key in keys:
        value = raw.get(key)
        if value is None:
            raise ConfigError(f"missing required key: {what}, e.g. {key}: \"my_module:Factory\"",
                              path=_join(path, key))
        module, _, attribute = value.partition(":") if isinstance(value, str) else ("", "", "")
        if not module or not attribute or not all(part.isidentifier() for part in (*module.split("."), *attribute.split("."))):
            raise ConfigError(f"expected an import path 'package.module:attribute', got {describe_value(value)}",
                              path=_join(path, key))
    kwargs = raw.get("kwargs", {})
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigError(f"expected a mapping of keyword arguments, got {describe_value(kwargs)}",
                          path=_join(path, "kwargs"))
    return dict(kwargs)


def _user_model(cls: type[NamedSection], raw: Mapping[str, Any], path: str) -> NamedSection:
    """``model: {torch: "pkg.module:Factory", jax: "pkg.module:Factory" | auto, kwargs: {...}}``.

    ``jax: auto`` ports the torch model at run time (``parity.port``), so only ``torch`` is an import path.
    """
    auto = raw.get("jax") == ModelConfig.AUTO
    kwargs = _import_paths({k: v for k, v in raw.items() if k != "init" and not (auto and k == "jax")}, path,
                           ("torch",) if auto else ("torch", "jax"), "a user model names both sides")
    init = coerce(raw.get("init", "copy"), typing.Literal["copy", "seed"], _join(path, "init"))
    if auto and init == "seed":
        raise ConfigError("init: seed keeps the JAX model's own initial weights, but with jax: auto the JAX model "
                          "is ported from the torch model and holds its weights; drop init or name a JAX model",
                          path=_join(path, "init"))
    return cls(name=raw["torch"], kwargs=kwargs, torch=raw["torch"], jax=raw["jax"], init=init)


def _user_dataset(cls: type[NamedSection], raw: Mapping[str, Any], path: str) -> NamedSection:
    """``dataset: {arrays: "pkg.module:load", kwargs: {...}}``."""
    kwargs = _import_paths(raw, path, ("arrays",), "a user data set names its loader")
    return cls(name=raw["arrays"], kwargs=kwargs, arrays=raw["arrays"])


def _param_groups(raw: Any, params: Mapping[str, registry.Param], path: str) -> tuple[ParamGroupConfig, ...]:
    """``optimizer.param_groups``: a list of ``{params: glob(s), <optimizer kwarg>: value}``."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError("expected a non-empty list of param groups ({params: <globs>, <kwarg>: <value>})", path=path)
    groups = []
    for i, item in enumerate(raw):
        item_path = _join(path, str(i))
        if not isinstance(item, Mapping):
            raise ConfigError(f"expected a mapping, got {describe_value(item)}", path=item_path)
        if "params" not in item:
            raise ConfigError("missing required key 'params' (a glob or a list of globs over parameter names)",
                              path=item_path)
        globs = item["params"]
        globs = [globs] if isinstance(globs, str) else globs
        if not isinstance(globs, list) or not globs or not all(isinstance(g, str) and g for g in globs):
            raise ConfigError(f"expected a glob or a non-empty list of globs, got {describe_value(item['params'])}",
                              path=_join(item_path, "params"))
        overrides = {}
        for key, value in item.items():
            if key == "params":
                continue
            if key not in params:
                raise unknown_key_error(item_path, str(key), ["params", *params])
            overrides[key] = _coerce_kwarg("optimizer", params[key], value, _join(item_path, str(key)))
        groups.append(ParamGroupConfig(params=tuple(globs), overrides=overrides))
    return tuple(groups)


def _coerce_kwarg(section: str, param: registry.Param, value: Any, path: str) -> Any:
    if section == "scheduler" and param.name == "schedulers":
        # SequentialLR / ChainedScheduler take a list of schedulers: nested sections.
        if not isinstance(value, list):
            raise ConfigError(f"expected a list of scheduler sections, got {type(value).__name__}", path=path)
        nested = [_build_named(SchedulerConfig, item, _join(path, str(i))) for i, item in enumerate(value)]
        for i, item in enumerate(nested):
            if "interval" in (value[i] if isinstance(value[i], dict) else {}):
                raise ConfigError("interval is set on the outer scheduler only", path=_join(path, f"{i}.interval"))
        return nested
    return coerce(value, param.annotation, path)
