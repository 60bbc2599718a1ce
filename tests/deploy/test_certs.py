"""Generated TLS certificates: the server certificate is signed by the CA and valid for
the loopback names the SuperLink is reached by."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from cryptography import x509

from geofl.deploy.certs import write_certificates


def test_server_certificate_is_signed_by_the_ca_for_the_hosts(tmp_path: Path) -> None:
    c = write_certificates(tmp_path, hosts=("127.0.0.1", "site.example.org"))
    ca = x509.load_pem_x509_certificate(c.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(c.cert.read_bytes())
    cert.verify_directly_issued_by(ca)  # raises unless the CA signed it
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["site.example.org"]
    assert c.key.stat().st_mode & 0o777 == 0o600
