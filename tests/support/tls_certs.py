"""Test certificates: a CA, a server certificate for 127.0.0.1 and `localhost`, a client
certificate, all signed by the CA, and a second CA that signed nothing here (PEM files)."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclasses.dataclass(frozen=True)
class Certificates:
  """Paths of the PEM files."""

  ca: pathlib.Path
  server_cert: pathlib.Path
  server_key: pathlib.Path
  client_cert: pathlib.Path
  client_key: pathlib.Path
  other_ca: pathlib.Path


def _key() -> ec.EllipticCurvePrivateKey:
  return ec.generate_private_key(ec.SECP256R1())


def _certificate(subject: str, key, issuer: str, issuer_key, *, ca: bool,
                 names: list[x509.GeneralName] = ()) -> x509.Certificate:
  now = datetime.datetime.now(datetime.UTC)
  builder = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
  if names:
    builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
  return builder.sign(issuer_key, hashes.SHA256())


def _write(folder: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
  path = folder / name
  path.write_bytes(data)
  return path


def _pem(certificate: x509.Certificate) -> bytes:
  return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
  return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def make_certificates(folder: pathlib.Path) -> Certificates:
  ca_key, other_key, server_key, client_key = _key(), _key(), _key(), _key()
  ca = _certificate("test ca", ca_key, "test ca", ca_key, ca=True)
  other = _certificate("other ca", other_key, "other ca", other_key, ca=True)
  server = _certificate("sub slice", server_key, "test ca", ca_key, ca=False, names=[
      x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
  client = _certificate("main slice", client_key, "test ca", ca_key, ca=False)
  return Certificates(
      ca=_write(folder, "ca.pem", _pem(ca)),
      server_cert=_write(folder, "server.pem", _pem(server)),
      server_key=_write(folder, "server.key", _key_pem(server_key)),
      client_cert=_write(folder, "client.pem", _pem(client)),
      client_key=_write(folder, "client.key", _key_pem(client_key)),
      other_ca=_write(folder, "other_ca.pem", _pem(other)))
