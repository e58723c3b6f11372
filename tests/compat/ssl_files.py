"""The client key material librdkafka's SSL test (0097) reads, made by the secured
cluster's own development CA.

0097 loads one client certificate, its key and the CA in every form librdkafka takes:
files and in-memory PEM through the configuration, and PKCS#12, DER and PEM through
``set_ssl_cert``. It finds them through ``SSL_*`` variables and the ``ssl.*`` settings
of ``test.conf``. :func:`write_ssl_files` issues the certificate and writes each form;
the key files are protected by :data:`KEY_PASSWORD` where the format carries one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from eventplatform.dev_certificates import CA_FILE, issue

CLIENT_NAME = "compat-client"
KEY_PASSWORD = "compat suite's key password"


@dataclass(frozen=True)
class SslFiles:
    environment: dict[str, str]
    """The ``SSL_*`` variables 0097 reads."""
    settings: dict[str, str]
    """The ``ssl.*`` client settings for ``test.conf``."""


def write_ssl_files(authority: Path, directory: Path) -> SslFiles:
    """Issue the suite's client certificate from the CA in ``authority`` and write it,
    its key and the CA into ``directory`` in every form 0097 loads."""
    directory.mkdir(parents=True, exist_ok=True)
    issued = issue(authority, CLIENT_NAME)
    certificate = x509.load_pem_x509_certificate(issued.certificate.read_bytes())
    key = serialization.load_pem_private_key(issued.key.read_bytes(), password=None)
    assert isinstance(key, pkcs12.PKCS12PrivateKeyTypes)
    ca = x509.load_pem_x509_certificate((authority / CA_FILE).read_bytes())
    password = KEY_PASSWORD.encode()
    protected = serialization.BestAvailableEncryption(password)
    files = {
        "SSL_pub_pem": ("client.crt", certificate.public_bytes(serialization.Encoding.PEM)),
        "SSL_pub_der": ("client.crt.der", certificate.public_bytes(serialization.Encoding.DER)),
        "SSL_priv_pem": (
            "client.key",
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, protected
            ),
        ),
        "SSL_priv_der": (
            "client.key.der",
            key.private_bytes(
                serialization.Encoding.DER,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        ),
        "SSL_pkcs": (
            "client.p12",
            pkcs12.serialize_key_and_certificates(
                CLIENT_NAME.encode(), key, certificate, [ca], protected
            ),
        ),
        "SSL_ca_der": ("ca.der", ca.public_bytes(serialization.Encoding.DER)),
        "SSL_all_cas_pem": ("ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
    }
    environment = {"SSL_password": KEY_PASSWORD}
    for variable, (name, data) in files.items():
        path = directory / name
        path.write_bytes(data)
        environment[variable] = str(path)
    settings = {
        "ssl.certificate.location": environment["SSL_pub_pem"],
        "ssl.key.location": environment["SSL_priv_pem"],
        "ssl.key.password": KEY_PASSWORD,
    }
    return SslFiles(environment, settings)
