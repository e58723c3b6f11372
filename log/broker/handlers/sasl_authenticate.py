"""SaslAuthenticate (key 36), v0-2.

One step of the SASL exchange chosen by SaslHandshake: PLAIN takes one,
SCRAM-SHA-256 and SCRAM-SHA-512 take two. The step that completes it sets the
connection's principal, and from v1 says how long the session lasts
(``session_lifetime_ms``, from ``connections.max.reauth.ms``; 0 for the
connection's life), after which the client authenticates again (KIP-368).

A failed step is answered SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms``, and the connection then closes.
An address with ``failed.authentication.max.per.ip`` failures in the last minute
is refused at once, with the wait in the message, whatever it sends.
"""

from __future__ import annotations

import logging

import trio

from eventplatform.log.broker.broker import Broker
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SASL_AUTHENTICATE
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.security.session import AuthenticationError, Session

API = SASL_AUTHENTICATE
VERSIONS = Versions.parse("0-2")

log = logging.getLogger("eventplatform.broker.security")


async def handle(context: RequestContext, request: Body) -> Body:
    answer, refusal = await exchange_step(
        context.broker,
        context.session,
        context.client_host,
        context.connection_id,
        bytes(request["auth_bytes"]),
    )
    if refusal is not None:
        return _answer(ErrorCode.SASL_AUTHENTICATION_FAILED, refusal, b"", 0)
    lifetime_ms = context.session.session_lifetime_ms(trio.current_time())
    return _answer(ErrorCode.NONE, None, answer, lifetime_ms)


async def exchange_step(
    broker: Broker, session: Session, host: str, connection_id: int, token: bytes
) -> tuple[bytes, str | None]:
    """One step of the exchange, whether the token came in SaslAuthenticate or, after a
    v0 handshake, bare: the server's answer, or why it failed (after the delay)."""
    now = trio.current_time()
    wait_s = broker.failed_authentications.refused(host, now)
    try:
        if wait_s is not None:
            session.fail()
            raise AuthenticationError(
                f"too many failed authentications from {host} in the last minute; "
                f"try again in {wait_s:.0f} s"
            )
        if session.checks_a_password:
            answer: bytes = await broker.off_loop(session.authenticate, token, now)
        else:
            await trio.lowlevel.checkpoint()
            answer = session.authenticate(token, now)
    except AuthenticationError as exc:
        if wait_s is None:
            broker.failed_authentications.record(host, now)
        log.info("authentication failed on connection %d from %s: %s", connection_id, host, exc)
        await trio.sleep(broker.config.connection_failed_authentication_delay_ms / 1000)
        return b"", str(exc)
    return answer, None


def _answer(code: ErrorCode, message: str | None, token: bytes, lifetime_ms: int) -> Body:
    return {
        "error_code": code,
        "error_message": message,
        "auth_bytes": token,
        "session_lifetime_ms": lifetime_ms,
    }
