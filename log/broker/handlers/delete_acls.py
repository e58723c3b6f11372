"""DeleteAcls (key 31), v0-3.

Removes every binding each filter matches; per filter, the bindings it removed.
It needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED); a filter with an
unknown type is INVALID_REQUEST; a broker without an authorizer answers
SECURITY_DISABLED. The bindings of every filter go in one change.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.describe_acls import read_filter
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DELETE_ACLS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError
from eventplatform.log.security.acls import AclBinding, AclError

API = DELETE_ACLS
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    filters = request["filters"]
    refusal = None
    if context.broker.authorizer is None:
        refusal = (ErrorCode.SECURITY_DISABLED, "no authorizer is configured")
    elif not authorize_cluster(context, AclOperation.ALTER):
        refusal = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster is needed")
    if refusal is not None:
        await trio.lowlevel.checkpoint()
        return _answer([_filter_result(*refusal, []) for _ in filters])
    results: list[Body] = []
    removed: set[AclBinding] = set()
    for entry in filters:
        try:
            acl_filter = read_filter(entry)
            acl_filter.check()
        except (AclError, ValueError) as exc:
            results.append(_filter_result(ErrorCode.INVALID_REQUEST, str(exc), []))
            continue
        matched = context.broker.acls.matching(acl_filter)
        removed.update(matched)
        results.append(_filter_result(ErrorCode.NONE, None, matched))
    try:
        if removed:
            await context.broker.membership.change_acls([], sorted(removed))
        else:
            await trio.lowlevel.checkpoint()
    except TopicError as exc:
        return _answer([_filter_result(exc.code, str(exc), []) for _ in filters])
    return _answer(results)


def _filter_result(code: ErrorCode, message: str | None, bindings: list[AclBinding]) -> Body:
    return {
        "error_code": code,
        "error_message": message,
        "matching_acls": [
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "resource_type": b.resource_type,
                "resource_name": b.resource_name,
                "pattern_type": b.pattern_type,
                "principal": b.principal,
                "host": b.host,
                "operation": b.operation,
                "permission_type": b.permission,
            }
            for b in bindings
        ],
    }


def _answer(results: list[Body]) -> Body:
    return {"throttle_time_ms": 0, "filter_results": results}
