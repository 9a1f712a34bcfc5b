"""The config spec, presets, overrides and start-up validation."""

import importlib.util
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.config import (
  SPEC,
  ConfigError,
  apply_overrides,
  base_config,
  check_environment,
  iter_fields,
  validate,
)
from mgrpo_jax.config.spec import PRETRAINED_PRESETS
from mgrpo_jax.core.alignment import MODES as ALIGNMENT_MODES
from mgrpo_jax.core.losses import AGGREGATIONS
from mgrpo_jax.core.rewards import SUB_REWARDS, RewardWeights
from mgrpo_jax.store import keys

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def _load_config_module(name: str):
  spec = importlib.util.spec_from_file_location(name, CONFIGS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_base_config_holds_every_declared_key_with_its_default():
  config = base_config()
  keys = dict(iter_fields())
  assert len(keys) > 50
  for key, field in keys.items():
    node = config
    for part in key.split("."):
      node = node[part]
    assert node == field.default, key
  validate(config)


def test_every_field_is_documented_and_its_default_is_valid():
  for key, field in iter_fields():
    assert field.doc.strip(), key
    if field.allowed is not None:
      assert field.default in field.allowed, key


@pytest.mark.parametrize("preset", [None, "paper", "released_code"])
def test_default_config_file_and_presets_validate(preset):
  config = _load_config_module("default").get_config(preset)
  validate(config)


def test_paper_preset_sets_the_papers_group_sizes():
  config = _load_config_module("default").get_config("paper")
  assert config.mgrpo.rollouts_per_query == 8
  assert config.mgrpo.aligned_sub_calls == 8
  assert config.main.optim.learning_rate == 1e-6


def test_released_code_preset_is_the_released_codes_sub_reward():
  """R_S = format * (0.1 + 0.9 * correct_M), through the config's weights."""
  rewards = _load_config_module("default").get_config("released_code").rewards
  assert RewardWeights.from_config(rewards) == RewardWeights(
      a1=0.1, a2=0.9, b1=0.1, b2=0.9, b3=0.0, sub_reward="released")


def test_the_released_sub_reward_refuses_an_expert_weight():
  config = base_config()
  apply_overrides(config, {"rewards.sub_reward": "released"})
  with pytest.raises(ConfigError, match=r"'rewards.b3': rewards.sub_reward='released' has "
                                        r"no expert term: must be 0 .* got 0.5"):
    validate(config)
  apply_overrides(config, {"rewards.b3": 0.0})
  validate(config)


def test_unknown_preset_names_the_presets():
  with pytest.raises(ValueError, match="unknown preset 'nope'.*paper"):
    _load_config_module("default").get_config("nope")


def test_unknown_key_is_rejected_naming_it_and_its_siblings():
  config = base_config().to_dict()
  config["main"]["optim"]["lr"] = 1e-3
  with pytest.raises(ConfigError, match=r"'main\.optim\.lr' is not a known setting.*learning_rate"):
    validate(config)


def test_unknown_top_level_group_is_rejected():
  config = base_config().to_dict()
  config["trainer"] = {}
  with pytest.raises(ConfigError, match="'trainer' is not a known setting; known keys at the top"):
    validate(config)


def test_missing_key_is_rejected_naming_it():
  config = base_config().to_dict()
  del config["mgrpo"]["alignment"]
  with pytest.raises(ConfigError, match=r"'mgrpo\.alignment' is missing"):
    validate(config)


@pytest.mark.parametrize("key,value,message", [
    ("experiment.seed", "zero", r"'experiment\.seed': expected a int >= 0, got str 'zero'"),
    ("experiment.seed", 1.5, r"'experiment\.seed': expected a int >= 0, got float 1\.5"),
    ("main.optim.learning_rate", "1e-3", r"'main\.optim\.learning_rate': expected a float"),
    ("checkpoint.async_save", 1, r"'checkpoint\.async_save': expected a bool, got int 1"),
    ("mgrpo.rollouts_per_query", True, r"'mgrpo\.rollouts_per_query': expected a int >= 2"),
])
def test_wrong_type_is_rejected_naming_the_key(key, value, message):
  config = base_config().to_dict()
  group, *rest = key.split(".")
  node = config[group]
  for part in rest[:-1]:
    node = node[part]
  node[rest[-1]] = value
  with pytest.raises(ConfigError, match=message):
    validate(config)


@pytest.mark.parametrize("key,value,message", [
    ("mgrpo.rollouts_per_query", 1, r"'mgrpo\.rollouts_per_query': expected a int >= 2, got 1"),
    ("main.loss.clip_low", 1.5, r"'main\.loss\.clip_low': expected a float in \[0\.0, 1\.0\]"),
    ("sub.sampling.top_p", 0.0, r"'sub\.sampling\.top_p'"),
    ("experiment.mode", "solo", r"'experiment\.mode': expected one of 'mgrpo', 'frozen_sub'"),
    ("main.loss.aggregation", "sum", r"'main\.loss\.aggregation': expected one of"),
    ("experiment.run_id", "", r"'experiment\.run_id': expected a str \(not empty\)"),
    ("main.model.attention", "flash", r"'main\.model\.attention': expected one of 'auto', "
     r"'xla', 'cudnn', 'splash', got 'flash'"),
    ("main.model.logprob_chunk", -1, r"'main\.model\.logprob_chunk': expected a int >= 0"),
    ("sub.model.remat", "all", r"'sub\.model\.remat': expected one of 'none', 'full', 'dots'"),
])
def test_out_of_range_value_is_rejected_naming_the_key_and_allowed_values(key, value, message):
  config = base_config()
  apply_overrides(config, {key: value})
  with pytest.raises(ConfigError, match=message):
    validate(config)


def test_int_is_accepted_for_a_float_key_but_not_the_reverse():
  config = base_config()
  apply_overrides(config, {"main.optim.grad_clip": 2})
  validate(config)


def test_cross_key_rule_aligned_slots_within_call_limit():
  config = base_config()
  apply_overrides(config, {"mgrpo.aligned_sub_calls": 32})
  with pytest.raises(ConfigError, match=r"'mgrpo\.aligned_sub_calls' \(D\) must be <= "):
    validate(config)


def test_apply_overrides_rejects_unknown_keys():
  with pytest.raises(ConfigError, match=r"'main\.optim\.lr' is not a known setting"):
    apply_overrides(base_config(), {"main.optim.lr": 1.0})
  with pytest.raises(ConfigError, match=r"'nothing' is not a group"):
    apply_overrides(base_config(), {"nothing.at.all": 1.0})


def test_spec_groups_match_the_design_modes():
  # one declaration of the modes (config/modes.py), in the order of docs/ALGORITHM.md
  assert SPEC["experiment"]["mode"].choices == (
      "mgrpo", "frozen_sub", "no_alignment", "unsynchronized", "shared_policy", "single_agent")


def test_aggregation_alignment_and_sub_reward_choices_are_the_core_registries():
  # one source of truth: what the core can compute is what the config may select
  assert SPEC["main"]["loss"]["aggregation"].allowed == tuple(AGGREGATIONS.names())
  assert SPEC["mgrpo"]["alignment"].allowed == tuple(ALIGNMENT_MODES.names())
  assert SPEC["rewards"]["sub_reward"].allowed == tuple(SUB_REWARDS.names()) == (
      "paper", "released")
  assert "seq_mean_token_sum_norm" in SPEC["sub"]["loss"]["aggregation"].allowed
  assert set(SPEC["mgrpo"]["alignment"].allowed) >= {"duplicate_drop", "mask"}


def test_a_name_registered_later_is_selectable(monkeypatch):
  monkeypatch.setattr(AGGREGATIONS, "_items", dict(AGGREGATIONS._items))  # undone after
  config = base_config()
  apply_overrides(config, {"main.loss.aggregation": "test_registered_later"})
  with pytest.raises(ConfigError, match=r"'main\.loss\.aggregation': expected one of .*"
                     r"'seq_mean_token_mean'"):
    validate(config)
  AGGREGATIONS.register("test_registered_later")(lambda *args, **kwargs: None)
  validate(config)


def test_checkpoint_every_is_not_a_setting():
  # every RL step is checkpointed (its acknowledgement promises a durable checkpoint)
  with pytest.raises(ConfigError, match=r"'checkpoint\.every' is not a known setting"):
    apply_overrides(base_config(), {"checkpoint.every": 2})


@pytest.mark.parametrize("key,value,message", [
    ("main.optim.learning_rate", float("nan"), r"'main\.optim\.learning_rate': expected a "
     r"finite float in \[0\.0, 1\.0\], got nan"),
    ("sub.loss.clip_high", float("inf"), r"'sub\.loss\.clip_high': expected a finite float"),
    ("store.wait_timeout_s", float("inf"), r"'store\.wait_timeout_s': expected a finite"),
    ("serving.deadline_s", float("-inf"), r"'serving\.deadline_s'"),
])
def test_nan_and_inf_are_rejected_naming_the_key(key, value, message):
  config = base_config()
  apply_overrides(config, {key: value})
  with pytest.raises(ConfigError, match=message):
    validate(config)


@pytest.mark.parametrize("value", [8, 2048])
def test_the_service_part_limit_holds_a_delegation_and_stays_under_the_request_limit(value):
  """serving.max_part_kib: at least 16 (a delegation's two strings take up to 8 KiB), at
  most 1024 (the smallest serving.max_request_mib)."""
  config = base_config()
  apply_overrides(config, {"serving.max_part_kib": value})
  with pytest.raises(ConfigError, match=r"'serving\.max_part_kib': expected a int in "
                                        r"\[16, 1024\], got " + str(value)):
    validate(config)
  apply_overrides(config, {"serving.max_part_kib": 16})
  validate(config)


@pytest.mark.parametrize("overrides,message", [
    ({"main.sampling.max_new_tokens": 2048},
     r"'main\.sampling\.max_new_tokens': must be < main\.limits\.max_context = 1024"),
    ({"sub.limits.max_context": 128},
     r"'sub\.sampling\.max_new_tokens': must be < sub\.limits\.max_context = 128"),
    ({"main.loss.clip_ratio_c": 1.0}, r"'main\.loss\.clip_ratio_c': the dual-clip bound must "
     r"be > 1 \(or 0: off\), got 1\.0"),
    ({"sub.loss.clip_ratio_c": 0.5}, r"'sub\.loss\.clip_ratio_c'"),
    ({"main.loss.clip_low": 1.0}, r"'main\.loss\.clip_low': must be < 1"),
    ({"sub.optim.b2": 1.0}, r"'sub\.optim\.b2': AdamW's beta must be < 1"),
    ({"experiment.run_id": ".hidden"}, r"'experiment\.run_id': '\.hidden' is not a store key"),
    ({"experiment.run_id": "a/b"}, r"'experiment\.run_id': 'a/b' is not a store key segment"),
    ({"experiment.run_id": "r" * 129}, r"'experiment\.run_id'"),
    ({"world.render": "symbolic", "world.size": "large"},
     r"'world\.size': 'large' has no symbolic rendering"),
    ({"mgrpo.staleness": 3}, r"'checkpoint\.keep': must be >= mgrpo\.staleness \+ 1 = 4"),
    ({"serving.host": "0.0.0.0"}, r"'serving\.host': '0\.0\.0\.0' is reachable from other "
     r"machines, .* set serving\.token_env"),
    ({"serving.host": "sub-host.internal"}, r"'serving\.host'.*serving\.token_env"),
    ({"serving.host": "0.0.0.0", "serving.token_env": "T"},
     r"'serving\.host': '0\.0\.0\.0' is reachable .* needs TLS: set serving\.tls_cert"),
    ({"serving.tls_cert": "c.pem"}, r"'serving\.tls_key': serving\.tls_cert and "
     r"serving\.tls_key are set together, got only serving\.tls_cert"),
    ({"serving.tls_client_key": "k.pem", "serving.tls_cert": "c", "serving.tls_key": "k"},
     r"'serving\.tls_client_cert': .* got only serving\.tls_client_key"),
    ({"serving.tls_ca": "ca.pem"}, r"'serving\.tls_ca': applies to TLS, which is off"),
    ({"serving.tls_cert": "c", "serving.tls_key": "k", "serving.tls_client_ca": "ca"},
     r"'serving\.tls_client_cert': client certificates need both"),
    ({"main.sampling.temperature": 0.0}, r"'main\.sampling\.temperature': RL samples K "
     r"rollouts per query: at 0 they are identical and every advantage is 0"),
    ({"sub.sampling.temperature": 0}, r"'sub\.sampling\.temperature'"),
    ({"main.optim.learning_rate": 0.0},
     r"'main\.optim\.learning_rate': experiment\.mode='mgrpo' trains main: must be > 0"),
    ({"sub.optim.learning_rate": 0.0, "experiment.mode": "no_alignment"},
     r"'sub\.optim\.learning_rate'"),
    ({"main.optim.learning_rate": 0.0, "experiment.mode": "single_agent"},
     r"'main\.optim\.learning_rate'"),
    ({"curriculum.stage2_steps": 5, "curriculum.learning_rate_scale": 0.0},
     r"'curriculum\.learning_rate_scale': stage 2 trains the agents: must be > 0"),
    ({"warm_start.enabled": True, "warm_start.learning_rate": 0.0},
     r"'warm_start\.learning_rate': warm_start\.enabled trains the agents"),
    ({"main.optim.schedule": "cosine", "main.optim.warmup_steps": 10},
     r"'main\.optim\.warmup_steps': an RL run of experiment\.num_steps = 10 would end inside "
     r"the warm-up and never reach the cosine decay; must be < 10, got 10"),
    ({"main.optim.micro_batch_size": 3},
     r"'main\.optim\.micro_batch_size': must divide the main agent's batch rows 16"),
    ({"sub.optim.micro_batch_size": 96},
     r"'sub\.optim\.micro_batch_size': must divide the sub agent's batch rows 128"),
    ({"warm_start.enabled": True, "warm_start.batch_rows": 12, "main.optim.micro_batch_size": 8},
     r"'main\.optim\.micro_batch_size': the warm start's updates are micro-batched too: "
     r"must divide warm_start\.batch_rows = 12, got 8"),
    ({"main.limits.shortest_train_length": 2048},
     r"'main\.limits\.shortest_train_length': must be at most main\.limits\.max_context = "
     r"1024"),
    ({"sub.model.preset": "smollm2_135m", "sub.model.smeared_keys": True},
     r"'sub\.model\.smeared_keys': needs a preset trained from scratch"),
    ({"main.optim.iterations": 2, "main.loss.old_logp": "recompute"},
     r"'main\.optim\.iterations': several steps per batch need main\.loss\.old_logp="),
    ({"sub.model.attention": "cudnn"}, r"'sub\.model\.attention': 'cudnn' needs "
     r"sub\.model\.dtype='bfloat16'"),
])
def test_cross_key_rules_name_the_key(overrides, message):
  config = base_config()
  apply_overrides(config, overrides)
  with pytest.raises(ConfigError, match=message):
    validate(config)


@pytest.mark.parametrize("overrides", [
    {"main.loss.clip_ratio_c": 3.0},
    {"serving.host": "0.0.0.0", "serving.token_env": "MGRPO_TOKEN", "serving.tls_cert": "c",
     "serving.tls_key": "k"},
    {"serving.tls_cert": "c", "serving.tls_key": "k", "serving.tls_client_ca": "ca",
     "serving.tls_client_cert": "cc", "serving.tls_client_key": "ck", "serving.tls_ca": "ca",
     "serving.tls_server_name": "sub-host"},
    {"sub.sampling.temperature": 0.0, "sub.optim.learning_rate": 0.0,
     "experiment.mode": "frozen_sub"},  # S is not trained
    {"sub.sampling.temperature": 0.0, "experiment.mode": "shared_policy"},
    {"warm_start.learning_rate": 0.0},  # no warm start
    {"serving.host": "localhost"},
    {"serving.host": "::1"},
    {"experiment.run_id": "sweep-a_1.2"},
    {"sub.optim.micro_batch_size": 96, "experiment.mode": "frozen_sub"},
    {"main.optim.micro_batch_size": 4, "sub.optim.micro_batch_size": 32},
    {"main.optim.schedule": "cosine", "main.optim.warmup_steps": 9},
    {"main.optim.iterations": 2, "sub.optim.iterations": 4},
    {"main.model.attention": "cudnn", "main.model.dtype": "bfloat16"},
    {"sub.model.attention": "xla"},
])
def test_cross_key_rules_accept_what_works(overrides):
  config = base_config()
  apply_overrides(config, overrides)
  validate(config)


@given(st.text(alphabet="ab_-./ \u00e9", min_size=0, max_size=6))
def test_run_id_rule_is_the_store_key_segment_rule(run_id):
  config = base_config()
  apply_overrides(config, {"experiment.run_id": run_id})
  try:
    validate(config)
    accepted = True
  except ConfigError:
    accepted = False
  assert accepted == keys.is_valid_segment(run_id)


def test_the_environment_check_names_the_token_variable_and_unreadable_files(tmp_path,
                                                                          monkeypatch):
  config = base_config()
  apply_overrides(config, {"serving.token_env": "MGRPO_TEST_TOKEN"})
  monkeypatch.delenv("MGRPO_TEST_TOKEN", raising=False)
  with pytest.raises(ConfigError, match=r"'serving\.token_env': names the environment "
                                        r"variable 'MGRPO_TEST_TOKEN', which is unset"):
    check_environment(config)
  monkeypatch.setenv("MGRPO_TEST_TOKEN", "s3cret")
  check_environment(config)
  (tmp_path / "c.pem").write_text("cert")
  apply_overrides(config, {"serving.tls_cert": str(tmp_path / "c.pem"),
                           "serving.tls_key": str(tmp_path / "missing.key")})
  with pytest.raises(ConfigError, match=r"'serving\.tls_key': .*missing\.key is not a "
                                        r"readable file"):
    check_environment(config)


def test_pretrained_presets_are_the_trainers():
  from mgrpo_jax.training.agent_setup import PRETRAINED

  assert PRETRAINED == PRETRAINED_PRESETS


def test_attention_choices_are_the_models():
  from mgrpo_jax.models.config import ATTENTION_IMPLEMENTATIONS

  assert SPEC["main"]["model"]["attention"].choices == ATTENTION_IMPLEMENTATIONS


def test_model_training_keys_are_the_trainers():
  from mgrpo_jax.models.transformer import REMAT_POLICIES
  from mgrpo_jax.training import UpdateConfig

  model = SPEC["main"]["model"]
  assert model["logprob_chunk"].default == UpdateConfig().logprob_chunk
  assert model["remat"].default == UpdateConfig().remat
  assert model["remat"].choices == tuple(REMAT_POLICIES)
  agent = base_config().main
  agent.model.logprob_chunk, agent.model.remat = 0, "dots"
  agent.sampling.temperature = 1.5
  update = UpdateConfig.from_config(agent)
  assert (update.logprob_chunk, update.remat, update.temperature) == (0, "dots", 1.5)
