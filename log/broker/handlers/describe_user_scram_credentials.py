"""DescribeUserScramCredentials (key 50), v0.

Lists, per user, the SCRAM mechanisms a credential exists for and their iterations;
never a salt or a key. A null or empty list describes every user. A user named
twice is DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

from collections import Counter

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_USER_SCRAM_CREDENTIALS
from eventplatform.log.protocol.schema import Versions

API = DESCRIBE_USER_SCRAM_CREDENTIALS
VERSIONS = Versions.parse("0")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    if not authorize_cluster(context, AclOperation.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "DESCRIBE on the cluster is needed",
            "results": [],
        }
    store = context.broker.credentials
    asked = [entry["name"] for entry in request["users"] or []]
    counts = Counter(asked)
    results = []
    for user in dict.fromkeys(asked) if asked else store.users():
        credentials = store.of_user(user)
        if counts[user] > 1:
            results.append(_result(user, ErrorCode.DUPLICATE_RESOURCE, "named more than once"))
        elif not credentials:
            results.append(
                _result(user, ErrorCode.RESOURCE_NOT_FOUND, "the user has no credentials")
            )
        else:
            infos = [
                {"mechanism": int(c.mechanism), "iterations": c.iterations} for c in credentials
            ]
            results.append({**_result(user, ErrorCode.NONE, None), "credential_infos": infos})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "results": results,
    }


def _result(user: str, code: ErrorCode, message: str | None) -> Body:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}
