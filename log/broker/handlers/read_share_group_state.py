"""ReadShareGroupState (key 84), v0; see :mod:`.share_group_state`."""

from __future__ import annotations

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.share_group_state import ADVERTISED, VERSIONS, answer_each
from eventplatform.log.groups.records import ShareStateKey
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import READ_SHARE_GROUP_STATE

API = READ_SHARE_GROUP_STATE
__all__ = ["ADVERTISED", "API", "VERSIONS", "handle"]


async def _read(context: RequestContext, key: ShareStateKey, entry: Body) -> Body:
    assert context.broker.groups is not None
    error, kept = await context.broker.groups.shares.read_state(key)
    if error is not ErrorCode.NONE or kept is None:
        return {"error_code": error}
    return {"error_code": ErrorCode.NONE, **kept}


async def handle(context: RequestContext, request: Body) -> Body:
    return await answer_each(context, request, _read)
