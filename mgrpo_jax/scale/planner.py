"""Dry-run memory planner: per-device bytes of an agent's train state on any mesh shape.

Nothing is allocated and no device of that mesh is needed: the model and its AdamW
state are built with `nnx.eval_shape` / `jax.eval_shape` on a
`jax.sharding.AbstractMesh` (data, fsdp, tensor), the same logical rules as a real run
(`mgrpo_jax.models.sharding`) give every array its `PartitionSpec`, and the bytes of a
device are the sums of the shard shapes (`NamedSharding.shard_shape`). Shard shapes are
equal on every device because a dimension is only split when its size divides.

Per device, for an agent with L layers, hidden D, N query heads, K kv heads, head dim
H, vocabulary V, activation dtype of b bytes, a = the activation rule's split of a
dimension (rows over data*fsdp, heads and vocabulary over tensor when they divide):
  parameters    sum of the parameters' shard bytes (float32 storage; with LoRA the
                frozen base in `lora.base_dtype` plus the float32 adapters).
  optimizer     AdamW mu and nu (sharded like their parameter) + the replicated
                counters, train step and PRNG key (with LoRA: of the adapters only).
  gradients     one float32 copy of the trained parameters' shards (two with
                micro-batching: the accumulator and the micro-batch's gradient).
  activations   saved for the backward pass, per token per layer, by `<agent>.model.remat`
                (b = activation bytes; F = SwiGLU width):
                  full  D x b (each block's input; the block is recomputed);
                  dots  (3D + N*H + 2K*H + 2F) x b (also its matmul outputs);
                  none  dots + (4D + 2F + N*H) x 4 (also the float32 norms, RoPE and
                        softmax intermediates);
                times rows/a x T x L.
  attention     the kernel a full-sequence pass runs on the planned platform
                (`layers.attention_implementation`, `--dry_run_platform`):
                  xla          float32 scores and softmax probabilities [rows/a, N/a, T, T]:
                               every layer's (2L, plus one layer's gradient) unless
                               remat = full, which keeps three at a time;
                  cudnn/splash the flash kernels keep no T x T tensor, only the softmax
                               statistics, L x [rows/a, N/a, T] float32.
  logits        float32 [rows/a, c, V/a] of one LM-head chunk and its gradient, c =
                `<agent>.model.logprob_chunk` (capped at T); with chunk 0, one copy of the
                whole [rows/a, T, V/a].
  kv cache      2 x L x K/a x H x context x decode_batch/a x b (rollouts; the
                cache's rule: batch over data*fsdp, kv heads over tensor).
  train peak    parameters + optimizer + gradients + activations + attention + logits.
  rollout peak  parameters + optimizer + kv cache (the state stays resident).
The state lines are exact; the activation lines are estimates (XLA's buffer assignment
decides the real peak), calibrated on one H200 against SmolLM2-135M's measured update
peaks (docs/SCALING.md section 3).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from mgrpo_jax.models.config import PRESETS, LoraConfig, ModelConfig, get_config
from mgrpo_jax.models.kv_cache import init_cache
from mgrpo_jax.models.layers import attention_implementation
from mgrpo_jax.models.lora import FROZEN
from mgrpo_jax.models.sharding import (
    HIDDEN_AXES,
    LOGITS_AXES,
    MESH_AXES,
    MLP_AXES,
    activation_sharding,
    kv_cache_shardings,
    param_shardings,
)
from mgrpo_jax.models.transformer import Transformer
from mgrpo_jax.training.mesh import MeshConfig
from mgrpo_jax.training.optimizer import OptimizerConfig, make_optimizer
from mgrpo_jax.training.train_state import TrainState

ROLES = {"main": "main agent M", "sub": "sub-agent S"}
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
_GIB = 2**30


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
  """The batch shapes one agent trains and decodes with.

  Attributes:
    train_rows: N, sequences per update (M: B*K rollouts; S: B*K*D sub-trajectories).
    micro_batch_size: rows per micro-batch (0: all N at once).
    seq_len: T, tokens per training sequence.
    decode_batch: sequences decoded at once during rollouts.
    context: KV-cache slots per decoded sequence.
    logprob_chunk: positions per LM-head chunk of the log-probs (0: all T at once).
    remat: what each block keeps for the backward pass ("none", "dots", "full").
  """

  train_rows: int
  micro_batch_size: int = 0
  seq_len: int
  decode_batch: int
  context: int
  logprob_chunk: int = 0
  remat: str = "none"

  @property
  def rows_per_pass(self) -> int:
    """Rows of one forward/backward pass (a micro-batch, or the whole batch)."""
    return self.micro_batch_size or self.train_rows


@dataclasses.dataclass(frozen=True)
class ParameterGroup:
  """Parameters that share a name up to the layer index (`layers.*.mlp.up_proj.kernel`).

  Attributes:
    name: the parameter path with unrolled layer indices replaced by `*`.
    count: parameters in the group (L for per-layer arrays, else 1).
    shape: global shape of one of them.
    spec: its PartitionSpec on the mesh.
    shard_shape: the shape of its shard on one device.
    bytes_per_device: bytes of all `count` shards on one device.
  """

  name: str
  count: int
  shape: tuple[int, ...]
  spec: PartitionSpec
  shard_shape: tuple[int, ...]
  bytes_per_device: int


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
  """Per-device memory of one agent on one mesh (module docstring: the formulas)."""

  role: str
  model_name: str
  model: ModelConfig
  mesh: MeshConfig
  workload: Workload
  platform: str
  attention_kernel: str
  groups: tuple[ParameterGroup, ...]
  parameters: int
  optimizer: int
  gradients: int
  activations: int
  attention: int
  logits: int
  kv_cache: int

  @property
  def train_peak(self) -> int:
    return (self.parameters + self.optimizer + self.gradients + self.activations
            + self.attention + self.logits)

  @property
  def rollout_peak(self) -> int:
    return self.parameters + self.optimizer + self.kv_cache


def abstract_mesh(config: MeshConfig) -> AbstractMesh:
  """A (data, fsdp, tensor) mesh of `config`'s shape without devices."""
  return AbstractMesh(config.shape, MESH_AXES)


def shard_bytes(leaf: jax.ShapeDtypeStruct) -> int:
  """Bytes one device holds of an array (shape, dtype and a `NamedSharding`)."""
  shard = leaf.sharding.shard_shape(leaf.shape)
  return int(np.prod(shard, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize


def tree_bytes_per_device(tree: Any) -> int:
  """Sum of `shard_bytes` over a pytree of sharded `ShapeDtypeStruct`s."""
  return sum(shard_bytes(leaf) for leaf in jax.tree.leaves(tree))


def abstract_train_state(model_config: ModelConfig, tx: optax.GradientTransformation,
                         mesh: AbstractMesh | jax.sharding.Mesh) -> TrainState:
  """The `TrainState` a run would create, as sharded `ShapeDtypeStruct`s (no memory).

  Shardings follow `create_train_state`: parameters by the model's logical rules, the
  optimizer moments like their parameter, every other leaf replicated. With LoRA the
  parameters are the adapters (`abstract_frozen_params` has the base).
  """
  model = nnx.eval_shape(lambda: Transformer(model_config, rngs=nnx.Rngs(0)))
  trainable = nnx.LoRAParam if model_config.lora is not None else nnx.Param
  params = nnx.state(model, trainable)
  params_sharding = nnx.filter_state(param_shardings(model, mesh, model_config.sharding_rules),
                                     trainable)
  replicated = NamedSharding(mesh, PartitionSpec())
  opt_abstract = jax.eval_shape(tx.init, params)
  opt_sharding = optax.tree_map_params(tx, lambda _, sharding: sharding, opt_abstract,
                                       params_sharding,
                                       transform_non_params=lambda _: replicated)
  return TrainState(
      step=jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated),
      params=jax.tree.map(_attach, params, params_sharding),
      opt_state=jax.tree.map(_attach, opt_abstract, opt_sharding),
      rng=jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated))


def abstract_frozen_params(model_config: ModelConfig,
                           mesh: AbstractMesh | jax.sharding.Mesh) -> Any:
  """With LoRA, the frozen base as sharded `ShapeDtypeStruct`s; an empty tree without."""
  if model_config.lora is None:
    return {}
  model = nnx.eval_shape(lambda: Transformer(model_config, rngs=nnx.Rngs(0)))
  shardings = nnx.filter_state(param_shardings(model, mesh, model_config.sharding_rules),
                               FROZEN)
  return jax.tree.map(_attach, nnx.state(model, FROZEN), shardings)


def _attach(leaf, sharding):
  return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)


def _group_name(path: tuple[Any, ...]) -> str:
  parts = []
  for key in path:
    name = getattr(key, "key", getattr(key, "name", getattr(key, "idx", key)))
    if name == "value":  # the nnx.Variable wrapper
      continue
    parts.append(str(name))
  return re.sub(r"(^|\.)layers\.\d+\.", r"\1layers.*.", ".".join(parts))


def parameter_groups(params: Any) -> tuple[ParameterGroup, ...]:
  """The sharded parameters of `abstract_train_state(...).params`, grouped by name."""
  groups: dict[str, ParameterGroup] = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    name = _group_name(path)
    known = groups.get(name)
    if known is None:
      groups[name] = ParameterGroup(name, 1, tuple(leaf.shape), leaf.sharding.spec,
                                    tuple(leaf.sharding.shard_shape(leaf.shape)),
                                    shard_bytes(leaf))
    else:
      groups[name] = dataclasses.replace(
          known, count=known.count + 1,
          bytes_per_device=known.bytes_per_device + shard_bytes(leaf))
  return tuple(groups.values())


def _activation_bytes(axes: tuple[str, ...], shape: tuple[int, ...], mesh: AbstractMesh,
                      dtype: Any) -> int:
  sharding = activation_sharding(axes, shape, mesh)
  return shard_bytes(jax.ShapeDtypeStruct(shape, dtype, sharding=sharding))


def saved_activation_bytes(config: ModelConfig, remat: str, rows: int, length: int,
                           mesh: AbstractMesh) -> int:
  """Bytes one layer keeps per device for the backward pass (module docstring), each
  tensor split as its activation rule says ([rows, T, D] over the rows; the head- and
  F-wide ones also over `tensor`)."""
  c = config

  def width(axes: tuple[str | None, ...], shape: tuple[int, ...], dtype: Any) -> int:
    return _activation_bytes((*HIDDEN_AXES[:2], *axes), (rows, length, *shape), mesh, dtype)

  def layer(dtype: Any) -> tuple[int, int, int, int]:  # [T, D], [T, N*H], [T, K*H], [T, F]
    return (width(HIDDEN_AXES[2:], (c.hidden_size,), dtype),
            width(("act_heads", None), (c.num_heads, c.head_dim), dtype),
            width(("act_kv", None), (c.num_kv_heads, c.head_dim), dtype),
            width(MLP_AXES[2:], (c.intermediate_size,), dtype))

  d, q, kv, f = layer(c.dtype)
  dots = 3 * d + q + 2 * kv + 2 * f
  d32, q32, _, f32 = layer(jnp.float32)
  saved = {"full": d, "dots": dots, "none": dots + 4 * d32 + 2 * f32 + q32}
  if remat not in saved:
    raise ValueError(f"model.remat must be one of {tuple(saved)}, got {remat!r}")
  return saved[remat]


def plan_memory(role: str, model_name: str, model_config: ModelConfig, mesh_config: MeshConfig,
                tx: optax.GradientTransformation, workload: Workload, *,
                platform: str = "tpu") -> MemoryPlan:
  """The per-device memory of one agent (module docstring: what each line counts).

  `platform` ("tpu", "gpu" or "cpu") decides which attention kernel `model.attention`
  takes there, as a run on that platform would with its mesh set.
  """
  mesh = abstract_mesh(mesh_config)
  state = abstract_train_state(model_config, tx, mesh)
  frozen = abstract_frozen_params(model_config, mesh)
  c, w = model_config, workload
  parameters = tree_bytes_per_device(state.params) + tree_bytes_per_device(frozen)
  grad_copies = 2 if w.micro_batch_size and w.micro_batch_size < w.train_rows else 1
  gradients = grad_copies * sum(
      shard_bytes(jax.ShapeDtypeStruct(p.shape, jnp.float32, sharding=p.sharding))
      for p in jax.tree.leaves(state.params))
  rows, t = w.rows_per_pass, w.seq_len
  kernel = attention_implementation(c.attention, c.dtype, c.head_dim, t, t, backend=platform)
  if kernel == "xla":
    scores = _activation_bytes(("batch", "act_heads", "length", "length"),
                               (rows, c.num_heads, t, t), mesh, jnp.float32)
    attention = scores * (3 if w.remat == "full" else 2 * c.num_layers + 1)
  else:
    attention = c.num_layers * _activation_bytes(("batch", "act_heads", "length"),
                                                 (rows, c.num_heads, t), mesh, jnp.float32)
  if w.logprob_chunk:
    logits = 2 * _activation_bytes(LOGITS_AXES, (rows, min(w.logprob_chunk, t), c.vocab_size),
                                   mesh, jnp.float32)
  else:
    logits = _activation_bytes(LOGITS_AXES, (rows, t, c.vocab_size), mesh, jnp.float32)
  cache = jax.eval_shape(lambda: init_cache(c, w.decode_batch, w.context))
  cache_sharding = kv_cache_shardings(cache, mesh)
  kv_cache = sum(shard_bytes(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s))
                 for x, s in ((cache.k, cache_sharding.k), (cache.v, cache_sharding.v)))
  return MemoryPlan(
      role=role, model_name=model_name, model=c, mesh=mesh_config, workload=w,
      platform=platform, attention_kernel=kernel,
      groups=parameter_groups(frozen) + parameter_groups(state.params), parameters=parameters,
      optimizer=tree_bytes_per_device(state.opt_state) + shard_bytes(state.step)
      + shard_bytes(state.rng),
      gradients=gradients,
      activations=c.num_layers * saved_activation_bytes(c, w.remat, rows, t, mesh),
      attention=attention, logits=logits, kv_cache=kv_cache)


def agent_model_config(agent: Any, role: str) -> tuple[str, ModelConfig]:
  """(name, ModelConfig) of an agent section: a preset, a HF folder or a GGUF file."""
  preset = str(agent["model"]["preset"])
  overrides = dict(dtype=_DTYPES[str(agent["model"]["dtype"])],
                   scan_layers=bool(agent["model"]["scan_layers"]),
                   attention=str(agent["model"]["attention"]),
                   lora=LoraConfig.from_config(agent["lora"]))
  if overrides["lora"] is not None:
    overrides["param_dtype"] = _DTYPES[str(agent["lora"]["base_dtype"])]
  if preset in PRESETS:
    return preset, get_config(preset, smeared_keys=bool(agent["model"]["smeared_keys"]),
                              **overrides)
  path = pathlib.Path(preset)
  if path.is_dir():
    from mgrpo_jax.models.weights.safetensors import read_hf_config
    return path.name, read_hf_config(path, **overrides)
  if path.is_file():
    from mgrpo_jax.models.weights.gguf import gguf_config, open_gguf
    return path.name, gguf_config(open_gguf(path), str(path), **overrides)
  raise ValueError(f"{role}.model.preset: {preset!r} is neither a preset "
                   f"({', '.join(sorted(PRESETS))}) nor an existing folder or GGUF file")


def agent_workload(config: Any, role: str) -> Workload:
  """The batch shapes of `role` ("main" or "sub") from a run config (paper B, K, D)."""
  mgrpo, agent = config["mgrpo"], config[role]
  rollouts = int(mgrpo["queries_per_step"]) * int(mgrpo["rollouts_per_query"])
  rows = rollouts if role == "main" else rollouts * int(mgrpo["aligned_sub_calls"])
  context = int(agent["limits"]["max_context"])
  return Workload(train_rows=rows, micro_batch_size=int(agent["optim"]["micro_batch_size"]),
                  seq_len=context, decode_batch=rollouts, context=context,
                  logprob_chunk=int(agent["model"]["logprob_chunk"]),
                  remat=str(agent["model"]["remat"]))


def plan_from_config(config: Any, roles: tuple[str, ...] = ("main", "sub"), *,
                     platform: str = "tpu") -> list[MemoryPlan]:
  """One `MemoryPlan` per agent of a run config, on the meshes its `<role>.mesh` names,
  for a run on `platform`."""
  plans = []
  for role in roles:
    if role not in ROLES:
      raise ValueError(f"unknown agent role {role!r}; known: {sorted(ROLES)}")
    agent = config[role]
    name, model_config = agent_model_config(agent, role)
    optim = OptimizerConfig.from_config(agent["optim"],
                                        total_steps=int(config["experiment"]["num_steps"]))
    plans.append(plan_memory(role, name, model_config, MeshConfig.from_config(agent["mesh"]),
                             make_optimizer(optim), agent_workload(config, role),
                             platform=platform))
  return plans


def _spec_text(spec: PartitionSpec) -> str:
  return "P(" + ", ".join(repr(axis) for axis in spec) + ")"


def _lora_text(lora: LoraConfig | None) -> str:
  if lora is None:
    return ""
  return (f", LoRA rank {lora.rank} on {','.join(lora.targets)} (only the float32 adapters "
          "train; the base is frozen)")


def format_plan(plan: MemoryPlan, hbm_gib: float = 0.0) -> str:
  """The plan as text tables: parameter groups, then the memory lines per device."""
  m, w = plan.mesh, plan.workload
  lines = [
      f"{ROLES[plan.role]} ({plan.role}): {plan.model_name}, "
      f"{plan.model.num_params:,} parameters ({np.dtype(plan.model.param_dtype).name}), "
      f"activations {np.dtype(plan.model.dtype).name}" + _lora_text(plan.model.lora),
      f"mesh data={m.data} fsdp={m.fsdp} tensor={m.tensor} ({m.size} devices); "
      f"train {w.train_rows} rows x {w.seq_len} tokens (micro-batch {w.rows_per_pass}), "
      f"decode {w.decode_batch} x {w.context} slots",
      f"on {plan.platform}: attention {plan.attention_kernel}, remat {w.remat}, "
      f"log-prob chunk {w.logprob_chunk or 'none'}",
      "",
      f"{'parameter group':<34} {'count':>5}  {'global shape':<18} {'PartitionSpec':<24} "
      f"{'shard shape':<16} {'bytes/device':>15}",
  ]
  for g in plan.groups:
    lines.append(f"{g.name:<34} {g.count:>5}  {str(g.shape):<18} {_spec_text(g.spec):<24} "
                 f"{str(g.shard_shape):<16} {g.bytes_per_device:>15,}")
  rows = [("parameters", plan.parameters), ("optimizer state", plan.optimizer),
          ("gradients", plan.gradients), ("activations (saved)", plan.activations),
          ("attention", plan.attention), ("logits", plan.logits),
          ("kv cache", plan.kv_cache), ("train peak", plan.train_peak),
          ("rollout peak", plan.rollout_peak)]
  lines += ["", f"{'memory per device':<34} {'bytes':>17} {'GiB':>10}"]
  lines += [f"{name:<34} {value:>17,} {value / _GIB:>10.3f}" for name, value in rows]
  if hbm_gib > 0:
    worst = max(plan.train_peak, plan.rollout_peak)
    verdict = "fits" if worst <= hbm_gib * _GIB else "does NOT fit"
    lines.append(f"{'peak vs ' + format(hbm_gib, 'g') + ' GiB HBM':<34} "
                 f"{worst / (hbm_gib * _GIB):>16.1%}  {verdict}")
  return "\n".join(lines)

