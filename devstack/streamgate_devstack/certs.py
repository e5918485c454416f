"""Throwaway certificates for a local TLS stack and the TLS tests: a CA, a server and a client
certificate.

Never for production: keys are unencrypted, certificates live one day (or one hour for a self-signed
one). The server certificate names 127.0.0.1 and localhost and allows client use too, because Redis
nodes present it to each other on the TLS cluster bus and replication links.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a local PKI: the CA, the servers' certificate and key, and a client certificate
    and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(directory: Path, names: tuple[str, ...] = LOOPBACK_NAMES,
             prefix: str = "") -> TlsFiles:
    """A new CA with one server and one client certificate it signed, written under ``directory``.

    ``names`` are IP addresses or DNS names put in the server certificate; ``prefix`` names the
    files (so two PKIs can share a directory: the second one's CA is then "a wrong CA" for the first
    one's servers).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{prefix}streamgate-test-ca")
    ca = _builder(ca_name, ca_name, ca_key, datetime.timedelta(days=1)).add_extension(
        x509.BasicConstraints(ca=True, path_length=0), critical=True).add_extension(
        x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                      content_commitment=False, key_encipherment=False, data_encipherment=False,
                      key_agreement=False, encipher_only=False,
                      decipher_only=False), critical=True).sign(ca_key, hashes.SHA256())
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (_builder(_name(f"{prefix}streamgate-test-server"), ca_name, server_key,
                       datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]),
                             critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                    ExtendedKeyUsageOID.CLIENT_AUTH]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = (_builder(_name(f"{prefix}streamgate-test-client"), ca_name, client_key,
                       datetime.timedelta(days=1))
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    files = TlsFiles(ca_cert=directory / f"{prefix}ca.pem",
                     server_cert=directory / f"{prefix}server.pem",
                     server_key=directory / f"{prefix}server-key.pem",
                     client_cert=directory / f"{prefix}client.pem",
                     client_key=directory / f"{prefix}client-key.pem")
    _write_cert(files.ca_cert, ca)
    _write_cert(files.server_cert, server)
    _write_key(files.server_key, server_key)
    _write_cert(files.client_cert, client)
    _write_key(files.client_key, client_key)
    return files


def self_signed(directory: Path, names: tuple[str, ...] = ("127.0.0.1",)) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for ``names`` and its key: ``cert.pem``,
    ``key.pem``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("streamgate-test")
    cert = (_builder(name, name, key, datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    _write_cert(cert_path, cert)
    _write_key(key_path, key)
    return cert_path, key_path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey,
             lifetime: datetime.timedelta) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + lifetime))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
