"""The entity store's connections to a broker: TCP, then TLS and SASL as the client
config asks, as librdkafka would do for the same settings.

:func:`open_connection` returns a socket that is ready for requests: connected,
wrapped in TLS for ``SSL`` and ``SASL_SSL`` (the server verified against
``ssl.ca.location``, else the system's authorities; a client certificate presented
when one is configured), and authenticated for ``SASL_PLAINTEXT`` and ``SASL_SSL``
with SaslHandshake and SaslAuthenticate, by PLAIN or SCRAM (RFC 5802, RFC 7677).
The SCRAM exchange checks the server's signature too, so a server that does not know
the password is not believed.

Every read is bounded by the socket's timeout and :data:`RESPONSE_BYTES_MAX`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from eventplatform.client_config import ClientConfig
from eventplatform.events.errors import EventError
from eventplatform.log.protocol import (
    Api,
    ErrorCode,
    ProtocolError,
    decode_response,
    encode_request,
)
from eventplatform.log.protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from eventplatform.log.security.scram import ScramMechanism, salted_password

RESPONSE_BYTES_MAX = 64 * 1024 * 1024
RECEIVE_CHUNK_BYTES = 1 << 20
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 1
SCRAM_NONCE_BYTES = 24
SCRAM_ITERATIONS_MIN = 4096
SCRAM_ITERATIONS_MAX = 1_000_000
"""The most PBKDF2 iterations a server may ask of this client: bounds its CPU time."""
HANDSHAKE_CORRELATION_ID = 0x7FFF0000
"""Correlation ids of the authentication requests, apart from the client's own."""
_SIZE = struct.Struct(">i")


class AuthenticationFailedError(EventError):
    """The broker refused the TLS handshake or the SASL credentials; trying again with
    the same settings cannot help."""


def open_connection(
    address: tuple[str, int], config: ClientConfig, *, timeout_s: float, client_id: str
) -> socket.socket:
    """A connected, secured and authenticated socket to ``address`` (see the module
    docstring). Raises OSError when the broker cannot be reached, and
    :class:`AuthenticationFailedError` when it refuses the client."""
    sock = socket.create_connection(address, timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        protocol = config.security_protocol
        if protocol in ("SSL", "SASL_SSL"):
            sock = _wrap_tls(sock, address[0], config.settings)
        if protocol.startswith("SASL_"):
            _authenticate(sock, config.settings, client_id)
    except BaseException:
        sock.close()
        raise
    return sock


def round_trip(
    sock: socket.socket,
    api: Api,
    version: int,
    body: dict[str, Any],
    *,
    correlation_id: int,
    client_id: str,
) -> dict[str, Any]:
    """Send one request and read its answer; raises OSError or ProtocolError."""
    frame = encode_request(api, version, body, correlation_id=correlation_id, client_id=client_id)
    sock.sendall(frame)
    size = _SIZE.unpack(receive_exactly(sock, _SIZE.size))[0]
    if not 0 <= size <= RESPONSE_BYTES_MAX:
        raise ProtocolError(f"an answer of {size} bytes")
    correlation, response = decode_response(api, version, receive_exactly(sock, size))
    if correlation != correlation_id:
        raise ProtocolError(f"correlation id {correlation}, expected {correlation_id}")
    return response


def receive_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(min(count - len(data), RECEIVE_CHUNK_BYTES))
        if not chunk:
            raise ConnectionResetError("the broker closed the connection")
        data += chunk
    return bytes(data)


def tls_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The client's TLS context from the ``ssl.*`` settings, librdkafka's defaults
    otherwise (the host name is checked unless the algorithm is ``none``)."""
    try:
        context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if settings.get("ssl.endpoint.identification.algorithm") == "none":
            context.check_hostname = False
        if "ssl.certificate.location" in settings:
            context.load_cert_chain(
                settings["ssl.certificate.location"],
                settings.get("ssl.key.location"),
                password=settings.get("ssl.key.password"),
            )
    except (OSError, ssl.SSLError) as exc:
        raise AuthenticationFailedError(f"cannot load the TLS settings: {exc}") from exc
    return context


def _wrap_tls(sock: socket.socket, host: str, settings: Mapping[str, str]) -> socket.socket:
    try:
        return tls_context(settings).wrap_socket(sock, server_hostname=host)
    except ssl.SSLError as exc:  # a certificate error included
        raise AuthenticationFailedError(f"TLS handshake with {host} failed: {exc}") from exc


def _authenticate(sock: socket.socket, settings: Mapping[str, str], client_id: str) -> None:
    mechanism = settings["sasl.mechanism"]
    handshake = round_trip(
        sock,
        SASL_HANDSHAKE,
        SASL_HANDSHAKE_VERSION,
        {"mechanism": mechanism},
        correlation_id=HANDSHAKE_CORRELATION_ID,
        client_id=client_id,
    )
    if handshake["error_code"] != ErrorCode.NONE:
        offered = ", ".join(handshake["mechanisms"] or [])
        raise AuthenticationFailedError(
            f"the broker does not take SASL {mechanism} (it offers: {offered or 'none'})"
        )
    user, password = settings["sasl.username"], settings["sasl.password"]
    if mechanism == "PLAIN":
        _send_token(sock, b"\x00" + user.encode() + b"\x00" + password.encode(), client_id, 1)
        return
    scram = ScramMechanism.from_sasl_name(mechanism)
    if scram is None:
        raise AuthenticationFailedError(f"unknown SASL mechanism {mechanism}")
    _scram(sock, scram, user, password, client_id)


def _send_token(sock: socket.socket, token: bytes, client_id: str, step: int) -> bytes:
    """One SaslAuthenticate round; the server's answer bytes."""
    answer = round_trip(
        sock,
        SASL_AUTHENTICATE,
        SASL_AUTHENTICATE_VERSION,
        {"auth_bytes": token},
        correlation_id=HANDSHAKE_CORRELATION_ID + step,
        client_id=client_id,
    )
    if answer["error_code"] != ErrorCode.NONE:
        reason = answer.get("error_message") or ErrorCode(answer["error_code"]).name
        raise AuthenticationFailedError(f"SASL authentication failed: {reason}")
    token_bytes: bytes = answer["auth_bytes"] or b""
    return token_bytes


def _scram(
    sock: socket.socket, mechanism: ScramMechanism, user: str, password: str, client_id: str
) -> None:
    nonce = base64.b64encode(secrets.token_bytes(SCRAM_NONCE_BYTES)).decode()
    first_bare = f"n={_escape_user(user)},r={nonce}"
    server_first = _send_token(sock, f"n,,{first_bare}".encode(), client_id, 1).decode()
    combined_nonce, salt, iterations = _challenge(server_first, nonce)
    salted = salted_password(mechanism, password, salt, iterations)
    final_bare = f"c=biws,r={combined_nonce}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(mechanism.digest, client_key).digest()
    signature = _hmac(mechanism, stored_key, auth_message)
    proof = bytes(left ^ right for left, right in zip(client_key, signature, strict=True))
    final = f"{final_bare},p={base64.b64encode(proof).decode()}".encode()
    server_final = _scram_fields(_send_token(sock, final, client_id, 2).decode())
    expected = _hmac(mechanism, _hmac(mechanism, salted, b"Server Key"), auth_message)
    if not hmac.compare_digest(base64.b64decode(server_final.get("v", "")), expected):
        raise AuthenticationFailedError("the broker's SCRAM signature is wrong")


def _challenge(server_first: str, nonce: str) -> tuple[str, bytes, int]:
    """The server-first message's nonce, salt and iteration count, once checked: the
    nonce must extend ours, and the iterations must be within bounds."""
    fields = _scram_fields(server_first)
    try:
        combined_nonce, salt, iterations = (
            fields["r"],
            base64.b64decode(fields["s"]),
            int(fields["i"]),
        )
    except (KeyError, ValueError, binascii.Error) as exc:
        raise AuthenticationFailedError("the broker's SCRAM challenge is malformed") from exc
    if not combined_nonce.startswith(nonce) or not (
        SCRAM_ITERATIONS_MIN <= iterations <= SCRAM_ITERATIONS_MAX
    ):
        raise AuthenticationFailedError("the broker's SCRAM challenge is not acceptable")
    return combined_nonce, salt, iterations


def _scram_fields(message: str) -> dict[str, str]:
    fields = dict(part.split("=", 1) for part in message.split(",") if "=" in part)
    if "e" in fields:
        raise AuthenticationFailedError(f"SASL authentication failed: {fields['e']}")
    return fields


def _escape_user(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.digest).digest()
