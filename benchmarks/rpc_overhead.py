"""RPC overhead of one RL step: the slices' gRPC service against the framed JSON it replaced.

One RL step of the demo's shape sends its delegations to the sub-agent service in a few
batches (one per round of M's turns) and gets back S's records: token ids, loss mask,
logprobs and roles of every call, its messages and tool calls. This times everything
the service adds to a step besides S's own sampling, on loopback, with a handler that
returns prepared records (no model):

  grpc    the project's path: tasks to protobuf, a gRPC call (token metadata, request id)
          streaming the request as a header and one part per task, the server's schema
          check and parse of each part, records to protobuf and back to
          `SubAgentResult`s; plus the digest of each received record (`SubRecord.digest`,
          which the step's outcomes publish), timed apart;
  framed  the peer, the framing this replaced, rebuilt here as it was: the request as
          JSON in a length-prefixed frame after the token, one thread per connection,
          records as JSON lists (`to_plain`) decoded with `SubRecord.from_dict`.

It prints the median milliseconds per step of each, their ratio, and the bytes a step's
replies take on the wire.

Usage: python benchmarks/rpc_overhead.py [--calls=96] [--batches=3] [--tokens=600]
                                         [--repeats=30]
"""

from __future__ import annotations

import json
import socket
import struct
import threading

import numpy as np
from absl import app, flags
from bench_timing import median_seconds

from mgrpo_jax.agents.records import END_RESULT, SubRecord, ToolCall, Trajectory
from mgrpo_jax.agents.sub_client import SubAgentResult, SubTaskRequest
from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import Method, RpcClient, RpcServer
from mgrpo_jax.serving.wire import to_plain

_CALLS = flags.DEFINE_integer("calls", 96, "S calls in one RL step (the demo: 64 rollouts, "
                              "about 1.5 delegations each).")
_BATCHES = flags.DEFINE_integer("batches", 3, "Delegation batches they come in (M's rounds).")
_TOKENS = flags.DEFINE_integer("tokens", 600, "Tokens of one S trajectory.")
_REPEATS = flags.DEFINE_integer("repeats", 30, "Timed steps per path (the median is shown).")

TOKEN = "s3cret"
_LENGTH = struct.Struct(">I")


def _record(rng: np.random.Generator, index: int, tokens: int) -> SubRecord:
  """A realistic S record: `tokens` ids, a third of them sampled, four messages."""
  mask = np.zeros(tokens, bool)
  mask[tokens // 3:] = True
  trajectory = Trajectory(
      ids=rng.integers(0, 32_000, tokens).astype(np.int32), loss_mask=mask,
      logprobs=np.where(mask, -rng.random(tokens) * 5, 0).astype(np.float32),
      roles=rng.integers(0, 4, tokens).astype(np.int32),
      messages=(("system", "You are S." * 20), ("user", "Task: find the boss of x."),
                ("assistant", "<thinking>search</thinking><tool_call>{}</tool_call>"),
                ("user", "<tool_response>" + "page text " * 40 + "</tool_response>")),
      policy_version=3, format_ok=True, error="", end=END_RESULT, num_turns=3,
      tool_calls=(ToolCall(0, "search", '{"query": "boss of x"}', True, 0.01),),
      final="The boss of x is y.", wall_s=0.5)
  return SubRecord(f"q{index % 8}", index // 8, index % 3, "Find the boss of x.", "",
                   "The boss of x is y.", trajectory)


def _batches(records: list[SubRecord], count: int) -> list[list[SubRecord]]:
  size = -(-len(records) // count)
  return [records[i:i + size] for i in range(0, len(records), size)]


def _tasks(batch: list[SubRecord]) -> list[SubTaskRequest]:
  return [SubTaskRequest(r.query_id, r.rollout_index, r.call_index, r.subtask, r.context)
          for r in batch]


class _GrpcPath:
  """The project's service path, with a handler that answers prepared records."""

  def __init__(self, batches: list[list[SubRecord]]):
    replies = [pb.RunSubtasksReply(status=pb.RunSubtasksReply.OK, version=3, results=[
        messages.result_to_proto(SubAgentResult(r.report, r)) for r in batch])
        for batch in batches]
    self._batches = batches
    self._server = RpcServer(messages.SERVICE, {"RunSubtasks": Method(
        lambda parts: request_parts.assemble(parts, 1024), lambda request: replies[request.batch],
        streamed=True)}, token=TOKEN).start()
    self._client = RpcClient(messages.SERVICE, self._server.address, token=TOKEN)
    self.reply_bytes = sum(r.ByteSize() for r in replies)

  def step(self) -> list[SubAgentResult]:
    results = []
    for index, batch in enumerate(self._batches):
      request = pb.RunSubtasksRequest(step=1, seed=7, version=3, batch=index, tasks=[
          messages.task_to_proto(t) for t in _tasks(batch)])
      reply = self._client.call("RunSubtasks", request, pb.RunSubtasksReply,
                                parts=request_parts.parts)
      results += [messages.result_from_proto(r) for r in reply.results]
    return results

  def close(self) -> None:
    self._client.close()
    self._server.stop()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
  chunks, got = [], 0
  while got < n:
    chunk = sock.recv(min(n - got, 1 << 20))
    if not chunk:
      raise ConnectionError("closed")
    chunks.append(chunk)
    got += len(chunk)
  return b"".join(chunks)


def _frame(data: bytes) -> bytes:
  return _LENGTH.pack(len(data)) + data


class _FramedPath:
  """The replaced framing: token and JSON body in length-prefixed frames over TCP."""

  def __init__(self, batches: list[list[SubRecord]]):
    self._replies = [json.dumps({"ok": True, "result": {"status": "ok", "version": 3,
                                 "results": [to_plain({"report": r.report,
                                                       "record": r.to_dict()})
                                             for r in batch]}},
                                separators=(",", ":")).encode() for batch in batches]
    self.reply_bytes = sum(len(r) for r in self._replies)
    self._batches = batches
    self._listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=self._accept, daemon=True).start()
    self._sock = socket.create_connection(self._listener.getsockname())

  def _accept(self) -> None:
    while True:
      try:
        connection, _ = self._listener.accept()
      except OSError:
        return
      threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

  def _serve(self, sock: socket.socket) -> None:
    try:
      while True:
        (length,) = _LENGTH.unpack(_recv_exact(sock, 4))
        if _recv_exact(sock, length) != TOKEN.encode():
          return
        (length,) = _LENGTH.unpack(_recv_exact(sock, 4))
        request = json.loads(_recv_exact(sock, length).decode("utf-8"))
        requests = [SubTaskRequest(**r) for r in request["payload"]["requests"]]
        del requests
        sock.sendall(_frame(self._replies[request["payload"]["batch"]]))
    except (ConnectionError, OSError):
      return

  def step(self) -> list[SubAgentResult]:
    results = []
    for index, batch in enumerate(self._batches):
      body = json.dumps({"method": "run_subtasks", "id": f"r{index}", "payload": {
          "step": 1, "seed": 7, "version": 3, "batch": index,
          "requests": [vars(t) for t in _tasks(batch)]}}, separators=(",", ":")).encode()
      self._sock.sendall(_frame(TOKEN.encode()) + _frame(body))
      (length,) = _LENGTH.unpack(_recv_exact(self._sock, 4))
      reply = json.loads(_recv_exact(self._sock, length).decode("utf-8"))
      results += [SubAgentResult(r["report"], SubRecord.from_dict(r["record"]))
                  for r in reply["result"]["results"]]
    return results

  def close(self) -> None:
    self._sock.close()
    self._listener.close()


def main(argv: list[str]) -> None:
  del argv
  rng = np.random.default_rng(0)
  records = [_record(rng, i, _TOKENS.value) for i in range(_CALLS.value)]
  batches = _batches(records, _BATCHES.value)
  grpc_path, framed_path = _GrpcPath(batches), _FramedPath(batches)
  try:
    for path in (grpc_path, framed_path):  # warm up, and check both return the records
      assert [r.record.digest() for r in path.step()] == [r.digest() for r in records]
    seconds = {}
    for _ in range(2):  # alternate, so a change in load hits both
      seconds["framed"] = median_seconds(framed_path.step, _REPEATS.value)
      seconds["grpc"] = median_seconds(grpc_path.step, _REPEATS.value)
    received = grpc_path.step()
    seconds["digests"] = median_seconds(lambda: [r.record.digest() for r in received],
                                        _REPEATS.value)
  finally:
    grpc_path.close()
    framed_path.close()
  print(f"one RL step: {_CALLS.value} S calls of {_TOKENS.value} tokens in "
        f"{_BATCHES.value} batches; median of {_REPEATS.value} steps")
  print(f"replies on the wire: grpc {grpc_path.reply_bytes / 1e6:.2f} MB, "
        f"framed JSON {framed_path.reply_bytes / 1e6:.2f} MB "
        f"({framed_path.reply_bytes / grpc_path.reply_bytes:.1f}x)")
  for name in ("framed", "grpc", "digests"):
    print(f"{name:<8}{seconds[name] * 1e3:9.1f} ms per step")
  total = seconds["grpc"] + seconds["digests"]
  print(f"grpc / framed: {seconds['grpc'] / seconds['framed']:.2f}x "
        f"(with the digests: {total / seconds['framed']:.2f}x)")


if __name__ == "__main__":
  app.run(main)
