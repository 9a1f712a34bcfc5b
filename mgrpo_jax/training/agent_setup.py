"""Builds one agent from its `AgentSetup` (`agent_config.py`, the agent's settings resolved
once): tokenizer, model, sampler policy, train state.

Tokenizer: `model.tokenizer` when set (a SentencePiece model or GGUF file); the
pretrained model's own for `smollm2_135m` or a model path; otherwise ONE SentencePiece
tokenizer trained on the world's corpus (train-world pages, train questions, the agents'
system prompts and the scripted agents' transcripts: `tokenizer_corpus`), cached in
`<root>/data/tokenizer` and file-locked so both slices use the same file
(`world.tokenizer_vocab_size` ids): `world_tokenizer`, which `build_model` calls only
for such an agent.

Model: `load_pretrained` for `smollm2_135m` or a path; otherwise the preset's shape with
the tokenizer's vocabulary and a seeded init (`derive_seed(seed, "init", role)`). A
non-empty `model.init_checkpoint` replaces the initial parameters by the ones of that
orbax checkpoint (`restore_init_params`). With `lora.rank` > 0 the model gets LoRA
adapters (`models.lora.with_lora`, seeded by `derive_seed(seed, "lora", role)`) over a
frozen base stored in `lora.base_dtype`; the agents of one process that load the same
pretrained weights share one base (`_pretrained`), each with its own adapters.

Every seed of the run comes from `derive_seed(experiment.seed, *names)`, a hash, never
from wall time or arrival order.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
from collections.abc import Callable
from typing import Any

import gin
import jax
import jax.numpy as jnp

from mgrpo_jax import plugins
from mgrpo_jax.agents import specs
from mgrpo_jax.agents.config import RolloutConfig
from mgrpo_jax.agents.policy import SamplerPolicy
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.config.spec import PRETRAINED_PRESETS
from mgrpo_jax.models import get_config, init_model, load_pretrained
from mgrpo_jax.models.lora import with_lora
from mgrpo_jax.sampling import Sampler, SamplerConfig, SamplingParams
from mgrpo_jax.text import DEFAULT_USER_DEFINED_SYMBOLS, SentencePieceTokenizer, Tokenizer
from mgrpo_jax.tools import ToolRegistry, index_registry, world_index
from mgrpo_jax.tools.web import WebSettings, web_registry
from mgrpo_jax.training.agent_config import AgentSetup, agent_limits
from mgrpo_jax.training.checkpoint import restore_params
from mgrpo_jax.training.mesh import create_mesh
from mgrpo_jax.training.optimizer import OptimizerConfig, make_optimizer
from mgrpo_jax.training.tokenizer_corpus import (
  TokenizerSetup,
  protocol_symbols,
  tokenizer_corpus,
)
from mgrpo_jax.training.train_state import StateLayout, TrainState, create_train_state
from mgrpo_jax.training.update import UpdateConfig
from mgrpo_jax.utils.file_lock import file_lock
from mgrpo_jax.utils.seeds import derive_seed

PRETRAINED = PRETRAINED_PRESETS


def step_key(seed: int, purpose: str, step: int) -> jax.Array:
  """The PRNG key of one purpose ("rollout", "align", ...) at one step."""
  return jax.random.fold_in(jax.random.key(derive_seed(seed, purpose)), step)


def is_pretrained(preset: str) -> bool:
  """Whether `preset` names pretrained weights (a known name or a folder/file), not a
  shape trained from scratch."""
  return preset in PRETRAINED or pathlib.Path(preset).exists()


def world_tokenizer(root: str | pathlib.Path, setup: TokenizerSetup) -> SentencePieceTokenizer:
  """The SentencePiece tokenizer trained once on the world's corpus (module docstring,
  `setup`: `TokenizerSetup.from_config(config)`); the rendering's symbols (every name,
  relation, value and page id of the symbolic world) are user-defined symbols, one token
  each wherever they occur."""
  folder = pathlib.Path(root) / "data" / "tokenizer"
  with file_lock(folder.parent / ".tokenizer.lock"):
    if (folder / "tokenizer.model").exists():
      return SentencePieceTokenizer.load(folder)
    symbols = (DEFAULT_USER_DEFINED_SYMBOLS + protocol_symbols(setup.system)
               + setup.world.rendering.symbols)
    tokenizer = SentencePieceTokenizer.train(tokenizer_corpus(setup), folder / "tmp",
                                             setup.world.tokenizer_vocab_size,
                                             user_defined_symbols=symbols)
    (folder / "tmp" / "tokenizer.model").replace(folder / "tokenizer.model")
    return tokenizer


def load_tokenizer(path: str):
  """A tokenizer file: SentencePiece `.model` (or folder) or a GGUF file."""
  if path.endswith(".gguf"):
    from mgrpo_jax.models.weights.gguf import open_gguf
    from mgrpo_jax.text.gguf_bpe import GGUFTokenizer
    return GGUFTokenizer.from_reader(open_gguf(path), source=path)
  return SentencePieceTokenizer.load(path)


def chat_template(setting: str, tokenizer, key: str) -> str | None:
  """The chat template of `<agent>.model.chat_template` (`key` names it in errors).

  "auto": the tokenizer's own (None: ChatML); "chatml": None; else a path to a Jinja
  file or to a `tokenizer_config.json` with a string `chat_template`.
  """
  if setting == "auto":
    return tokenizer.chat_template
  if setting == "chatml":
    return None
  path = pathlib.Path(setting)
  if not path.is_file():
    raise ValueError(f"{key}: {setting!r} is neither auto, chatml nor a template file")
  text = path.read_text(encoding="utf-8")
  if path.suffix != ".json":
    return text
  try:
    template = json.loads(text).get("chat_template")
  except (ValueError, AttributeError) as e:
    raise ValueError(f"{key}: {path} is not a JSON object ({e})") from None
  if not isinstance(template, str):
    raise ValueError(f"{key}: {path} has no string 'chat_template'")
  return template


def build_model(setup: AgentSetup, world_tokenizer: Callable[[], Tokenizer]):
  """(model, tokenizer) of one agent; the tokenizer's `chat_template` is the one
  `model.chat_template` selects. `world_tokenizer` gives the world's tokenizer, called
  only for a model trained from scratch without `model.tokenizer`."""
  model, tokenizer = _build_base(setup, world_tokenizer)
  if setup.lora is not None:
    model = with_lora(model, setup.lora, setup.lora_seed)
  tokenizer.chat_template = chat_template(setup.model.chat_template, tokenizer,
                                          f"{setup.role}.model.chat_template")
  return model, tokenizer


# Pretrained models loaded by this process for agents with LoRA adapters, by preset and
# overrides: the agents that load the same weights share one frozen base.
_SHARED_BASES: dict[tuple[str, tuple[tuple[str, Any], ...]], tuple[Any, Any]] = {}


def _pretrained(preset: str, overrides: dict[str, Any], *, shared: bool):
  """`load_pretrained(preset, **overrides)`; with `shared`, the model loaded once per
  process (a base only adapters train) and a copy of its tokenizer (each agent sets its
  own chat template)."""
  if not shared:
    return load_pretrained(preset, **overrides)
  key = (preset, tuple(sorted(overrides.items())))
  if key not in _SHARED_BASES:
    _SHARED_BASES[key] = load_pretrained(preset, **overrides)
  model, tokenizer = _SHARED_BASES[key]
  return model, copy.copy(tokenizer)


def _build_base(setup: AgentSetup, world_tokenizer: Callable[[], Tokenizer]):
  settings = setup.model
  dtype = jnp.bfloat16 if settings.dtype == "bfloat16" else jnp.float32
  overrides = {"dtype": dtype, "scan_layers": settings.scan_layers,
               "attention": settings.attention}
  lora = setup.lora is not None
  if lora and settings.base_dtype == "bfloat16":
    overrides["param_dtype"] = jnp.bfloat16
  if is_pretrained(settings.preset):
    if settings.smeared_keys:
      raise ValueError(f"{setup.role}.model.smeared_keys: pretrained weights "
                       f"({settings.preset!r}) have no key-smear parameters; use it with a "
                       "preset trained from scratch")
    model, tokenizer = _pretrained(settings.preset, overrides, shared=lora)
    if settings.tokenizer:
      tokenizer = load_tokenizer(settings.tokenizer)
    return model, tokenizer
  tokenizer = (load_tokenizer(settings.tokenizer) if settings.tokenizer
               else world_tokenizer())
  max_seq_len = 2 * setup.limits.context_tokens
  model_config = get_config(settings.preset, vocab_size=tokenizer.vocab_size,
                            max_seq_len=max_seq_len, smeared_keys=settings.smeared_keys,
                            **overrides)
  return init_model(model_config, setup.init_seed), tokenizer


def rollout_config(config) -> RolloutConfig:
  """Limits of M (or the single agent) and of each S call, and d_max of delegations."""
  return RolloutConfig(main=agent_limits(config.main), sub=agent_limits(config.sub),
                       max_sub_calls=int(config.mgrpo.max_sub_calls))


def agent_specs(config, mode: Mode) -> tuple[specs.AgentSpec, specs.AgentSpec]:
  """(M's or the single agent's spec, S's spec) of `mode` with `prompts.system`'s system
  prompts, each with its role's user tools (`plugins.user_tools`) after the built-in
  ones."""
  style = str(config.prompts.system)
  main_role = mode.main_role
  extra = plugins.user_tools()
  return (specs.spec_for(main_role, style, extra[main_role]),
          specs.spec_for("sub", style, extra["sub"]))


def tool_registry(world_path: pathlib.Path, config, *, world: str = "train_world",
                  offline: bool = False) -> ToolRegistry:
  """`index_tool_registry` over a built world's index ("train_world", "test_world")."""
  return index_tool_registry(world_index(world_path, world), config, offline=offline)


def index_tool_registry(index_path: pathlib.Path, config, *, offline: bool = False
                        ) -> ToolRegistry:
  """What every agent's tool calls run through: search / visit / reason over the SQLite
  FTS5 index at `index_path`, or with `tools.backend=web` (and not `offline`) search /
  visit on the web (`tools.web.*`) and reason; sized by `tools.*`, and every role's
  user tools (`plugins.all_user_tools`)."""
  tools = config.tools
  if tools.backend == "web" and not offline:
    registry = web_registry(WebSettings(**tools.web.to_dict()), top_n=int(tools.search_top_n),
                            visit_budget=int(tools.visit_chars))
  else:
    registry = index_registry(index_path, top_n=int(tools.search_top_n),
                              visit_budget=int(tools.visit_chars))
  for tool in plugins.all_user_tools():
    registry.register(tool)
  return registry


def sampler_policy(model, tokenizer, params: SamplingParams, *, version: int = 0
                   ) -> SamplerPolicy:
  """The agent's `SamplerPolicy` sampling with `params` (`AgentSetup.sampling`), compiled
  for turns of `params.max_new_tokens`."""
  sampler_config = SamplerConfig(generation_buckets=(params.max_new_tokens,))
  return SamplerPolicy(Sampler(model, tokenizer, config=sampler_config), params,
                       version=version)


@gin.configurable(module="mgrpo_jax.training")
def rollout_policy(policy: SamplerPolicy, tokenizer, role: str, wrapper=None):
  """The policy rollouts sample with: `policy`, or `wrapper(policy, tokenizer, role)`.

  Gin can bind `wrapper` (e.g. a test mixing model-sampled thinking with scripted
  actions, so a random model still delegates); the trainer keeps updating `policy`'s
  weights either way, and the wrapper must report `policy.version` as its `version`.
  """
  return policy if wrapper is None else wrapper(policy, tokenizer, role)


@dataclasses.dataclass
class AgentTrainer:
  """One agent's mesh-placed train state and its static layout."""

  state: TrainState
  layout: StateLayout
  update_config: UpdateConfig
  optim: OptimizerConfig


def create_agent_state(model, setup: AgentSetup) -> AgentTrainer:
  """The train state of `model` on the agent's mesh (`mesh.*`, `optim.*`, `loss.*`)."""
  mesh = create_mesh(setup.mesh)
  state, layout = create_train_state(
      model, make_optimizer(setup.optim), mesh, seed=setup.state_seed,
      with_reference=setup.update.with_reference)
  return AgentTrainer(state, layout, setup.update, setup.optim)


def restore_init_params(trainer: AgentTrainer, directory: str) -> dict[str, Any]:
  """Replaces the initial params (and the reference policy's) by those saved in `directory`.

  `directory` holds a parameter checkpoint (`checkpoint.save_params`, e.g. a warm start);
  the optimizer state stays fresh. Returns the checkpoint's metadata.
  """
  try:
    params, metadata = restore_params(directory, trainer.layout.abstract.params)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"model.init_checkpoint {directory!r}: {e}") from None
  ref = trainer.state.ref_params
  trainer.state = trainer.state.replace(
      params=params, ref_params=None if ref is None else jax.tree.map(jnp.copy, params))
  return metadata
