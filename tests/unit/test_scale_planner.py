"""The dry-run memory planner: abstract per-device bytes against real sharded arrays."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.config import base_config
from mgrpo_jax.models import get_config, init_cache, init_model
from mgrpo_jax.models.config import LoraConfig
from mgrpo_jax.models.lora import with_lora
from mgrpo_jax.models.sharding import shard_kv_cache
from mgrpo_jax.scale.planner import (
  Workload,
  agent_model_config,
  format_plan,
  plan_from_config,
  plan_memory,
)
from mgrpo_jax.training import (
  MeshConfig,
  OptimizerConfig,
  create_mesh,
  create_train_state,
  make_optimizer,
)

CONFIG = get_config("tiny", qkv_bias=True, tie_embeddings=False)
TX = make_optimizer(OptimizerConfig())
WORKLOAD = Workload(train_rows=8, seq_len=16, decode_batch=8, context=32)


def _device0_bytes(tree) -> int:
  """Bytes of a pytree's shards that live on device 0 (really allocated)."""
  device = jax.devices()[0]
  return sum(shard.data.nbytes for leaf in jax.tree.leaves(tree)
             for shard in leaf.addressable_shards if shard.device == device)


@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 4, 1), (2, 2, 2), (1, 2, 4)])
def test_planned_bytes_match_the_allocated_sharded_state(shape):
  mesh_config = MeshConfig(data=shape[0], fsdp=shape[1], tensor=shape[2])
  plan = plan_memory("main", "tiny", CONFIG, mesh_config, TX, WORKLOAD)
  state, _ = create_train_state(init_model(CONFIG, seed=0), TX, create_mesh(mesh_config),
                                seed=0)
  real_params = _device0_bytes(state.params)
  real_other = _device0_bytes((state.opt_state, state.step, state.rng))
  assert plan.parameters == pytest.approx(real_params, rel=0.05)
  assert plan.optimizer == pytest.approx(real_other, rel=0.05)
  assert plan.parameters == real_params  # identical shard shapes: exact
  full = sum(x.nbytes for x in jax.tree.leaves(state.params))
  if shape[1] * shape[2] > 1:
    assert real_params < 0.6 * full, "the check must see a sharded state"
  # Every group's PartitionSpec is the one the real layer-0 array carries.
  real_specs = {".".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path
                         if getattr(k, "name", None) != "value"): leaf.sharding.spec
                for path, leaf in jax.tree_util.tree_leaves_with_path(state.params)}
  for group in plan.groups:
    name = group.name.replace("*", "0")
    assert group.spec == real_specs[name], name
    assert group.count == (CONFIG.num_layers if "*" in group.name else 1)

  cache = shard_kv_cache(init_cache(CONFIG, WORKLOAD.decode_batch, WORKLOAD.context),
                         create_mesh(mesh_config))
  assert plan.kv_cache == _device0_bytes((cache.k, cache.v))


def test_scanned_model_plan_matches_too():
  config = CONFIG.replace(scan_layers=True)
  mesh_config = MeshConfig(data=1, fsdp=4, tensor=2)
  plan = plan_memory("sub", "tiny", config, mesh_config, TX, WORKLOAD)
  state, _ = create_train_state(init_model(config, seed=0), TX, create_mesh(mesh_config),
                                seed=0)
  assert plan.parameters == _device0_bytes(state.params)
  assert plan.optimizer == pytest.approx(_device0_bytes((state.opt_state, state.step,
                                                         state.rng)), rel=0.05)
  assert {g.count for g in plan.groups} == {1}  # one stacked array per parameter kind


def test_lora_plan_matches_the_allocated_adapters_and_base():
  """With LoRA the plan counts the frozen base (bfloat16 here) and the float32 adapters as
  parameters, and only the adapters' moments and gradients."""
  lora = LoraConfig(rank=4, alpha=8.0, targets=("q", "v", "up"))
  config = CONFIG.replace(param_dtype=jnp.bfloat16)
  mesh_config = MeshConfig(data=2, fsdp=2, tensor=2)
  plan = plan_memory("main", "tiny", config.replace(lora=lora), mesh_config, TX, WORKLOAD)
  base = init_model(config, seed=0)
  state, layout = create_train_state(with_lora(base, lora, seed=1), TX,
                                     create_mesh(mesh_config), seed=0)
  assert plan.parameters == _device0_bytes(state.params) + _device0_bytes(layout.frozen)
  assert plan.optimizer == pytest.approx(_device0_bytes((state.opt_state, state.step,
                                                         state.rng)), rel=0.05)
  assert plan.gradients == _device0_bytes(state.params)  # float32 adapters, no base
  full = plan_memory("main", "tiny", CONFIG, mesh_config, TX, WORKLOAD)
  assert plan.optimizer < 0.2 * full.optimizer and plan.parameters < 0.7 * full.parameters
  assert "LoRA rank 4 on q,v,up" in format_plan(plan)


def test_activation_lines_follow_the_documented_formulas():
  # (2, 2, 2): rows 8 / (data * fsdp) = 2 per device; 8 heads / tensor = 4; vocab / 2.
  plan = plan_memory("main", "tiny", CONFIG, MeshConfig(data=2, fsdp=2, tensor=2), TX,
                     WORKLOAD)
  c = CONFIG
  # Widths per device: D whole; heads, kv heads and F split over tensor = 2.
  d, f, heads, kv = c.hidden_size, c.intermediate_size // 2, c.num_heads * c.head_dim // 2, \
      c.num_kv_heads * c.head_dim // 2
  dots = (3 * d + heads + 2 * kv + 2 * f) * 4  # float32 activations
  # No remat (the default): the matmul outputs and the float32 intermediates.
  assert plan.activations == 2 * 16 * c.num_layers * (dots + (4 * d + 2 * f + heads) * 4)
  # XLA attention (a CPU, or the tiny model's head_dim 16 on a TPU): the scores and
  # probabilities of every layer plus one layer's gradient, [rows, heads, T, T] float32.
  assert plan.attention_kernel == "xla"
  assert plan.attention == (2 * c.num_layers + 1) * 2 * (c.num_heads // 2) * 16 * 16 * 4
  assert plan.logits == 2 * 16 * (c.vocab_size // 2) * 4  # chunk 0: all T positions
  assert plan.kv_cache == 2 * c.num_layers * (c.num_kv_heads // 2) * c.head_dim * 32 * 2 * 4
  assert plan.gradients == plan.parameters  # float32 params, no micro-batching
  micro = plan_memory("main", "tiny", CONFIG, MeshConfig(data=2, fsdp=2, tensor=2), TX,
                      Workload(train_rows=8, micro_batch_size=4, seq_len=16, decode_batch=8,
                               context=32))
  assert micro.gradients == 2 * plan.parameters
  assert micro.activations == plan.activations // 2  # 4 rows per pass: 1 per device
  assert plan.train_peak == (plan.parameters + plan.optimizer + plan.gradients
                             + plan.activations + plan.attention + plan.logits)


@pytest.mark.parametrize("remat, per_token", [("full", 64 * 4),
                                              ("dots", (3 * 64 + 128 + 2 * 64 + 2 * 128) * 4)])
def test_remat_keeps_less_and_a_full_remat_keeps_three_score_tensors(remat, per_token):
  workload = Workload(train_rows=8, seq_len=16, decode_batch=8, context=32, remat=remat,
                      logprob_chunk=4)
  plan = plan_memory("main", "tiny", CONFIG, MeshConfig(), TX, workload)
  assert plan.activations == 8 * 16 * CONFIG.num_layers * per_token
  scores = 8 * CONFIG.num_heads * 16 * 16 * 4
  assert plan.attention == (3 if remat == "full" else 2 * CONFIG.num_layers + 1) * scores
  # One LM-head chunk of 4 positions and its gradient, not [8, 16, V].
  assert plan.logits == 2 * 8 * 4 * CONFIG.vocab_size * 4


@pytest.mark.parametrize("platform, kernel", [("gpu", "cudnn"), ("tpu", "splash"),
                                              ("cpu", "xla")])
def test_flash_kernels_keep_softmax_statistics_not_scores(platform, kernel):
  """bfloat16, head_dim 128, T = 256: cuDNN on a GPU, splash on a TPU, XLA on a CPU."""
  config = get_config("tiny", head_dim=128, dtype=jnp.bfloat16)
  workload = Workload(train_rows=4, seq_len=256, decode_batch=4, context=256)
  plan = plan_memory("main", "tiny", config, MeshConfig(), TX, workload, platform=platform)
  assert plan.attention_kernel == kernel
  layers, heads = config.num_layers, config.num_heads
  if kernel == "xla":
    assert plan.attention == (2 * layers + 1) * 4 * heads * 256 * 256 * 4
  else:
    assert plan.attention == layers * 4 * heads * 256 * 4
  assert f"on {platform}: attention {kernel}, remat none" in format_plan(plan)


def test_smollm2_plan_is_calibrated_on_the_measured_update_peaks():
  """One H200, 16 x 4096 in one-row micro-batches, bfloat16, scanned (docs/SCALING.md):
  measured 6.8 / 3.9 / 2.8 GiB with cuDNN attention and remat none / dots / full, 4.3 GiB
  with XLA attention and remat full."""
  for attention, remat, measured in (("auto", "none", 6.8), ("auto", "dots", 3.9),
                                     ("auto", "full", 2.8), ("xla", "full", 4.3)):
    config = get_config("smollm2_135m", dtype=jnp.bfloat16, scan_layers=True,
                        attention=attention)
    workload = Workload(train_rows=16, micro_batch_size=1, seq_len=4096, decode_batch=16,
                        context=4096, logprob_chunk=64, remat=remat)
    plan = plan_memory("main", "smollm2_135m", config, MeshConfig(), TX, workload,
                       platform="gpu")
    assert plan.train_peak / 2**30 == pytest.approx(measured, abs=0.25), (attention, remat)


def _qwen7b_param_bytes_per_device(fsdp: int, tensor: int) -> int:
  """Qwen2.5-7B float32 params per device when every dimension divides (by hand)."""
  v, d, layers, f, q, kv = 152064, 3584, 28, 18944, 28 * 128, 4 * 128
  matrices = 2 * v * d + layers * (2 * d * q + 2 * d * kv + 3 * d * f)
  biases = layers * (q + 2 * kv)          # split over tensor only
  norms = (2 * layers + 1) * d            # replicated
  return 4 * (matrices // (fsdp * tensor) + biases // tensor + norms)


@pytest.mark.parametrize("mesh_shape", [(1, 16, 4), (4, 4, 4), (1, 64, 1)])
def test_qwen2_5_7b_on_64_chips_without_devices_or_allocation(mesh_shape):
  assert len(jax.devices()) <= 8
  live_before = sum(x.nbytes for x in jax.live_arrays())
  data, fsdp, tensor = mesh_shape
  config = base_config()
  config.main.model.preset = "qwen2_5_7b"
  config.main.model.dtype = "bfloat16"
  config.main.mesh.data, config.main.mesh.fsdp, config.main.mesh.tensor = mesh_shape
  config.main.limits.max_context = 4096
  (plan,) = plan_from_config(config, ("main",))
  assert sum(x.nbytes for x in jax.live_arrays()) - live_before < 2**20

  total = get_config("qwen2_5_7b").num_params * 4
  assert plan.parameters == _qwen7b_param_bytes_per_device(fsdp, tensor)
  assert plan.parameters == pytest.approx(total / (fsdp * tensor), rel=5e-3)  # + norms, biases
  # AdamW: mu and nu like the params, plus two int32 step counters (Adam's, the schedule's).
  assert plan.optimizer - 2 * plan.parameters in range(0, 64)
  # B*K = 16 decode rows split over data*fsdp when it divides them, else replicated.
  rows = 16 // (data * fsdp) if 16 % (data * fsdp) == 0 else 16
  kv_heads = 4 // tensor
  assert plan.kv_cache == 2 * 28 * kv_heads * 128 * 4096 * rows * 2
  groups = {g.name: g for g in plan.groups}
  down = groups["layers.*.mlp.down_proj.kernel"]
  assert down.count == 28 and down.shape == (18944, 3584)
  assert down.shard_shape == (18944 // tensor, 3584 // fsdp)


def test_format_plan_prints_specs_and_the_hbm_verdict():
  plan = plan_memory("main", "tiny", CONFIG, MeshConfig(data=2, fsdp=2, tensor=2), TX,
                     WORKLOAD)
  text = format_plan(plan, hbm_gib=16)
  assert "layers.*.attn.q_proj.kernel" in text and "P('fsdp', 'tensor')" in text
  assert f"{plan.parameters:,}" in text and "fits" in text
  assert "does NOT fit" in format_plan(plan, hbm_gib=1e-6)


def test_config_workloads_follow_b_k_d():
  config = base_config()
  config.mgrpo.queries_per_step, config.mgrpo.rollouts_per_query = 3, 4
  config.mgrpo.aligned_sub_calls = 5
  config.sub.optim.micro_batch_size = 6
  main, sub = plan_from_config(config)
  assert (main.workload.train_rows, main.workload.decode_batch) == (12, 12)
  assert (sub.workload.train_rows, sub.workload.rows_per_pass) == (60, 6)
  assert sub.workload.seq_len == config.sub.limits.max_context
  assert sub.gradients == 2 * sub.parameters


def test_unknown_preset_names_the_key():
  agent = base_config().main
  agent.model.preset = "no_such_model"
  with pytest.raises(ValueError, match=r"main\.model\.preset: 'no_such_model' is neither"):
    agent_model_config(agent, "main")
  assert np.dtype(agent_model_config(base_config().sub, "sub")[1].dtype) == np.float32
