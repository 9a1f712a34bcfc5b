"""The main slice's `SubAgentClient` for the remote sub-agent service.

`RemoteSubAgentClient.run(requests, seed)` sends one delegation batch as one
`RunSubtasks` call (gRPC, `sub_service.py`; the request streamed in parts of at most
`serving.max_part_kib`, `request_parts.parts`), tagged with the step, the S weight version
the step must use and the batch's index within the step (`begin_step` resets it; the
controller's batches are deterministic, so a restarted step sends the same batches with
the same tags).

Failures:
  - unreachable service (not started, died, restarted elsewhere): every attempt
    re-resolves the address (a restarted sub slice publishes a new port) and retries
    with backoff; after `serving.deadline_s` without an answer it raises
    `ServiceUnavailableError` naming the address it last tried.
  - NOT_READY (S has not yet published the requested version): polled until
    `ready_timeout_s`, then `TimeoutError`.
  - a handler error or a refused request: `RpcError` at once (not retried).
  - an answer slower than `serving.call_timeout_s`: `RpcTimeoutError` (not retried).
Every attempt of one call carries the same request id, so a batch the service is still
running when the connection drops is not run a second time by the retry.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

from google.protobuf.message import Message

from mgrpo_jax.agents.sub_client import SubAgentResult, SubTaskRequest
from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.address import Address
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import ClientSettings, RpcClient, ServiceUnavailableError
from mgrpo_jax.serving.tls import ClientTls

# Seconds one connection attempt window lasts before the address is read again.
_ATTEMPT_WINDOW_S = 2.0


class RemoteSubAgentClient:
  """`SubAgentClient` over gRPC (see the module docstring)."""

  def __init__(self, resolve: Callable[[], Address | None], *, describe: str,
               token: str | None = None, settings: ClientSettings = ClientSettings(),
               tls: ClientTls | None = None, ready_timeout_s: float = 3600.0,
               poll_s: float = 0.05):
    """Args:
      resolve: returns the service address, or None while it is not published.
      describe: where the address comes from, for errors (a file path or "host:port").
      token: the shared service token, if the service requires one.
      settings: the calls' limits; `settings.deadline` is how long an unreachable
        service is retried, across address changes.
      tls: the client's TLS (None: plaintext).
      ready_timeout_s: seconds to wait for the requested S weight version.
      poll_s: first pause between NOT_READY polls (doubles up to 1 s).
    """
    self._resolve = resolve
    self._describe = describe
    self._token = token
    self._settings = settings
    self._tls = tls
    self._deadline_s = settings.deadline
    self._ready_timeout_s = ready_timeout_s
    self._poll_s = poll_s
    self._clients: dict[Address, RpcClient] = {}
    self._step = 0
    self._version = 0
    self._batch = 0
    self.last_version = -1

  def begin_step(self, step: int, version: int) -> None:
    """Tags the following batches with `step` and the S weight `version` to use."""
    self._step, self._version, self._batch = step, version, 0

  def call(self, method: str, request: Message, reply_type: type[Message], *,
           parts: Callable[[Message, int], Iterable[Message]] | None = None) -> Message:
    """One RPC, retried across address changes until the deadline (module docstring);
    `parts`: a streamed method's (`RpcClient.call`)."""
    deadline = time.monotonic() + self._deadline_s
    request_id = uuid.uuid4().hex
    last: Address | None = None
    error: Exception | None = None
    while True:
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        if last is None:
          raise ServiceUnavailableError(
              f"the sub-agent service published no address in {self._describe} within "
              f"{self._deadline_s:g}s: is the sub slice running?")
        raise ServiceUnavailableError(
            f"the sub-agent service at {last[0]}:{last[1]} is unreachable (no answer for "
            f"{self._deadline_s:g}s; address from {self._describe}): {error}")
      address = self._resolve()
      if address is None:
        time.sleep(min(0.2, remaining))
        continue
      last = address
      client = self._clients.get(address)
      if client is None:
        for old in self._clients.values():
          old.close()
        client = RpcClient(messages.SERVICE, address, token=self._token, tls=self._tls,
                           settings=dataclasses.replace(
                               self._settings, deadline=min(_ATTEMPT_WINDOW_S, remaining)))
        self._clients = {address: client}
      try:
        return client.call(method, request, reply_type, request_id=request_id, parts=parts)
      except ServiceUnavailableError as e:
        error = e
        del self._clients[address]
        client.close()

  def status(self) -> pb.StatusReply:
    return self.call("Status", pb.StatusRequest(), pb.StatusReply)

  def run(self, requests: Sequence[SubTaskRequest], seed: int) -> list[SubAgentResult]:
    request = pb.RunSubtasksRequest(step=self._step, seed=int(seed), version=self._version,
                                    batch=self._batch,
                                    tasks=[messages.task_to_proto(r) for r in requests])
    ready_by = time.monotonic() + self._ready_timeout_s
    pause = self._poll_s
    while True:
      reply = self.call("RunSubtasks", request, pb.RunSubtasksReply,
                        parts=request_parts.parts)
      if reply.status != pb.RunSubtasksReply.NOT_READY:
        break
      if time.monotonic() > ready_by:
        raise TimeoutError(f"the sub-agent service stayed at S version {reply.version} "
                           f"for {self._ready_timeout_s:g}s; step {self._step} needs "
                           f"version {self._version}")
      time.sleep(pause)
      pause = min(1.0, 2 * pause)
    self._batch += 1
    self.last_version = int(reply.version)
    results = [messages.result_from_proto(r) for r in reply.results]
    if len(results) != len(requests):
      raise ValueError(f"the sub-agent service returned {len(results)} results for "
                       f"{len(requests)} requests")
    return results

  def close(self) -> None:
    for client in self._clients.values():
      client.close()
    self._clients = {}
