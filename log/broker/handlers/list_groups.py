"""ListGroups (key 16), v0-5.

Lists every group the coordinator knows, with its protocol type (empty for
groups that only store offsets). While ``__consumer_offsets`` loads, the
groups loaded so far come with COORDINATOR_LOAD_IN_PROGRESS. v3 is the
first flexible version. v4 adds ``states_filter`` (state names such as
``Stable`` or ``Empty``, matched case-insensitively; empty lists every
group) and each group's state; v5 adds ``types_filter`` and each group's
type: ``classic`` for groups of the JoinGroup protocol, ``share`` for share
groups (KIP-932; states ``Empty`` and ``Stable``). The consumer protocol of
KIP-848 is not served.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import LIST_GROUPS
from eventplatform.log.protocol.schema import Versions

API = LIST_GROUPS
VERSIONS = Versions.parse("0-5")


async def handle(context: RequestContext, request: Body) -> Body:
    coordinator = context.broker.groups
    if coordinator is None:
        await trio.lowlevel.checkpoint()
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    error, groups = await coordinator.list_groups(request["states_filter"], request["types_filter"])
    if not authorize_cluster(context, AclOperation.DESCRIBE):
        groups = [g for g in groups if may_group(context, AclOperation.DESCRIBE, g.group_id)]
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "groups": [
            {
                "group_id": group.group_id,
                "protocol_type": group.protocol_type,
                "group_state": str(group.state),
                "group_type": group.group_type,
            }
            for group in groups
        ],
    }
