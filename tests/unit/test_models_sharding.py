"""Logical-axis sharding on the 8-device CPU mesh: specs follow the rules, logits unchanged."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.models.config import DEFAULT_RULES
from mgrpo_jax.models.sharding import (
    batch_sharding,
    logical_to_mesh_spec,
    make_mesh,
    shard_model,
)

forward = nnx.jit(lambda model, ids: model(ids))
IDS = np.random.default_rng(0).integers(0, 256, size=(8, 16)).astype(np.int32)


@pytest.fixture(scope="module")
def reference_logits():
  """Single-device logits of the unrolled and the scanned tiny model (their own inits)."""
  assert len(jax.devices()) == 8
  return {scanned: np.asarray(forward(init_model(get_config("tiny", scan_layers=scanned), 3),
                                      IDS))
          for scanned in (False, True)}


def _spec(array) -> P:
  spec = tuple(array.sharding.spec)
  return P(*(spec + (None,) * (array.ndim - len(spec))))


@pytest.mark.parametrize("shape,scanned", [
    ((1, 1, 8), False), ((2, 2, 2), False), ((8, 1, 1), False), ((1, 8, 1), True),
    ((2, 1, 4), True)])
def test_sharded_logits_equal_single_device(reference_logits, shape, scanned):
  mesh = make_mesh(shape)
  model = init_model(get_config("tiny", scan_layers=scanned), seed=3)
  shard_model(model, mesh)
  ids = jax.device_put(IDS, batch_sharding(mesh, IDS.shape[0]))
  logits = forward(model, ids)
  np.testing.assert_allclose(np.asarray(logits), reference_logits[scanned], atol=1e-4, rtol=0)


def test_parameters_are_sharded_as_the_rules_say():
  mesh = make_mesh((2, 2, 2))
  model = shard_model(init_model(get_config("tiny"), seed=0), mesh)
  attn, mlp = model.layers[0].attn, model.layers[0].mlp
  assert _spec(model.embedding[...]) == P("tensor", "fsdp")            # (vocab, embed)
  assert _spec(attn.q_proj.kernel[...]) == P("fsdp", "tensor")         # (embed, heads)
  assert _spec(attn.k_proj.kernel[...]) == P("fsdp", "tensor")         # (embed, kv)
  assert _spec(attn.o_proj.kernel[...]) == P("tensor", "fsdp")         # (heads, embed)
  assert _spec(mlp.down_proj.kernel[...]) == P("tensor", "fsdp")       # (mlp, embed)
  assert _spec(model.final_norm.scale[...]) == P(None)
  q = attn.q_proj.kernel[...]
  assert q.addressable_shards[0].data.shape == (32, 64)                 # [64, 128] / (2, 2)


def test_scanned_parameters_keep_layers_replicated():
  mesh = make_mesh((1, 2, 4))
  model = shard_model(init_model(get_config("tiny", scan_layers=True), seed=0), mesh)
  assert _spec(model.blocks.mlp.gate_proj.kernel[...]) == P(None, "fsdp", "tensor")


def test_custom_rules_move_parameters():
  mesh = make_mesh((1, 2, 4))
  rules = (("embed", None), ("mlp", "fsdp"), ("vocab", ("fsdp", "tensor")))
  model = shard_model(init_model(get_config("tiny"), seed=0), mesh, rules)
  assert _spec(model.layers[0].mlp.up_proj.kernel[...]) == P(None, "fsdp")
  assert _spec(model.embedding[...]) == P(("fsdp", "tensor"), None)


def test_indivisible_or_reused_axes_stay_replicated():
  mesh = make_mesh((1, 2, 4))
  # SmolLM2: 3 kv heads x 64 = 192 divides by 4, 9 heads x 64 = 576 too; 49152 vocab too.
  assert logical_to_mesh_spec(("embed", "kv"), (576, 192), DEFAULT_RULES, mesh) == P(
      "fsdp", "tensor")
  assert logical_to_mesh_spec(("embed", "kv"), (576, 6), DEFAULT_RULES, mesh) == P("fsdp", None)
  assert logical_to_mesh_spec(("heads", "mlp"), (8, 8), DEFAULT_RULES, mesh) == P("tensor", None)
  assert logical_to_mesh_spec(("embed",), (8,), (("embed", "absent"),), mesh) == P(None)


def test_make_mesh_checks_device_count():
  with pytest.raises(ValueError, match="needs 6 devices"):
    make_mesh((1, 2, 3))
