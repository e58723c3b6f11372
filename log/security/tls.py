"""The broker's TLS: its server context, and the principal a client certificate names.

Keys, certificates and trusted authorities are read from PEM files
(``ssl.keystore.location`` holds the private key and the certificate chain,
``ssl.truststore.location`` the authorities). TLS 1.2 is the oldest version
accepted. With ``ssl.client.auth=required`` a client without a certificate the
truststore vouches for fails the handshake; with ``requested`` it may present none
and is then ``User:ANONYMOUS`` (on SSL listeners) or whoever it authenticates as
with SASL.

A verified client certificate makes the principal ``User:<subject>``, the subject
written as RFC 2253 does (most specific first: ``CN=alice,OU=apps,O=example``), as
Kafka's default principal builder does.
"""

from __future__ import annotations

import ssl
from typing import Any

ANONYMOUS = "User:ANONYMOUS"

_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_ESCAPED = ',+"\\<>;='


class TlsConfigError(ValueError):
    """A keystore or truststore that cannot be read or does not hold what it must."""


def server_context(
    *, keystore: str, key_password: str = "", truststore: str = "", client_auth: str = "none"
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(keystore, password=key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"cannot read the key and certificate chain in ssl.keystore.location={keystore}: {exc}"
        ) from exc
    if client_auth != "none":
        try:
            context.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"cannot read the authorities in ssl.truststore.location={truststore}: {exc}"
            ) from exc
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def client_context(
    *, truststore: str = "", certificate: str = "", key: str = "", key_password: str = ""
) -> ssl.SSLContext:
    """A client's context: the server is verified against ``truststore`` (the system's
    authorities when empty); ``certificate`` (with ``key``, or a PEM holding both) is
    presented when given."""
    try:
        context = ssl.create_default_context(cafile=truststore or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if certificate:
            context.load_cert_chain(certificate, key or None, password=key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot set up TLS as a client: {exc}") from exc
    return context


def certificate_principal(certificate: dict[str, Any] | None) -> str | None:
    """``User:<RFC 2253 subject>`` of a verified peer certificate (``getpeercert()``), or
    None when the peer presented none."""
    if not certificate:
        return None
    relative_names = certificate.get("subject", ())
    parts = []
    for relative_name in reversed(relative_names):
        parts.append(
            "+".join(
                f"{_SHORT_NAMES.get(kind, kind)}={_escape(value)}" for kind, value in relative_name
            )
        )
    return "User:" + ",".join(parts)


def _escape(value: str) -> str:
    escaped = "".join(f"\\{char}" if char in _ESCAPED else char for char in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
