"""The train state of one agent: parameters, AdamW state, step and PRNG state on its mesh.

`TrainState` is a pure pytree (a `flax.struct` dataclass), so the jitted update can
donate it and orbax can save it as one tree:
  step        int32 []       optimizer steps taken (the schedule's t).
  params      nnx.State      the policy pi_theta (trainable `nnx.Param`s).
  opt_state   optax state    clipping + AdamW moments, sharded like `params`.
  rng         uint32 [2]     raw PRNG key data (`jax.random.key_data`) of the agent.
  ref_params  nnx.State      frozen copy of the initial params, the reference policy
              or None        pi_ref of the KL term (only when kl_coef > 0).

The static part lives in `StateLayout`: the model's graph definition (to rebuild an NNX
model from `params`), the optax transformation, the mesh and the `NamedSharding` of
every leaf (parameters and their moments by the model's logical rules: FSDP over
`fsdp`, tensor parallel over `tensor`; scalars replicated).

With LoRA (`ModelConfig.lora`) `params` are the adapters alone: the optimizer state,
the reference policy and every checkpoint hold only them. The frozen base
(`models.lora.FROZEN`) is placed on the mesh once and kept in the layout
(`StateLayout.frozen`), outside the state an update donates, so samplers and another
agent may share its arrays; `StateLayout.merge(params)` is the model.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct
from jax.sharding import Mesh

from mgrpo_jax.models.lora import FROZEN
from mgrpo_jax.models.sharding import param_shardings
from mgrpo_jax.training.mesh import replicated


@struct.dataclass
class TrainState:
  """Everything that changes during training (module docstring has the shapes)."""

  step: jax.Array
  params: nnx.State
  opt_state: optax.OptState
  rng: jax.Array
  ref_params: nnx.State | None = None


@dataclasses.dataclass(frozen=True)
class StateLayout:
  """The static side of a `TrainState`: graph, optimizer, mesh, shardings, shapes.

  Attributes:
    graphdef: NNX graph definition of the model (`nnx.merge(graphdef, params)`).
    tx: the optax transformation that produced `opt_state`.
    mesh: the agent's (data, fsdp, tensor) mesh.
    shardings: a `TrainState` whose leaves are the `NamedSharding` of each array.
    abstract: a `TrainState` of `jax.ShapeDtypeStruct`s carrying those shardings (the
      restore target of a checkpoint).
    frozen: with LoRA, the frozen base parameters on the mesh (module docstring); None
      when every parameter trains.
  """

  graphdef: nnx.GraphDef
  tx: optax.GradientTransformation
  mesh: Mesh
  shardings: TrainState
  abstract: TrainState
  frozen: nnx.State | None = None

  @property
  def has_reference(self) -> bool:
    return self.abstract.ref_params is not None

  def merge(self, params: nnx.State) -> nnx.Module:
    """The NNX model of `params` (with LoRA: the adapters on the frozen base); shares
    their buffers."""
    return merge_model(self.graphdef, params, self.frozen)

  def full_params(self, params: nnx.State) -> nnx.State:
    """`params` and the frozen base as one state (`params` itself without LoRA)."""
    return params if self.frozen is None else nnx.merge_state(params, self.frozen)

  def model(self, state: TrainState) -> nnx.Module:
    """The NNX model pi_theta with the state's parameters (shares their buffers)."""
    return self.merge(state.params)

  def reference_model(self, state: TrainState) -> nnx.Module:
    """The frozen reference model pi_ref; raises if the state has none."""
    if state.ref_params is None:
      raise ValueError("this train state has no reference policy (kl_coef == 0)")
    return self.merge(state.ref_params)


def merge_model(graphdef: nnx.GraphDef, params: nnx.State,
                frozen: nnx.State | None) -> nnx.Module:
  """The model of `graphdef` over `params` and, with LoRA, the `frozen` base (inside
  jitted code: both are arguments, never closed over)."""
  return nnx.merge(graphdef, params) if frozen is None else nnx.merge(graphdef, params, frozen)


def _optimizer_shardings(tx: optax.GradientTransformation, params: nnx.State,
                         params_sharding: nnx.State, mesh: Mesh) -> optax.OptState:
  """Shardings of `tx.init(params)`: moments like their parameter, the rest replicated."""
  abstract = jax.eval_shape(tx.init, params)
  return optax.tree_map_params(tx, lambda _, sharding: sharding, abstract, params_sharding,
                               transform_non_params=lambda _: replicated(mesh))


def create_train_state(model: nnx.Module, tx: optax.GradientTransformation, mesh: Mesh, *,
                       seed: int, with_reference: bool = False
                       ) -> tuple[TrainState, StateLayout]:
  """Places `model` on `mesh` and builds its optimizer state.

  Args:
    model: an NNX model whose parameters carry logical axis names and whose `config`
      has `sharding_rules` (e.g. `mgrpo_jax.models.Transformer`); only `nnx.Param`
      state is supported. With `config.lora`, only its adapters train (module
      docstring); the base is placed on the mesh without a copy where it already is.
    tx: the agent's optimizer (`make_optimizer`).
    mesh: the agent's mesh (`create_mesh`).
    seed: seeds the state's PRNG key.
    with_reference: keep a frozen copy of the initial parameters as pi_ref (for a KL
      term, kl_coef > 0).

  Returns:
    (state at step 0, its layout). The model object itself is left as it was.
  """
  lora = getattr(getattr(model, "config", None), "lora", None) is not None
  trainable = nnx.LoRAParam if lora else nnx.Param
  if lora:
    graphdef, params, frozen, rest = nnx.split(model, trainable, FROZEN, ...)
  else:
    (graphdef, params, rest), frozen = nnx.split(model, trainable, ...), None
  if jax.tree.leaves(rest):
    raise ValueError("create_train_state supports models whose state is only nnx.Param; "
                     f"found other state: {jax.tree.map(jnp.shape, rest)}")
  rep = replicated(mesh)
  all_shardings = param_shardings(model, mesh, model.config.sharding_rules)
  params_sharding = nnx.filter_state(all_shardings, trainable)
  if lora:
    frozen = jax.device_put(frozen, nnx.filter_state(all_shardings, FROZEN))
  opt_sharding = _optimizer_shardings(tx, params, params_sharding, mesh)
  shardings = TrainState(step=rep, params=params_sharding, opt_state=opt_sharding, rng=rep,
                         ref_params=params_sharding if with_reference else None)

  # A copy even where the model already sits on the mesh: updates donate the state.
  params = jax.device_put(params, params_sharding, may_alias=False)
  state = TrainState(
      step=jax.device_put(np.zeros((), np.int32), rep), params=params,
      opt_state=jax.device_put(tx.init(params), opt_sharding),
      rng=jax.device_put(np.asarray(jax.random.key_data(jax.random.key(seed))), rep),
      ref_params=jax.tree.map(jnp.copy, params) if with_reference else None)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          state, shardings)
  return state, StateLayout(graphdef=graphdef, tx=tx, mesh=mesh, shardings=shardings,
                            abstract=abstract, frozen=frozen)


def split_rng(state: TrainState) -> tuple[TrainState, jax.Array]:
  """(state with its PRNG key advanced, a fresh typed key for one use)."""
  carry, use = jax.random.split(jax.random.wrap_key_data(state.rng))
  return state.replace(rng=jax.random.key_data(carry)), use
