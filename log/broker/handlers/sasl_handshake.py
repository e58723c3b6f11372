"""SaslHandshake (key 17), v0-1.

Chooses the SASL mechanism of a connection on a SASL listener; the exchange itself
follows in SaslAuthenticate requests. The answer lists the mechanisms enabled here
(``sasl.enabled.mechanisms``). An unknown mechanism is UNSUPPORTED_SASL_MECHANISM
and a handshake on a listener without SASL, or in the middle of an exchange, is
ILLEGAL_SASL_STATE; the connection closes after either answer, as Kafka's does.

After v1 the tokens travel in SaslAuthenticate requests; after v0 they travel bare,
each with a 4-byte size and no request header, until the exchange completes (the
connection reads them so). Older librdkafka (and kcat built on it) enables SASL only
when v0 is offered.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SASL_HANDSHAKE
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.security.session import AuthenticationError

API = SASL_HANDSHAKE
VERSIONS = Versions.parse("0-1")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    session = context.session
    try:
        chosen = session.handshake(request["mechanism"], bare_tokens=context.version == 0)
    except AuthenticationError:
        session.fail()
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": list(session.mechanisms)}
    if not chosen:
        session.fail()
        return {
            "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            "mechanisms": list(session.mechanisms),
        }
    return {"error_code": ErrorCode.NONE, "mechanisms": list(session.mechanisms)}
