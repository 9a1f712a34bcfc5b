"""Per-array sharding on 8 CPU devices: parameters, optimizer state, activations, KV cache.

Every array of a train state is checked against a spec derived here, independently of
`mgrpo_jax.models.sharding`, from a table of each parameter's logical axes and the
default rules (embed -> fsdp; heads, kv, mlp, vocab -> tensor; a dimension is split only
when it divides and the axis is still free).
"""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mgrpo_jax.models import get_config, init_cache, init_model
from mgrpo_jax.models.sharding import (
    HIDDEN_AXES,
    LOGITS_AXES,
    MLP_AXES,
    constrain,
    constrain_kv_cache,
    make_mesh,
    shard_kv_cache,
    shard_model,
)
from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
)

SHAPES = [(8, 1, 1), (2, 4, 1), (2, 2, 2)]
# Every parameter kind once: q/k/v biases, an untied LM head, and a vocabulary (250)
# that a tensor axis of 4 does not divide.
CONFIG = get_config("tiny", qkv_bias=True, tie_embeddings=False, vocab_size=250)
LOGICAL = {
    "embedding": ("vocab", "embed"), "lm_head.kernel": ("embed", "vocab"),
    "q_proj.kernel": ("embed", "heads"), "q_proj.bias": ("heads",),
    "k_proj.kernel": ("embed", "kv"), "k_proj.bias": ("kv",),
    "v_proj.kernel": ("embed", "kv"), "v_proj.bias": ("kv",),
    "o_proj.kernel": ("heads", "embed"), "gate_proj.kernel": ("embed", "mlp"),
    "up_proj.kernel": ("embed", "mlp"), "down_proj.kernel": ("mlp", "embed"),
    "scale": ("norm",),
}
AXIS = {"embed": "fsdp", "heads": "tensor", "kv": "tensor", "mlp": "tensor", "vocab": "tensor",
        "norm": None}


def _path_name(path) -> str:
  keys = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
  return ".".join(k for k in keys if k != "value")


def _logical_axes(name: str) -> tuple[str, ...]:
  matches = [axes for suffix, axes in LOGICAL.items() if name.endswith(suffix)]
  assert len(matches) == 1, name
  return matches[0]


def _expected_spec(name: str, shape: tuple[int, ...], mesh_shape: dict[str, int]) -> P:
  used, spec = set(), []
  for logical, dim in zip(_logical_axes(name), shape, strict=True):
    axis = AXIS[logical]
    if axis is None or axis in used or dim % mesh_shape[axis]:
      spec.append(None)
    else:
      used.add(axis)
      spec.append(axis)
  return P(*spec)


def _spec(array) -> P:
  spec = tuple(array.sharding.spec)
  return P(*(spec + (None,) * (array.ndim - len(spec))))


def _equivalent(array, spec: P, mesh) -> bool:
  """Same placement (jit outputs drop mesh axes of size 1 from their specs)."""
  return array.sharding.is_equivalent_to(NamedSharding(mesh, spec), array.ndim)


def _shard_shape(spec: P, shape, mesh_shape) -> tuple[int, ...]:
  out = []
  for axes, dim in zip(spec, shape, strict=True):
    names = () if axes is None else (axes,) if isinstance(axes, str) else axes
    out.append(dim // int(np.prod([mesh_shape[a] for a in names], dtype=int)))
  return tuple(out)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_parameter_and_moment_is_sharded_as_the_rules_say(shape):
  mesh = create_mesh(MeshConfig(data=shape[0], fsdp=shape[1], tensor=shape[2]))
  mesh_shape = dict(mesh.shape)
  state, _ = create_train_state(init_model(CONFIG, seed=0),
                                make_optimizer(OptimizerConfig()), mesh, seed=0)
  expected = {}
  for path, array in jax.tree_util.tree_leaves_with_path(state.params):
    name = _path_name(path)
    spec = _expected_spec(name, array.shape, mesh_shape)
    expected[name] = spec
    assert _spec(array) == spec, name
    assert array.addressable_shards[0].data.shape == _shard_shape(spec, array.shape,
                                                                  mesh_shape), name
  assert len(expected) == 2 + 12 * CONFIG.num_layers + 1  # embedding, lm head, blocks, norm
  assert expected["embedding"] == P("tensor", "fsdp")                  # 250 % 2 == 0

  # Optimizer state: Adam's mu and nu exactly like their parameter, all else replicated.
  adam = state.opt_state[1][0]
  assert isinstance(adam, optax.ScaleByAdamState)
  moment_ids = set()
  for moments in (adam.mu, adam.nu):
    for path, array in jax.tree_util.tree_leaves_with_path(moments):
      name = _path_name(path)
      assert _spec(array) == expected[name], name
      assert array.addressable_shards[0].data.shape == _shard_shape(
          expected[name], array.shape, mesh_shape), name
      moment_ids.add(id(array))
  others = [a for a in jax.tree.leaves(state.opt_state) if id(a) not in moment_ids]
  assert len(moment_ids) == 2 * len(expected) and others
  for array in others + [state.step, state.rng]:
    assert array.sharding.is_fully_replicated


def test_indivisible_vocabulary_stays_replicated_on_tensor_axis_of_4():
  mesh = create_mesh(MeshConfig(data=1, fsdp=2, tensor=4))
  state, _ = create_train_state(init_model(CONFIG, seed=0),
                                make_optimizer(OptimizerConfig()), mesh, seed=0)
  assert _spec(state.params["embedding"][...]) == P(None, "fsdp")        # 250 % 4 != 0
  assert _spec(state.params["lm_head"]["kernel"][...]) == P("fsdp", None)
  assert _spec(state.opt_state[1][0].nu["embedding"][...]) == P(None, "fsdp")
  assert _spec(state.params["layers"][0]["mlp"]["up_proj"]["kernel"][...]) == P("fsdp",
                                                                               "tensor")


B, PROMPT, CAPACITY = 8, 12, 32
TOKENS = np.random.default_rng(0).integers(0, 256, (B, PROMPT)).astype(np.int32)


@pytest.fixture(scope="module")
def single_device_prefill():
  """Logits and cache of a prefill of the tiny model on one device."""
  model = init_model(get_config("tiny"), seed=2)
  prefill = nnx.jit(lambda m, t, c: m.forward_cached(t, c))
  logits, cache = prefill(model, TOKENS, init_cache(model.config, B, CAPACITY))
  return np.asarray(logits), np.asarray(cache.k), np.asarray(cache.v)


def _batch_axes(mesh_shape, rows):
  return ("data", "fsdp") if rows % (mesh_shape["data"] * mesh_shape["fsdp"]) == 0 else None


@pytest.mark.parametrize("shape", SHAPES)
def test_kv_cache_and_activations_are_constrained_as_the_rules_say(single_device_prefill,
                                                                   shape):
  mesh = make_mesh(shape)
  mesh_shape = dict(mesh.shape)
  model = shard_model(init_model(get_config("tiny"), seed=2), mesh)
  cache = shard_kv_cache(init_cache(model.config, B, CAPACITY), mesh)
  # k, v [L, B, S, K, H]: batch over (data, fsdp), the 4 kv heads over tensor.
  kv_spec = P(None, _batch_axes(mesh_shape, B), None, "tensor", None)
  assert _spec(cache.k) == kv_spec and _spec(cache.v) == kv_spec
  assert _spec(cache.start) == P(_batch_axes(mesh_shape, B))

  @nnx.jit
  def prefill(model, tokens, cache):
    logits, new_cache = model.forward_cached(tokens, cache)
    hidden = constrain(model.embedding[...][tokens], HIDDEN_AXES, mesh)       # [B, T, D]
    mlp = constrain(jax.numpy.tile(hidden, (1, 1, 2)), MLP_AXES, mesh)       # [B, T, F]
    return (constrain(logits, LOGITS_AXES, mesh), constrain_kv_cache(new_cache, mesh),
            hidden, mlp)

  logits, new_cache, hidden, mlp = prefill(model, TOKENS, cache)
  want_logits, want_k, want_v = single_device_prefill
  np.testing.assert_allclose(np.asarray(logits), want_logits, atol=1e-4, rtol=0)
  np.testing.assert_allclose(np.asarray(new_cache.k), want_k, atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(new_cache.v), want_v, atol=1e-5, rtol=0)
  batch = _batch_axes(mesh_shape, B)
  assert _equivalent(new_cache.k, kv_spec, mesh) and _equivalent(new_cache.v, kv_spec, mesh)
  assert new_cache.index.sharding.is_fully_replicated
  assert _equivalent(logits, P(batch, None, "tensor"), mesh)           # vocab 256 / tensor
  assert _equivalent(hidden, P(batch, None, None), mesh)
  assert _equivalent(mlp, P(batch, None, "tensor"), mesh)
  np.testing.assert_array_equal(np.asarray(hidden),
                                np.asarray(model.embedding[...])[TOKENS])
  rows = B // (mesh_shape["data"] * mesh_shape["fsdp"])
  assert new_cache.k.addressable_shards[0].data.shape == (
      2, rows, CAPACITY, 4 // mesh_shape["tensor"], 16)
  assert logits.addressable_shards[0].data.shape == (rows, PROMPT, 256 // mesh_shape["tensor"])


def test_indivisible_batch_and_kv_heads_stay_replicated():
  mesh = make_mesh((1, 2, 4))
  config = get_config("tiny", num_heads=6, num_kv_heads=3)       # 3 kv heads, tensor = 4
  cache = shard_kv_cache(init_cache(config, 3, 16), mesh)        # 3 rows, fsdp = 2
  assert _spec(cache.k) == P(None, None, None, None, None)
  cache = shard_kv_cache(init_cache(get_config("tiny"), 6, 16), mesh)
  assert _spec(cache.k) == P(None, ("data", "fsdp"), None, "tensor", None)
