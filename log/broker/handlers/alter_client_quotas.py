"""AlterClientQuotas (key 49), v0-1.

Sets and removes quotas on entities (``user``, ``client-id``, both, or ``ip``; a
null name is the type's default), one result per entry. An entity or key the
broker keeps no quota for, or a value not above 0, is INVALID_REQUEST; with
``validate_only`` nothing changes. It needs ALTER_CONFIGS on the cluster
(CLUSTER_AUTHORIZATION_FAILED). The valid entries change together.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import ALTER_CLIENT_QUOTAS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError
from eventplatform.log.security.quotas import QuotaChange, QuotaError, check_quota, entity_of

API = ALTER_CLIENT_QUOTAS
VERSIONS = Versions.parse("0-1")


async def handle(context: RequestContext, request: Body) -> Body:
    entries = request["entries"]
    if not authorize_cluster(context, AclOperation.ALTER_CONFIGS):
        await trio.lowlevel.checkpoint()
        refusal = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER_CONFIGS on the cluster")
        return _answer(entries, [refusal] * len(entries))
    results: list[tuple[ErrorCode, str | None]] = []
    changes: list[QuotaChange] = []
    for entry in entries:
        try:
            entity = entity_of((e["entity_type"], e["entity_name"]) for e in entry["entity"])
            entry_changes = []
            for op in entry["ops"]:
                value = None if op["remove"] else float(op["value"])
                if value is not None:
                    check_quota(entity, op["key"], value)
                entry_changes.append(QuotaChange(entity, op["key"], value))
        except QuotaError as exc:
            results.append((ErrorCode.INVALID_REQUEST, str(exc)))
            continue
        changes.extend(entry_changes)
        results.append((ErrorCode.NONE, None))
    try:
        if changes and not request["validate_only"]:
            await context.broker.membership.alter_quotas(changes)
        else:
            await trio.lowlevel.checkpoint()
    except (QuotaError, TopicError) as exc:
        code = exc.code if isinstance(exc, TopicError) else ErrorCode.INVALID_REQUEST
        results = [(code, str(exc)) if c == ErrorCode.NONE else (c, m) for c, m in results]
    return _answer(entries, results)


def _answer(entries: list[Body], results: list[tuple[ErrorCode, str | None]]) -> Body:
    return {
        "throttle_time_ms": 0,
        "entries": [
            {"error_code": code, "error_message": message, "entity": entry["entity"]}
            for entry, (code, message) in zip(entries, results, strict=True)
        ],
    }
