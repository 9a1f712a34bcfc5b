"""The sub-agent service: S's turns for the main slice, served on the sub slice over gRPC.

Methods (`proto/sub_agent.proto`, service `SubAgent`):
  RunSubtasks {step, seed, version, batch, tasks} -> {status OK, version, results}
                                                   | {status NOT_READY, version: current}
    The request travels as a stream of small parts (`request_parts`).
    Runs S's lockstep loop (`agents.InProcessSubAgentClient`, one S policy call per S
    round for the whole batch: concurrent delegations of one M round share sampler
    calls) with S's weights of EXACTLY version `version`. A version newer than the
    trainer has published answers NOT_READY (the caller retries); the service keeps
    the newest `keep_versions` versions (staleness + 1), so with a staleness bound s the
    main slice's step t is always served by version max(0, t - s) whatever the sub
    trainer's progress: rollouts never depend on timing. The batch's `SubRecord`s are
    stored in the step's record cache (`RecordCache.put`, with their arrival: batch,
    position) BEFORE the reply, so the sub trainer finds every call that M saw.
  Status {} -> {version}

Every request is checked on arrival, and a refused one (`messages.BadRequest`: the
caller gets INVALID_ARGUMENT with the reason) runs nothing and stores nothing
(`RequestGate`): its parts' bytes against the schema, at most B*K tasks, the header in
the first part, each task's strings within their lengths (`assemble`), then a
step outside the run, a version other than the one the step must use
(max(0, step - staleness)), a batch index or seed out of range, a query id not among
the run's questions, a rollout or call index out of range, a call twice in one batch,
an empty or overlong sub-task. A call already stored is never replaced: the same call
again (a main slice that restarted mid-step, a retry after the sub slice restarted)
is answered with the stored record, not run again, so M reads exactly what S trains on;
the same key with another sub-task, context or arrival is refused. A step S has already
trained on (a main slice that fell back to an older checkpoint redoes it) is served but
not stored: S's trainer will not read that step's records again.

S's tools (search, visit) run here, on the sub slice. Requests are served one at a
time (a lock), since they share one sampler.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from flax import nnx

from mgrpo_jax.agents.policy import SamplerPolicy
from mgrpo_jax.agents.records import SubRecord
from mgrpo_jax.agents.sub_client import (
  InProcessSubAgentClient,
  SubAgentResult,
  SubTaskRequest,
)
from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.messages import TASK_FIELDS, BadRequest
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import Method, RpcServer, ServerLimits
from mgrpo_jax.serving.tls import ServerTls

Arrival = tuple[int, int]  # (delegation batch of the step, position in the batch)
SEED_RANGE = 2**32  # jax.random.key takes a 32-bit seed


class RecordCache(Protocol):
  """Where the service stores S's records of each step (`slices.step_cache.SubStepCache`)."""

  def stored(self, step: int, keys: Collection[tuple[str, int, int]]
             ) -> dict[tuple[str, int, int], tuple[Arrival, SubRecord]]: ...

  def put(self, step: int, calls: list[tuple[SubRecord, Arrival]]) -> None: ...


class WeightVersions:
  """The newest `keep` published versions of S's parameters (thread-safe)."""

  def __init__(self, keep: int = 1):
    if keep < 1:
      raise ValueError(f"keep must be >= 1, got {keep}")
    self._keep = keep
    self._params: dict[int, Any] = {}
    self._lock = threading.Lock()

  @property
  def current(self) -> int:
    """The newest published version (-1 before the first)."""
    with self._lock:
      return max(self._params, default=-1)

  def publish(self, version: int, params: Any) -> None:
    """Makes `params` (not donated later) servable as `version`; drops the oldest."""
    with self._lock:
      if self._params and version <= max(self._params):
        raise ValueError(f"version {version} is not newer than {max(self._params)}")
      self._params[version] = params
      for old in sorted(self._params)[:-self._keep]:
        del self._params[old]

  def get(self, version: int) -> Any | None:
    """The params of `version`; None if not published yet; raises if already dropped."""
    with self._lock:
      if version in self._params:
        return self._params[version]
      newest = max(self._params, default=-1)
    if version > newest:
      return None
    raise LookupError(f"S weights of version {version} are no longer kept (newest: {newest}, "
                      f"keeping {self._keep}): the caller is behind the staleness bound")


@dataclasses.dataclass(frozen=True)
class RequestGate:
  """The delegations the service hands out: S's steps, versions and the run's queries.

  Attributes:
    num_steps: the run's RL steps (`experiment.num_steps`).
    staleness: the staleness bound s: step t is served by version max(0, t - s).
    query_ids: the ids of the run's questions.
    rollouts_per_query: K (rollout indices are in [0, K)).
    max_sub_calls: delegations per rollout at most (call indices are below it).
    max_tasks: delegations per batch at most (B*K: one per rollout of the step).
    max_batches: delegation batches per step at most (M's turns: one per round).
    max_chars: characters of a sub-task or its context at most (M's longest argument).
  """

  num_steps: int
  staleness: int
  query_ids: Collection[str]
  rollouts_per_query: int
  max_sub_calls: int
  max_tasks: int
  max_batches: int
  max_chars: int

  @functools.cached_property
  def _string_bytes(self) -> dict[str, int]:
    """The longest a task's strings may be, in bytes (UTF-8: 4 bytes a character)."""
    return {TASK_FIELDS["query_id"]: max(len(q.encode()) for q in self.query_ids),
            TASK_FIELDS["subtask"]: 4 * self.max_chars,
            TASK_FIELDS["context"]: 4 * self.max_chars}

  def assemble(self, parts: Iterable[bytes]) -> pb.RunSubtasksRequest:
    """A `RunSubtasks` request from its parts' bytes, each checked against the schema and
    the strings' lengths before it is parsed, at most `max_tasks` tasks
    (`request_parts.assemble`)."""
    return request_parts.assemble(parts, self.max_tasks, self._string_bytes)

  @functools.cached_property
  def largest_part_bytes(self) -> int:
    """The largest part a request the service serves needs: one task of the longest query
    id and two strings of `max_chars` four-byte characters."""
    text = "\U0001f600" * self.max_chars
    return pb.RunSubtasksPart(tasks=[pb.SubTask(
        query_id=max(self.query_ids, key=lambda q: len(q.encode())),
        rollout_index=self.rollouts_per_query - 1, call_index=self.max_sub_calls - 1,
        subtask=text, context=text)]).ByteSize()

  def refusal(self, request: pb.RunSubtasksRequest) -> str | None:
    """Why the service refuses this batch (None: it serves it). Reads one task at a time:
    a refused request is never held twice, as protobuf and as Python strings."""
    step, version = request.step, request.version
    if not 0 <= step < self.num_steps:
      return f"step {step} is not a step of this run (0..{self.num_steps - 1})"
    if version != max(0, step - self.staleness):
      return (f"step {step} is served by S version {max(0, step - self.staleness)} "
              f"(staleness {self.staleness}), not {version}")
    if not 0 <= request.batch < self.max_batches:
      return f"batch {request.batch} is outside [0, {self.max_batches}) (M's turns)"
    if not 0 <= request.seed < SEED_RANGE:
      return f"seed {request.seed} is outside [0, 2**32)"
    if not 0 < len(request.tasks) <= self.max_tasks:
      return f"{len(request.tasks)} tasks: a batch holds 1 to {self.max_tasks}"
    seen = set()
    for t in map(messages.task_from_proto, request.tasks):
      if t.query_id not in self.query_ids:
        return f"query {t.query_id[:200]!r} is not a question of this run"
      if not 0 <= t.rollout_index < self.rollouts_per_query:
        return (f"query {t.query_id!r}: rollout {t.rollout_index} is outside "
                f"[0, {self.rollouts_per_query})")
      if not 0 <= t.call_index < self.max_sub_calls:
        return (f"query {t.query_id!r} rollout {t.rollout_index}: call {t.call_index} is "
                f"outside [0, {self.max_sub_calls})")
      if t.key in seen:
        return f"call {t.key} appears twice in the batch"
      seen.add(t.key)
      # A blank sub-task is served: M's protocol accepts it (agents/specs.check_action), so
      # an honest main slice sends it, and S's reply is its credit.
      if max(len(t.subtask), len(t.context)) > self.max_chars:
        return (f"call {t.key}: the sub-task and its context must each be at most "
                f"{self.max_chars} characters")
    return None


def _conflict(stored: tuple[Arrival, SubRecord], task: SubTaskRequest,
              arrival: Arrival) -> str | None:
  """Why a stored call differs from the same key requested again (None: the same call)."""
  stored_arrival, record = stored
  if (record.subtask, record.context) != (task.subtask, task.context):
    return f"call {task.key} is stored with another sub-task or context"
  if stored_arrival != arrival:
    return (f"call {task.key} is stored as (batch, position) {stored_arrival}, requested "
            f"as {arrival}")
  return None


class SubAgentService:
  """S's side of delegations (see the module docstring)."""

  def __init__(self, policy: SamplerPolicy, graphdef: nnx.GraphDef,
               client: InProcessSubAgentClient, versions: WeightVersions, cache: RecordCache,
               gate: RequestGate, *, after_persist: Callable[[int], None] | None = None):
    """Args:
      policy: holds S's weights: its sampler's model is set to `versions`' params of the
        requested version (merged with `graphdef`) before each batch runs.
      graphdef: S's model graph.
      client: S's lockstep loop (its tokenizer, tools, limits, spec and summarizer),
        sampling with `policy` or a wrapper around it (e.g. in tests).
      versions: the published versions of S's parameters.
      cache: where the step's records are stored before the reply.
      gate: what the service refuses.
      after_persist: called with the step after a batch's records are stored.
    """
    self._policy = policy
    self._graphdef = graphdef
    self._versions = versions
    self._cache = cache
    self._gate = gate
    self._after_persist = after_persist
    self._client = client
    self._lock = threading.Lock()

  def run_subtasks(self, request: pb.RunSubtasksRequest) -> pb.RunSubtasksReply:
    refusal = self._gate.refusal(request)
    if refusal is not None:
      raise BadRequest(f"refused: {refusal}")
    tasks = [messages.task_from_proto(t) for t in request.tasks]
    step, version = request.step, request.version
    with self._lock:
      current = self._versions.current
      if version > current:
        return pb.RunSubtasksReply(status=pb.RunSubtasksReply.NOT_READY, version=current)
      already_trained = step < current  # the module docstring
      stored = {} if already_trained else self._cache.stored(step, [t.key for t in tasks])
      arrivals = [(request.batch, position) for position in range(len(tasks))]
      for task, arrival in zip(tasks, arrivals, strict=True):
        conflict = task.key in stored and _conflict(stored[task.key], task, arrival)
        if conflict:
          raise BadRequest(f"refused: {conflict}; a stored record is never replaced")
      results = self._run(tasks, request.seed, version, stored)
      new = [(r.record, arrival) for r, arrival, t in zip(results, arrivals, tasks, strict=True)
             if t.key not in stored]
      if new and not already_trained:
        self._cache.put(step, new)
      if self._after_persist is not None:
        self._after_persist(step)
      return pb.RunSubtasksReply(status=pb.RunSubtasksReply.OK, version=version,
                                 results=[messages.result_to_proto(r) for r in results])

  def _run(self, tasks: list[SubTaskRequest], seed: int, version: int,
           stored: dict[tuple[str, int, int], tuple[Arrival, SubRecord]]
           ) -> list[SubAgentResult]:
    """The batch's results: S's rollouts of it with weights `version`, each call already
    `stored` replaced by its stored record (nothing runs when all are stored)."""
    def kept(key) -> SubAgentResult:
      record = stored[key][1]
      return SubAgentResult(record.report, record)

    if all(t.key in stored for t in tasks):
      return [kept(t.key) for t in tasks]
    self._policy.sampler.model = nnx.merge(self._graphdef, self._versions.get(version))
    self._policy.version = version
    results = self._client.run(tasks, seed)
    return [kept(t.key) if t.key in stored else result
            for t, result in zip(tasks, results, strict=True)]

  def status(self, request: pb.StatusRequest) -> pb.StatusReply:
    del request
    return pb.StatusReply(version=self._versions.current)

  def server(self, *, host: str, port: int, token: str | None,
             limits: ServerLimits = ServerLimits(), tls: ServerTls | None = None
             ) -> RpcServer:
    """An (unstarted) `RpcServer` of the `SubAgent` service; a `ValueError` if a part of
    `limits.max_part_bytes` cannot hold every delegation the gate serves."""
    if limits.max_part_bytes < self._gate.largest_part_bytes:
      raise ValueError(f"serving.max_part_kib: a part of {limits.max_part_bytes} bytes cannot "
                       f"hold a delegation of up to {self._gate.largest_part_bytes} bytes")
    return RpcServer(messages.SERVICE, {
        "RunSubtasks": Method(self._gate.assemble, self.run_subtasks, streamed=True),
        "Status": Method(lambda data: messages.parse_request(data, pb.StatusRequest, {}),
                         self.status)}, host=host, port=port, token=token, limits=limits,
        tls=tls)
