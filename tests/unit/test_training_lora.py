"""LoRA agents in the trainer: only the adapters are in the train state, its optimizer
state and its checkpoints; the update's gradient is the full gradient's chain rule and
never touches the base; two agents of one process share one base."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.config import apply_overrides
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.models.config import LoraConfig
from mgrpo_jax.models.lora import FROZEN, adapter_arrays, merge_lora, with_lora
from mgrpo_jax.models.weights.hf_export import export_hf_folder
from mgrpo_jax.text import CHATML_TEMPLATE
from mgrpo_jax.training import (
  AgentCheckpointer,
  MeshConfig,
  OptimizerConfig,
  UpdateConfig,
  agent_setup,
  create_mesh,
  create_train_state,
  make_optimizer,
  make_update_fn,
)
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from mgrpo_jax.training.update import _gradients
from tests.support import plumbing_config
from tests.unit.test_training_checkpoint import N, _batch

OPTIM = OptimizerConfig(learning_rate=1e-2, warmup_steps=0)
LORA = LoraConfig(rank=4, alpha=8.0, targets=("q", "o", "up", "down"))


def _adapted(seed: int = 0):
  """A tiny model with random (non-zero) adapters."""
  model = with_lora(init_model(get_config("tiny"), seed=seed), LORA, seed=1)
  graphdef, adapters, base = nnx.split(model, nnx.LoRAParam, FROZEN)
  adapters = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.key(5), x.shape),
                          adapters)
  return nnx.merge(graphdef, adapters, base)


@pytest.fixture(scope="module")
def lora_state():
  mesh = create_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  return create_train_state(_adapted(), make_optimizer(OPTIM), mesh, seed=0)


def test_the_state_holds_only_the_adapters(lora_state):
  state, layout = lora_state
  adapters = jax.tree.leaves(state.params)
  assert len(adapters) == 2 * 4 * 2  # A and B of 4 projections in 2 layers
  assert all(x.dtype == jnp.float32 for x in adapters)
  moments = [x for x in jax.tree.leaves(state.opt_state) if x.ndim >= 2]
  assert sorted(x.shape for x in moments) == sorted(2 * [x.shape for x in adapters])
  assert len(jax.tree.leaves(layout.frozen)) == len(jax.tree.leaves(
      nnx.state(init_model(get_config("tiny")), nnx.Param)))
  up_a = [x for x in adapters if x.shape == (64, 4)][0]
  assert up_a.sharding.spec[0] == "fsdp"  # the adapter's `in` axis follows its kernel's


def test_lora_gradient_is_the_chain_rule_of_the_full_gradient(lora_state):
  """dL/dA = s G B^T and dL/dB = s A^T G, G the full model's gradient of the merged
  weight W + s A B ([in, out] layout)."""
  state, layout = lora_state
  batch = jax.tree.map(jnp.asarray, _batch(0))
  lora_grads, _ = jax.jit(lambda s, b, f: _gradients(layout, UpdateConfig(), s, b, f))(
      state, batch, layout.frozen)
  merged = merge_lora(layout.model(state))
  full_state, full_layout = create_train_state(merged, make_optimizer(OPTIM), layout.mesh,
                                               seed=0)
  full_grads, _ = jax.jit(lambda s, b: _gradients(full_layout, UpdateConfig(), s, b, None))(
      full_state, batch)
  arrays = adapter_arrays(layout.model(state))
  for i in range(2):
    for path, module in ((("attn", "q_proj"), "self_attn.q_proj"),
                         (("mlp", "down_proj"), "mlp.down_proj")):
      g = np.asarray(full_grads["layers"][i][path[0]][path[1]]["kernel"][...])
      got = lora_grads["layers"][i][path[0]][path[1]]
      a, b = arrays[f"model.layers.{i}.{module}"]
      np.testing.assert_allclose(got["lora_a"][...], 2.0 * g @ b.T, atol=1e-6, rtol=1e-4)
      np.testing.assert_allclose(got["lora_b"][...], 2.0 * a.T @ g, atol=1e-6, rtol=1e-4)


def test_updates_train_the_adapters_and_never_the_base(lora_state):
  _, layout = lora_state
  state, layout = create_train_state(_adapted(), make_optimizer(OPTIM), layout.mesh, seed=0)
  base_before = jax.tree.map(np.asarray, layout.frozen)
  adapters_before = jax.tree.map(np.asarray, state.params)
  update = make_update_fn(layout, UpdateConfig(), N)
  for seed in (0, 1):
    state, metrics = update(state, _batch(seed))  # the state is donated, the base is not
  for got, want in zip(jax.tree.leaves(layout.frozen), jax.tree.leaves(base_before),
                       strict=True):
    np.testing.assert_array_equal(np.asarray(got), want)
  moved = [np.abs(np.asarray(a) - b).max() for a, b in
           zip(jax.tree.leaves(state.params), jax.tree.leaves(adapters_before), strict=True)]
  assert min(moved) > 1e-4 and np.isfinite(float(metrics["loss"]))


def test_checkpoints_hold_only_the_adapters(lora_state, tmp_path):
  state, layout = lora_state
  with AgentCheckpointer(tmp_path / "lora", layout) as checkpointer:
    checkpointer.save(state, force=True)
    restored, _ = checkpointer.restore()
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  # orbax's own record of the saved tree: every parameter array is an adapter
  saved = json.loads((tmp_path / "lora" / "0" / "state" / "_METADATA").read_text())
  params = [path for path in saved["tree_metadata"] if path.startswith("('params'")]
  assert len(params) == 16 and all("'lora_a'" in p or "'lora_b'" in p for p in params)


def test_agents_loading_one_folder_share_its_base(tmp_path):
  """Both agents with adapters on the same pretrained folder, in one process: one base
  in memory (the same buffers on the same mesh), two sets of adapters."""
  config = plumbing_config.get_config()
  world_tokenizer = functools.partial(agent_setup.world_tokenizer, tmp_path,
                                      TokenizerSetup.from_config(config))
  _, tokenizer = agent_setup.build_model(AgentSetup.from_config(config, "main"), world_tokenizer)
  folder = export_hf_folder(init_model(get_config("tiny", vocab_size=tokenizer.vocab_size),
                                       seed=0), tokenizer, tmp_path / "base",
                            chat_template=CHATML_TEMPLATE)
  apply_overrides(config, {f"{role}.{key}": value for role in ("main", "sub") for key, value in
                           (("model.preset", str(folder)), ("lora.rank", 4),
                            ("lora.base_dtype", "bfloat16"))})
  trainers = {}
  for role in ("main", "sub"):
    setup = AgentSetup.from_config(config, role)
    model, _ = agent_setup.build_model(setup, world_tokenizer)
    trainers[role] = agent_setup.create_agent_state(model, setup)
  main, sub = trainers["main"], trainers["sub"]
  pointers = [(a.unsafe_buffer_pointer(), b.unsafe_buffer_pointer()) for a, b in
              zip(jax.tree.leaves(main.layout.frozen), jax.tree.leaves(sub.layout.frozen),
                  strict=True)]
  assert all(a == b for a, b in pointers)
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(main.layout.frozen))
  a_main = np.asarray(jax.tree.leaves(main.state.params)[0])
  assert not np.array_equal(a_main, np.asarray(jax.tree.leaves(sub.state.params)[0]))
