"""An agent's settings resolved once from the config (`training/agent_config.py`)."""

from mgrpo_jax.agents import protocol
from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.utils.seeds import derive_seed


def test_agent_setup_reads_the_agents_section_and_the_runs_seed_and_steps():
  config = base_config()
  apply_overrides(config, {"experiment.seed": 3, "experiment.num_steps": 12,
                           "sub.lora.rank": 4, "sub.lora.base_dtype": "bfloat16",
                           "sub.sampling.temperature": 0.5, "sub.limits.max_context": 160,
                           "sub.limits.shortest_train_length": 64,
                           "sub.optim.micro_batch_size": 2, "sub.model.tokenizer": "t.model"})
  setup = AgentSetup.from_config(config, "sub")
  assert setup.role == "sub"
  assert (setup.init_seed, setup.lora_seed, setup.state_seed) == (
      derive_seed(3, "init", "sub"), derive_seed(3, "lora", "sub"),
      derive_seed(3, "state", "sub"))
  assert setup.lora is not None and setup.lora.rank == 4
  assert setup.model.base_dtype == "bfloat16" and setup.model.tokenizer == "t.model"
  assert setup.optim.total_steps == 12
  assert setup.update.micro_batch_size == 2
  assert setup.limits.context_tokens == 160 and setup.train_lengths == (64, 128, 160)
  assert setup.sampling.temperature == 0.5
  assert setup.sampling.stop_strings == protocol.STOP_STRINGS


def test_agent_setup_without_adapters_or_tokenizer():
  setup = AgentSetup.from_config(base_config(), "main")
  assert setup.lora is None and setup.model.tokenizer == ""
  assert setup.model.init_checkpoint == ""
