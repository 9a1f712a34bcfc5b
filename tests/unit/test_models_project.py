"""`layers.project`: x @ kernel whose weight gradient is computed transposed. Its values
must be autodiff's to the bit, so that no result of the project moves."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.models.layers import project


def _loss(matmul, x, kernel):
  return jnp.sum(jnp.tanh(matmul(x, kernel)) ** 2)


@pytest.mark.parametrize("x_shape", [(48, 24), (3, 16, 24), (2, 2, 8, 24)])
def test_value_and_gradients_are_autodiffs_to_the_bit(x_shape):
  rng = np.random.default_rng(len(x_shape))
  x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
  kernel = jnp.asarray(0.2 * rng.standard_normal((24, 40)), jnp.float32)
  ours = jax.jit(jax.value_and_grad(lambda x, k: _loss(project, x, k), argnums=(0, 1)))
  autodiff = jax.jit(jax.value_and_grad(lambda x, k: _loss(jnp.dot, x, k), argnums=(0, 1)))
  (value, (dx, dkernel)), (ref_value, (ref_dx, ref_dkernel)) = ours(x, kernel), autodiff(x, kernel)
  assert dx.shape == x.shape and dkernel.shape == kernel.shape
  np.testing.assert_array_equal(value, ref_value)
  np.testing.assert_array_equal(dx, ref_dx)
  np.testing.assert_array_equal(dkernel, ref_dkernel)


def test_gradients_match_the_definition():
  """dL/dkernel = x^T g and dL/dx = g kernel^T for L = sum(g_fixed * (x @ kernel))."""
  rng = np.random.default_rng(7)
  x = rng.standard_normal((5, 6, 3)).astype(np.float32)
  kernel = rng.standard_normal((3, 4)).astype(np.float32)
  g = rng.standard_normal((5, 6, 4)).astype(np.float32)
  dx, dkernel = jax.grad(lambda x, k: jnp.sum(g * project(x, k)), argnums=(0, 1))(x, kernel)
  np.testing.assert_allclose(dkernel, np.einsum("bti,bto->io", x, g), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dx, np.einsum("bto,io->bti", g, kernel), rtol=1e-5, atol=1e-5)
