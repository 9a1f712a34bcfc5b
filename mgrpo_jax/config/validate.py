"""Start-up validation of a configuration against the declared spec.

Every problem is reported with the dotted key and the allowed values, so a bad
sweep override fails before any model is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mgrpo_jax.config.spec import SPEC, Field


class ConfigError(ValueError):
  """A configuration key is unknown, missing, of the wrong type or out of range."""


def _describe(field: Field) -> str:
  if field.choices is not None:
    return "one of " + ", ".join(repr(c) for c in field.choices)
  kind = field.type.__name__
  if field.low is not None and field.high is not None:
    return f"a {kind} in [{field.low}, {field.high}]"
  if field.low is not None:
    return f"a {kind} >= {field.low}"
  if field.high is not None:
    return f"a {kind} <= {field.high}"
  return f"a {kind}" + ("" if field.allow_empty or field.type is not str else " (not empty)")


def _type_ok(field: Field, value: Any) -> bool:
  if field.type is bool:
    return isinstance(value, bool)
  if field.type is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if field.type is int:
    return isinstance(value, int) and not isinstance(value, bool)
  return isinstance(value, field.type)


def _check_field(key: str, field: Field, value: Any) -> None:
  if not _type_ok(field, value):
    raise ConfigError(f"config key {key!r}: expected {_describe(field)}, got "
                      f"{type(value).__name__} {value!r}")
  bad = (
      (field.choices is not None and value not in field.choices)
      or (field.low is not None and value < field.low)
      or (field.high is not None and value > field.high)
      or (field.type is str and not field.allow_empty and not value)
  )
  if bad:
    raise ConfigError(f"config key {key!r}: expected {_describe(field)}, got {value!r}")


def _check_node(spec: Mapping[str, Any], config: Mapping[str, Any], prefix: str) -> None:
  for name in config:
    if name not in spec:
      where = f"under {prefix[:-1]!r}" if prefix else "at the top level"
      raise ConfigError(f"config key {prefix + name!r} is not a known setting; known keys "
                        f"{where}: {', '.join(sorted(spec))}")
  for name, node in spec.items():
    key = prefix + name
    if name not in config:
      raise ConfigError(f"config key {key!r} is missing (start from mgrpo_jax.config.base_config())")
    value = config[name]
    if isinstance(node, Field):
      _check_field(key, node, value)
    elif not isinstance(value, Mapping):
      raise ConfigError(f"config key {key!r}: expected a group of settings, got {value!r}")
    else:
      _check_node(node, value, key + ".")


def validate(config: Mapping[str, Any]) -> None:
  """Checks `config` (a ConfigDict or nested dict) against `SPEC` and cross-key rules.

  Raises:
    ConfigError: naming the first offending key and the allowed values.
  """
  as_dict = config.to_dict() if hasattr(config, "to_dict") else config
  _check_node(SPEC, as_dict, "")
  _check_cross_keys(as_dict)


def _check_cross_keys(config: Mapping[str, Any]) -> None:
  mgrpo = config["mgrpo"]
  if mgrpo["aligned_sub_calls"] > mgrpo["max_sub_calls"]:
    raise ConfigError("config key 'mgrpo.aligned_sub_calls' (D) must be <= "
                      f"'mgrpo.max_sub_calls', got {mgrpo['aligned_sub_calls']} > "
                      f"{mgrpo['max_sub_calls']}")
