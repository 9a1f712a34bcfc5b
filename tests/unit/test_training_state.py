"""Train state construction: copies of the model's weights, abstract layout, PRNG splitting."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    split_rng,
)


def _create(with_reference: bool = False, model=None):
  mesh = create_mesh(MeshConfig(), jax.devices()[:1])
  model = init_model(get_config("tiny"), seed=0) if model is None else model
  state, layout = create_train_state(model, make_optimizer(OptimizerConfig()), mesh, seed=5,
                                     with_reference=with_reference)
  return model, state, layout


def test_state_owns_copies_of_the_weights():
  model, state, layout = _create(with_reference=True)
  ours = jax.tree.leaves(state.params)
  theirs = jax.tree.leaves(nnx.state(model, nnx.Param))
  refs = jax.tree.leaves(state.ref_params)
  for a, b, r in zip(ours, theirs, refs, strict=True):
    # Separate buffers (updates donate the state), equal values.
    assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer()
    assert r.unsafe_buffer_pointer() != a.unsafe_buffer_pointer()
    assert np.array_equal(np.asarray(a), np.asarray(b)) and np.array_equal(r, a)
  assert int(state.step) == 0 and layout.has_reference
  rebuilt = layout.model(state)
  assert np.array_equal(rebuilt.embedding[...], model.embedding[...])


def test_abstract_state_matches_the_state():
  _, state, layout = _create()
  assert jax.tree.structure(layout.abstract) == jax.tree.structure(state)
  for spec, array in zip(jax.tree.leaves(layout.abstract), jax.tree.leaves(state), strict=True):
    assert (spec.shape, spec.dtype) == (array.shape, array.dtype)
  assert state.ref_params is None and not layout.has_reference
  with pytest.raises(ValueError, match="no reference policy"):
    layout.reference_model(state)


def test_split_rng_is_deterministic_and_advances():
  _, state, _ = _create()
  assert np.array_equal(state.rng, jax.random.key_data(jax.random.key(5)))
  state1, key1 = split_rng(state)
  state1b, key1b = split_rng(state)
  state2, key2 = split_rng(state1)
  assert np.array_equal(jax.random.key_data(key1), jax.random.key_data(key1b))
  assert np.array_equal(state1.rng, state1b.rng)
  assert not np.array_equal(jax.random.key_data(key1), jax.random.key_data(key2))
  assert not np.array_equal(state1.rng, state.rng) and not np.array_equal(state2.rng, state1.rng)


def test_models_with_non_parameter_state_are_rejected():
  class WithCounter(nnx.Module):
    def __init__(self):
      self.w = nnx.Param(jax.numpy.ones((2,)))
      self.count = nnx.BatchStat(jax.numpy.zeros(()))

  with pytest.raises(ValueError, match="only nnx.Param"):
    create_train_state(WithCounter(), make_optimizer(OptimizerConfig()),
                       create_mesh(MeshConfig(), jax.devices()[:1]), seed=0)
