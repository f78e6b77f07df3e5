"""Experiment configs: a typed schema, YAML loading, dotted overrides, clear errors."""

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
    "load_config",
    "parse_override",
    "read_yaml",
]
