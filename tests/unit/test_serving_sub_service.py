"""The sub-agent service's handler (called directly, then once over loopback gRPC) and the
shared-policy batch.

The service answers NOT_READY for a version it has not published, serves a published
version with exactly those weights, stores every record (in a real `SubStepCache`)
before replying, answers a stored call from the store and never replaces it, and
refuses what it did not hand out with nothing run or stored; over gRPC a batch arrives
as parts, and a stream over the size limits stores nothing. In shared_policy the one
update sees M's and S's rows: dropping S's rows changes the updated weights.
"""

from __future__ import annotations

import dataclasses
import re

import grpc
import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.agents import (
  AgentLimits,
  InProcessSubAgentClient,
  OraclePolicy,
  RolloutConfig,
  SamplerPolicy,
  SubTaskRequest,
  specs,
)
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.sampling import Sampler
from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.messages import BadRequest
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.remote_client import RemoteSubAgentClient
from mgrpo_jax.serving.rpc import ServerLimits
from mgrpo_jax.serving.sub_service import RequestGate, SubAgentService, WeightVersions
from mgrpo_jax.slices import step_math
from mgrpo_jax.slices.step_cache import SubStepCache
from mgrpo_jax.store.folder import LocalFolder
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.oracle import OracleSubAgent
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.tools import SearchIndex, default_registry
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


def _gate(qs, **changes) -> RequestGate:
  return dataclasses.replace(RequestGate(
      num_steps=4, staleness=1, query_ids=frozenset(q.id for q in qs[:3]),
      rollouts_per_query=2, max_sub_calls=3, max_tasks=4, max_batches=3, max_chars=200),
      **changes)


def _service(env, cache, gate, keep=1):
  registry, _, tokenizer, model = env
  policy = SamplerPolicy(Sampler(model, tokenizer))
  versions = WeightVersions(keep=keep)
  client = InProcessSubAgentClient(OraclePolicy(OracleSubAgent(), tokenizer, version=0),
                                   tokenizer, registry, CONFIG, spec=SUB_SPEC)
  service = SubAgentService(policy, nnx.graphdef(model), client, versions, cache, gate)
  return service, versions, policy, nnx.state(model, nnx.Param)


def _task(q, rollout=0, call=0, subtask=None, context="") -> pb.SubTask:
  return messages.task_to_proto(SubTaskRequest(
      q.id, rollout, call, subtask or f"Find the {q.path[0].relation} of {q.path[0].subject}.",
      context))


def _request(step, version, tasks, batch=0, seed=11) -> pb.RunSubtasksRequest:
  return pb.RunSubtasksRequest(step=step, seed=seed, version=version, batch=batch, tasks=tasks)


def _runs(service) -> int:
  return service._client.stats.rounds


def test_service_gates_versions_and_stores_before_replying(env, tmp_path):
  _, qs, _, _ = env
  cache = SubStepCache(LocalFolder(tmp_path))
  service, versions, policy, params = _service(env, cache, _gate(qs, staleness=3))
  request = _request(3, 0, [_task(qs[0], k) for k in range(2)], batch=2)
  assert service.run_subtasks(request) == pb.RunSubtasksReply(
      status=pb.RunSubtasksReply.NOT_READY, version=-1)
  assert cache.load(3) == []
  versions.publish(0, params)
  reply = service.run_subtasks(request)
  assert reply.status == pb.RunSubtasksReply.OK and reply.version == 0
  stored = cache.load(3)
  assert [a for a, _ in stored] == [(2, 0), (2, 1)]
  assert [r.key for _, r in stored] == [(qs[0].id, k, 0) for k in range(2)]
  results = [messages.result_from_proto(r) for r in reply.results]
  assert [r.record.digest() for r in results] == [r.digest() for _, r in stored]
  assert policy.version == 0
  assert service.status(pb.StatusRequest()) == pb.StatusReply(version=0)


def test_a_stored_call_is_answered_from_the_store_and_never_replaced(env, tmp_path):
  """The same call again (a restarted main slice) gets the stored record without a new
  run; the same key with another sub-task, or at another position, is refused and the
  stored record stays; a batch mixing stored and new calls runs, keeps the stored ones."""
  _, qs, _, _ = env
  cache = SubStepCache(LocalFolder(tmp_path))
  service, versions, _, params = _service(env, cache, _gate(qs))
  versions.publish(0, params)
  first = service.run_subtasks(_request(1, 0, [_task(qs[0])]))
  runs = _runs(service)
  assert service.run_subtasks(_request(1, 0, [_task(qs[0])])) == first
  assert _runs(service) == runs  # nothing ran
  (stored,) = cache.load(1)
  for request, problem in [
      (_request(1, 0, [_task(qs[0], subtask="Find something else.")]),
       "is stored with another sub-task or context"),
      (_request(1, 0, [_task(qs[0])], batch=1), "is stored as (batch, position) (0, 0)"),
  ]:
    with pytest.raises(BadRequest, match=re.escape(problem)):
      service.run_subtasks(request)
  assert [r.digest() for _, r in cache.load(1)] == [stored[1].digest()]
  mixed = service.run_subtasks(_request(1, 0, [_task(qs[0]), _task(qs[1])]))
  assert mixed.results[0] == first.results[0]
  assert [r.key for _, r in cache.load(1)] == [(qs[0].id, 0, 0), (qs[1].id, 0, 0)]
  assert _runs(service) > runs


def test_requests_the_service_did_not_hand_out_are_refused_untouched(env, tmp_path):
  """A step outside the run, a version the step does not use, a batch or seed out of
  range, too many tasks, an unknown query, a rollout or call index out of range, a call
  twice in a batch, an empty or overlong sub-task: refused with the reason (the RPC
  server replies it as INVALID_ARGUMENT), and nothing is run or stored. A step S was
  already trained on is served but not stored."""
  _, qs, _, _ = env
  cache = SubStepCache(LocalFolder(tmp_path))
  service, versions, _, params = _service(env, cache, _gate(qs), keep=2)
  versions.publish(0, params)
  versions.publish(1, params)  # S trained step 0: steps 1 (version 0) and 2 (version 1) serve
  q = qs[0]
  for bad, reason in [
      (_request(4, 3, [_task(q)]), "step 4 is not a step of this run (0..3)"),
      (_request(-1, 0, [_task(q)]), "step -1 is not a step of this run"),
      (_request(2, 0, [_task(q)]), "step 2 is served by S version 1 (staleness 1), not 0"),
      (_request(1, 0, [_task(q)], batch=3), "batch 3 is outside [0, 3)"),
      (_request(1, 0, [_task(q)], batch=-1), "batch -1 is outside"),
      (_request(1, 0, [_task(q)], seed=2**32), "seed 4294967296 is outside [0, 2**32)"),
      (_request(1, 0, [_task(q)], seed=-5), "seed -5 is outside"),
      (_request(1, 0, []), "0 tasks: a batch holds 1 to 4"),
      (_request(1, 0, [_task(q, k % 2, k // 2) for k in range(5)]), "5 tasks"),
      (_request(1, 0, [pb.SubTask(query_id="not-a-question", subtask="x")]),
       "query 'not-a-question' is not a question"),
      (_request(1, 0, [_task(qs[5])]), f"query {qs[5].id!r} is not a question"),
      (_request(1, 0, [_task(q, rollout=2)]), "rollout 2 is outside [0, 2)"),
      (_request(1, 0, [_task(q, rollout=-1)]), "rollout -1 is outside"),
      (_request(1, 0, [_task(q, call=3)]), "call 3 is outside [0, 3)"),
      (_request(1, 0, [_task(q), _task(q)]), "appears twice in the batch"),
      (_request(1, 0, [_task(q, subtask="x" * 201)]), "each be at most 200 characters"),
      (_request(1, 0, [_task(q, context="x" * 201)]), "each be at most 200 characters"),
  ]:
    with pytest.raises(BadRequest, match="^refused: .*" + re.escape(reason)):
      service.run_subtasks(bad)
  assert _runs(service) == 0 and cache.load(1) == [] and cache.load(2) == []
  assert service.run_subtasks(_request(3, 2, [_task(q)])).status == pb.RunSubtasksReply.NOT_READY
  assert service.run_subtasks(_request(0, 0, [_task(q)])).status == pb.RunSubtasksReply.OK
  assert cache.load(0) == []  # trained: not stored
  assert service.run_subtasks(_request(2, 1, [_task(q)])).status == pb.RunSubtasksReply.OK
  assert [(a, r.key) for a, r in cache.load(2)] == [((0, 0), (q.id, 0, 0))]


def test_a_blank_sub_task_that_m_may_write_is_served(env, tmp_path):
  """M's protocol accepts a delegation of blank text; the gate must serve what an honest
  main slice sends (a refusal stopped a training run), and S's reply is its credit."""
  _, qs, _, _ = env
  action = specs.parse_action(specs.MAIN, '<thinking>x</thinking><tool_call>{"name": '
                              '"delegate", "arguments": {"subtask": "  "}}</tool_call>')
  assert action.name == specs.DELEGATE and action.arguments == {"subtask": "  "}
  cache = SubStepCache(LocalFolder(tmp_path))
  service, versions, _, params = _service(env, cache, _gate(qs))
  versions.publish(0, params)
  reply = service.run_subtasks(_request(0, 0, [_task(qs[0], subtask="  ")]))
  assert reply.status == pb.RunSubtasksReply.OK and _runs(service) > 0
  assert [r.task.subtask for r in reply.results] == ["  "] and reply.results[0].report


def _wire(request: pb.RunSubtasksRequest, max_part_bytes: int = 64 << 10) -> list[bytes]:
  return [part.SerializeToString() for part in request_parts.parts(request, max_part_bytes)]


def test_the_gate_assembles_at_most_max_tasks_before_building_anything(env):
  _, qs, _, _ = env
  gate = _gate(qs)
  request = _request(1, 0, [_task(qs[0], k % 2, k // 2) for k in range(4)])
  assert gate.assemble(_wire(request)) == request
  empty_task = pb.RunSubtasksPart(tasks=[pb.SubTask()]).SerializeToString()
  announce = pb.RunSubtasksPart(header=pb.RunSubtasksHeader(num_tasks=1_000_000))
  with pytest.raises(BadRequest, match="the header announces 1000000 tasks: a request holds "
                                       "0 to 4"):
    gate.assemble([announce.SerializeToString()])
  with pytest.raises(BadRequest, match="RunSubtasksPart.tasks: more than 4 entries"):
    gate.assemble(_wire(_request(1, 0, [pb.SubTask()] * 1_000_000)))  # 32,000 in a part
  with pytest.raises(BadRequest, match="part 1: more tasks than the 4"):
    gate.assemble(_wire(request) + [empty_task] * 1_000_000)
  long_task = _request(1, 0, [_task(qs[0], subtask="x" * 801)])  # max_chars 200: 800 bytes
  with pytest.raises(BadRequest, match="SubTask.subtask: 801 bytes, more than 800"):
    gate.assemble(_wire(long_task))
  with pytest.raises(BadRequest, match="SubTask.query_id: .* bytes, more than"):
    gate.assemble(_wire(_request(1, 0, [pb.SubTask(query_id="q" * 999, subtask="x")])))


def test_a_part_limit_too_small_for_a_delegation_is_refused_at_start(env, tmp_path):
  _, qs, _, _ = env
  gate = _gate(qs)
  longest = max(len(q.id.encode()) for q in qs[:3])
  widest = pb.RunSubtasksPart(tasks=[pb.SubTask(
      query_id="q" * longest, rollout_index=1, call_index=2, subtask="\U0001f600" * 200,
      context="\U0001f600" * 200)])
  assert gate.largest_part_bytes == widest.ByteSize() > 1600
  service, *_ = _service(env, SubStepCache(LocalFolder(tmp_path)), gate)
  with pytest.raises(ValueError, match=rf"serving\.max_part_kib: a part of 1024 bytes "
                                       rf"cannot hold a delegation of up to "
                                       rf"{gate.largest_part_bytes} bytes"):
    service.server(host="127.0.0.1", port=0, token=None,
                   limits=ServerLimits(max_part_bytes=1024))
  service.server(host="127.0.0.1", port=0, token=None,
                 limits=ServerLimits(max_part_bytes=gate.largest_part_bytes)).stop()


def test_over_grpc_a_batch_travels_as_parts_and_oversized_streams_store_nothing(env, tmp_path):
  """The main slice's client streams a batch (served, stored); a stream whose parts pass
  `max_request_bytes`, and one with a part over `max_part_bytes`, are RESOURCE_EXHAUSTED
  with nothing run or stored."""
  _, qs, _, _ = env
  cache = SubStepCache(LocalFolder(tmp_path))
  gate = _gate(qs, max_tasks=400)
  service, versions, _, params = _service(env, cache, gate)
  versions.publish(0, params)
  limits = ServerLimits(max_request_bytes=64 << 10, max_part_bytes=gate.largest_part_bytes)
  server = service.server(host="127.0.0.1", port=0, token=None, limits=limits).start()
  client = RemoteSubAgentClient(lambda: server.address, describe="test")
  try:
    client.begin_step(1, 0)
    (result,) = client.run([messages.task_from_proto(_task(qs[0]))], seed=3)
    assert [r.key for _, r in cache.load(1)] == [result.record.key]
    runs = _runs(service)
    with grpc.insecure_channel(f"127.0.0.1:{server.address[1]}") as channel:
      call = channel.stream_unary(f"/{messages.SERVICE}/RunSubtasks", request_serializer=None)
      widest = pb.SubTask(query_id=qs[1].id, subtask="x" * 200, context="x" * 200)
      over = _request(1, 0, [widest] * 400)  # 170 KB in parts of up to 1.6 KB
      too_wide = _request(1, 0, [pb.SubTask(query_id=qs[1].id, subtask="x" * 4000)])
      for request, problem in ((over, f"more than {64 << 10} bytes"),
                               (too_wide, "larger than max")):
        with pytest.raises(grpc.RpcError) as error:
          call(iter(_wire(request, limits.max_part_bytes)), timeout=30)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert problem in error.value.details()
    assert _runs(service) == runs
    assert [r.key for _, r in cache.load(1)] == [result.record.key]
  finally:
    client.close()
    server.stop()


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
