"""TLS of the sub-agent service, from the PEM files the config names (keys `serving.tls_*`).

The sub slice serves with its certificate chain and key (`serving.tls_cert`,
`serving.tls_key`) and, with `serving.tls_client_ca`, requires every caller to present a
certificate signed by that CA. The main slice verifies the server against
`serving.tls_ca` (empty: gRPC's bundled roots), checks the name `serving.tls_server_name`
(empty: the host it connects to) and presents `serving.tls_client_cert` and
`serving.tls_client_key` when set. TLS is on whenever `serving.tls_cert` is set; a
non-loopback `serving.host` requires it (`config.validate`). A file that cannot be read
raises `TlsFileError` naming the key and the path.
"""

from __future__ import annotations

import dataclasses
import pathlib

import grpc


class TlsFileError(ValueError):
  """A PEM file named by a `serving.tls_*` key cannot be read."""


def _read(serving, key: str) -> bytes | None:
  """The bytes of the file `serving.<key>` names (None: the key is empty)."""
  path = str(serving[key])
  if not path:
    return None
  try:
    data = pathlib.Path(path).read_bytes()
  except OSError as e:
    raise TlsFileError(f"config key 'serving.{key}': cannot read {path}: "
                       f"{e.strerror or e}") from None
  if not data.strip():
    raise TlsFileError(f"config key 'serving.{key}': {path} is empty")
  return data


@dataclasses.dataclass(frozen=True)
class ServerTls:
  """The server's certificate chain and key (PEM), and the CA its callers' certificates
  must be signed by (None: no client certificates)."""

  cert_chain: bytes
  private_key: bytes
  client_ca: bytes | None = None

  def credentials(self) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(self.private_key, self.cert_chain)],
                                       root_certificates=self.client_ca,
                                       require_client_auth=self.client_ca is not None)


@dataclasses.dataclass(frozen=True)
class ClientTls:
  """The roots the client verifies the server with (None: gRPC's bundled ones), its own
  certificate chain and key (None: none), and the name the server's certificate must
  carry ("": the host connected to)."""

  root_certs: bytes | None = None
  cert_chain: bytes | None = None
  private_key: bytes | None = None
  server_name: str = ""

  def credentials(self) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=self.root_certs,
                                        private_key=self.private_key,
                                        certificate_chain=self.cert_chain)

  def options(self) -> list[tuple[str, str]]:
    return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def server_tls(serving) -> ServerTls | None:
  """The sub slice's TLS from the config's `serving` section (None: plaintext)."""
  cert = _read(serving, "tls_cert")
  if cert is None:
    return None
  return ServerTls(cert, _read(serving, "tls_key"), _read(serving, "tls_client_ca"))


def client_tls(serving) -> ClientTls | None:
  """The main slice's TLS from the config's `serving` section (None: plaintext)."""
  if not str(serving.tls_cert):
    return None
  return ClientTls(_read(serving, "tls_ca"), _read(serving, "tls_client_cert"),
                   _read(serving, "tls_client_key"), str(serving.tls_server_name))

