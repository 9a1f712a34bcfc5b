"""Configuration: the declared spec of every key, the default config, validation."""

from mgrpo_jax.config.base import apply_overrides, base_config, flat_values
from mgrpo_jax.config.spec import SPEC, Field, iter_fields
from mgrpo_jax.config.validate import ConfigError, check_environment, validate

__all__ = ["SPEC", "ConfigError", "Field", "apply_overrides", "base_config",
           "check_environment", "flat_values", "iter_fields", "validate"]
