"""A local certificate authority for development: a CA, server and client certificates.

``platform cluster up --secure`` and the tests use it to give brokers a TLS identity
and clients a certificate of their own, without any tool beyond this package. The
files are PEM; keys are written readable by their owner alone. Nothing here is fit
for production: the CA's key sits beside the certificates it signed.

Layout of a directory made by :func:`make_authority` and :func:`issue`::

    ca.pem            the authority's certificate (clients' ssl.ca.location)
    ca.key            its private key
    <name>.pem        a certificate followed by its private key (a broker's
                      ssl.keystore.location)
    <name>.crt        the certificate alone (a client's ssl.certificate.location)
    <name>.key        the private key alone (a client's ssl.key.location)
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY_DAYS = 825
CA_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"


@dataclass(frozen=True, slots=True)
class Issued:
    """The files of one issued certificate."""

    keystore: Path
    certificate: Path
    key: Path


def make_authority(directory: Path, name: str = "eventplatform development CA") -> Path:
    """Create (or keep) the CA in ``directory``; the path of its certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    certificate_path = directory / CA_FILE
    if certificate_path.exists() and (directory / CA_KEY_FILE).exists():
        return certificate_path
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_private(directory / CA_KEY_FILE, _key_pem(key))
    certificate_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return certificate_path


def issue(
    directory: Path,
    name: str,
    *,
    hosts: tuple[str, ...] = (),
    organization: str | None = None,
    not_valid_before: datetime.datetime | None = None,
    not_valid_after: datetime.datetime | None = None,
) -> Issued:
    """A certificate for ``name`` (its common name) signed by the CA in ``directory``.

    ``hosts`` (names and addresses) make it a server certificate valid for them, which
    also serves as a client one (a broker is both); without hosts it is a client
    certificate. It is valid from five minutes ago for ``VALIDITY_DAYS``, unless
    ``not_valid_before`` or ``not_valid_after`` (timezone-aware) say otherwise: an end
    in the past, alone, gives a certificate that expired then, valid for
    ``VALIDITY_DAYS`` before it."""
    make_authority(directory)
    authority_key = serialization.load_pem_private_key(
        (directory / CA_KEY_FILE).read_bytes(), password=None
    )
    assert isinstance(authority_key, ec.EllipticCurvePrivateKey)
    authority = x509.load_pem_x509_certificate((directory / CA_FILE).read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    now = datetime.datetime.now(datetime.UTC)
    valid_until = not_valid_after or now + datetime.timedelta(days=VALIDITY_DAYS)
    valid_from = not_valid_before or min(
        now - datetime.timedelta(minutes=5), valid_until - datetime.timedelta(days=VALIDITY_DAYS)
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(authority.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_alternative_name(host) for host in hosts]),
            critical=False,
        ).add_extension(
            # A broker's certificate serves its listeners and identifies it to the others.
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    certificate = builder.sign(authority_key, hashes.SHA256())
    certificate_pem = certificate.public_bytes(serialization.Encoding.PEM)
    issued = Issued(directory / f"{name}.pem", directory / f"{name}.crt", directory / f"{name}.key")
    _write_private(issued.keystore, certificate_pem + _key_pem(key))
    issued.certificate.write_bytes(certificate_pem)
    _write_private(issued.key, _key_pem(key))
    return issued


def _alternative_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
