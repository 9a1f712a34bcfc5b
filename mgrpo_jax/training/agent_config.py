"""One agent's settings resolved once from the run's config: `AgentSetup.from_config`.

What builds, samples and trains an agent (`agent_setup.build_model`,
`agent_setup.create_agent_state`, `agent_setup.sampler_policy`, a slice's runtime, the
warm start, an evaluation, the export) reads this typed object, never the agent's
ConfigDict section beside the whole config. Its seeds are derived here, from the run
seed and the role (`utils.seeds.derive_seed`), and nowhere else.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mgrpo_jax.agents import protocol
from mgrpo_jax.agents.config import AgentLimits
from mgrpo_jax.models.config import LoraConfig
from mgrpo_jax.sampling import SamplingParams
from mgrpo_jax.sampling.buckets import doubling_lengths
from mgrpo_jax.training.mesh import MeshConfig
from mgrpo_jax.training.optimizer import OptimizerConfig
from mgrpo_jax.training.update import UpdateConfig
from mgrpo_jax.utils.seeds import derive_seed


def agent_limits(agent: Any) -> AgentLimits:
  """The limits of one agent section's trajectories (`limits.*`, `sampling.max_new_tokens`)."""
  return AgentLimits(max_turns=int(agent.limits.max_turns),
                     context_tokens=int(agent.limits.max_context),
                     max_new_tokens=int(agent.sampling.max_new_tokens))


def train_lengths(limits: Any) -> tuple[int, ...]:
  """The row lengths T an agent's RL batches are padded to, from its `limits` section:
  max_context alone when `shortest_train_length` is 0 (one compiled update per run),
  else its doublings up to max_context."""
  if not limits.shortest_train_length:
    return (int(limits.max_context),)
  return doubling_lengths(int(limits.shortest_train_length), int(limits.max_context))


@dataclasses.dataclass(frozen=True)
class ModelSettings:
  """What an agent's model and tokenizer are built from (`<role>.model.*`, `lora.base_dtype`).

  Attributes:
    preset: a preset name, a pretrained preset or a model path.
    dtype: the activations' dtype, "bfloat16" or "float32".
    scan_layers: whether the decoder blocks run under one `lax.scan`.
    attention: the attention kernel's name.
    smeared_keys: whether the model has key-smear parameters (trained from scratch only).
    tokenizer: a tokenizer file or folder; "" for the pretrained model's own, or the
      world's SentencePiece tokenizer for a model trained from scratch.
    chat_template: "auto", "chatml" or a template file (`agent_setup.chat_template`).
    init_checkpoint: a parameter checkpoint replacing the initial parameters ("": none).
    base_dtype: the frozen base's parameter dtype under LoRA, "bfloat16" or "float32".
  """

  preset: str
  dtype: str
  scan_layers: bool
  attention: str
  smeared_keys: bool
  tokenizer: str
  chat_template: str
  init_checkpoint: str
  base_dtype: str

  @classmethod
  def from_config(cls, agent: Any) -> ModelSettings:
    """From an agent's section (`config.main` / `config.sub`)."""
    model = agent.model
    return cls(preset=str(model.preset), dtype=str(model.dtype),
               scan_layers=bool(model.scan_layers), attention=str(model.attention),
               smeared_keys=bool(model.smeared_keys), tokenizer=str(model.tokenizer or ""),
               chat_template=str(model.chat_template),
               init_checkpoint=str(model.init_checkpoint or ""),
               base_dtype=str(agent.lora.base_dtype))


@dataclasses.dataclass(frozen=True)
class AgentSetup:
  """One agent's settings, resolved once (module docstring).

  Attributes:
    role: "main" (M, or the single agent) or "sub"; names the `<role>.*` keys in errors.
    model: what the model and tokenizer are built from.
    lora: the LoRA adapters' settings; None for full fine-tuning (`lora.rank` 0).
    limits: turns, context and new tokens of one trajectory.
    train_lengths: the row lengths T its RL batches are padded to (`train_lengths`).
    sampling: how its rollouts sample (`sampling.*`, stopping after an action).
    optim: its AdamW settings, with the run's `experiment.num_steps` as total steps.
    mesh: its (data, fsdp, tensor) mesh.
    update: how its update step runs (`loss.*`, micro-batches, remat, ...).
    init_seed: the seed of a model trained from scratch (`derive_seed(seed, "init", role)`).
    lora_seed: the seed of its LoRA adapters (`derive_seed(seed, "lora", role)`).
    state_seed: the seed of its train state's PRNG (`derive_seed(seed, "state", role)`).
  """

  role: str
  model: ModelSettings
  lora: LoraConfig | None
  limits: AgentLimits
  train_lengths: tuple[int, ...]
  sampling: SamplingParams
  optim: OptimizerConfig
  mesh: MeshConfig
  update: UpdateConfig
  init_seed: int
  lora_seed: int
  state_seed: int

  @classmethod
  def from_config(cls, config: Any, role: str) -> AgentSetup:
    """The setup of agent `role` ("main" or "sub") of the run's `config`."""
    agent = config[role]
    seed = int(config.experiment.seed)
    sampling = agent.sampling
    return cls(
        role=role, model=ModelSettings.from_config(agent),
        lora=LoraConfig.from_config(agent.lora), limits=agent_limits(agent),
        train_lengths=train_lengths(agent.limits),
        sampling=SamplingParams(max_new_tokens=int(sampling.max_new_tokens),
                                temperature=float(sampling.temperature),
                                top_k=int(sampling.top_k), top_p=float(sampling.top_p),
                                stop_strings=protocol.STOP_STRINGS),
        optim=OptimizerConfig.from_config(agent.optim,
                                          total_steps=int(config.experiment.num_steps)),
        mesh=MeshConfig.from_config(agent.mesh), update=UpdateConfig.from_config(agent),
        init_seed=derive_seed(seed, "init", role), lora_seed=derive_seed(seed, "lora", role),
        state_seed=derive_seed(seed, "state", role))
