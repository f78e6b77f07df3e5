"""Experiment configs: a typed schema, YAML loading, dotted overrides, clear errors."""

from parity.config.describe import describe_config, list_configs
from parity.config.loader import apply_overrides, config_from_dict, load_config, parse_override, read_yaml
from parity.config.schema import (
    DataConfig,
    DatasetConfig,
    ExperimentConfig,
    LossConfig,
    ModelConfig,
    NamedSection,
    OptimizerConfig,
    ParallelConfig,
    SchedulerConfig,
    ToleranceConfig,
    TrainConfig,
)
from parity.config.shipped import resolve_config_path, shipped_configs
from parity.config.types import ConfigError

__all__ = [
    "ConfigError",
    "DataConfig",
    "DatasetConfig",
    "ExperimentConfig",
    "LossConfig",
    "ModelConfig",
    "NamedSection",
    "OptimizerConfig",
    "ParallelConfig",
    "SchedulerConfig",
    "ToleranceConfig",
    "TrainConfig",
    "apply_overrides",
    "config_from_dict",
    "describe_config",
    "list_configs",
    "load_config",
    "parse_override",
    "read_yaml",
    "resolve_config_path",
    "shipped_configs",
]
