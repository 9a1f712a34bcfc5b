"""The main slice's wait for the sub slice's acknowledgement: found, timed out, or down."""

import socket

import pytest

from mgrpo_jax.serving import messages
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.remote_client import RemoteSubAgentClient
from mgrpo_jax.serving.rpc import ClientSettings, Method, RpcServer, ServiceUnavailableError
from mgrpo_jax.slices.main_slice import wait_for_sub_ack
from mgrpo_jax.store import StoreTimeoutError, open_store

KEY = "runs/r/step_00000000/ack_sub"


@pytest.fixture
def live_service():
  server = RpcServer(messages.SERVICE, {"Status": Method(
      lambda data: messages.parse_request(data, pb.StatusRequest, {}),
      lambda request: pb.StatusReply(version=0))}).start()
  yield server.address
  server.stop()


def _client(address, deadline_s=2.0):
  return RemoteSubAgentClient(lambda: address, describe=f"{address[0]}:{address[1]}",
                              settings=ClientSettings(deadline=deadline_s))


def test_returns_once_the_ack_exists(tmp_path, live_service):
  store = open_store(str(tmp_path))
  store.put(KEY, b"{}")
  wait_for_sub_ack(store, KEY, _client(live_service), timeout=5.0)


def test_times_out_naming_the_missing_ack(tmp_path, live_service):
  store = open_store(str(tmp_path))
  with pytest.raises(StoreTimeoutError, match="ack_sub") as info:
    wait_for_sub_ack(store, KEY, _client(live_service), timeout=0.3)
  assert info.value.missing == (KEY,)


def test_fails_naming_the_address_when_the_service_is_down(tmp_path):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    address = s.getsockname()
  store = open_store(str(tmp_path))
  with pytest.raises(ServiceUnavailableError, match=f"127.0.0.1:{address[1]}"):
    wait_for_sub_ack(store, KEY, _client(address, deadline_s=0.5), timeout=60.0)
