"""Builds the default configuration from the declared spec."""

from __future__ import annotations

from typing import Any

import ml_collections

from mgrpo_jax.config.spec import SPEC, Field


def _build(spec: dict[str, Any]) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  for name, node in spec.items():
    config[name] = node.default if isinstance(node, Field) else _build(node)
  return config


def base_config() -> ml_collections.ConfigDict:
  """Returns a fresh ConfigDict holding the default of every key in `SPEC`."""
  return _build(SPEC)


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict[str, Any]) -> None:
  """Sets dotted keys in place, e.g. `{"main.optim.learning_rate": 3e-5}`.

  Used by presets and sweeps. Raises ConfigError naming a key that does not exist.
  """
  from mgrpo_jax.config.validate import ConfigError  # avoid an import cycle at module load

  for dotted, value in overrides.items():
    *parents, leaf = dotted.split(".")
    node = config
    for i, part in enumerate(parents):
      if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
        raise ConfigError(f"override {dotted!r}: {'.'.join(parents[:i + 1])!r} is not a group "
                          "of settings")
      node = node[part]
    if leaf not in node:
      raise ConfigError(f"override {dotted!r}: config key {dotted!r} is not a known setting")
    with node.ignore_type():
      node[leaf] = value


def flat_values(config, *, excluding: tuple[str, ...] = ()) -> dict[str, Any]:
  """{dotted key: value} of `config` (a ConfigDict or nested dicts), sorted by key, without
  the keys in `excluding` (a name ending in "." excludes its whole group)."""
  def flatten(node, prefix: str) -> dict[str, Any]:
    out = {}
    for name, value in node.items():
      key = f"{prefix}{name}"
      out.update(flatten(value, key + ".") if hasattr(value, "items") else {key: value})
    return out

  values = flatten(config.to_dict() if hasattr(config, "to_dict") else config, "")
  return {key: value for key, value in sorted(values.items())
          if not any(key == k or (k.endswith(".") and key.startswith(k)) for k in excluding)}
