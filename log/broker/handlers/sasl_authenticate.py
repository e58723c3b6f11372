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

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SASL_AUTHENTICATE
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.security.session import AuthenticationError

API = SASL_AUTHENTICATE
VERSIONS = Versions.parse("0-2")

log = logging.getLogger("eventplatform.broker.security")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    session = context.session
    now = trio.current_time()
    wait_s = broker.failed_authentications.refused(context.client_host, now)
    try:
        if wait_s is not None:
            session.fail()
            raise AuthenticationError(
                f"too many failed authentications from {context.client_host} in the last "
                f"minute; try again in {wait_s:.0f} s"
            )
        token = bytes(request["auth_bytes"])
        if session.checks_a_password:
            answer = await broker.off_loop(session.authenticate, token, now)
        else:
            await trio.lowlevel.checkpoint()
            answer = session.authenticate(token, now)
    except AuthenticationError as exc:
        if wait_s is None:
            broker.failed_authentications.record(context.client_host, now)
        log.info(
            "authentication failed on connection %d from %s: %s",
            context.connection_id,
            context.client_host,
            exc,
        )
        await trio.sleep(broker.config.connection_failed_authentication_delay_ms / 1000)
        return _answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc), b"", 0)
    return _answer(ErrorCode.NONE, None, answer, session.session_lifetime_ms(now))


def _answer(code: ErrorCode, message: str | None, token: bytes, lifetime_ms: int) -> Body:
    return {
        "error_code": code,
        "error_message": message,
        "auth_bytes": token,
        "session_lifetime_ms": lifetime_ms,
    }
