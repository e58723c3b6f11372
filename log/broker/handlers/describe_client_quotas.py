"""DescribeClientQuotas (key 48), v0-1.

Lists the quotas set on entities that match the filter's components: per entity
type, an exact name (match type 0), the default (1) or any name (2). With
``strict``, entities of types the filter does not name are left out. It needs
DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_CLIENT_QUOTAS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.security.quotas import Entity

API = DESCRIBE_CLIENT_QUOTAS
VERSIONS = Versions.parse("0-1")
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    if not authorize_cluster(context, AclOperation.DESCRIBE_CONFIGS):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS on the cluster")
    components = request["components"]
    if any(c["match_type"] not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY) for c in components):
        return _answer(ErrorCode.INVALID_REQUEST, "a match type is 0, 1 or 2")
    entries = [
        {
            "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
            "values": [{"key": key, "value": value} for key, value in sorted(values.items())],
        }
        for entity, values in sorted(context.broker.quotas.entries().items(), key=repr)
        if _matches(entity, components, strict=request["strict"])
    ]
    return {**_answer(ErrorCode.NONE, None), "entries": entries}


def _matches(entity: Entity, components: list[Body], *, strict: bool) -> bool:
    names = dict(entity)
    for component in components:
        kind = component["entity_type"]
        if kind not in names:
            return False
        name = names[kind]
        match_type = component["match_type"]
        if match_type == MATCH_EXACT and name != component["match"]:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or set(names) == {c["entity_type"] for c in components}


def _answer(code: ErrorCode, message: str | None) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}
