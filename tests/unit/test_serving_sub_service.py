"""The sub-agent service's handler (called directly, no socket) and the shared-policy batch.

The service answers "not_ready" for a version it has not published, serves a published
version with exactly those weights, persists every record before replying, and gives
the same records for the same request. In shared_policy the one update sees M's and
S's rows: dropping S's rows changes the updated weights.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.agents import (
  AgentLimits,
  OraclePolicy,
  RolloutConfig,
  SamplerPolicy,
  SubTaskRequest,
  specs,
)
from mgrpo_jax.agents.tools import SearchIndex, default_registry
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.sampling import Sampler
from mgrpo_jax.serving.sub_service import NOT_READY, RequestGate, SubAgentService, WeightVersions
from mgrpo_jax.slices import step_math
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.oracle import OracleSubAgent
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.training.batching import TokenSequence, pack_sequences
from mgrpo_jax.training.mesh import MeshConfig, create_mesh
from mgrpo_jax.training.optimizer import OptimizerConfig, make_optimizer
from mgrpo_jax.training.train_state import create_train_state
from mgrpo_jax.training.update import UpdateConfig, make_update_fn
from tests.support import trees

SUB_SPEC = dataclasses.replace(specs.SUB, system="Tools: search(query), visit(page).")
CONFIG = RolloutConfig(sub=AgentLimits(max_turns=4, context_tokens=1024, max_new_tokens=96))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  w = world.generate_world("tiny", 5)
  page_list = pages.render_pages(w)
  registry = default_registry(SearchIndex.from_pages(page_list), top_n=2, visit_budget=300)
  qs = questions.synthesize(w, 6, stage=1, seed=3)
  tokenizer = SentencePieceTokenizer.train([p.text for p in page_list] + [q.text for q in qs],
                                           tmp_path_factory.mktemp("spm"), 600)
  model = init_model(get_config("tiny", vocab_size=tokenizer.vocab_size, max_seq_len=256), 0)
  return registry, qs, tokenizer, model


def _service(env, persisted, gate=None, keep=1):
  registry, _, tokenizer, model = env
  policy = SamplerPolicy(Sampler(model, tokenizer))
  versions = WeightVersions(keep=keep)
  service = SubAgentService(
      policy, nnx.graphdef(model), tokenizer, registry, CONFIG, versions,
      lambda step, calls: persisted.extend((step, r, a) for r, a in calls),
      spec=SUB_SPEC, rollout_policy=OraclePolicy(OracleSubAgent(), tokenizer,
                                                 version=0), gate=gate)
  return service, versions, policy, nnx.state(model, nnx.Param)


def test_service_gates_versions_and_persists_before_replying(env):
  _, qs, _, _ = env
  persisted = []
  service, versions, policy, params = _service(env, persisted)
  requests = [SubTaskRequest(qs[0].id, k, 0, f"Find the {qs[0].path[0].relation} of "
                             f"{qs[0].path[0].subject}.").to_dict() for k in range(2)]
  payload = {"step": 3, "seed": 11, "version": 0, "batch": 2, "requests": requests}
  assert service.run_subtasks(payload) == {"status": NOT_READY, "version": -1}
  assert persisted == []
  versions.publish(0, params)
  reply = service.run_subtasks(payload)
  assert reply["status"] == "ok" and reply["version"] == 0
  assert [(s, a) for s, _, a in persisted] == [(3, (2, 0)), (3, (2, 1))]
  assert [r.key for _, r, _ in persisted] == [(qs[0].id, k, 0) for k in range(2)]
  assert [r["record"]["trajectory"]["ids"] for r in reply["results"]] == [
      r.trajectory.ids.tolist() for _, r, _ in persisted]
  assert policy.version == 0
  again = service.run_subtasks(payload)
  assert again["results"][0]["record"]["trajectory"]["ids"] == reply["results"][0][
      "record"]["trajectory"]["ids"]
  assert service.status({}) == {"version": 0}


def test_requests_the_service_did_not_hand_out_are_refused_untouched(env):
  """A step outside the run, a version the step does not use, an unknown query, a
  rollout or call index out of range are refused with the reason (the RPC server
  replies it as an error), and nothing is run or persisted. A step S was already trained
  on is served but not persisted."""
  _, qs, _, _ = env
  persisted = []
  gate = RequestGate(num_steps=4, staleness=1, query_ids=frozenset(q.id for q in qs[:3]),
                     rollouts_per_query=2, max_sub_calls=3)
  service, versions, _, params = _service(env, persisted, gate, keep=2)
  versions.publish(0, params)
  versions.publish(1, params)  # S trained step 0: steps 1 (version 0) and 2 (version 1) serve

  def payload(step, version, query_id=qs[0].id, rollout=0, call=0):
    request = SubTaskRequest(query_id, rollout, call, f"Find the {qs[0].path[0].relation} of "
                             f"{qs[0].path[0].subject}.")
    return {"step": step, "seed": 1, "version": version, "batch": 0,
            "requests": [request.to_dict()]}

  for bad, reason in [
      (payload(4, 3), "step 4 is not a step of this run (0..3)"),
      (payload(-1, 0), "step -1 is not a step of this run"),
      (payload(2, 0), "step 2 is served by S version 1 (staleness 1), not 0"),
      (payload(1, 0, query_id="not-a-question"), "query 'not-a-question' is not a question"),
      (payload(1, 0, query_id=qs[5].id), f"query {qs[5].id!r} is not a question"),
      (payload(1, 0, rollout=2), "rollout 2 is outside [0, 2)"),
      (payload(1, 0, call=3), "call 3 is outside [0, 3)"),
  ]:
    with pytest.raises(ValueError, match="^refused: .*" + re.escape(reason)):
      service.run_subtasks(bad)
  assert persisted == []
  assert service.run_subtasks(payload(3, 2)) == {"status": NOT_READY, "version": 1}
  assert service.run_subtasks(payload(0, 0))["status"] == "ok"  # trained: not persisted
  assert persisted == []
  assert service.run_subtasks(payload(2, 1))["status"] == "ok"
  assert [(s, r.key) for s, r, _ in persisted] == [(2, (qs[0].id, 0, 0))]


def test_shared_policy_update_uses_both_roles_rows(env):
  _, _, tokenizer, model = env
  rng = np.random.default_rng(0)

  def sequences(n):
    out = []
    for _ in range(n):
      ids = rng.integers(0, tokenizer.vocab_size, 20).astype(np.int32)
      mask = np.zeros(20, np.float32)
      mask[5:] = 1
      out.append(TokenSequence(ids, mask, np.where(mask > 0, -3.0, 0.0).astype(np.float32)))
    return out

  main = pack_sequences(sequences(2), [1.0, -1.0], buckets=(32,))
  sub = pack_sequences(sequences(4), [0.5, -0.5, 1.0, -1.0], buckets=(32,))
  both = step_math.concat_batches(main, sub, pad_id=0)
  assert both.ids.shape == (6, 32)
  np.testing.assert_array_equal(both.ids[2:], sub.ids)
  mesh = create_mesh(MeshConfig())
  tx = make_optimizer(OptimizerConfig(learning_rate=1e-2))

  def updated(batch):
    state, layout = create_train_state(model, tx, mesh, seed=0)
    state, metrics = make_update_fn(layout, UpdateConfig(), batch.ids.shape[0])(state, batch)
    return jax.tree.map(np.asarray, state.params), float(metrics["num_tokens"])

  params_both, tokens_both = updated(both)
  padded_main = step_math.concat_batches(
      main, dataclasses.replace(sub, weights=np.zeros(4, np.float32),
                                loss_mask=np.zeros_like(sub.loss_mask)), pad_id=0)
  params_main, tokens_main = updated(padded_main)
  assert tokens_both == main.loss_mask.sum() + sub.loss_mask.sum()
  assert tokens_main == main.loss_mask.sum()
  assert not trees.tree_equal(params_both, params_main)
