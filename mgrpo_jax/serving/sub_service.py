"""The sub-agent service: S's turns for the main slice, served on the sub slice over RPC.

Methods (`rpc.RpcServer` handlers, plain JSON):
  run_subtasks {step, seed, version, batch, requests: [SubTaskRequest dict]}
      -> {"status": "ok", "version": v, "results": [SubAgentResult dict]}
       | {"status": "not_ready", "version": current}
    Runs S's lockstep loop (`agents.InProcessSubAgentClient`, one S policy call per S
    round for the whole batch: concurrent delegations of one M round share sampler
    calls) with S's weights of EXACTLY version `version`. A version newer than the
    trainer has published answers "not_ready" (the caller retries); the service keeps
    the newest `keep_versions` versions (staleness + 1), so with a staleness bound s the
    main slice's step t is always served by version max(0, t - s) whatever the sub
    trainer's progress: rollouts never depend on timing. The batch's `SubRecord`s are
    handed to `persist(step, [(record, (batch, position))])` BEFORE the reply, so the
    sub trainer finds every call that M saw; serving the same request again produces the
    same records and replaces them.
  status {} -> {"version": current}

Requests the service did not hand out are refused before anything runs or is
persisted (`RequestGate`): a step outside the run, a version other than the one the
step must use (max(0, step - staleness)), a query id not among the run's questions, a
rollout or call index out of range. A step S has already been trained on (a main slice
that fell back to an older checkpoint redoes it) is served but not persisted: S's
trainer will not read that step's records again.

S's tools (search, visit) run here, on the sub slice. Requests are served one at a
time (a lock), since they share one sampler.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection
from typing import Any

from flax import nnx

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.config import RolloutConfig
from mgrpo_jax.agents.policy import Policy, SamplerPolicy
from mgrpo_jax.agents.records import SubRecord
from mgrpo_jax.agents.sub_client import InProcessSubAgentClient, SubTaskRequest, Summarizer
from mgrpo_jax.agents.tools import ToolRegistry
from mgrpo_jax.serving.rpc import RpcServer
from mgrpo_jax.serving.wire import to_plain
from mgrpo_jax.text import Tokenizer

Persist = Callable[[int, list[tuple[SubRecord, tuple[int, int]]]], None]
NOT_READY = "not_ready"
OK = "ok"


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
  """

  num_steps: int
  staleness: int
  query_ids: Collection[str]
  rollouts_per_query: int
  max_sub_calls: int

  def refusal(self, step: int, version: int, requests: list[SubTaskRequest]) -> str | None:
    """Why the service refuses this batch (None: it serves it)."""
    if not 0 <= step < self.num_steps:
      return f"step {step} is not a step of this run (0..{self.num_steps - 1})"
    if version != max(0, step - self.staleness):
      return (f"step {step} is served by S version {max(0, step - self.staleness)} "
              f"(staleness {self.staleness}), not {version}")
    for r in requests:
      if r.query_id not in self.query_ids:
        return f"query {r.query_id!r} is not a question of this run"
      if not 0 <= r.rollout_index < self.rollouts_per_query:
        return (f"query {r.query_id!r}: rollout {r.rollout_index} is outside "
                f"[0, {self.rollouts_per_query})")
      if not 0 <= r.call_index < self.max_sub_calls:
        return (f"query {r.query_id!r} rollout {r.rollout_index}: call {r.call_index} is "
                f"outside [0, {self.max_sub_calls})")
    return None


class SubAgentService:
  """S's side of delegations (see the module docstring)."""

  def __init__(self, policy: SamplerPolicy, graphdef: nnx.GraphDef, tokenizer: Tokenizer,
               registry: ToolRegistry, config: RolloutConfig, versions: WeightVersions,
               persist: Persist, *, summarizer: Summarizer | None = None,
               spec: specs.AgentSpec = specs.SUB,
               after_persist: Callable[[int], None] | None = None,
               rollout_policy: Policy | None = None, gate: RequestGate | None = None):
    """`policy` holds S's weights (swapped per version); rollouts sample with
    `rollout_policy` (default: `policy`; a wrapper around it, e.g. in tests); `gate`
    refuses requests the service did not hand out (None: any is served)."""
    self._policy = policy
    self._graphdef = graphdef
    self._versions = versions
    self._persist = persist
    self._after_persist = after_persist
    self._gate = gate
    self._client = InProcessSubAgentClient(rollout_policy or policy, tokenizer, registry, config,
                                           summarizer=summarizer, spec=spec)
    self._lock = threading.Lock()

  def run_subtasks(self, payload: dict[str, Any]) -> dict[str, Any]:
    step, seed = int(payload["step"]), int(payload["seed"])
    version, batch = int(payload["version"]), int(payload["batch"])
    requests = [SubTaskRequest.from_dict(r) for r in payload["requests"]]
    with self._lock:
      current = self._versions.current
      refusal = (self._gate.refusal(step, version, requests)
                 if self._gate is not None else None)
      if refusal is not None:
        raise ValueError(f"refused: {refusal}")
      if version > current:
        return {"status": NOT_READY, "version": current}
      params = self._versions.get(version)
      self._policy.sampler.model = nnx.merge(self._graphdef, params)
      self._policy.version = version
      results = self._client.run(requests, seed)
      already_trained = self._gate is not None and step < current  # the module docstring
      if not already_trained:
        self._persist(step, [(result.record, (batch, position))
                             for position, result in enumerate(results)])
      if self._after_persist is not None:
        self._after_persist(step)
      return {"status": OK, "version": version,
              "results": [to_plain(r.to_dict()) for r in results]}

  def status(self, payload: dict[str, Any]) -> dict[str, Any]:
    del payload
    return {"version": self._versions.current}

  def server(self, *, host: str, port: int, token: str | None) -> RpcServer:
    """An (unstarted) `RpcServer` exposing `run_subtasks` and `status`."""
    return RpcServer({"run_subtasks": self.run_subtasks, "status": self.status}, host=host,
                     port=port, token=token)
