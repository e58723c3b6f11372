"""WriteShareGroupState (key 85), v0; see :mod:`.share_group_state`."""

from __future__ import annotations

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.share_group_state import ADVERTISED, VERSIONS, answer_each
from eventplatform.log.groups.records import ShareStateKey
from eventplatform.log.protocol.apis import WRITE_SHARE_GROUP_STATE

API = WRITE_SHARE_GROUP_STATE
__all__ = ["ADVERTISED", "API", "VERSIONS", "handle"]


async def _write(context: RequestContext, key: ShareStateKey, entry: Body) -> Body:
    assert context.broker.groups is not None
    value = {
        "state_epoch": entry["state_epoch"],
        "start_offset": entry["start_offset"],
        "state_batches": entry["state_batches"],
    }
    return {"error_code": await context.broker.groups.shares.write_state(key, value)}


async def handle(context: RequestContext, request: Body) -> Body:
    return await answer_each(context, request, _write)
