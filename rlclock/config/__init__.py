"""Typed settings read from YAML: env specs (and families of them) and agent recipes."""

from rlclock.config.env_spec import (
    DEFAULT_ENV,
    ActionSpec,
    EnvSpec,
    ObservationSpec,
    RewardSpec,
    find_env_file,
    load_env_spec,
    load_env_specs,
    parse_env_spec,
)
from rlclock.config.recipe import DEFAULT_RECIPE, AgentConfig, load_agent_config, parse_agent_config

__all__ = [
    "DEFAULT_ENV",
    "DEFAULT_RECIPE",
    "ActionSpec",
    "AgentConfig",
    "EnvSpec",
    "ObservationSpec",
    "RewardSpec",
    "find_env_file",
    "load_agent_config",
    "load_env_spec",
    "load_env_specs",
    "parse_agent_config",
    "parse_env_spec",
]
