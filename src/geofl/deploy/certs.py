"""Certificates for a TLS deployment: a CA and a server certificate it signs.

The SuperLink serves with the server certificate (``--ssl-certfile/--ssl-keyfile``, the CA
with ``--ssl-ca-certfile``); SuperNodes and ``flwr`` verify it against the CA
(``--root-certificates``, ``root-certificates`` in the Flower connection). Generated with
``cryptography`` (Flower's own dependency); for a real deployment name the SuperLink's host
in ``hosts``.

SuperNode authentication (SuperLink ``--enable-supernode-auth``) uses one EC key pair per
site in OpenSSH format (:func:`write_node_key`, like ``ssh-keygen -t ecdsa -b 384``): the
public key is registered with ``flwr supernode register site.pub <connection>``, the
SuperNode starts with ``--auth-supernode-private-key site``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Certificates", "NodeKey", "write_certificates", "write_node_key"]


@dataclass(frozen=True)
class Certificates:
    """Paths of the PEM files: CA certificate, server certificate and server key."""

    ca: Path
    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def write_certificates(
    path: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost"), days: int = 30
) -> Certificates:
    """Write ``ca.crt``, ``server.pem`` and ``server.key`` (P-384) under ``path``.

    Args:
        path: Directory to write.
        hosts: Names and IP addresses the server certificate is valid for.
        days: Validity.
    """
    path.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("geofl-ca"))
        .issuer_name(_name("geofl-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    alt: list[x509.GeneralName] = []
    for h in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            alt.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out = Certificates(path / "ca.crt", path / "server.pem", path / "server.key")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    out.key.chmod(0o600)
    return out


@dataclass(frozen=True)
class NodeKey:
    """Paths of a SuperNode's authentication key pair (OpenSSH format)."""

    private: Path
    public: Path


def write_node_key(path: Path, name: str) -> NodeKey:
    """Write a P-384 key pair ``<name>`` (private, 0600) and ``<name>.pub`` under ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    out = NodeKey(path / name, path / f"{name}.pub")
    out.private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    out.private.chmod(0o600)
    pub = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    out.public.write_bytes(pub + f" geofl-{name}\n".encode())
    return out
