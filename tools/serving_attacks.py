"""A hostile caller against the sub-agent service: what each attack gets, and what it costs.

    .venv/bin/python tools/serving_attacks.py

Starts a real `SubAgentService` (tiny world and model, the scripted S oracle acting,
records stored in a `SubStepCache`, the default `serving.*` limits, a token) in a child
process, then from this process, without the token or with bad requests:

- 200 connections that send nothing, 200 that stall inside the HTTP/2 preface, and 200
  HTTP/2 clients calling without the token: the latency of a caller with the token
  (a `Status` and a `RunSubtasks` that runs S), the server's memory against idle, and
  when the silent ones are closed;
- each malformed request kind, streamed as parts as the main slice sends a request
  (wrong wire types, out-of-range indices, an unknown query, a duplicate of a stored
  call with other content, parts out of order or fewer than announced, a part over the
  part limit, 64 MiB and 4 MiB of empty tasks, tasks of long sub-tasks, the largest
  request that parses and one just over the size limit): the status it gets, whether
  the next call is served, whether anything was stored, how much of it the attacker's
  gRPC took before the refusal, and the server's peak memory during it (its VmHWM,
  reset before each) against the request's size.

Prints one table per part (docs/RELIABILITY.md has the results). Linux only (reads
/proc). The well-formed call M never made is in tests/integration/test_slices_e2e.py
(`-k hostile`): S never trains on it.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable

import grpc

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mgrpo_jax.serving import messages, request_parts  # noqa: E402
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb  # noqa: E402
from mgrpo_jax.serving.rpc import TOKEN_KEY, RpcClient  # noqa: E402
from tests.support.request_wire import header_part, task_part  # noqa: E402
from tests.support.sockets import closed_by_peer  # noqa: E402

TOKEN = "s3cret"
MAX_TASKS = 512  # B*K of a run with B = 64, K = 8: the largest request that parses is 4 MiB
MAX_CHARS = 1024
_SERVER = """
import json, sys, tempfile
import dataclasses
from flax import nnx
from mgrpo_jax.agents import (AgentLimits, InProcessSubAgentClient, OraclePolicy,
                              RolloutConfig, SamplerPolicy, specs)
from mgrpo_jax.tools import SearchIndex, default_registry
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.sampling import Sampler
from mgrpo_jax.serving.sub_service import RequestGate, SubAgentService, WeightVersions
from mgrpo_jax.slices.step_cache import SubStepCache
from mgrpo_jax.store.folder import LocalFolder
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.oracle import OracleSubAgent
from mgrpo_jax.text import SentencePieceTokenizer

folder = sys.argv[1]
w = world.generate_world("tiny", 5)
page_list = pages.render_pages(w)
registry = default_registry(SearchIndex.from_pages(page_list), top_n=2, visit_budget=300)
qs = questions.synthesize(w, 8, stage=1, seed=3)
tokenizer = SentencePieceTokenizer.train([p.text for p in page_list] + [q.text for q in qs],
                                         tempfile.mkdtemp(), 600)
model = init_model(get_config("tiny", vocab_size=tokenizer.vocab_size, max_seq_len=512), 0)
max_tasks, max_chars, token = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
versions = WeightVersions()
versions.publish(0, nnx.state(model, nnx.Param))
config = RolloutConfig(sub=AgentLimits(max_turns=4, context_tokens=1024, max_new_tokens=96))
gate = RequestGate(num_steps=10, staleness=0, query_ids=frozenset(q.id for q in qs),
                   rollouts_per_query=8, max_sub_calls=16, max_tasks=max_tasks, max_batches=8,
                   max_chars=max_chars)
client = InProcessSubAgentClient(
    OraclePolicy(OracleSubAgent(), tokenizer, version=0), tokenizer, registry, config,
    spec=dataclasses.replace(specs.SUB, system="Tools: search(query), visit(page)."))
service = SubAgentService(SamplerPolicy(Sampler(model, tokenizer)), nnx.graphdef(model), client,
                          versions, SubStepCache(LocalFolder(folder)), gate)
server = service.server(host="127.0.0.1", port=0, token=token).start()
print(json.dumps({"port": server.address[1], "queries": [
    [q.id, f"Find the {q.path[0].relation} of {q.path[0].subject}."] for q in qs]}), flush=True)
sys.stdin.read()
"""


class Server:
  """The service in a child process, and its memory as /proc reports it."""

  def __init__(self, folder: pathlib.Path):
    self.folder = folder
    self.process = subprocess.Popen([sys.executable, "-c", _SERVER, str(folder),
                                     str(MAX_TASKS), str(MAX_CHARS), TOKEN],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    cwd=ROOT)
    info = json.loads(self.process.stdout.readline())
    self.address = ("127.0.0.1", info["port"])
    self.queries = info["queries"]

  def _status(self, field: str) -> float:
    for line in pathlib.Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
      if line.startswith(field):
        return int(line.split()[1]) / 1024
    raise KeyError(field)

  def rss_mb(self) -> float:
    return self._status("VmRSS:")

  def reset_peak(self) -> None:
    pathlib.Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

  def peak_mb(self) -> float:
    return self._status("VmHWM:")

  def stored(self) -> int:
    return sum(1 for p in self.folder.rglob("*.json"))

  def close(self) -> None:
    self.process.kill()
    self.process.wait()


class Caller:
  """The main slice: calls with the token, each `RunSubtasks` with a fresh call key."""

  def __init__(self, server: Server):
    self._server = server
    self._client = RpcClient(messages.SERVICE, server.address, token=TOKEN)
    self._calls = 0

  def status_s(self) -> float:
    start = time.perf_counter()
    self._client.call("Status", pb.StatusRequest(), pb.StatusReply)
    return time.perf_counter() - start

  def run_s(self) -> float:
    query, subtask = self._server.queries[self._calls % len(self._server.queries)]
    rollout, call = divmod(self._calls // len(self._server.queries), 16)
    self._calls += 1
    request = pb.RunSubtasksRequest(step=0, seed=1, version=0, batch=0, tasks=[pb.SubTask(
        query_id=query, rollout_index=rollout % 8, call_index=call, subtask=subtask)])
    start = time.perf_counter()
    reply = self._client.call("RunSubtasks", request, pb.RunSubtasksReply,
                              parts=request_parts.parts)
    assert len(reply.results) == 1
    return time.perf_counter() - start


def _raw(address, parts: Iterable[bytes]) -> tuple[grpc.StatusCode, int]:
  """The status of a `RunSubtasks` call streaming `parts`, and the bytes of the parts
  the caller's gRPC took from it before the call ended."""
  taken = [0]

  def counted():
    for part in parts:
      taken[0] += len(part)
      yield part

  with grpc.insecure_channel(f"{address[0]}:{address[1]}",
                             options=[("grpc.max_send_message_length", -1)]) as channel:
    call = channel.stream_unary(f"/{messages.SERVICE}/RunSubtasks", request_serializer=None)
    try:
      call(counted(), timeout=120, metadata=[(TOKEN_KEY, TOKEN.encode())])
    except grpc.RpcError as e:
      return e.code(), taken[0]
  return grpc.StatusCode.OK, taken[0]


def connection_attacks(server: Server, caller: Caller) -> None:
  idle = server.rss_mb()
  base_status = statistics.median(caller.status_s() for _ in range(5))
  base_run = statistics.median(caller.run_s() for _ in range(5))
  print(f"\nidle: {idle:.0f} MB; a caller with the token: Status {base_status * 1e3:.1f} ms, "
        f"RunSubtasks (1 call of S) {base_run * 1e3:.1f} ms")
  print(f"{'attack':<46}{'Status ms':>10}{'Run ms':>9}{'RSS MB':>9}{'vs idle':>9}")

  def row(name: str) -> None:
    status = statistics.median(caller.status_s() for _ in range(5))
    run = statistics.median(caller.run_s() for _ in range(5))
    rss = server.rss_mb()
    print(f"{name:<46}{status * 1e3:>10.1f}{run * 1e3:>9.1f}{rss:>9.0f}{rss - idle:>+9.0f}")

  silent = [socket.create_connection(server.address) for _ in range(200)]
  opened = time.monotonic()
  time.sleep(1)
  row("200 silent connections")
  slow = [socket.create_connection(server.address) for _ in range(200)]
  for sock in slow:
    sock.sendall(b"PRI * HTTP/2.0\r\n")
  time.sleep(1)
  row("+ 200 stalled in the HTTP/2 preface")
  stop = threading.Event()

  def no_token() -> None:
    with grpc.insecure_channel(f"{server.address[0]}:{server.address[1]}") as channel:
      call = channel.unary_unary(f"/{messages.SERVICE}/Status", request_serializer=None)
      while not stop.is_set():
        try:
          call(b"", timeout=10)
        except grpc.RpcError:
          pass

  callers = [threading.Thread(target=no_token, daemon=True) for _ in range(200)]
  for thread in callers:
    thread.start()
  time.sleep(2)
  row("+ 200 HTTP/2 clients calling without the token")
  stop.set()
  for thread in callers:
    thread.join()
  while not all(closed_by_peer(sock, 0.01) for sock in silent + slow):
    time.sleep(0.2)
  print(f"the 400 silent and stalled connections were all closed "
        f"{time.monotonic() - opened:.1f} s after they opened (serving.handshake_timeout_s)")
  for sock in silent + slow:
    sock.close()


def _parts(request: pb.RunSubtasksRequest) -> list[bytes]:
  return [part.SerializeToString() for part in request_parts.parts(request, 64 << 10)]


def _empty_tasks(size: int) -> tuple[Iterable[bytes], int]:
  """A header announcing `MAX_TASKS`, then empty task parts up to `size` bytes."""
  count = (size - len(header_part(MAX_TASKS))) // len(task_part())
  return (itertools.chain([header_part(MAX_TASKS)], itertools.repeat(task_part(), count)),
          len(header_part(MAX_TASKS)) + count * len(task_part()))


def _long_task(query: str, index: int, text: str) -> pb.SubTask:
  return pb.SubTask(query_id=query, rollout_index=index % 8, call_index=index // 8,
                    subtask=text, context=text)


def request_attacks(server: Server, caller: Caller) -> None:
  query, subtask = server.queries[0]
  stored_task = pb.SubTask(query_id=query, rollout_index=7, call_index=15, subtask=subtask)
  stored = _parts(pb.RunSubtasksRequest(tasks=[stored_task]))
  assert _raw(server.address, stored)[0] == grpc.StatusCode.OK
  other = pb.SubTask(query_id=query, rollout_index=7, call_index=15, subtask="Other task.")
  well_formed = [pb.SubTask(query_id=query, subtask=subtask)]
  task = pb.RunSubtasksPart(tasks=well_formed).SerializeToString()

  def largest(chars: int) -> pb.RunSubtasksRequest:  # MAX_TASKS tasks of 4-byte characters
    return pb.RunSubtasksRequest(step=10**9, tasks=[
        _long_task(query, i, "\U0001f600" * chars) for i in range(MAX_TASKS)])

  attacks = {
      "step sent as a string (wrong wire type)": [header_part(1, b"\x0a\x01x"), task],
      "rollout_index sent as a double 0.5": [header_part(1), task_part(b"\x11" + b"\x00" * 7 + b"\x3f")],
      "batch = -5": _parts(pb.RunSubtasksRequest(batch=-5, tasks=well_formed)),
      "batch = 10**9": _parts(pb.RunSubtasksRequest(batch=10**9, tasks=well_formed)),
      "step = 10**9": _parts(pb.RunSubtasksRequest(step=10**9, tasks=well_formed)),
      "rollout_index = 8 (K = 8)": _parts(pb.RunSubtasksRequest(tasks=[pb.SubTask(
          query_id=query, rollout_index=8, subtask=subtask)])),
      "an unknown query": _parts(pb.RunSubtasksRequest(tasks=[pb.SubTask(query_id="nope",
                                                                         subtask=subtask)])),
      "a stored call again with another sub-task": _parts(pb.RunSubtasksRequest(tasks=[other])),
      "a task before the header": [task, header_part(1)],
      "two headers": [header_part(1), header_part(1), task],
      "fewer tasks than the header announces": [header_part(2), task],
      "one 64 MiB part (over the 64 KiB part limit)": [task_part() * (32 << 20)],
      "64 MiB of empty tasks in 2-byte parts": _empty_tasks(64 << 20),
      "4 MiB of empty tasks in 2-byte parts": _empty_tasks(4 << 20),
      "512 tasks of 32,000-character texts (31 MiB)": _parts(pb.RunSubtasksRequest(tasks=[
          _long_task(query, i, "x" * 32_000) for i in range(MAX_TASKS)])),
      "the largest that parses: 1,000-char tasks": _parts(largest(1000)),
      "1,024-char tasks: over the 4 MiB limit": _parts(largest(MAX_CHARS)),
  }
  print(f"\n{'request':<46}{'status':>19}{'next served':>12}{'stored':>7}{'MB':>7}"
        f"{'taken':>7}{'peak MB':>8}{'x size':>7}")
  print("(MB: the request's parts; taken: what the attacker's gRPC took of them before the "
        "refusal;\n x size: the peak's growth over the request's size, for 256 KiB and up)")
  for name, attack in attacks.items():
    parts, size = attack if isinstance(attack, tuple) else (attack, sum(map(len, attack)))
    before, rss = server.stored(), server.rss_mb()
    server.reset_peak()
    status, taken = _raw(server.address, parts)
    growth = server.peak_mb() - rss
    served = caller.run_s() > 0 and caller.status_s() > 0
    ratio = f"{growth / (size / 2**20):.1f}" if size >= 256 << 10 else "-"
    print(f"{name:<46}{status.name:>19}{'yes' if served else 'NO':>12}"
          f"{server.stored() - before - 1:>7}{size / 2**20:>7.2f}{taken / 2**20:>7.2f}"
          f"{growth:>8.1f}{ratio:>7}")
  assert _raw(server.address, stored)[0] == grpc.StatusCode.OK  # the stored call is unchanged


def main() -> None:
  with tempfile.TemporaryDirectory() as folder:
    server = Server(pathlib.Path(folder))
    try:
      caller = Caller(server)
      caller.run_s()  # warm up
      connection_attacks(server, caller)
      request_attacks(server, caller)
    finally:
      server.close()
  print("\n(stored: records the attack left, besides the caller's own call after it)")


if __name__ == "__main__":
  main()
