"""DescribeAcls (key 29), v0-3.

Lists the ACL bindings a filter matches, grouped by resource pattern. It needs
DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); a filter with an unknown
type is INVALID_REQUEST; a broker without an authorizer answers SECURITY_DISABLED.
"""

from __future__ import annotations

import itertools

import trio

from eventplatform.log.broker.authorizer import authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_ACLS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.security.acls import (
    AclError,
    AclFilter,
    AclOperation,
    AclPermission,
    AclResourceType,
    PatternType,
)

API = DESCRIBE_ACLS
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    if context.broker.authorizer is None:
        return _answer(ErrorCode.SECURITY_DISABLED, "no authorizer is configured", [])
    if not authorize_cluster(context, AclOperation.DESCRIBE):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster", [])
    try:
        acl_filter = read_filter(request)
        acl_filter.check()
    except (AclError, ValueError) as exc:
        return _answer(ErrorCode.INVALID_REQUEST, str(exc), [])
    bindings = context.broker.acls.matching(acl_filter)
    resources = []
    for (kind, name, pattern), group in itertools.groupby(
        bindings, key=lambda b: (b.resource_type, b.resource_name, b.pattern_type)
    ):
        resources.append(
            {
                "resource_type": kind,
                "resource_name": name,
                "pattern_type": pattern,
                "acls": [
                    {
                        "principal": b.principal,
                        "host": b.host,
                        "operation": b.operation,
                        "permission_type": b.permission,
                    }
                    for b in group
                ],
            }
        )
    return _answer(ErrorCode.NONE, None, resources)


def read_filter(entry: Body) -> AclFilter:
    """A filter as DescribeAcls and DeleteAcls carry it (v0 has no pattern type: LITERAL)."""
    return AclFilter(
        AclResourceType(entry["resource_type_filter"]),
        entry["resource_name_filter"],
        PatternType(entry.get("pattern_type_filter", PatternType.LITERAL)),
        entry["principal_filter"],
        entry["host_filter"],
        AclOperation(entry["operation"]),
        AclPermission(entry["permission_type"]),
    )


def _answer(code: ErrorCode, message: str | None, resources: list[Body]) -> Body:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "resources": resources,
    }
