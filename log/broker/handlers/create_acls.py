"""CreateAcls (key 30), v0-3.

Adds ACL bindings; one result per creation, in order. A binding Kafka would refuse
(an ANY or unknown type, a pattern other than LITERAL or PREFIXED, a principal that
is not ``Type:name``, a cluster resource not named ``kafka-cluster``) is
INVALID_REQUEST; the others are stored together. It needs ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED), and a broker without an authorizer answers
SECURITY_DISABLED, as Kafka does.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import CREATE_ACLS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError
from eventplatform.log.security.acls import (
    AclBinding,
    AclError,
    AclOperation,
    AclPermission,
    AclResourceType,
    PatternType,
)

API = CREATE_ACLS
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    creations = request["creations"]
    refusal = _refusal(context)
    if refusal is not None:
        await trio.lowlevel.checkpoint()
        return _answer([refusal] * len(creations))
    results: list[tuple[ErrorCode, str | None]] = []
    accepted: list[AclBinding] = []
    for creation in creations:
        try:
            binding = _binding(creation)
            binding.check()
        except (AclError, ValueError) as exc:
            results.append((ErrorCode.INVALID_REQUEST, str(exc)))
            continue
        accepted.append(binding)
        results.append((ErrorCode.NONE, None))
    try:
        if accepted:
            await context.broker.membership.change_acls(accepted, [])
        else:
            await trio.lowlevel.checkpoint()
    except (AclError, TopicError) as exc:
        code = exc.code if isinstance(exc, TopicError) else ErrorCode.INVALID_REQUEST
        results = [(code, str(exc)) if c == ErrorCode.NONE else (c, m) for c, m in results]
    return _answer(results)


def _refusal(context: RequestContext) -> tuple[ErrorCode, str] | None:
    if context.broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, "no authorizer is configured (authorizer.class.name)"
    if not authorize_cluster(context, AclOperation.ALTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster is needed"
    return None


def _binding(creation: Body) -> AclBinding:
    return AclBinding(
        AclResourceType(creation["resource_type"]),
        creation["resource_name"],
        PatternType(creation["resource_pattern_type"]),
        creation["principal"],
        creation["host"],
        AclOperation(creation["operation"]),
        AclPermission(creation["permission_type"]),
    )


def _answer(results: list[tuple[ErrorCode, str | None]]) -> Body:
    return {
        "throttle_time_ms": 0,
        "results": [{"error_code": code, "error_message": message} for code, message in results],
    }
