"""FindCoordinator (key 10), v0-2.

This single broker is the coordinator of every group (key type 0) and of
every transactional id (key type 1); v0 has no key type and means a group.
Any other key type is INVALID_REQUEST. Until the group coordinator has
started (or after it stopped) the answer is COORDINATOR_NOT_AVAILABLE with
no node, and clients retry; while it loads ``__consumer_offsets`` the broker
is named, and group requests answer COORDINATOR_LOAD_IN_PROGRESS until the
load ends. v1+ carries an error message.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FIND_COORDINATOR
from eventplatform.log.protocol.schema import Versions

API = FIND_COORDINATOR
VERSIONS = Versions.parse("0-2")
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    broker = context.broker
    key_type = request["key_type"]
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return _no_coordinator(ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}")
    coordinator = broker.groups
    if key_type == GROUP_KEY_TYPE and (coordinator is None or not coordinator.is_available):
        return _no_coordinator(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running"
        )
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "node_id": broker.node_id,
        "host": broker.advertised_host,
        "port": broker.port,
    }


def _no_coordinator(error: ErrorCode, message: str) -> Body:
    return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}
