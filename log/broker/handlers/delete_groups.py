"""DeleteGroups (key 42), v0-1.

Deletes Empty groups with all their committed offsets; tombstones in
``__consumer_offsets`` make the deletion survive restarts and compaction.
Per group: GROUP_ID_NOT_FOUND for a group that does not exist,
NON_EMPTY_GROUP for one with members, COORDINATOR_LOAD_IN_PROGRESS or
COORDINATOR_NOT_AVAILABLE when the coordinator cannot answer.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DELETE_GROUPS
from eventplatform.log.protocol.schema import Versions

API = DELETE_GROUPS
VERSIONS = Versions.parse("0-1")


async def handle(context: RequestContext, request: Body) -> Body:
    group_ids = list(dict.fromkeys(request["groups_names"]))
    coordinator = context.broker.groups
    refused = [g for g in group_ids if not may_group(context, AclOperation.DELETE, g)]
    permitted = [g for g in group_ids if g not in refused]
    results = dict.fromkeys(refused, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if coordinator is None or not permitted:
        await trio.lowlevel.checkpoint()
        results.update(dict.fromkeys(permitted, ErrorCode.COORDINATOR_NOT_AVAILABLE))
    else:
        results.update(await coordinator.delete_groups(permitted))
    results = {group_id: results[group_id] for group_id in group_ids}
    return {
        "throttle_time_ms": 0,
        "results": [
            {"group_id": group_id, "error_code": error} for group_id, error in results.items()
        ],
    }
