"""Start-up validation of a configuration against the declared spec.

Every problem is reported with the dotted key and the allowed values, so a bad
sweep override fails before any model is built. Besides each key's type and range
(numbers must also be finite: NaN passes every comparison), the cross-key rules below
refuse at start what would otherwise fail steps, hours or a restart later
(`_check_cross_keys`).
"""

from __future__ import annotations

import ipaddress
import math
import os
import pathlib
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.config.spec import LORA_TARGETS, MODEL_PRESETS, PRETRAINED_PRESETS, SPEC, Field


class ConfigError(ValueError):
  """A configuration key is unknown, missing, of the wrong type or out of range."""


# `experiment.run_id` is one segment of the store's keys (`runs/<run_id>/step_...`) and a
# folder name: the store's segment rule (mgrpo_jax/store/keys.py, which config may not
# import; tests/unit/test_config.py checks that the two agree), at most 128 characters.
_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_LOOPBACK_NAMES = ("localhost",)
_SCRATCH_PRESETS = tuple(p for p in MODEL_PRESETS if p not in PRETRAINED_PRESETS)


def _describe(field: Field) -> str:
  if field.allowed is not None:
    return "one of " + ", ".join(repr(c) for c in field.allowed)
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
  if field.type is float and not math.isfinite(value):
    raise ConfigError(f"config key {key!r}: expected a finite {_describe(field)[2:]}, got "
                      f"{value!r}")
  bad = (
      (field.allowed is not None and value not in field.allowed)
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


def _fail(key: str, problem: str) -> None:
  raise ConfigError(f"config key {key!r}: {problem}")


def is_loopback(host: str) -> bool:
  """Whether `host` names this machine only (127.0.0.0/8, ::1, localhost)."""
  if host.lower() in _LOOPBACK_NAMES:
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False  # a host name: reachable from elsewhere


def _check_cross_keys(config: Mapping[str, Any]) -> None:
  experiment, mgrpo = config["experiment"], config["mgrpo"]
  if not _RUN_ID.fullmatch(experiment["run_id"]):
    _fail("experiment.run_id", f"{experiment['run_id']!r} is not a store key segment: "
          "1 to 128 letters, digits, '_', '-', '.' (not first)")
  if mgrpo["aligned_sub_calls"] > mgrpo["max_sub_calls"]:
    raise ConfigError("config key 'mgrpo.aligned_sub_calls' (D) must be <= "
                      f"'mgrpo.max_sub_calls', got {mgrpo['aligned_sub_calls']} > "
                      f"{mgrpo['max_sub_calls']}")
  if config["world"]["render"] == "symbolic" and config["world"]["size"] not in ("tiny",
                                                                                 "small"):
    _fail("world.size", f"{config['world']['size']!r} has no symbolic rendering "
          "(world.render='symbolic'): expected 'tiny' or 'small'")
  if config["world"]["train_worlds"] > 1 and config["world"]["source"] != "generated":
    _fail("world.train_worlds", f"{config['world']['train_worlds']} worlds need generated "
          f"questions; world.source={config['world']['source']!r} has one questions file")
  if config["curriculum"]["stage2_steps"] and config["world"]["source"] != "generated":
    _fail("curriculum.stage2_steps", "stage 2 draws the generated world's stage-2 questions; "
          f"world.source={config['world']['source']!r} has one questions file")
  _check_tools(config)
  _check_gold_paths(config)
  checkpoint = config["checkpoint"]
  if checkpoint["keep"] < mgrpo["staleness"] + 1:
    _fail("checkpoint.keep", f"must be >= mgrpo.staleness + 1 = {mgrpo['staleness'] + 1} "
          f"(a restarted sub slice serves the older versions), got {checkpoint['keep']}")
  _check_serving(config["serving"])
  _check_rewards(config["rewards"])
  _check_learning(config)
  mode = parse_mode(experiment["mode"])
  rollouts = mgrpo["queries_per_step"] * mgrpo["rollouts_per_query"]
  rows = {"main": rollouts,
          # the sub slice trains S on [B * K * D] rows
          "sub": rollouts * mgrpo["aligned_sub_calls"] if mode.sub_trained else 0}
  warm_start = config["warm_start"]
  for role in ("main", "sub"):
    warm_rows = (warm_start["batch_rows"]
                 if warm_start["enabled"] and role in mode.agents else 0)
    _check_agent(role, config[role], experiment["num_steps"], rows[role], warm_rows)


def _check_gold_paths(config: Mapping[str, Any]) -> None:
  """A user's questions have no gold path: the gold-path expert judge would score S's
  reports against the generated world's facts, not the question's, so R_S's expert term
  needs the model judge (or a weight of 0). The warm start is no concern: its scripted
  oracles demonstrate the generated world's questions whatever `world.source` is."""
  source, rewards = config["world"]["source"], config["rewards"]
  if parse_mode(config["experiment"]["mode"]).single:
    return  # no sub-agent, no reports
  if source != "generated" and rewards["expert_judge"] == "gold_path" and rewards["b3"] > 0:
    _fail("rewards.expert_judge", f"world.source={source!r} questions have no gold path, "
          f"which 'gold_path' checks S's reports against (rewards.b3 = {rewards['b3']}): "
          "set rewards.expert_judge=model, or rewards.b3=0")


def _check_serving(serving: Mapping[str, Any]) -> None:
  """The service's exposure and TLS keys: a non-loopback address needs a token and TLS;
  certificates and keys come in pairs; client-side TLS keys need the service's TLS."""
  if not is_loopback(serving["host"]):
    for key, what in (("token_env", "a shared token: set serving.token_env to the name of "
                       "an environment variable holding it"),
                      ("tls_cert", "TLS: set serving.tls_cert and serving.tls_key to its "
                       "PEM certificate and key")):
      if not serving[key]:
        _fail("serving.host", f"{serving['host']!r} is reachable from other machines, so "
              f"the sub-agent service needs {what} (or bind 127.0.0.1)")
  for cert, key in (("tls_cert", "tls_key"), ("tls_client_cert", "tls_client_key")):
    if bool(serving[cert]) != bool(serving[key]):
      missing = key if serving[cert] else cert
      _fail(f"serving.{missing}", f"serving.{cert} and serving.{key} are set together, "
            f"got only serving.{key if missing == cert else cert}")
  for key in ("tls_client_ca", "tls_ca", "tls_client_cert", "tls_server_name"):
    if serving[key] and not serving["tls_cert"]:
      _fail(f"serving.{key}", "applies to TLS, which is off: set serving.tls_cert and "
            "serving.tls_key")
  if bool(serving["tls_client_ca"]) != bool(serving["tls_client_cert"]):
    _fail("serving.tls_client_cert" if serving["tls_client_ca"] else "serving.tls_client_ca",
          "client certificates need both serving.tls_client_ca (the service checks them) "
          "and serving.tls_client_cert (the main slice presents one)")


def _check_rewards(rewards: Mapping[str, Any]) -> None:
  """A weight the chosen R_S preset has no term for would be silently unused; a judge
  model must be one with weights."""
  if rewards["sub_reward"] == "released" and rewards["b3"] != 0:
    _fail("rewards.b3", "rewards.sub_reward='released' has no expert term: must be 0 (the "
          f"released code's weights: b1 = 0.1, b2 = 0.9, b3 = 0), got {rewards['b3']}")
  if "model" in (rewards["answer_judge"], rewards["expert_judge"]):
    _check_judge_model(rewards["judge"])


def _check_judge_model(judge: Mapping[str, Any]) -> None:
  """The judge model is pretrained or a file, or a preset with a checkpoint (random
  weights would judge at random)."""
  preset = str(judge["preset"])
  if preset in PRETRAINED_PRESETS or pathlib.Path(preset).exists():
    return
  if preset not in _SCRATCH_PRESETS:
    _fail("rewards.judge.preset", f"{preset!r} is neither a preset "
          f"({', '.join(MODEL_PRESETS)}) nor an existing GGUF file or model folder")
  if not judge["checkpoint"]:
    _fail("rewards.judge.checkpoint", f"the judge preset {preset!r} is trained from "
          "scratch: name the parameter checkpoint of its weights (e.g. a warm start's)")


def _check_learning(config: Mapping[str, Any]) -> None:
  """What would silently stop learning: RL sampling greedily (K identical rollouts, every
  advantage 0) or a zero learning rate, for an agent the mode trains, its warm start or
  its stage 2."""
  mode = parse_mode(config["experiment"]["mode"])
  for role in ("main", "sub") if mode.sub_trained else ("main",):
    if config[role]["sampling"]["temperature"] == 0:
      _fail(f"{role}.sampling.temperature", "RL samples K rollouts per query: at 0 they are "
            "identical and every advantage is 0 (evaluation adds a greedy pass anyway); "
            "must be > 0")
    if config[role]["optim"]["learning_rate"] == 0:
      _fail(f"{role}.optim.learning_rate", f"experiment.mode={mode.name!r} trains {role}: "
            "must be > 0")
  warm_start = config["warm_start"]
  if warm_start["enabled"] and warm_start["learning_rate"] == 0:
    _fail("warm_start.learning_rate", "warm_start.enabled trains the agents: must be > 0")
  curriculum = config["curriculum"]
  if curriculum["stage2_steps"] and curriculum["learning_rate_scale"] == 0:
    _fail("curriculum.learning_rate_scale", "stage 2 trains the agents: must be > 0")


def _check_tools(config: Mapping[str, Any]) -> None:
  """The web tools' keys: an http(s) search URL (required by the web backend), parsable
  extra parameters, a cache to replay from, one world (the web is one)."""
  tools, web = config["tools"], config["tools"]["web"]
  try:
    url = urllib.parse.urlsplit(web["search_url"])
    web_url = url.scheme in ("http", "https") and bool(url.hostname)
  except ValueError:  # e.g. an unclosed IPv6 bracket
    web_url = False
  if web["search_url"] and not web_url:
    _fail("tools.web.search_url", f"expected an http(s) URL with a host, got "
          f"{web['search_url']!r}")
  if tools["backend"] == "web" and not web["search_url"]:
    _fail("tools.web.search_url", "tools.backend='web' searches through it: set the "
          "SearXNG instance's or the search API's URL, e.g. http://localhost:8888")
  try:
    urllib.parse.parse_qsl(web["search_params"], strict_parsing=True)
  except ValueError as e:
    _fail("tools.web.search_params", f"expected URL-encoded parameters such as "
          f"'language=en&count=10', got {web['search_params']!r} ({e})")
  if web["replay_only"] and not web["cache_dir"]:
    _fail("tools.web.replay_only", "replays the answers recorded in tools.web.cache_dir, "
          "which is empty")
  if tools["backend"] == "web" and config["world"]["train_worlds"] > 1:
    _fail("tools.backend", f"'web' is one world: world.train_worlds must be 1, got "
          f"{config['world']['train_worlds']}")


def check_environment(config: Mapping[str, Any]) -> None:
  """What a valid config names outside itself, checked before a slice starts: the token's
  and the search API key's environment variables are set and the TLS files are readable
  (ConfigError naming the key)."""
  serving = config["serving"]
  if serving["token_env"] and not os.environ.get(serving["token_env"]):
    _fail("serving.token_env", f"names the environment variable {serving['token_env']!r}, "
          "which is unset or empty: the service's token")
  for key in ("tls_cert", "tls_key", "tls_client_ca", "tls_ca", "tls_client_cert",
              "tls_client_key"):
    path = pathlib.Path(serving[key])
    if serving[key] and not (path.is_file() and os.access(path, os.R_OK)):
      _fail(f"serving.{key}", f"{serving[key]} is not a readable file")
  web = config["tools"]["web"]
  if (config["tools"]["backend"] == "web" and web["api_key_env"] and not web["replay_only"]
      and not os.environ.get(web["api_key_env"])):
    _fail("tools.web.api_key_env", f"names the environment variable {web['api_key_env']!r}, "
          "which is unset or empty: the search API's key")


def _check_agent(role: str, agent: Mapping[str, Any], num_steps: int, rows: int,
                 warm_rows: int) -> None:
  """One agent's cross-key rules; `rows`: its RL batch rows (0: fixed by the mode);
  `warm_rows`: its warm start's batch rows (0: no warm start)."""
  new_tokens, context = agent["sampling"]["max_new_tokens"], agent["limits"]["max_context"]
  if new_tokens >= context:
    _fail(f"{role}.sampling.max_new_tokens", f"must be < {role}.limits.max_context = "
          f"{context} (a turn's prompt shares the context), got {new_tokens}")
  loss, optim = agent["loss"], agent["optim"]
  if loss["clip_low"] >= 1.0:
    _fail(f"{role}.loss.clip_low", f"must be < 1 (the ratio's lower clip is 1 - clip_low), "
          f"got {loss['clip_low']}")
  if loss["clip_ratio_c"] != 0 and loss["clip_ratio_c"] <= 1.0:
    _fail(f"{role}.loss.clip_ratio_c", f"the dual-clip bound must be > 1 (or 0: off), got "
          f"{loss['clip_ratio_c']}")
  for beta in ("b1", "b2"):
    if optim[beta] >= 1.0:
      _fail(f"{role}.optim.{beta}", f"AdamW's beta must be < 1, got {optim[beta]}")
  if optim["schedule"] == "cosine" and num_steps <= optim["warmup_steps"]:
    _fail(f"{role}.optim.warmup_steps", f"an RL run of experiment.num_steps = {num_steps} "
          f"would end inside the warm-up and never reach the cosine decay; must be < "
          f"{num_steps}, got {optim['warmup_steps']}")
  if optim["iterations"] > 1 and loss["old_logp"] != "sampler":
    _fail(f"{role}.optim.iterations", f"several steps per batch need {role}.loss.old_logp="
          f"'sampler' (a recomputed pi_old would move with every step), got "
          f"{optim['iterations']} with {loss['old_logp']!r}")
  shortest, context = agent["limits"]["shortest_train_length"], agent["limits"]["max_context"]
  if shortest > context:
    _fail(f"{role}.limits.shortest_train_length", f"must be at most {role}.limits."
          f"max_context = {context} (or 0: every batch padded to it), got {shortest}")
  micro = optim["micro_batch_size"]
  if micro and rows and rows % micro:
    _fail(f"{role}.optim.micro_batch_size", f"must divide the {role} agent's batch rows "
          f"{rows} (queries_per_step x rollouts_per_query"
          f"{' x aligned_sub_calls' if role == 'sub' else ''}), got {micro}")
  if micro and warm_rows and warm_rows % micro:
    _fail(f"{role}.optim.micro_batch_size", f"the warm start's updates are micro-batched "
          f"too: must divide warm_start.batch_rows = {warm_rows}, got {micro}")
  if agent["model"]["attention"] == "cudnn" and agent["model"]["dtype"] != "bfloat16":
    _fail(f"{role}.model.attention", f"'cudnn' needs {role}.model.dtype='bfloat16' (cuDNN "
          f"flash attention has no float32 kernel), got {agent['model']['dtype']!r}")
  _check_lora(role, agent["lora"])
  preset = str(agent["model"]["preset"])
  has_weights = preset in PRETRAINED_PRESETS or pathlib.Path(preset).exists()
  # An unknown name is left to the model builder, whose error names the presets.
  if agent["model"]["smeared_keys"] and has_weights:
    _fail(f"{role}.model.smeared_keys", f"needs a preset trained from scratch "
          f"({', '.join(_SCRATCH_PRESETS)}); {agent['model']['preset']!r} has pretrained "
          "weights or is a file")


def _check_lora(role: str, lora: Mapping[str, Any]) -> None:
  targets = [t.strip() for t in str(lora["targets"]).split(",")]
  unknown = [t for t in targets if t not in LORA_TARGETS]
  if unknown:
    _fail(f"{role}.lora.targets", f"names projections among {', '.join(LORA_TARGETS)}, "
          f"got {', '.join(repr(t) for t in unknown)}")
  if lora["rank"] == 0 and lora["base_dtype"] != "float32":
    _fail(f"{role}.lora.base_dtype", f"a frozen base needs {role}.lora.rank > 0 (full "
          "fine-tuning keeps float32 weights: small AdamW steps vanish in bfloat16), got "
          f"{lora['base_dtype']!r}")
